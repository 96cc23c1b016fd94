// Packer and Queue: gang placement across servers, link-group aware best fit, and
// reservations against starvation. See packer.h for the rules; this file only implements them.
#include "executor/packer.h"

#include <algorithm>
#include <climits>
#include <cmath>
#include <numeric>
#include <string>
#include <tuple>

namespace sweep::executor {

// ---- link groups ----

std::vector<int> LinkGroupsFromRanks(const std::vector<std::vector<int>>& rank) {
  const int n = static_cast<int>(rank.size());
  std::vector<int> group(n);
  std::iota(group.begin(), group.end(), 0);
  for (const auto& row : rank) {
    if (static_cast<int>(row.size()) != n) return group;
  }
  int best = INT_MAX;
  for (int i = 0; i < n; ++i) {
    for (int j = 0; j < n; ++j) {
      if (i != j) best = std::min(best, rank[i][j]);
    }
  }
  // Union-find with the root kept at the lowest GPU, so groups are named by their lowest GPU.
  std::vector<int> parent(group);
  auto find = [&](int x) {
    while (parent[x] != x) x = parent[x] = parent[parent[x]];
    return x;
  };
  for (int i = 0; i < n; ++i) {
    for (int j = 0; j < n; ++j) {
      if (i == j || (rank[i][j] != best && rank[j][i] != best)) continue;
      int a = find(i), b = find(j);
      if (a != b) parent[std::max(a, b)] = std::min(a, b);
    }
  }
  for (int i = 0; i < n; ++i) group[i] = find(i);
  return group;
}

// ---- packer: set-up ----

Result<Packer> Packer::Create(std::vector<Server> servers, PackerOptions options) {
  Packer p;
  p.options_ = options;
  p.servers_with_free_.assign(1, 0);
  for (const Server& in : servers) SWEEP_RETURN_IF_ERROR(p.AddServer(in));
  return p;
}

Status Packer::AddServer(const Server& in) {
  std::string name = "packer: server " + std::to_string(in.id);
  if (IndexOf(in.id) >= 0) return Status::InvalidArgument(name + " repeated");
  ServerState s;
  s.id = in.id;
  s.gpu = !in.link_group.empty();
  if (s.gpu) {
    // Dense group numbers in order of first appearance.
    std::vector<int> seen;
    for (int g : in.link_group) {
      auto it = std::find(seen.begin(), seen.end(), g);
      s.group_of.push_back(static_cast<int>(it - seen.begin()));
      if (it == seen.end()) seen.push_back(g);
    }
    s.group_size.assign(seen.size(), 0);
    for (int g : s.group_of) ++s.group_size[g];
  } else {
    if (in.cpu_slots <= 0) return Status::InvalidArgument(name + " has no slot");
    s.group_of.assign(in.cpu_slots, 0);  // CPU shares: no link to prefer
    s.group_size.assign(1, in.cpu_slots);
  }
  s.group_free = s.group_size;
  s.slots.assign(s.group_of.size(), SlotState{});
  s.free = static_cast<int>(s.slots.size());
  total_slots_ += s.free;
  free_slots_ += s.free;
  largest_server_ = std::max(largest_server_, s.free);
  if (static_cast<int>(servers_with_free_.size()) <= largest_server_) {
    servers_with_free_.resize(largest_server_ + 1, 0);
  }
  Count(s.free, 1);
  if (s.gpu) ++gpu_servers_;
  auto at = std::lower_bound(servers_.begin(), servers_.end(), in.id,
                             [](const ServerState& x, int id) { return x.id < id; });
  servers_.insert(at, std::move(s));
  return Status::Ok();
}

Status Packer::RemoveServer(int server) {
  int i = IndexOf(server);
  if (i < 0) return Status::NotFound("packer: no server " + std::to_string(server));
  const ServerState& s = servers_[i];
  Count(s.free, -1);
  total_slots_ -= static_cast<int>(s.slots.size());
  free_slots_ -= s.free;
  if (s.gpu) --gpu_servers_;
  servers_.erase(servers_.begin() + i);
  largest_server_ = 0;
  for (const ServerState& x : servers_) {
    largest_server_ = std::max(largest_server_, static_cast<int>(x.slots.size()));
  }
  return Status::Ok();
}

int Packer::IndexOf(int server) const {
  auto it = std::lower_bound(servers_.begin(), servers_.end(), server,
                             [](const ServerState& s, int id) { return s.id < id; });
  if (it == servers_.end() || it->id != server) return -1;
  return static_cast<int>(it - servers_.begin());
}

bool Packer::Usable(const ServerState& s, int64_t trial) const {
  return !s.reserved_for || *s.reserved_for == trial;
}

Status Packer::Check(const Request& r) const {
  if (r.gpus < 1) return Status::InvalidArgument("packer: a trial needs at least one slot");
  if (r.share < 1) return Status::InvalidArgument("packer: gpu_share must be at least 1");
  if (!std::isfinite(r.cost_s) || r.cost_s < 0) {
    return Status::InvalidArgument("packer: trial " + std::to_string(r.trial) +
                                   " has an expected duration that is not a finite number >= 0");
  }
  if (r.share > 1 && r.gpus != 1) {
    return Status::InvalidArgument(
        "packer: only 1-GPU trials share a GPU (gpus = " + std::to_string(r.gpus) +
        ", gpu_share = " + std::to_string(r.share) + ")");
  }
  if (r.share > 1 && gpu_servers_ == 0) {
    return Status::InvalidArgument("packer: gpu_share without GPUs");
  }
  if (r.gpus > largest_server_) {
    return Status::InvalidArgument("packer: trial " + std::to_string(r.trial) + " needs " +
                                   std::to_string(r.gpus) + " slots on one server; the largest " +
                                   "has " + std::to_string(largest_server_));
  }
  return Status::Ok();
}

int Packer::free_slots(int server) const {
  int i = IndexOf(server);
  return i < 0 ? 0 : servers_[i].free;
}

int Packer::trials_on(int server) const {
  int i = IndexOf(server);
  return i < 0 ? 0 : servers_[i].trials;
}

// ---- packer: placing ----

Packer::Fitting Packer::FitOn(const ServerState& s, int n) {
  const int groups = static_cast<int>(s.group_free.size());
  int slack = INT_MAX;
  for (int f : s.group_free) {
    if (f >= n) slack = std::min(slack, f - n);
  }
  if (slack != INT_MAX) return {1, slack};
  // Fewest groups: take the fullest-free ones first (s.free >= n is known). Servers have a
  // handful of groups; the copy stays on the stack for up to 64.
  int stack[64];
  std::vector<int> heap;
  int* free = stack;
  if (groups > 64) {
    heap.resize(groups);
    free = heap.data();
  }
  int m = 0;
  for (int g = 0; g < groups; ++g) {
    if (s.group_free[g] > 0) free[m++] = s.group_free[g];
  }
  std::sort(free, free + m, [](int a, int b) { return a > b; });
  int left = n, used = 0;
  for (int k = 0; k < m && left > 0; ++k, ++used) left -= free[k];
  return {used, 0};
}

std::vector<int> Packer::TakeSlots(ServerState& s, int n, Fit fit) {
  std::vector<int> got;
  got.reserve(n);
  const int slots = static_cast<int>(s.slots.size());
  if (fit == Fit::kFirstFit) {
    for (int i = 0; i < slots && static_cast<int>(got.size()) < n; ++i) {
      if (s.slots[i].share == 0) got.push_back(i);
    }
    return got;
  }
  const int groups = static_cast<int>(s.group_free.size());
  std::vector<bool> used(groups, false);
  int left = n;
  while (left > 0) {
    // The smallest group that covers what is left, else the largest one.
    int pick = -1;
    for (int g = 0; g < groups; ++g) {
      if (used[g] || s.group_free[g] < left) continue;
      if (pick < 0 || s.group_free[g] < s.group_free[pick]) pick = g;
    }
    if (pick < 0) {
      for (int g = 0; g < groups; ++g) {
        if (used[g] || s.group_free[g] == 0) continue;
        if (pick < 0 || s.group_free[g] > s.group_free[pick]) pick = g;
      }
    }
    if (pick < 0) break;  // cannot happen when s.free >= n
    used[pick] = true;
    for (int i = 0; i < slots && left > 0; ++i) {
      if (s.group_of[i] == pick && s.slots[i].share == 0) {
        got.push_back(i);
        --left;
      }
    }
  }
  std::sort(got.begin(), got.end());
  return got;
}

void Packer::Take(ServerState& s, int slot, int share) {
  SlotState& st = s.slots[slot];
  if (st.users == 0) {
    st.share = share;
    Count(s.free, -1);
    --s.free;
    Count(s.free, 1);
    --s.group_free[s.group_of[slot]];
    --free_slots_;
    if (share > 1) ++s.shared_open;
  }
  ++st.users;
  if (share > 1 && st.users == share) --s.shared_open;
}

std::optional<Placement> Packer::PlaceExclusive(const Request& r, bool cpu_only) {
  const int n = r.gpus;
  // No server has n free slots: done without a scan (the common case in a busy cluster).
  int most_free = largest_server_;
  while (most_free > 0 && servers_with_free_[most_free] == 0) --most_free;
  if (most_free < n) return std::nullopt;
  int best = -1;
  std::tuple<int, int, int> best_key{INT_MAX, INT_MAX, INT_MAX};
  for (int i = 0; i < static_cast<int>(servers_.size()); ++i) {
    const ServerState& s = servers_[i];
    // A shared request opens a GPU; on CPU slots (gpu_share does not apply there) it is an
    // ordinary one, placed only where no GPU has room (see PlaceShared).
    if (s.free < n || !Usable(s, r.trial) || (r.share > 1 && !s.gpu) || (cpu_only && s.gpu)) {
      continue;
    }
    if (options_.fit == Fit::kFirstFit) {
      best = i;
      break;
    }
    Fitting f = FitOn(s, n);
    std::tuple<int, int, int> key{f.groups, s.free - n, f.slack};
    if (key < best_key) {  // strict: ties keep the lower id
      best_key = key;
      best = i;
    }
  }
  if (best < 0) return std::nullopt;
  ServerState& s = servers_[best];
  Placement p;
  p.trial = r.trial;
  p.server = s.id;
  p.share = r.share;
  p.gpus = TakeSlots(s, n, options_.fit);
  for (int slot : p.gpus) Take(s, slot, r.share);
  ++s.trials;
  return p;
}

std::optional<Placement> Packer::PlaceShared(const Request& r) {
  // Join the fullest GPU shared k ways with room, on the fullest server; else open a free GPU.
  int best_server = -1, best_slot = -1;
  std::tuple<int, int> best_key{INT_MAX, INT_MAX};  // (-users, free)
  for (int i = 0; i < static_cast<int>(servers_.size()); ++i) {
    const ServerState& s = servers_[i];
    if (s.shared_open == 0 || !Usable(s, r.trial)) continue;
    for (int j = 0; j < static_cast<int>(s.slots.size()); ++j) {
      const SlotState& st = s.slots[j];
      if (st.share != r.share || st.users >= r.share) continue;
      std::tuple<int, int> key{-st.users, s.free};
      if (key < best_key) {
        best_key = key;
        best_server = i;
        best_slot = j;
      }
    }
    if (options_.fit == Fit::kFirstFit && best_server >= 0) break;
  }
  if (best_server < 0) {
    // A free GPU to share; else, on a server without GPUs, a CPU slot of its own (gpu_share is
    // ignored on CPU slots, which take trials as they do without it).
    if (std::optional<Placement> opened = PlaceExclusive(r)) return opened;
    Request alone = r;
    alone.share = 1;
    return PlaceExclusive(alone, /*cpu_only=*/true);
  }
  ServerState& s = servers_[best_server];
  Take(s, best_slot, r.share);
  ++s.trials;
  return Placement{r.trial, s.id, {best_slot}, r.share};
}

std::optional<Placement> Packer::Place(const Request& r) {
  if (!Check(r).ok()) return std::nullopt;
  if (r.share > 1) return PlaceShared(r);
  return PlaceExclusive(r);
}

Status Packer::Release(const Placement& p) {
  int i = IndexOf(p.server);
  if (i < 0) return Status::InvalidArgument("packer: release on unknown server");
  ServerState& s = servers_[i];
  if (p.gpus.empty() || p.share < 1 || s.trials == 0) {
    return Status::InvalidArgument("packer: release of nothing held");
  }
  for (size_t k = 0; k < p.gpus.size(); ++k) {
    int slot = p.gpus[k];
    if (slot < 0 || slot >= static_cast<int>(s.slots.size()) || s.slots[slot].users == 0 ||
        s.slots[slot].share != p.share || (k > 0 && p.gpus[k - 1] >= slot)) {
      return Status::InvalidArgument("packer: release of slot " + std::to_string(slot) +
                                     " on server " + std::to_string(p.server) +
                                     ", which is not held that way");
    }
  }
  for (int slot : p.gpus) {
    SlotState& st = s.slots[slot];
    if (st.share > 1 && st.users == st.share) ++s.shared_open;
    if (--st.users == 0) {
      if (st.share > 1) --s.shared_open;
      st.share = 0;
      Count(s.free, -1);
      ++s.free;
      Count(s.free, 1);
      ++s.group_free[s.group_of[slot]];
      ++free_slots_;
    }
  }
  --s.trials;
  return Status::Ok();
}

// ---- packer: reservations ----

Status Packer::Reserve(int server, int64_t trial) {
  int i = IndexOf(server);
  if (i < 0) return Status::NotFound("packer: no server " + std::to_string(server));
  ServerState& s = servers_[i];
  if (s.reserved_for && *s.reserved_for != trial) {
    return Status::Busy("packer: server " + std::to_string(server) + " is held for trial " +
                        std::to_string(*s.reserved_for));
  }
  s.reserved_for = trial;
  return Status::Ok();
}

void Packer::Unreserve(int server) {
  int i = IndexOf(server);
  if (i >= 0) servers_[i].reserved_for.reset();
}

std::optional<int64_t> Packer::reserved_for(int server) const {
  int i = IndexOf(server);
  if (i < 0) return std::nullopt;
  return servers_[i].reserved_for;
}

std::optional<int> Packer::SoonestToFit(const Request& r) const {
  std::optional<int> best;
  std::tuple<int, int> best_key{INT_MAX, INT_MAX};
  for (const ServerState& s : servers_) {
    if (static_cast<int>(s.slots.size()) < r.gpus || !Usable(s, r.trial)) continue;
    std::tuple<int, int> key{std::max(0, r.gpus - s.free), s.trials};
    if (key < best_key) {
      best_key = key;
      best = s.id;
    }
  }
  return best;
}

// ---- queue ----

int Queue::ClassOf(const Request& r) { return r.share == 1 ? r.gpus : -r.share; }

Status Queue::Push(const Request& request, const Packer& packer) {
  SWEEP_RETURN_IF_ERROR(packer.Check(request));
  if (key_of_.count(request.trial) != 0) {
    return Status::AlreadyExists("queue: trial " + std::to_string(request.trial) +
                                 " is already pending");
  }
  Key key{-request.priority, -request.cost_s, next_arrival_++};
  pending_.emplace(key, Entry{request, 0, std::nullopt});
  classes_[ClassOf(request)].insert(key);
  key_of_.emplace(request.trial, key);
  return Status::Ok();
}

void Queue::Forget(std::map<Key, Entry>::iterator it) {
  auto c = classes_.find(ClassOf(it->second.request));
  if (c != classes_.end()) c->second.erase(it->first);
  holders_.erase(it->first);
  key_of_.erase(it->second.request.trial);
  pending_.erase(it);
}

bool Queue::Remove(int64_t trial, Packer& packer) {
  auto k = key_of_.find(trial);
  if (k == key_of_.end()) return false;
  auto it = pending_.find(k->second);
  if (it->second.reserved) packer.Unreserve(*it->second.reserved);
  Forget(it);
  std::erase_if(classes_, [](const auto& c) { return c.second.empty(); });
  return true;
}

int Queue::bypasses(int64_t trial) const {
  auto k = key_of_.find(trial);
  return k == key_of_.end() ? -1 : pending_.at(k->second).bypasses;
}

std::optional<int> Queue::reservation(int64_t trial) const {
  auto k = key_of_.find(trial);
  if (k == key_of_.end()) return std::nullopt;
  return pending_.at(k->second).reserved;
}

// One pass in queue order:
//   1. A request that holds a server tries every server open to it (its own included); placed,
//      it gives the reservation back.
//   2. Any other request is tried unless one of its class (exclusive and no larger, or shared
//      the same way) already failed in this pass: the pass only takes slots, so it would fail
//      too. Such hopeless requests are not visited at all: the pass walks each class in queue
//      order and merges the classes still open, so a long queue of big requests that cannot
//      fit costs a pass nothing.
//   3. A request that fails gains one bypass for every request placed behind it in the pass.
//      (Within a class the first one to fail is the one that would reserve first.)
//   4. A failed exclusive request for 2+ slots, passed over reserve_after_bypasses times,
//      reserves the server that would soonest fit it, while fewer than max_reservations are held.
std::vector<Placement> Queue::Schedule(Packer& packer) {
  std::vector<Placement> placed;
  int smallest_failed = INT_MAX;                  // exclusive requests, no reservation held
  std::vector<int> failed_shares;                 // shared requests that found no room
  std::vector<std::pair<Entry*, size_t>> failed;  // entry, placements made before it failed
  struct Cursor {
    int cls;
    std::set<Key>::iterator at, end;
  };
  std::vector<Cursor> cursors;
  for (auto& [cls, keys] : classes_) cursors.push_back(Cursor{cls, keys.begin(), keys.end()});
  auto hopeless = [&](int cls) {
    return cls > 0
               ? cls >= smallest_failed
               : std::find(failed_shares.begin(), failed_shares.end(), -cls) != failed_shares.end();
  };
  auto holder = holders_.begin();  // holders are visited from here, not from their class
  for (;;) {
    // The next request in queue order among the reservation holders and the open classes.
    Cursor* from = nullptr;
    const Key* next = nullptr;
    for (Cursor& c : cursors) {
      if (hopeless(c.cls)) continue;
      while (c.at != c.end && holders_.count(*c.at) != 0) ++c.at;
      if (c.at != c.end && (next == nullptr || *c.at < *next)) {
        next = &*c.at;
        from = &c;
      }
    }
    if (holder != holders_.end() && (next == nullptr || *holder < *next)) {
      next = &*holder;
      from = nullptr;
    }
    if (next == nullptr) break;
    const Key key = *next;
    if (from != nullptr) {
      ++from->at;
    } else {
      ++holder;
    }
    auto it = pending_.find(key);
    Entry& e = it->second;
    const Request& r = e.request;
    const bool holds = e.reserved.has_value();
    std::optional<Placement> p = packer.Place(r);
    if (p) {
      if (holds) packer.Unreserve(*e.reserved);
      placed.push_back(std::move(*p));
      // A holder's class cursor may rest on it (skipped lazily): move that past it first.
      for (Cursor& c : cursors) {
        if (c.at != c.end && *c.at == key) ++c.at;
      }
      Forget(it);
      continue;
    }
    if (!holds) {
      if (r.share == 1) {
        smallest_failed = std::min(smallest_failed, r.gpus);
      } else {
        failed_shares.push_back(r.share);
      }
    }
    failed.emplace_back(&e, placed.size());
    const bool may_reserve = options_.reserve_after_bypasses > 0 && r.share == 1 && r.gpus > 1;
    if (may_reserve && !holds && e.bypasses >= options_.reserve_after_bypasses &&
        static_cast<int>(holders_.size()) < options_.max_reservations) {
      std::optional<int> server = packer.SoonestToFit(r);
      if (server && packer.Reserve(*server, r.trial).ok()) {
        e.reserved = server;
        holders_.insert(key);  // before `holder`: this pass does not visit it again
      }
    }
  }
  for (auto& [entry, before] : failed) {
    entry->bypasses += static_cast<int>(placed.size() - before);
  }
  std::erase_if(classes_, [](const auto& c) { return c.second.empty(); });
  return placed;
}

}  // namespace sweep::executor
