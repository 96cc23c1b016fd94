// Early-stopping schedulers: how fast they decide, and what ASHA and Hyperband buy on function
// trials compared with random search run to the end.
//
// Part 1, decision rate: a history of N reports is recorded by running trials (noisy curves, 32
// at a time, each until stopped or at max_resource) against a live scheduler; then the history
// is replayed through a fresh one, timing the last 10,000 decisions, i.e. decisions taken with
// N - 10,000 reports already recorded. N = 10,000 and 100,000, so the growth is visible.
//
// Part 2, ASHA and Hyperband against random search on analytic functions (hartmann6, branin)
// with steps = 27: for each seed the same random-sampler sequence feeds random search (every
// trial to step 27) and the schedulers (trials in that same order, `--concurrency` at a time,
// each reporting CurveValue at steps 1..27 until stopped). Printed per seed: the best final value
// found, the steps consumed, and their ratio; then ASHA again with random search's step budget.
//
// Usage: scheduler_bench [--seeds N] [--trials N] [--concurrency N]
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "executor/functions.h"
#include "search/early_stopping.h"
#include "search/space.h"

namespace {

using sweep::search::Decision;
using sweep::search::EarlyStopping;
using sweep::search::Report;
using sweep::search::Scheduler;
using sweep::search::SchedulerConfig;

constexpr int64_t kSteps = 27;

double Seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

std::unique_ptr<Scheduler> Make(const SchedulerConfig& config) {
  auto s = sweep::search::MakeScheduler(config);
  if (!s.ok()) {
    std::fprintf(stderr, "%s\n", s.status().message().c_str());
    std::exit(1);
  }
  return std::move(s).value();
}

SchedulerConfig Config(EarlyStopping algorithm, bool maximize) {
  SchedulerConfig c;
  c.algorithm = algorithm;
  c.min_resource = 1;
  c.max_resource = kSteps;
  c.reduction_factor = 3;
  c.grace_period = 1;
  c.min_trials = 3;
  c.maximize = maximize;
  return c;
}

// ---- part 1: decision rate ----

struct Recorded {
  std::vector<Report> reports;
  int64_t trials = 0;
};

// Trials of hidden quality report noisy rising curves, 32 at a time in turn, each until it is
// stopped or reaches kSteps, until `n` reports exist.
Recorded Record(const SchedulerConfig& config, size_t n) {
  auto live = Make(config);
  std::mt19937_64 rng(1);
  std::uniform_real_distribution<double> unit(0, 1);
  struct Running {
    int64_t trial;
    double quality;
    int64_t step;
  };
  Recorded out;
  std::vector<Running> running;
  while (out.reports.size() < n) {
    while (running.size() < 32) running.push_back({out.trials++, unit(rng), 0});
    for (size_t i = 0; i < running.size() && out.reports.size() < n;) {
      Running& r = running[i];
      ++r.step;
      const double value =
          r.quality * (1 - 1.0 / (1 + static_cast<double>(r.step))) + 0.02 * (unit(rng) - 0.5);
      out.reports.push_back({r.trial, static_cast<double>(r.step), value});
      if (live->OnReport(r.trial, static_cast<double>(r.step), value).stop() || r.step >= kSteps) {
        running.erase(running.begin() + static_cast<std::ptrdiff_t>(i));
      } else {
        ++i;
      }
    }
  }
  return out;
}

// Nanoseconds per decision over the last `window` reports, replayed after the ones before them.
double NsPerDecision(const SchedulerConfig& config, const std::vector<Report>& reports,
                     size_t window, int* stops) {
  double best = 1e300;
  for (int repeat = 0; repeat < 3; ++repeat) {
    auto s = Make(config);
    const size_t start = reports.size() - window;
    for (size_t i = 0; i < start; ++i) {
      s->OnReport(reports[i].trial, reports[i].resource, reports[i].value);
    }
    int stopped = 0;
    const double t0 = Seconds();
    for (size_t i = start; i < reports.size(); ++i) {
      stopped += s->OnReport(reports[i].trial, reports[i].resource, reports[i].value).stop();
    }
    const double t1 = Seconds();
    best = std::min(best, (t1 - t0) * 1e9 / static_cast<double>(window));
    *stops = stopped;
  }
  return best;
}

void DecisionRates() {
  std::printf(
      "== decision rate: replaying a recorded history, timing its last 10000 decisions "
      "(best of 3)\n");
  std::printf("%-10s %9s %8s %12s %14s %14s\n", "algorithm", "recorded", "trials", "stops(last)",
              "ns/decision", "decisions/s");
  for (EarlyStopping a :
       {EarlyStopping::kAsha, EarlyStopping::kHyperband, EarlyStopping::kMedian}) {
    const SchedulerConfig config = Config(a, /*maximize=*/true);
    double small = 0;
    for (size_t n : {size_t{10000}, size_t{100000}}) {
      const Recorded rec = Record(config, n);
      int stops = 0;
      const double ns = NsPerDecision(config, rec.reports, 10000, &stops);
      if (n == 10000) small = ns;
      std::printf("%-10s %9zu %8ld %12d %14.1f %14.0f", std::string(EarlyStoppingName(a)).c_str(),
                  n, static_cast<long>(rec.trials), stops, ns, 1e9 / ns);
      if (n == 100000) std::printf("   cost growth x%.2f for 10x the reports", ns / small);
      std::printf("\n");
    }
  }
}

// ---- part 2: against random search on function trials ----

struct Outcome {
  double best = INFINITY;  // best final value among trials that ran to kSteps
  int64_t steps = 0;       // steps consumed by all trials
  int64_t trials = 0;
};

struct Trial {
  nlohmann::json params;
  double final_value;
};

Trial Draw(const sweep::search::Sampler& sampler, const std::string& function, int64_t i) {
  nlohmann::json params = *sampler.Sample(i);
  auto value = sweep::executor::EvaluateFunction(function, params);
  if (!value.ok()) {
    std::fprintf(stderr, "%s\n", value.status().message().c_str());
    std::exit(1);
  }
  return {params, *value};
}

Outcome RandomSearch(const sweep::search::Sampler& sampler, const std::string& function,
                     int64_t trials) {
  Outcome o;
  for (int64_t i = 0; i < trials; ++i) {
    o.best = std::min(o.best, Draw(sampler, function, i).final_value);
    o.steps += kSteps;
  }
  o.trials = trials;
  return o;
}

// Trials in sampler order, `concurrency` at a time; every running trial reports one step per
// round (in slot order), so the scheduler sees them interleaved as a real sweep would. Stops
// drawing new trials after `max_trials`, or once `step_budget` steps have been started.
Outcome WithScheduler(const SchedulerConfig& config, const sweep::search::Sampler& sampler,
                      const sweep::executor::FunctionInfo& info, int64_t max_trials,
                      int64_t step_budget, int concurrency) {
  auto scheduler = Make(config);
  struct Running {
    int64_t number;
    Trial trial;
    int64_t step = 0;
  };
  Outcome o;
  std::vector<Running> running;
  int64_t next = 0;
  for (;;) {
    while (static_cast<int>(running.size()) < concurrency && next < max_trials &&
           o.steps < step_budget) {
      running.push_back({next, Draw(sampler, info.name, next), 0});
      ++next;
    }
    if (running.empty()) break;
    for (size_t i = 0; i < running.size();) {
      Running& r = running[i];
      ++r.step;
      ++o.steps;
      const double value = sweep::executor::CurveValue(r.trial.final_value, info.minimum,
                                                       r.trial.params, r.step, kSteps);
      const bool stop = scheduler->OnReport(r.number, static_cast<double>(r.step), value).stop();
      if (r.step >= kSteps) o.best = std::min(o.best, value);
      if (stop || r.step >= kSteps) {
        running.erase(running.begin() + static_cast<std::ptrdiff_t>(i));
      } else {
        ++i;
      }
    }
  }
  o.trials = next;
  return o;
}

void AgainstRandom(int seeds, int64_t trials, int concurrency) {
  std::printf(
      "\n== ASHA / Hyperband vs random search: function trials, steps = %ld, %ld trials "
      "per seed, %d at a time, eta = 3, min_resource = 1\n",
      static_cast<long>(kSteps), static_cast<long>(trials), concurrency);
  std::printf("%-10s %4s | %10s %7s | %10s %7s %6s %8s | %10s %7s %6s | %14s %7s\n", "function",
              "seed", "random", "steps", "asha", "steps", "ratio", "gap", "hyperband", "steps",
              "ratio", "asha@rnd.budg", "trials");
  for (const char* name : {"hartmann6", "branin"}) {
    const sweep::executor::FunctionInfo* info = sweep::executor::FindFunction(name);
    sweep::search::SearchSpace space;
    for (int d = 1; d <= info->dims; ++d) {
      sweep::search::Parameter p;
      p.name = "x" + std::to_string(d);
      p.distribution.kind = sweep::search::Distribution::Kind::kUniform;
      std::tie(p.distribution.min, p.distribution.max) = sweep::executor::DomainOf(*info, d);
      (void)space.Add(p);
    }
    double sum_gap = 0, sum_ratio = 0, sum_hb_ratio = 0;
    int within = 0;
    for (int seed = 1; seed <= seeds; ++seed) {
      auto sampler = sweep::search::MakeRandomSampler(space, static_cast<uint64_t>(seed));
      const Outcome rnd = RandomSearch(*sampler, name, trials);
      const Outcome asha = WithScheduler(Config(EarlyStopping::kAsha, false), *sampler, *info,
                                         trials, INT64_MAX, concurrency);
      const Outcome hb = WithScheduler(Config(EarlyStopping::kHyperband, false), *sampler, *info,
                                       trials, INT64_MAX, concurrency);
      const Outcome budget = WithScheduler(Config(EarlyStopping::kAsha, false), *sampler, *info,
                                           INT64_MAX, rnd.steps, concurrency);
      const double gap = asha.best - rnd.best;  // > 0: ASHA found worse
      const double ratio = static_cast<double>(asha.steps) / static_cast<double>(rnd.steps);
      const double hb_ratio = static_cast<double>(hb.steps) / static_cast<double>(rnd.steps);
      sum_gap += gap;
      sum_ratio += ratio;
      sum_hb_ratio += hb_ratio;
      within += gap <= 0.005;
      std::printf(
          "%-10s %4d | %10.5f %7ld | %10.5f %7ld %6.3f %+8.4f | %10.5f %7ld %6.3f | %14.5f %7ld\n",
          name, seed, rnd.best, static_cast<long>(rnd.steps), asha.best,
          static_cast<long>(asha.steps), ratio, gap, hb.best, static_cast<long>(hb.steps), hb_ratio,
          budget.best, static_cast<long>(budget.trials));
    }
    std::printf(
        "%-10s mean: asha steps ratio %.3f (target <= 0.333), best gap %+.4f, within "
        "0.005 of random on %d/%d seeds; hyperband steps ratio %.3f\n",
        name, sum_ratio / seeds, sum_gap / seeds, within, seeds, sum_hb_ratio / seeds);
  }
}

}  // namespace

int main(int argc, char** argv) {
  int seeds = 10;
  int64_t trials = 100;
  int concurrency = 8;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--seeds" && i + 1 < argc) {
      seeds = std::max(1, std::atoi(argv[++i]));
    } else if (a == "--trials" && i + 1 < argc) {
      trials = std::max<int64_t>(1, std::atoll(argv[++i]));
    } else if (a == "--concurrency" && i + 1 < argc) {
      concurrency = std::max(1, std::atoi(argv[++i]));
    } else {
      std::fprintf(stderr, "usage: %s [--seeds N] [--trials N] [--concurrency N]\n", argv[0]);
      return 2;
    }
  }
  DecisionRates();
  AgainstRandom(seeds, trials, concurrency);
  return 0;
}
