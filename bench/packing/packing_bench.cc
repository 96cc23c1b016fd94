// Packing quality and placement throughput of executor::Packer + Queue, in an event-driven
// simulation (simulated seconds, no sleeping): 64 servers x 8 GPUs (two NVLink islands of 4),
// 20,000 trials needing 1/2/4/8 GPUs (50/25/15/10%) with heavy-tailed durations, arriving as in
// a sweep: the sampler keeps up to `window` trials pending and adds more as trials are placed;
// a quarter come back promoted (priority 1-3). Best fit with reservations is compared with plain
// first fit (lowest server with room, backfill, no reservation) on the same trials.
// The only wall clock is steady_clock around Queue::Schedule (every Place call, failed ones
// included), for placements per second.
//
// Usage: packing_bench [trials] [window]
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <queue>
#include <string>
#include <vector>

#include "executor/packer.h"

namespace {

using sweep::executor::Fit;
using sweep::executor::Packer;
using sweep::executor::PackerOptions;
using sweep::executor::Placement;
using sweep::executor::Queue;
using sweep::executor::QueueOptions;
using sweep::executor::Request;
using sweep::executor::Server;

constexpr int kServers = 64;
constexpr int kGpusPerServer = 8;

// splitmix64: the same stream on every platform (std distributions are not).
struct Rng {
  uint64_t state;
  uint64_t Next() {
    uint64_t z = (state += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
  }
  double Uniform() { return (static_cast<double>(Next() >> 11) + 0.5) / 9007199254740992.0; }
  double Normal() {
    return std::sqrt(-2.0 * std::log(Uniform())) * std::cos(6.283185307179586 * Uniform());
  }
};

enum class Tail { kLognormal, kPareto };

struct Trial {
  int gpus = 1;
  int priority = 0;
  double seconds = 0;
};

std::vector<Trial> MakeTrials(uint64_t seed, int count, Tail tail) {
  Rng rng{seed};
  std::vector<Trial> trials(count);
  for (Trial& t : trials) {
    double u = rng.Uniform();
    t.gpus = u < 0.50 ? 1 : u < 0.75 ? 2 : u < 0.90 ? 4 : 8;
    t.priority = rng.Uniform() < 0.25 ? 1 + static_cast<int>(rng.Next() % 3) : 0;
    if (tail == Tail::kLognormal) {
      t.seconds = 600.0 * std::exp(1.0 * rng.Normal());  // median 10 min, sigma 1
    } else {
      t.seconds = 300.0 / std::pow(rng.Uniform(), 1.0 / 2.0);  // Pareto alpha 2, from 5 min
    }
  }
  return trials;
}

struct Outcome {
  double makespan_s = 0;
  double lower_bound_s = 0;
  double utilisation = 0;
  double one_group = 0;    // share of 2- and 4-GPU trials placed inside one link group
  double busy_util = 0;    // utilisation until the last trial was placed (the sampler had work)
  double tail_s = 0;       // makespan minus the time of the last placement: the drain
  double wait8_max_s = 0;  // longest an 8-GPU trial waited, pushed to placed
  int64_t placements = 0;
  double place_wall_s = 0;
  bool ok = true;
};

Outcome Simulate(const std::vector<Trial>& trials, int window, bool best_fit) {
  std::vector<Server> servers;
  for (int s = 0; s < kServers; ++s) servers.push_back(Server{s, {0, 0, 0, 0, 1, 1, 1, 1}, 0});
  PackerOptions popt;
  popt.fit = best_fit ? Fit::kBestFit : Fit::kFirstFit;
  QueueOptions qopt;
  if (!best_fit) qopt.reserve_after_bypasses = 0;
  Packer packer = std::move(Packer::Create(servers, popt)).value();
  Queue queue(qopt);

  struct End {
    double at;
    int64_t trial;
    bool operator>(const End& o) const { return at != o.at ? at > o.at : trial > o.trial; }
  };
  std::priority_queue<End, std::vector<End>, std::greater<End>> ends;
  std::vector<Placement> held(trials.size());
  Outcome out;
  double gpu_seconds = 0, longest = 0;
  int64_t multi = 0, multi_one_group = 0;
  size_t next = 0;
  double now = 0;
  double busy_integral = 0, last_place_busy_integral = 0, last_place_s = 0;
  int busy = 0;
  std::vector<double> pushed_at(trials.size(), 0);
  using Clock = std::chrono::steady_clock;
  Clock::duration wall{};
  while (true) {
    // The sampler tops the pending window up; place what fits; repeat while that placed some.
    while (true) {
      while (queue.size() < static_cast<size_t>(window) && next < trials.size()) {
        const Trial& t = trials[next];
        if (!queue.Push(Request{static_cast<int64_t>(next), t.gpus, 1, t.priority}, packer).ok()) {
          out.ok = false;
          return out;
        }
        pushed_at[next] = now;
        ++next;
      }
      Clock::time_point t0 = Clock::now();
      std::vector<Placement> placed = queue.Schedule(packer);
      wall += Clock::now() - t0;
      if (placed.empty()) break;
      for (Placement& p : placed) {
        const Trial& t = trials[p.trial];
        ends.push(End{now + t.seconds, p.trial});
        gpu_seconds += t.seconds * t.gpus;
        longest = std::max(longest, t.seconds);
        busy += t.gpus;
        if (t.gpus == 8) out.wait8_max_s = std::max(out.wait8_max_s, now - pushed_at[p.trial]);
        if (t.gpus == 2 || t.gpus == 4) {
          ++multi;
          bool one = std::all_of(p.gpus.begin(), p.gpus.end(),
                                 [&](int g) { return g / 4 == p.gpus[0] / 4; });
          multi_one_group += one ? 1 : 0;
        }
        ++out.placements;
        last_place_s = now;
        last_place_busy_integral = busy_integral;
        held[p.trial] = std::move(p);
      }
    }
    if (ends.empty()) break;
    busy_integral += busy * (ends.top().at - now);
    now = ends.top().at;
    while (!ends.empty() && ends.top().at == now) {
      busy -= trials[ends.top().trial].gpus;
      if (!packer.Release(held[ends.top().trial]).ok()) out.ok = false;
      ends.pop();
    }
  }
  out.ok = out.ok && out.placements == static_cast<int64_t>(trials.size()) && queue.empty();
  const double total_gpus = kServers * kGpusPerServer;
  out.makespan_s = now;
  out.lower_bound_s = std::max(gpu_seconds / total_gpus, longest);
  out.utilisation = gpu_seconds / (total_gpus * now);
  out.one_group = multi == 0 ? 1.0 : static_cast<double>(multi_one_group) / multi;
  out.busy_util = last_place_s > 0 ? last_place_busy_integral / (total_gpus * last_place_s) : 1.0;
  out.tail_s = now - last_place_s;
  out.place_wall_s = std::chrono::duration<double>(wall).count();
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  const int count = argc > 1 ? std::atoi(argv[1]) : 20000;
  const int window = argc > 2 ? std::atoi(argv[2]) : 64;
  if (count <= 0 || window <= 0) {
    std::fprintf(stderr, "usage: packing_bench [trials > 0] [window > 0]\n");
    return 2;
  }
  std::printf(
      "packing_bench: %d servers x %d GPUs (NVLink islands of 4), %d trials "
      "(1/2/4/8 GPUs: 50/25/15/10%%), %d pending at most\n",
      kServers, kGpusPerServer, count, window);
  std::printf(
      "columns: bound_s = max(GPU-s / GPUs, longest trial); ratio = makespan / bound; util = "
      "GPU-s / (GPUs x makespan); busy = util until the last trial was placed; tail_s = makespan "
      "- last placement; 1grp = 2/4-GPU trials inside one NVLink island; wait8_s = longest wait "
      "of an 8-GPU trial; place/s = placements / wall time of Queue::Schedule\n");
  std::printf("%-9s %4s %8s %7s | %-51s | %s\n", "", "", "", "", "best fit + reservations",
              "plain first fit");
  std::printf("%-9s %4s %8s %7s | %7s %6s %5s %5s %6s %5s %7s %8s | %7s %6s %5s %5s %5s %7s\n",
              "tail", "seed", "bound_s", "by", "make_s", "ratio", "util", "busy", "tail_s", "1grp",
              "wait8_s", "place/s", "make_s", "ratio", "util", "busy", "1grp", "wait8_s");
  bool all_ok = true;
  double worst = 0;
  int64_t total_placements = 0;
  double total_wall = 0;
  for (Tail tail : {Tail::kLognormal, Tail::kPareto}) {
    for (uint64_t seed = 1; seed <= 5; ++seed) {
      std::vector<Trial> trials =
          MakeTrials(seed * 1000 + static_cast<uint64_t>(tail), count, tail);
      Outcome best = Simulate(trials, window, /*best_fit=*/true);
      Outcome first = Simulate(trials, window, /*best_fit=*/false);
      all_ok = all_ok && best.ok && first.ok;
      double longest = 0;
      for (const Trial& t : trials) longest = std::max(longest, t.seconds);
      double ratio = best.makespan_s / best.lower_bound_s;
      worst = std::max(worst, ratio);
      total_placements += best.placements;
      total_wall += best.place_wall_s;
      std::printf(
          "%-9s %4llu %8.0f %7s | %7.0f %6.3f %5.3f %5.3f %6.0f %5.3f %7.0f %8.0f | %7.0f %6.3f "
          "%5.3f %5.3f %5.3f %7.0f\n",
          tail == Tail::kLognormal ? "lognormal" : "pareto2", static_cast<unsigned long long>(seed),
          best.lower_bound_s, longest >= best.lower_bound_s ? "longest" : "work", best.makespan_s,
          ratio, best.utilisation, best.busy_util, best.tail_s, best.one_group, best.wait8_max_s,
          best.placements / best.place_wall_s, first.makespan_s,
          first.makespan_s / first.lower_bound_s, first.utilisation, first.busy_util,
          first.one_group, first.wait8_max_s);
    }
  }
  std::printf(
      "best fit: worst makespan / lower bound %.3f (target <= 1.05); %.0f placements/s "
      "overall (target >= 50000)%s\n",
      worst, total_placements / total_wall, all_ok ? "" : "; SOME RUNS FAILED");
  return all_ok ? 0 : 1;
}
