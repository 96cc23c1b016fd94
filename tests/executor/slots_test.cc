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

TEST(SlotsTest, CpuSlotsHaveNoGpuFields) {
  if (CudaDeviceCount() > 0) GTEST_SKIP() << "this machine has GPUs: its slots are GPUs";
  for (const Slot& s : DiscoverLocalSlots(2)) {
    EXPECT_FALSE(s.gpu);
    EXPECT_EQ(s.compute_capability, 0);
    EXPECT_EQ(s.link_group, 0);
  }
}

// An 8-GPU NVLink server: every pair has peer access at rank 0. One group.
TEST(LinkGroupsFromPeers, AllPeersOneGroup) {
  const std::vector<std::vector<bool>> peer(8, std::vector<bool>(8, true));
  const std::vector<std::vector<int>> rank(8, std::vector<int>(8, 0));
  EXPECT_EQ(LinkGroupsFromPeers(peer, rank), std::vector<int>(8, 0));
}

// Two NVLink islands of 2 joined by slower peer access (rank 1), as a 2x2 server reports it:
// only the fastest links make groups.
TEST(LinkGroupsFromPeers, FastestLinksMakeTheGroups) {
  const std::vector<std::vector<bool>> peer(4, std::vector<bool>(4, true));
  const std::vector<std::vector<int>> rank = {
      {0, 0, 1, 1}, {0, 0, 1, 1}, {1, 1, 0, 0}, {1, 1, 0, 0}};
  EXPECT_EQ(LinkGroupsFromPeers(peer, rank), (std::vector<int>{0, 0, 2, 2}));
}

// PCIe GPUs without peer access (a consumer board, or across sockets): each alone, whatever
// rank values sit in the matrix.
TEST(LinkGroupsFromPeers, NoPeerAccessNoGroups) {
  const std::vector<std::vector<bool>> peer(3, std::vector<bool>(3, false));
  const std::vector<std::vector<int>> rank(3, std::vector<int>(3, 0));
  EXPECT_EQ(LinkGroupsFromPeers(peer, rank), (std::vector<int>{0, 1, 2}));
}

// Peer access one way only is not a link (both GPUs must reach each other); GPU 2 and 3 share
// one, 0 and 1 only one-way.
TEST(LinkGroupsFromPeers, OneWayAccessIsNoLink) {
  std::vector<std::vector<bool>> peer(4, std::vector<bool>(4, false));
  peer[0][1] = true;
  peer[2][3] = peer[3][2] = true;
  const std::vector<std::vector<int>> rank(4, std::vector<int>(4, 0));
  EXPECT_EQ(LinkGroupsFromPeers(peer, rank), (std::vector<int>{0, 1, 2, 2}));
}

TEST(LinkGroupsFromPeers, MalformedInputOneGroupPerGpu) {
  const std::vector<std::vector<bool>> peer(2, std::vector<bool>(2, true));
  EXPECT_EQ(LinkGroupsFromPeers(peer, {{0, 0}}), (std::vector<int>{0, 1}));
  EXPECT_EQ(LinkGroupsFromPeers({}, {}), std::vector<int>{});
}

}  // namespace
}  // namespace sweep::executor
