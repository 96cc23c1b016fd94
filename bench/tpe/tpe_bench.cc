// TPE: what one suggestion costs with a large history, and what it finds on analytic functions
// compared with random search. The peer is Optuna's TPESampler
// (../shared/peers/optuna_tpe.py, beside the checkout, runs the same protocol).
//
// Part 1, ask cost: a history of N random points over D floats in [0, 1] with value = their
// sum (as optuna_tpe.py ask-cost), then ASKS suggestions, each observed before the next; p50
// and p99 ms per Suggest (wall, and this thread's CPU time, which other load on the machine
// does not inflate), for N = 1,000 and 10,000, multivariate and univariate.
//
// Part 2, quality: each function minimised on its standard domain by sequential trials (ask,
// evaluate through executor's EvaluateFunction, observe), once per seed 0..SEEDS-1; the median
// over seeds of the best value after 10, 25, 50, 100 (... up to TRIALS) trials, for TPE
// (multivariate, univariate) and random search.
//
// With --concurrency N, N trials run at once in part 2 (the oldest finishes first), so each
// suggestion sees N - 1 running trials: the constant liar at work.
//
// Usage: tpe_bench [--seeds N] [--trials N] [--asks N] [--dims N] [--concurrency N]
//                  [--model multivariate|univariate] [--cost-only | --quality-only]
//                  [--function NAME[-DIMS]]...
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <deque>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/hash.h"
#include "executor/functions.h"
#include "search/space.h"
#include "search/tpe.h"

namespace {

using nlohmann::json;
using sweep::search::Distribution;
using sweep::search::MakeRandomSampler;
using sweep::search::MakeTpeSampler;
using sweep::search::Parameter;
using sweep::search::SearchSpace;
using sweep::search::TpeOptions;
using sweep::search::TpeSampler;

double Seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// "x3" for 3, appended because GCC 12 -O3 warns falsely (-Wrestrict) on "x" + std::string.
std::string InputName(int index) {
  std::string name = "x";
  name += std::to_string(index);
  return name;
}

SearchSpace Box(int dims, const sweep::executor::FunctionInfo* info) {
  SearchSpace space;
  for (int d = 1; d <= dims; ++d) {
    Parameter p;
    p.name = InputName(d);
    p.distribution.kind = Distribution::Kind::kUniform;
    if (info != nullptr) {
      std::tie(p.distribution.min, p.distribution.max) = sweep::executor::DomainOf(*info, d);
    } else {
      p.distribution.max = 1;
    }
    if (!space.Add(p).ok()) std::abort();
  }
  return space;
}

std::unique_ptr<TpeSampler> Make(const SearchSpace& space, uint64_t seed, bool multivariate) {
  TpeOptions o;
  o.multivariate = multivariate;
  auto s = MakeTpeSampler(space, seed, o, false);
  if (!s.ok()) {
    std::fprintf(stderr, "%s\n", s.status().message().c_str());
    std::exit(1);
  }
  return std::move(s).value();
}

// CPU seconds of this thread: unlike wall time, not inflated when other work shares the cores.
double CpuSeconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

double Percentile(std::vector<double> v, double q) {
  std::sort(v.begin(), v.end());
  const auto i = static_cast<size_t>(q * static_cast<double>(v.size()));
  return v[std::min(i, v.size() - 1)];
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// ---- part 1: ask cost ----

void AskCost(int dims, int asks, const std::string& model) {
  std::printf("== ask cost: %d floats in [0, 1], value = sum, %d asks each observed\n", dims, asks);
  std::printf("%-13s %8s | %10s %10s %10s | %11s %11s | %12s\n", "model", "history", "p50 ms",
              "p99 ms", "max ms", "cpu p50 ms", "cpu p99 ms", "observe us");
  const SearchSpace space = Box(dims, nullptr);
  for (bool multivariate : {true, false}) {
    if (!model.empty() && (model == "multivariate") != multivariate) continue;
    for (int n : {1000, 10000}) {
      auto tpe = Make(space, 0, multivariate);
      uint64_t state = 12345;
      double observe_s = 0;
      for (int t = 0; t < n; ++t) {
        json p = json::object();
        double sum = 0;
        for (int d = 1; d <= dims; ++d) {
          state = sweep::SplitMix64(state);
          const double x = sweep::UnitInterval(state);
          p[InputName(d)] = x;
          sum += x;
        }
        const double t0 = Seconds();
        tpe->Observe(t, p, sum);
        observe_s += Seconds() - t0;
      }
      std::vector<double> ms, cpu_ms;
      for (int a = 0; a < asks; ++a) {
        const double t0 = Seconds(), c0 = CpuSeconds();
        const json p = tpe->Suggest(n + a, {}).params;
        ms.push_back((Seconds() - t0) * 1000);
        cpu_ms.push_back((CpuSeconds() - c0) * 1000);
        double sum = 0;
        for (const auto& [k, v] : p.items()) sum += v.get<double>();
        tpe->Observe(n + a, p, sum);
      }
      std::printf("%-13s %8d | %10.3f %10.3f %10.3f | %11.3f %11.3f | %12.2f\n",
                  multivariate ? "multivariate" : "univariate", n, Percentile(ms, 0.5),
                  Percentile(ms, 0.99), Percentile(ms, 1.0), Percentile(cpu_ms, 0.5),
                  Percentile(cpu_ms, 0.99), observe_s / n * 1e6);
    }
  }
}

// ---- part 2: quality ----

struct Problem {
  std::string function;
  int dims;
};

// One seed's run: the best value after each trial, and how many suggestions repeated an
// earlier one exactly.
struct Trace {
  std::vector<double> best;
  int64_t duplicates = 0;
};

// `trials` trials, `concurrency` at once: each suggestion sees the others as running (the
// constant liar), and the oldest finishes first.
Trace Run(const Problem& problem, const std::string& sampler, uint64_t seed, int64_t trials,
          int concurrency, double* sampler_s) {
  const sweep::executor::FunctionInfo* info = sweep::executor::FindFunction(problem.function);
  const SearchSpace space = Box(problem.dims, info);
  std::unique_ptr<TpeSampler> tpe;
  std::unique_ptr<sweep::search::Sampler> random;
  if (sampler == "random") {
    random = MakeRandomSampler(space, seed);
  } else {
    tpe = Make(space, seed, sampler == "tpe-mv");
  }
  Trace trace;
  std::set<std::string> seen;
  std::deque<std::pair<int64_t, json>> running;
  double best = INFINITY;
  int64_t next = 0, done = 0;
  while (done < trials) {
    while (static_cast<int>(running.size()) < concurrency && next < trials) {
      std::vector<json> others;
      for (const auto& r : running) others.push_back(r.second);
      const double t0 = Seconds();
      json p = tpe ? tpe->Suggest(next, others).params : *random->Sample(next);
      *sampler_s += Seconds() - t0;
      if (!seen.insert(p.dump()).second) ++trace.duplicates;
      running.push_back({next++, std::move(p)});
    }
    const auto [t, p] = std::move(running.front());
    running.pop_front();
    auto value = sweep::executor::EvaluateFunction(problem.function, p);
    if (!value.ok()) {
      std::fprintf(stderr, "%s\n", value.status().message().c_str());
      std::exit(1);
    }
    if (tpe) tpe->Observe(t, p, *value);
    best = std::min(best, *value);
    ++done;
    trace.best.push_back(best);
  }
  return trace;
}

// The median over seeds of the best after each trial count.
std::vector<double> MedianCurve(const std::vector<Trace>& traces) {
  std::vector<double> curve(traces.at(0).best.size());
  for (size_t n = 0; n < curve.size(); ++n) {
    std::vector<double> at;
    for (const Trace& t : traces) at.push_back(t.best[n]);
    curve[n] = Median(at);
  }
  return curve;
}

// The first trial count whose median best reaches `target`; 0 when none does.
size_t TrialsToReach(const std::vector<double>& curve, double target) {
  for (size_t n = 0; n < curve.size(); ++n) {
    if (curve[n] <= target) return n + 1;
  }
  return 0;
}

void Quality(const std::vector<Problem>& problems, int seeds, int64_t trials, int concurrency) {
  std::vector<int64_t> marks;
  for (int64_t m : {10, 25, 50, 100, 200, 500, 1000}) {
    if (m <= trials) marks.push_back(m);
  }
  if (marks.empty() || marks.back() != trials) marks.push_back(trials);
  std::printf(
      "\n== quality: median over %d seeds of the best value after n trials (minimising), %d "
      "at a time\n",
      seeds, concurrency);
  std::printf("%-20s %-8s |", "function", "sampler");
  for (int64_t m : marks) std::printf(" %11s", ("best@" + std::to_string(m)).c_str());
  std::printf(" | %10s\n", "ms/trial");
  for (const Problem& problem : problems) {
    const sweep::executor::FunctionInfo* info = sweep::executor::FindFunction(problem.function);
    std::string label = problem.function;
    if (info->dims == 0) label += "-" + std::to_string(problem.dims);
    std::map<std::string, std::vector<double>> curves;
    std::map<std::string, int64_t> duplicates;
    for (const char* name : {"tpe-mv", "tpe", "random"}) {
      const std::string sampler = name;
      std::vector<Trace> traces;
      double sampler_s = 0;
      for (int seed = 0; seed < seeds; ++seed) {
        traces.push_back(
            Run(problem, sampler, static_cast<uint64_t>(seed), trials, concurrency, &sampler_s));
        duplicates[sampler] += traces.back().duplicates;
      }
      curves[sampler] = MedianCurve(traces);
      std::printf("%-20s %-8s |", label.c_str(), sampler.c_str());
      for (int64_t m : marks) std::printf(" %11.5g", curves[sampler][static_cast<size_t>(m - 1)]);
      std::printf(" | %10.4f\n", sampler_s / static_cast<double>(seeds * trials) * 1000);
    }
    const double minimum = sweep::executor::MinimumOf(*info, problem.dims);
    std::printf("%-20s %-8s | global minimum %.6g\n", label.c_str(), "", minimum);
    // How much sooner TPE gets where random search gets in all its trials.
    const double target = curves["random"].back();
    for (const char* name : {"tpe-mv", "tpe"}) {
      const size_t n = TrialsToReach(curves[name], target);
      std::printf(
          "%-20s %-8s | reaches random's median best@%lld (%.5g) in %s trials; %lld of "
          "%lld suggestions repeat an earlier one\n",
          label.c_str(), name, static_cast<long long>(trials), target,
          n == 0 ? "more than all" : std::to_string(n).c_str(),
          static_cast<long long>(duplicates[name]), static_cast<long long>(seeds * trials));
    }
    if (concurrency > 1) {
      // The same run one trial at a time: what running trials at once costs, on the log of the
      // regret (the distance to the minimum) at the last mark.
      std::vector<Trace> sequential;
      double ignored = 0;
      for (int seed = 0; seed < seeds; ++seed) {
        sequential.push_back(
            Run(problem, "tpe-mv", static_cast<uint64_t>(seed), trials, 1, &ignored));
      }
      const double one = MedianCurve(sequential).back() - minimum;
      const double many = curves["tpe-mv"].back() - minimum;
      std::printf(
          "%-20s %-8s | regret at %lld: %.5g one at a time, %.5g %d at a time; log10 "
          "%.3f vs %.3f (%.1f%% apart)\n",
          label.c_str(), "tpe-mv", static_cast<long long>(trials), one, many, concurrency,
          std::log10(one), std::log10(many),
          100 * std::abs(std::log10(many) - std::log10(one)) /
              std::max(1e-12, std::abs(std::log10(one))));
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  int seeds = 20;
  int64_t trials = 100;
  int asks = 200;
  int dims = 10;
  int concurrency = 1;
  std::string model;  // --model: ask cost of only "multivariate" or "univariate"
  bool cost = true, quality = true;
  bool chosen = false;  // --function given: only those
  std::vector<Problem> problems = {{"branin", 2},         {"hartmann3", 3}, {"hartmann6", 6},
                                   {"rosenbrock", 5},     {"ackley", 5},    {"levy", 5},
                                   {"styblinski_tang", 5}};
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--seeds" && i + 1 < argc) {
      seeds = std::max(1, std::atoi(argv[++i]));
    } else if (a == "--trials" && i + 1 < argc) {
      trials = std::max<int64_t>(10, std::atoll(argv[++i]));
    } else if (a == "--asks" && i + 1 < argc) {
      asks = std::max(1, std::atoi(argv[++i]));
    } else if (a == "--dims" && i + 1 < argc) {
      dims = std::max(1, std::atoi(argv[++i]));
    } else if (a == "--concurrency" && i + 1 < argc) {
      concurrency = std::max(1, std::atoi(argv[++i]));
    } else if (a == "--model" && i + 1 < argc) {
      model = argv[++i];
    } else if (a == "--cost-only") {
      quality = false;
    } else if (a == "--quality-only") {
      cost = false;
    } else if (a == "--function" && i + 1 < argc) {
      // NAME or NAME-DIMS ("levy-5"); a fixed-dimension function takes its own.
      std::string spec = argv[++i];
      int n = 5;
      if (const size_t dash = spec.rfind('-'); dash != std::string::npos) {
        n = std::max(2, std::atoi(spec.c_str() + dash + 1));
        spec.resize(dash);
      }
      const sweep::executor::FunctionInfo* info = sweep::executor::FindFunction(spec);
      if (info == nullptr) {
        std::fprintf(stderr, "unknown function '%s'\n", spec.c_str());
        return 2;
      }
      if (!chosen) problems.clear();
      chosen = true;
      problems.push_back({spec, info->dims > 0 ? info->dims : n});
    } else {
      std::fprintf(
          stderr,
          "usage: %s [--seeds N] [--trials N] [--asks N] [--dims N] "
          "[--concurrency N] [--model multivariate|univariate] [--cost-only | --quality-only] "
          "[--function NAME[-DIMS]]...\n",
          argv[0]);
      return 2;
    }
  }
  if (cost) AskCost(dims, asks, model);
  if (quality) Quality(problems, seeds, trials, concurrency);
  return 0;
}
