// Slot discovery on a machine without a GPU: CPU shares, named and numbered in order.
#include "executor/slots.h"

#include <gtest/gtest.h>

#include <algorithm>

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

TEST(SlotsTest, CpuSlotsHaveNoGpuFields) {
  if (CudaDeviceCount() > 0) GTEST_SKIP() << "this machine has GPUs: its slots are GPUs";
  for (const Slot& s : DiscoverLocalSlots(2)) {
    EXPECT_FALSE(s.gpu);
    EXPECT_EQ(s.compute_capability, 0);
    EXPECT_EQ(s.link_group, 0);
    EXPECT_TRUE(s.peers.empty());
  }
}

// Where there are GPUs: peer access is listed both ways and never to itself, and a GPU that
// shares its link group has peer access to another GPU of that group (groups join GPUs linked
// at the fastest rank, transitively).
TEST(SlotsTest, GpuPeersAreMutualAndJoinTheirLinkGroup) {
  const std::vector<Slot> slots = DiscoverLocalSlots(0);
  if (slots.empty() || !slots[0].gpu) GTEST_SKIP() << "no GPU here";
  auto has = [](const Slot& s, int d) {
    return std::find(s.peers.begin(), s.peers.end(), d) != s.peers.end();
  };
  for (const Slot& a : slots) {
    EXPECT_FALSE(has(a, a.device)) << a.name;
    bool shares_group = false, peer_in_group = false;
    for (const Slot& b : slots) {
      if (a.device == b.device) continue;
      EXPECT_EQ(has(a, b.device), has(b, a.device)) << a.name << " " << b.name;
      if (a.link_group == b.link_group) {
        shares_group = true;
        peer_in_group = peer_in_group || has(a, b.device);
      }
    }
    if (shares_group) {
      EXPECT_TRUE(peer_in_group) << a.name;
    }
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
