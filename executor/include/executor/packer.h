// Packer: places gang requests (n slots at once, on one server) across many servers, and Queue,
// which orders pending requests (priority, then arrival) and keeps big ones from starving.
// Pure: no clocks, no I/O, no globals; the same calls give the same placements. Neither class is
// thread-safe: the coordinator loop owns both.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <tuple>
#include <unordered_map>
#include <utility>
#include <vector>

#include "base/status.h"

namespace sweep::executor {

// ---- servers and their links ----

// One machine the packer places on. Its slots are its GPUs, or `cpu_slots` CPU shares when it
// has none. A cluster may mix both: a request takes n slots of one server either way (CPU
// shares run n threads), and only GPUs are shared (gpu_share).
struct Server {
  int id = 0;  // unique; between equally good servers the lower id wins
  // One entry per GPU: GPUs with equal values share the fastest link (NVLink, peer access).
  // A single GPU: {0}. Empty: the server has no GPU.
  std::vector<int> link_group;
  int cpu_slots = 0;  // CPU shares offered when link_group is empty; ignored otherwise
};

// Link groups from a matrix of link ranks, rank[i][j] for GPUs i and j (lower is faster, e.g.
// 0 NVLink, 1 PCIe switch, 2 host bridge; the diagonal is ignored): GPUs joined, directly or
// through others, by the fastest rank in the matrix share a group. Groups are numbered by their
// lowest GPU. A malformed (non-square) matrix gives one group per GPU.
std::vector<int> LinkGroupsFromRanks(const std::vector<std::vector<int>>& rank);

// ---- requests and placements ----

struct Request {
  int64_t trial = 0;
  int gpus = 1;  // slots wanted, all on one server, all at once
  // 1: the slots are the trial's own. k > 1 (with gpus = 1): up to k trials asking share = k
  // run on one GPU ([trial] gpu_share = k, opt-in).
  int share = 1;
  int priority = 0;   // rungs survived under early stopping; higher is placed first
  double cost_s = 0;  // expected seconds on its slots; longer first within a priority; 0: unknown
};

struct Placement {
  int64_t trial = 0;
  int server = 0;         // Server::id
  std::vector<int> gpus;  // slot indexes on that server, ascending
  int share = 1;          // as requested
};

// kBestFit: the server left with the fewest free slots, fastest links first (the default).
// kFirstFit: the lowest server id with room, its lowest free slots (the baseline to compare to).
enum class Fit { kBestFit, kFirstFit };

struct PackerOptions {
  Fit fit = Fit::kBestFit;
};

// ---- packer ----

// Free/used state of every slot of every server. Place is O(servers x link groups).
//
// Choice for an exclusive request of n slots (share = 1), best fit:
//   1. Servers reserved for another trial and servers with fewer than n free slots are out.
//   2. On each remaining server, the n slots span as few link groups as possible: the smallest
//      group that holds n free slots, else the fewest groups (largest first, and the last one
//      the smallest that covers the rest), so big groups stay whole.
//   3. Across servers: fewest groups spanned, then fewest free slots left after placing, then
//      the tightest group, then the lowest id.
// A shared request (share = k) joins the fullest GPU already shared k ways with room left (on
// the fullest server), else opens a free GPU chosen as for n = 1.
class Packer {
 public:
  // Fails (InvalidArgument) on a repeated id or a server with no slot. No servers is allowed:
  // servers may join later (remote agents).
  static Result<Packer> Create(std::vector<Server> servers, PackerOptions options = {});
  // A server joins. InvalidArgument for an id already present or a server with no slot.
  Status AddServer(const Server& server);
  // A server leaves (its agent was lost): its slots leave the totals, held or not, and the
  // placements on it are void (the caller forgets them; Release of one fails). NotFound for an
  // unknown id.
  Status RemoveServer(int server);

  // Ok when some server could hold the request once empty; InvalidArgument otherwise.
  Status Check(const Request& request) const;
  // The slots for the request, taken now; nullopt when it does not fit now (or never fits).
  std::optional<Placement> Place(const Request& request);
  // Gives back what Place returned. InvalidArgument, changing nothing, when the placement does
  // not match what is held (an unknown server or slot, a slot not held that way).
  Status Release(const Placement& placement);

  // Holds a server for one trial: Place puts no other trial there, so it drains. A server holds
  // one reservation at a time; NotFound for an unknown server, Busy when held for another.
  Status Reserve(int server, int64_t trial);
  void Unreserve(int server);  // no-op when not reserved or unknown
  std::optional<int64_t> reserved_for(int server) const;
  // The server that would soonest fit the request, for a reservation: among servers with enough
  // slots, not reserved for another trial, the fewest slots still missing, then the fewest
  // trials to wait for, then the lowest id. nullopt when none.
  std::optional<int> SoonestToFit(const Request& request) const;

  int server_count() const { return static_cast<int>(servers_.size()); }
  bool gpu() const { return gpu_servers_ > 0; }  // some server offers GPUs
  bool has_server(int server) const { return IndexOf(server) >= 0; }
  int total_slots() const { return total_slots_; }
  int free_slots() const { return free_slots_; }  // not held at all (shared GPUs count as used)
  int free_slots(int server) const;               // 0 for an unknown server
  int trials_on(int server) const;                // trials holding slots there
  int largest_server() const { return largest_server_; }  // most slots on one server

 private:
  struct SlotState {
    int users = 0;  // trials on the slot
    int share = 0;  // 0 free, 1 exclusive, k shared k ways
  };
  struct ServerState {
    int id = 0;
    bool gpu = false;
    std::vector<int> group_of;    // slot -> dense link group
    std::vector<int> group_size;  // slots per group
    std::vector<int> group_free;  // free slots per group
    std::vector<SlotState> slots;
    int free = 0;
    int trials = 0;
    int shared_open = 0;  // GPUs shared with room for one more
    std::optional<int64_t> reserved_for;
  };
  // How n exclusive slots would sit on a server: groups spanned and the slack of the group used.
  struct Fitting {
    int groups = 0;
    int slack = 0;
  };

  Packer() = default;
  int IndexOf(int server) const;  // -1 when unknown
  bool Usable(const ServerState& s, int64_t trial) const;
  static Fitting FitOn(const ServerState& s, int n);
  static std::vector<int> TakeSlots(ServerState& s, int n, Fit fit);
  // cpu_only: only on servers without GPUs.
  std::optional<Placement> PlaceExclusive(const Request& request, bool cpu_only = false);
  std::optional<Placement> PlaceShared(const Request& request);
  void Take(ServerState& s, int slot, int share);
  void Count(int free, int delta) { servers_with_free_[free] += delta; }

  PackerOptions options_;
  std::vector<ServerState> servers_;  // ascending id
  int gpu_servers_ = 0;
  int total_slots_ = 0;
  int free_slots_ = 0;
  int largest_server_ = 0;
  std::vector<int> servers_with_free_;  // [k]: servers with exactly k free slots
};

// ---- queue ----

struct QueueOptions {
  // A request that has been passed over this many times (a request ranked behind it was placed
  // while it did not fit) reserves the server that would soonest fit it (Packer::SoonestToFit);
  // nothing else is placed there until it runs. 0: never reserve (plain backfill). Only
  // exclusive requests for 2+ slots reserve: a 1-slot request fits in any free slot.
  int reserve_after_bypasses = 64;
  int max_reservations = 1;  // servers held back at once, so the cost in idle slots is bounded
};

// Pending requests in order of (priority desc, cost_s desc, arrival). Schedule places as many as
// fit, in that order, backfilling past those that do not fit; the reservation rule above bounds how
// long a big request can be passed over.
class Queue {
 public:
  explicit Queue(QueueOptions options = {}) : options_(options) {}

  // Adds a request. InvalidArgument when the packer could never place it (Packer::Check);
  // AlreadyExists when the trial is already pending.
  Status Push(const Request& request, const Packer& packer);
  // Drops a pending trial and any server it holds; false when it was not pending.
  bool Remove(int64_t trial, Packer& packer);
  // Places what fits now, in queue order; the placements in the order they were made.
  std::vector<Placement> Schedule(Packer& packer);

  size_t size() const { return pending_.size(); }
  bool empty() const { return pending_.empty(); }
  // Times the trial was passed over, or -1 when it is not pending.
  int bypasses(int64_t trial) const;
  // The server the trial holds, if it holds one.
  std::optional<int> reservation(int64_t trial) const;

 private:
  using Key = std::tuple<int, double, int64_t>;  // (-priority, -cost, arrival)
  struct Entry {
    Request request;
    int bypasses = 0;
    std::optional<int> reserved;  // server id
  };

  // Requests that fail alike in a pass: exclusive ones by slots (n > 0), shared ones by -share.
  static int ClassOf(const Request& r);
  void Forget(std::map<Key, Entry>::iterator it);  // drops a pending entry from every index

  QueueOptions options_;
  std::map<Key, Entry> pending_;
  std::map<int, std::set<Key>> classes_;     // ClassOf -> keys, in queue order
  std::unordered_map<int64_t, Key> key_of_;  // lookup only; never iterated
  std::set<Key> holders_;                    // keys of entries holding a reservation
  int64_t next_arrival_ = 0;
};

}  // namespace sweep::executor
