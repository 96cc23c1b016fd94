// Slot discovery on a machine without a GPU: CPU shares, named and numbered in order.
#include "executor/slots.h"

#include <gtest/gtest.h>

namespace sweep::executor {
namespace {

TEST(SlotsTest, CpuSlotsAreNamedInOrder) {
  if (CudaDeviceCount() > 0) GTEST_SKIP() << "this machine has GPUs; its slots are those";
  std::vector<Slot> slots = DiscoverLocalSlots(3);
  ASSERT_EQ(slots.size(), 3u);
  for (int i = 0; i < 3; ++i) {
    EXPECT_FALSE(slots[i].gpu);
    EXPECT_EQ(slots[i].index, i);
    EXPECT_EQ(slots[i].device, i);
    EXPECT_EQ(slots[i].name, "cpu" + std::to_string(i));
    EXPECT_EQ(slots[i].link_group, 0);
  }
}

TEST(SlotsTest, DefaultCpuSlotsIsPositive) {
  EXPECT_GE(DefaultCpuSlots(), 1);
  if (CudaDeviceCount() == 0) {
    EXPECT_EQ(DiscoverLocalSlots(0).size(), static_cast<size_t>(DefaultCpuSlots()));
  }
}

}  // namespace
}  // namespace sweep::executor
