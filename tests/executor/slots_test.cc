// SlotPool: gang allocation is all-or-nothing and releases return slots.
#include "executor/slots.h"

#include <gtest/gtest.h>

namespace sweep::executor {
namespace {

TEST(SlotPoolTest, GangAllocationIsAllOrNothing) {
  SlotPool pool(DiscoverLocalSlots(3));
  ASSERT_EQ(pool.slots().size(), 3u);
  auto a = pool.Acquire(2);
  ASSERT_TRUE(a.has_value());
  EXPECT_EQ(pool.free_count(), 1);
  EXPECT_FALSE(pool.Acquire(2).has_value());  // one free: a 2-slot trial waits
  EXPECT_EQ(pool.free_count(), 1);            // and takes nothing meanwhile
  auto b = pool.Acquire(1);
  ASSERT_TRUE(b.has_value());
  EXPECT_EQ(pool.free_count(), 0);
  pool.Release(*a);
  EXPECT_EQ(pool.free_count(), 2);
  auto c = pool.Acquire(2);
  ASSERT_TRUE(c.has_value());
  EXPECT_EQ(*c, *a);
}

TEST(SlotPoolTest, PlacementNamesTheSlots) {
  SlotPool pool(DiscoverLocalSlots(2));
  EXPECT_EQ(pool.Placement({0, 1}), "local:cpu0,cpu1");
}

TEST(SlotPoolTest, RejectsImpossibleRequests) {
  SlotPool pool(DiscoverLocalSlots(2));
  EXPECT_FALSE(pool.Acquire(0).has_value());
  EXPECT_FALSE(pool.Acquire(3).has_value());
  pool.Release({5, -1});  // ignored
  EXPECT_EQ(pool.free_count(), 2);
}

TEST(SlotsTest, DefaultCpuSlotsIsPositive) { EXPECT_GE(DefaultCpuSlots(), 1); }

}  // namespace
}  // namespace sweep::executor
