// Packing quality and placement throughput of executor::Packer + Queue, in an event-driven
// simulation (simulated seconds, no sleeping): 64 servers x 8 GPUs (two NVLink islands of 4),
// 20,000 trials needing 1/2/4/8 GPUs (50/25/15/10%) with heavy-tailed durations.
//
// Trials arrive as in a sweep. The sampler's proposals do not depend on results (grid, random,
// and the new trials of ASHA and Hyperband), so the coordinator may draw the whole sweep ahead.
// Each trial carries the coordinator's estimate of how long it holds its slots if it runs its
// whole budget: the true figure times exp(sigma N(0,1)) (sigma 0.5 by default, so the estimate
// is off by a factor of 1.65 or more a third of the time). Two cases:
//   full: every trial runs its whole budget;
//   asha: early stopping ends 2/3 of the trials after 1/9 of their budget and 2/9 after 1/3,
//         which the placer cannot know: it still sees the whole-budget estimate.
// Three policies on the same trials:
//   lpt:   best fit, longest estimate first within a priority, the whole sweep drawn ahead;
//   first: plain first fit (lowest server with room, no reservation), same order and window;
//   fifo:  best fit, sampler order, 64 pending: what a placer without estimates gets.
// Lower bound: max(GPU-seconds / GPUs, longest trial), on the durations as they turned out.
// The only wall clock is steady_clock around Queue::Schedule (every Place call, failed ones
// included), for placements per second.
//
// Usage: packing_bench [trials] [sigma]
// Exit status 0 when every run placed every trial.
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
  double seconds = 0;   // true duration
  double estimate = 0;  // what the coordinator expects for the whole budget
};

std::vector<Trial> MakeTrials(uint64_t seed, int count, Tail tail, bool asha, double sigma) {
  Rng rng{seed};
  Rng noise{seed ^ 0x5eedULL};  // streams of their own: sigma and asha change no trial's size
  Rng pruning{seed ^ 0xa5aULL};
  std::vector<Trial> trials(count);
  for (Trial& t : trials) {
    double u = rng.Uniform();
    t.gpus = u < 0.50 ? 1 : u < 0.75 ? 2 : u < 0.90 ? 4 : 8;
    double budget = 0;
    if (tail == Tail::kLognormal) {
      budget = 600.0 * std::exp(1.0 * rng.Normal());  // median 10 min, sigma 1
    } else {
      budget = 300.0 / std::pow(rng.Uniform(), 1.0 / 2.0);  // Pareto alpha 2, from 5 min
    }
    t.estimate = budget * std::exp(sigma * noise.Normal());
    double v = pruning.Uniform();
    t.seconds = !asha ? budget : v < 6.0 / 9 ? budget / 9 : v < 8.0 / 9 ? budget / 3 : budget;
  }
  return trials;
}

// max(GPU-seconds / GPUs, longest trial): no schedule can beat either.
double LowerBound(const std::vector<Trial>& trials, double* longest) {
  double gpu_seconds = 0;
  *longest = 0;
  for (const Trial& t : trials) {
    *longest = std::max(*longest, t.seconds);
    gpu_seconds += t.seconds * t.gpus;
  }
  return std::max(gpu_seconds / (kServers * kGpusPerServer), *longest);
}

enum class Policy { kLpt, kFirstFit, kFifo };

struct Outcome {
  double makespan_s = 0;
  double utilisation = 0;
  double one_group = 0;    // share of 2- and 4-GPU trials placed inside one link group
  double busy_util = 0;    // utilisation until the last trial was placed
  double tail_s = 0;       // makespan minus the time of the last placement: the drain
  double wait8_max_s = 0;  // longest an 8-GPU trial waited, drawn to placed
  int64_t placements = 0;
  double place_wall_s = 0;
  bool ok = true;
};

Outcome Simulate(const std::vector<Trial>& trials, Policy policy) {
  std::vector<Server> servers;
  for (int s = 0; s < kServers; ++s) servers.push_back(Server{s, {0, 0, 0, 0, 1, 1, 1, 1}, 0});
  PackerOptions popt;
  popt.fit = policy == Policy::kFirstFit ? Fit::kFirstFit : Fit::kBestFit;
  QueueOptions qopt;
  if (policy == Policy::kFirstFit) qopt.reserve_after_bypasses = 0;
  const bool estimates = policy != Policy::kFifo;
  const size_t window = policy == Policy::kFifo ? 64 : trials.size();
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
  double gpu_seconds = 0;
  int64_t multi = 0, multi_one_group = 0;
  size_t next = 0;
  double now = 0;
  double busy_integral = 0, last_place_busy_integral = 0, last_place_s = 0;
  int busy = 0;
  std::vector<double> queued_at(trials.size(), 0);
  auto push = [&](int64_t i) {
    const Trial& t = trials[i];
    queued_at[i] = now;
    return queue.Push(Request{i, t.gpus, 1, 0, estimates ? t.estimate : 0}, packer).ok();
  };
  using Clock = std::chrono::steady_clock;
  Clock::duration wall{};
  while (true) {
    // The sampler tops the window of new trials up; place what fits; repeat while that placed.
    while (true) {
      while (queue.size() < window && next < trials.size()) {
        if (!push(static_cast<int64_t>(next++))) {
          out.ok = false;
          return out;
        }
      }
      Clock::time_point t0 = Clock::now();
      std::vector<Placement> placed = queue.Schedule(packer);
      wall += Clock::now() - t0;
      if (placed.empty()) break;
      for (Placement& p : placed) {
        const Trial& t = trials[p.trial];
        ends.push(End{now + t.seconds, p.trial});
        gpu_seconds += t.seconds * t.gpus;
        busy += t.gpus;
        if (t.gpus == 8) out.wait8_max_s = std::max(out.wait8_max_s, now - queued_at[p.trial]);
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
      const int64_t done = ends.top().trial;
      ends.pop();
      busy -= trials[done].gpus;
      if (!packer.Release(held[done]).ok()) out.ok = false;
    }
  }
  out.ok = out.ok && out.placements == static_cast<int64_t>(trials.size()) && queue.empty();
  const double total_gpus = kServers * kGpusPerServer;
  out.makespan_s = now;
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
  const double sigma = argc > 2 ? std::atof(argv[2]) : 0.5;
  if (count <= 0 || !(sigma >= 0)) {
    std::fprintf(stderr, "usage: packing_bench [trials > 0] [sigma >= 0]\n");
    return 2;
  }
  std::printf(
      "packing_bench: %d servers x %d GPUs (NVLink islands of 4), %d trials "
      "(1/2/4/8 GPUs: 50/25/15/10%%), duration estimates off by exp(%.2f N(0,1))\n",
      kServers, kGpusPerServer, count, sigma);
  std::printf(
      "columns: bound_s = max(GPU-s / GPUs, longest trial); ratio = makespan / bound; util = "
      "GPU-s / (GPUs x makespan); busy = util until the last trial was placed; tail_s = makespan "
      "- last placement; 1grp = 2/4-GPU trials inside one NVLink island; place/s = placements / "
      "wall time of Queue::Schedule; wait8_s = longest wait of an 8-GPU trial\n");
  std::printf("%-14s %4s %7s %7s | %-44s | %-20s | %s\n", "", "", "", "",
              "lpt: best fit, longest first, all drawn", "first: first fit",
              "fifo: no estimates, 64 drawn");
  std::printf("%-14s %4s %7s %7s | %7s %6s %5s %5s %6s %5s %7s | %7s %6s %5s | %7s %6s %5s %7s\n",
              "case", "seed", "bound_s", "by", "make_s", "ratio", "util", "busy", "tail_s", "1grp",
              "place/s", "make_s", "ratio", "1grp", "make_s", "ratio", "util", "wait8_s");
  bool all_ok = true;
  double worst = 0, worst_first = 0, worst_fifo = 0;
  int64_t total_placements = 0;
  double total_wall = 0;
  for (bool asha : {false, true}) {
    for (Tail tail : {Tail::kLognormal, Tail::kPareto}) {
      for (uint64_t seed = 1; seed <= 5; ++seed) {
        std::vector<Trial> trials =
            MakeTrials(seed * 1000 + static_cast<uint64_t>(tail), count, tail, asha, sigma);
        double longest = 0;
        const double bound = LowerBound(trials, &longest);
        Outcome lpt = Simulate(trials, Policy::kLpt);
        Outcome first = Simulate(trials, Policy::kFirstFit);
        Outcome fifo = Simulate(trials, Policy::kFifo);
        all_ok = all_ok && lpt.ok && first.ok && fifo.ok;
        const double ratio = lpt.makespan_s / bound;
        worst = std::max(worst, ratio);
        worst_first = std::max(worst_first, first.makespan_s / bound);
        worst_fifo = std::max(worst_fifo, fifo.makespan_s / bound);
        total_placements += lpt.placements;
        total_wall += lpt.place_wall_s;
        std::string name = std::string(tail == Tail::kLognormal ? "lognormal" : "pareto2") +
                           (asha ? " asha" : " full");
        std::printf(
            "%-14s %4llu %7.0f %7s | %7.0f %6.3f %5.3f %5.3f %6.0f %5.3f %7.0f | %7.0f %6.3f "
            "%5.3f | %7.0f %6.3f %5.3f %7.0f\n",
            name.c_str(), static_cast<unsigned long long>(seed), bound,
            longest >= bound ? "longest" : "work", lpt.makespan_s, ratio, lpt.utilisation,
            lpt.busy_util, lpt.tail_s, lpt.one_group, lpt.placements / lpt.place_wall_s,
            first.makespan_s, first.makespan_s / bound, first.one_group, fifo.makespan_s,
            fifo.makespan_s / bound, fifo.utilisation, fifo.wait8_max_s);
      }
    }
  }
  std::printf(
      "worst makespan / lower bound: lpt %.3f (target <= 1.05), first fit %.3f, fifo %.3f; "
      "%.0f placements/s overall (target >= 50000)%s\n",
      worst, worst_first, worst_fifo, total_placements / total_wall,
      all_ok ? "" : "; SOME RUNS FAILED");
  return all_ok ? 0 : 1;
}
