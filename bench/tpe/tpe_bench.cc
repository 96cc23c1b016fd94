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
// Besides the seven functions on their boxes, two discrete problems where TPE repeats points:
// branin-grid (x1 stepped, 61 values; x2 the integers 0..15) and mixed-4 (styblinski_tang over
// two integers and a stepped input, plus a categorical that adds a penalty); their minimum is
// their grid's.
//
// With --concurrency N, N trials run at once in part 2 (the oldest finishes first), so each
// suggestion sees N - 1 running trials: the constant liar at work. Each TPE line then counts
// the suggestions that repeat an earlier trial and those that repeat a running one (the liar's
// target: none), and tpe-mv's is set against the same seeds one at a time: the regret
// (distance to the minimum) of the median best, on its log10, how far apart as a share of one
// at a time's, and the mean over seeds of log10 regret (steadier where log10 regret is near 0).
// bench/tpe/tpe_parallel.py checks the same through `sweep run`. With --steps N as well, each
// trial reports a learning curve of N steps as a function trial with `steps = N` does
// (executor's CurveValue), and a running trial's latest report is handed to TPE as the sweep
// does without early stopping: as a provisional observation. Trials take equal time and one
// starts as one ends, so the k-th oldest of the N - 1 running has done (N - 1 - k) / N of its
// steps, rounded down.
//
// With --peer FILE, FILE holds what `optuna_tpe.py quality FUNCTION DIMS TRIALS SEEDS
// [--sampler tpe|tpe-mv]` printed, for one or more runs (concatenated): part 2 then ends with a
// table of our median best@TRIALS against the peer's better TPE variant's, per function, with
// a one-sided Wilcoxon rank-sum p-value for "ours is worse". --first-seed S runs seeds
// S..S+SEEDS-1 (fresh seeds, to check that a change was not tuned to 0..SEEDS-1); --sampler
// (repeatable) runs only the named samplers of tpe-mv, tpe, random. --windows ABOVE prints, per
// window of trials (0-300, 300-1,000, 1,000-2,000, ...), the median over seeds of the median
// value proposed in it, the share of its trials above ABOVE (the mean over seeds), and the
// median best at its end: whether a long sweep keeps proposing near its good trials.
//
// Usage: tpe_bench [--seeds N] [--first-seed S] [--trials N] [--asks N] [--dims N]
//                  [--concurrency N] [--steps N] [--model multivariate|univariate]
//                  [--cost-only | --quality-only] [--function NAME[-DIMS]]...
//                  [--sampler tpe-mv|tpe|random]... [--peer FILE] [--windows ABOVE]
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <deque>
#include <fstream>
#include <map>
#include <memory>
#include <optional>
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

// ---- the peer's results, and a rank-sum test against them ----

// One run of the peer (optuna_tpe.py quality ...): its sampler and the best value after
// `trials` trials for each seed.
struct PeerRun {
  std::string sampler;
  std::vector<double> best;
};

// The value of `key`= in a line of space-separated key=value fields; "" when absent.
std::string Field(const std::string& line, const std::string& key) {
  const std::string tag = key + "=";
  size_t at = 0;
  while ((at = line.find(tag, at)) != std::string::npos) {
    if (at == 0 || line[at - 1] == ' ') {
      const size_t start = at + tag.size();
      return line.substr(start, line.find(' ', start) - start);
    }
    at += tag.size();
  }
  return "";
}

// Reads the text optuna_tpe.py quality prints (one or several runs, concatenated): its
// per-seed lines "seed=S best@10=... best@100=..." followed by the line
// "optuna V sampler=K function=F dims=D trials=N seeds=S". Keyed by "F-D"; only the values
// at best@`trials` are kept, so a run without that mark is left out.
std::map<std::string, std::vector<PeerRun>> ReadPeer(const std::string& path, int64_t trials) {
  std::map<std::string, std::vector<PeerRun>> runs;
  std::ifstream in(path);
  if (!in) {
    std::fprintf(stderr, "cannot read %s\n", path.c_str());
    std::exit(2);
  }
  std::vector<double> pending;
  bool complete = true;  // every pending seed line had best@trials
  std::string line;
  const std::string mark = "best@" + std::to_string(trials);
  while (std::getline(in, line)) {
    if (line.rfind("seed=", 0) == 0) {
      const std::string v = Field(line, mark);
      if (v.empty()) {
        complete = false;
      } else {
        pending.push_back(std::strtod(v.c_str(), nullptr));
      }
    } else if (line.rfind("optuna ", 0) == 0 && !Field(line, "sampler").empty()) {
      if (complete && !pending.empty() && Field(line, "trials") == std::to_string(trials)) {
        runs[Field(line, "function") + "-" + Field(line, "dims")].push_back(
            {Field(line, "sampler"), pending});
      }
      pending.clear();
      complete = true;
    }
  }
  return runs;
}

// One-sided Wilcoxon rank-sum (Mann-Whitney) test: the exact probability, under the hypothesis
// that x and y come from one distribution, that x's rank sum is at least the one observed,
// i.e. small when x tends to be larger than y. Ties get mid-ranks and the exact conditional
// distribution over those ranks (counts by dynamic programming over doubled rank sums).
double RankSumPValue(const std::vector<double>& x, const std::vector<double>& y) {
  std::vector<std::pair<double, int>> pooled;  // (value, 1 for x)
  for (double v : x) pooled.push_back({v, 1});
  for (double v : y) pooled.push_back({v, 0});
  std::sort(pooled.begin(), pooled.end());
  const size_t n = pooled.size(), m = x.size();
  std::vector<int> rank2(n);  // twice the mid-rank: an integer
  for (size_t i = 0; i < n;) {
    size_t j = i;
    while (j < n && pooled[j].first == pooled[i].first) ++j;
    for (size_t k = i; k < j; ++k) rank2[k] = static_cast<int>(i + 1 + j);  // (i+1) + j
    i = j;
  }
  int observed = 0, total = 0;
  for (size_t i = 0; i < n; ++i) {
    total += rank2[i];
    if (pooled[i].second) observed += rank2[i];
  }
  // ways[k][s]: subsets of k of the items seen so far with doubled rank sum s (exact in a
  // double up to 2^53; C(40, 20) is 1.4e11).
  std::vector<std::vector<double>> ways(m + 1, std::vector<double>(total + 1, 0.0));
  ways[0][0] = 1;
  for (size_t i = 0; i < n; ++i) {
    for (size_t k = std::min(m, i + 1); k >= 1; --k) {
      for (int s = total; s >= rank2[i]; --s) ways[k][s] += ways[k - 1][s - rank2[i]];
    }
  }
  double at_least = 0, all = 0;
  for (int s = 0; s <= total; ++s) {
    all += ways[m][s];
    if (s >= observed) at_least += ways[m][s];
  }
  return at_least / all;
}

// ---- part 2: quality ----

// A function on its standard box; or, with a variant, on a discrete space where suggestions
// can repeat exactly:
//   "grid":  x1, x3, ... a stepped uniform of 61 values over the input's range, x2, x4, ... the
//            integers in it (branin-grid: 61 x 16 points);
//   "mixed": styblinski_tang over x1, x2 integers in [-5, 5] and x3 in [-5, 5] in steps of 0.5,
//            plus a categorical c in {"a", "b", "c", "d"} that adds 0, 5, 10 or 20 (mixed-4:
//            11 x 11 x 21 x 4 points).
// The minimum of a discrete problem is its grid's, found by enumeration.
struct Problem {
  std::string function;
  int dims;
  std::string variant;

  std::string Label() const {
    if (variant == "mixed") return "mixed-" + std::to_string(dims + 1);
    if (!variant.empty()) return function + "-" + variant;
    const sweep::executor::FunctionInfo* info = sweep::executor::FindFunction(function);
    return info->dims == 0 ? function + "-" + std::to_string(dims) : function;
  }
};

constexpr double kMixedPenalty[] = {0, 5, 10, 20};
const char* const kMixedValues[] = {"a", "b", "c", "d"};

SearchSpace SpaceOf(const Problem& problem) {
  const sweep::executor::FunctionInfo* info = sweep::executor::FindFunction(problem.function);
  if (problem.variant.empty()) return Box(problem.dims, info);
  SearchSpace space;
  for (int d = 1; d <= problem.dims; ++d) {
    Parameter p;
    p.name = InputName(d);
    if (problem.variant == "mixed") {
      p.distribution.kind = d < 3 ? Distribution::Kind::kIntUniform : Distribution::Kind::kUniform;
      p.distribution.min = -5;
      p.distribution.max = 5;
      p.distribution.step = d < 3 ? 0 : 0.5;
    } else {
      const auto [lo, hi] = sweep::executor::DomainOf(*info, d);
      p.distribution.kind = d % 2 ? Distribution::Kind::kUniform : Distribution::Kind::kIntUniform;
      p.distribution.min = d % 2 ? lo : std::ceil(lo);
      p.distribution.max = d % 2 ? hi : std::floor(hi);
      p.distribution.step = d % 2 ? (hi - lo) / 60 : 0;
    }
    if (!space.Add(p).ok()) std::abort();
  }
  if (problem.variant == "mixed") {
    Parameter c;
    c.name = "c";
    c.distribution.kind = Distribution::Kind::kCategorical;
    for (const char* v : kMixedValues) c.distribution.values.push_back(v);
    if (!space.Add(c).ok()) std::abort();
  }
  return space;
}

// The problem's value at p (its function of the inputs, plus the categorical's penalty).
double Evaluate(const Problem& problem, const json& p) {
  json inputs = json::object();
  double penalty = 0;
  for (const auto& [name, v] : p.items()) {
    if (name != "c") {
      inputs[name] = v;
      continue;
    }
    for (size_t i = 0; i < std::size(kMixedValues); ++i) {
      if (v == kMixedValues[i]) penalty = kMixedPenalty[i];
    }
  }
  auto value = sweep::executor::EvaluateFunction(problem.function, inputs);
  if (!value.ok()) {
    std::fprintf(stderr, "%s\n", value.status().message().c_str());
    std::exit(1);
  }
  return *value + penalty;
}

// The lowest value on the problem's space: the function's minimum on a box, else by
// enumerating the grid.
double MinimumOfProblem(const Problem& problem) {
  const sweep::executor::FunctionInfo* info = sweep::executor::FindFunction(problem.function);
  if (problem.variant.empty()) return sweep::executor::MinimumOf(*info, problem.dims);
  const SearchSpace space = SpaceOf(problem);
  std::vector<std::vector<json>> axes;
  for (const Parameter& p : space.parameters()) {
    std::vector<json> axis = p.distribution.values;
    if (axis.empty()) {
      const int64_t n = p.distribution.step > 0
                            ? sweep::search::StepCount(p.distribution)
                            : static_cast<int64_t>(p.distribution.max - p.distribution.min) + 1;
      for (int64_t k = 0; k < n; ++k) {
        axis.push_back(p.distribution.step > 0
                           ? sweep::search::StepValue(p.distribution, k)
                           : json(static_cast<int64_t>(p.distribution.min) + k));
      }
    }
    axes.push_back(std::move(axis));
  }
  double best = INFINITY;
  std::vector<size_t> at(axes.size(), 0);
  while (true) {
    json p = json::object();
    for (size_t i = 0; i < axes.size(); ++i) p[space.parameters()[i].name] = axes[i][at[i]];
    best = std::min(best, Evaluate(problem, p));
    size_t i = 0;
    while (i < axes.size() && ++at[i] == axes[i].size()) at[i++] = 0;
    if (i == axes.size()) return best;
  }
}

// log10 of a regret, floored at 1e-12: a discrete problem's best can hit its minimum exactly.
double LogRegret(double regret) { return std::log10(std::max(regret, 1e-12)); }

// One seed's run: the best value after each trial, how many suggestions repeated an earlier
// one exactly, and how many of those repeated a trial still running (what the liar is for).
struct Trace {
  std::vector<double> best;
  std::vector<double> values;  // each trial's own value
  int64_t duplicates = 0;
  int64_t running_duplicates = 0;
};

// `trials` trials, `concurrency` at once: each suggestion sees the others as running (the
// constant liar), and the oldest finishes first. With `steps` > 1, running trials that have
// reported are observed at their latest report (the sweep's provisional values).
Trace Run(const Problem& problem, const std::string& sampler, uint64_t seed, int64_t trials,
          int concurrency, int steps, double* sampler_s) {
  const SearchSpace space = SpaceOf(problem);
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
  const double minimum = steps > 1 ? MinimumOfProblem(problem) : 0;  // a grid's is a search
  double best = INFINITY;
  int64_t next = 0, done = 0;
  while (done < trials) {
    while (static_cast<int>(running.size()) < concurrency && next < trials) {
      std::vector<json> others;
      for (const auto& r : running) others.push_back(r.second);
      size_t reported = 0;
      for (size_t k = 0; tpe && steps > 1 && k < running.size(); ++k) {
        const int64_t step =
            int64_t{steps} * (concurrency - 1 - static_cast<int64_t>(k)) / concurrency;
        if (step < 1) continue;
        const auto& [t, p] = running[k];
        tpe->Observe(t, p,
                     sweep::executor::CurveValue(Evaluate(problem, p), minimum, p, step, steps));
        ++reported;
      }
      const double t0 = Seconds();
      json p = tpe ? tpe->Suggest(next, others, reported, true).params : *random->Sample(next);
      *sampler_s += Seconds() - t0;
      if (!seen.insert(p.dump()).second) {
        ++trace.duplicates;
        for (const json& q : others) {
          if (q == p) {
            ++trace.running_duplicates;
            break;
          }
        }
      }
      running.push_back({next++, std::move(p)});
    }
    const auto [t, p] = std::move(running.front());
    running.pop_front();
    const double value = Evaluate(problem, p);
    if (tpe) tpe->Observe(t, p, value);
    best = std::min(best, value);
    trace.values.push_back(value);
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

// Our TPE against the peer's better TPE variant (the lower median) per function: medians of the
// best after `trials` trials, and the one-sided rank-sum p-value for "ours is worse" (the
// seeds are not paired: the two use different random streams, so seed k here and there share
// nothing but the number).
void ComparePeer(
    const std::vector<std::pair<std::string, std::map<std::string, std::vector<double>>>>& finals,
    const std::map<std::string, std::vector<PeerRun>>& peer, int64_t trials) {
  std::printf(
      "\n== against the peer's better TPE variant: median best@%lld; p = one-sided rank-sum "
      "p-value that ours is worse\n",
      static_cast<long long>(trials));
  std::printf("%-20s %-8s | %11s %4s | %11s %-7s %4s | %8s | %s\n", "function", "ours", "median",
              "n", "peer median", "variant", "n", "p", "ours is");
  std::map<std::string, int> no_worse, worse_significant, compared;
  for (const auto& [label, by_sampler] : finals) {
    auto runs = peer.find(label);
    const PeerRun* best = nullptr;
    if (runs != peer.end()) {
      for (const PeerRun& run : runs->second) {
        if (run.sampler.rfind("tpe", 0) != 0) continue;
        if (best == nullptr || Median(run.best) < Median(best->best)) best = &run;
      }
    }
    for (const char* name : {"tpe-mv", "tpe"}) {
      auto ours = by_sampler.find(name);
      if (ours == by_sampler.end()) continue;
      if (best == nullptr) {
        std::printf("%-20s %-8s | no peer run of TPE at best@%lld\n", label.c_str(), name,
                    static_cast<long long>(trials));
        continue;
      }
      const double mine = Median(ours->second), theirs = Median(best->best);
      const double p = RankSumPValue(ours->second, best->best);
      const bool worse = mine > theirs;
      ++compared[name];
      no_worse[name] += worse ? 0 : 1;
      worse_significant[name] += p < 0.05 ? 1 : 0;
      std::printf("%-20s %-8s | %11.6g %4zu | %11.6g %-7s %4zu | %8.4f | %s%s\n", label.c_str(),
                  name, mine, ours->second.size(), theirs, best->sampler.c_str(), best->best.size(),
                  p, worse ? "worse" : "better", p < 0.05 ? " (significant, p < 0.05)" : "");
    }
  }
  for (const auto& [name, n] : compared) {
    std::printf("%-8s: no worse on %d of %d; significantly worse (p < 0.05) on %d\n", name.c_str(),
                no_worse[name], n, worse_significant[name]);
  }
}

void Quality(const std::vector<Problem>& problems, int first_seed, int seeds, int64_t trials,
             int concurrency, int steps, const std::vector<std::string>& samplers,
             const std::string& peer_path, std::optional<double> above) {
  // Per problem label and sampler: each seed's best after all the trials.
  std::vector<std::pair<std::string, std::map<std::string, std::vector<double>>>> finals;
  std::vector<int64_t> marks;
  for (int64_t m : {10, 25, 50, 100, 200, 500, 1000}) {
    if (m <= trials) marks.push_back(m);
  }
  if (marks.empty() || marks.back() != trials) marks.push_back(trials);
  const std::string reporting =
      steps > 1 && concurrency > 1
          ? ", running trials reporting " + std::to_string(steps) + "-step curves"
          : "";
  std::printf(
      "\n== quality: median over %d seeds of the best value after n trials (minimising), %d "
      "at a time%s\n",
      seeds, concurrency, reporting.c_str());
  std::printf("%-20s %-8s |", "function", "sampler");
  for (int64_t m : marks) std::printf(" %11s", ("best@" + std::to_string(m)).c_str());
  std::printf(" | %10s\n", "ms/trial");
  for (const Problem& problem : problems) {
    const std::string label = problem.Label();
    std::map<std::string, std::vector<double>> curves;
    std::map<std::string, int64_t> duplicates, running_duplicates;
    // The peer's runs are keyed "F-D"; a discrete problem has no peer run.
    finals.push_back(
        {problem.variant.empty() ? problem.function + "-" + std::to_string(problem.dims) : label,
         {}});
    for (const std::string& sampler : samplers) {
      std::vector<Trace> traces;
      double sampler_s = 0;
      for (int seed = first_seed; seed < first_seed + seeds; ++seed) {
        traces.push_back(Run(problem, sampler, static_cast<uint64_t>(seed), trials, concurrency,
                             steps, &sampler_s));
        duplicates[sampler] += traces.back().duplicates;
        running_duplicates[sampler] += traces.back().running_duplicates;
      }
      curves[sampler] = MedianCurve(traces);
      if (above) {
        // Per window of trials: the median over seeds of (the median value proposed in it, the
        // share above `above`), and the median best at its end.
        std::vector<int64_t> edges = {0, 300, 1000, 2000, 3000, 5000, 10000};
        for (size_t w = 0; w + 1 < edges.size() && edges[w] < trials; ++w) {
          const int64_t a = edges[w], b = std::min<int64_t>(edges[w + 1], trials);
          std::vector<double> med, share, bst;
          for (const Trace& t : traces) {
            std::vector<double> v(t.values.begin() + a, t.values.begin() + b);
            med.push_back(Median(v));
            double above_n = 0;
            for (double x : v) above_n += x > *above ? 1 : 0;
            share.push_back(above_n / static_cast<double>(v.size()));
            bst.push_back(t.best[static_cast<size_t>(b - 1)]);
          }
          double mean_share = 0;
          for (double x : share) mean_share += x / static_cast<double>(share.size());
          std::printf(
              "  window %5lld-%5lld: median proposed %10.4g  share>%g %5.1f%%  best %10.4g"
              "\n",
              static_cast<long long>(a), static_cast<long long>(b), Median(med), *above,
              100 * mean_share, Median(bst));
        }
      }
      for (const Trace& t : traces) finals.back().second[sampler].push_back(t.best.back());
      std::printf("%-20s %-8s |", label.c_str(), sampler.c_str());
      for (int64_t m : marks) std::printf(" %11.5g", curves[sampler][static_cast<size_t>(m - 1)]);
      std::printf(" | %10.4f\n", sampler_s / static_cast<double>(seeds * trials) * 1000);
    }
    const double minimum = MinimumOfProblem(problem);
    std::printf("%-20s %-8s | global minimum %.6g\n", label.c_str(), "", minimum);
    // How much sooner TPE gets where random search gets in all its trials, and how often a
    // suggestion repeats an earlier trial (one still running: the liar failed to spread them).
    const double target = curves.count("random") ? curves["random"].back() : -INFINITY;
    for (const char* name : {"tpe-mv", "tpe"}) {
      if (!curves.count(name)) continue;
      std::string reach;
      if (curves.count("random")) {
        const size_t n = TrialsToReach(curves[name], target);
        char text[128];
        std::snprintf(text, sizeof(text), "reaches random's median best@%lld (%.5g) in %s trials; ",
                      static_cast<long long>(trials), target,
                      n == 0 ? "more than all" : std::to_string(n).c_str());
        reach = text;
      }
      std::printf(
          "%-20s %-8s | %s%lld of %lld suggestions repeat an earlier one, %lld a running one\n",
          label.c_str(), name, reach.c_str(), static_cast<long long>(duplicates[name]),
          static_cast<long long>(seeds * trials), static_cast<long long>(running_duplicates[name]));
    }
    if (concurrency > 1 && curves.count("tpe-mv")) {
      // The same run one trial at a time: what running trials at once costs, on the log of the
      // regret (the distance to the minimum) at the last mark.
      std::vector<Trace> sequential;
      double ignored = 0;
      for (int seed = first_seed; seed < first_seed + seeds; ++seed) {
        sequential.push_back(
            Run(problem, "tpe-mv", static_cast<uint64_t>(seed), trials, 1, steps, &ignored));
      }
      const double one = MedianCurve(sequential).back() - minimum;
      const double many = curves["tpe-mv"].back() - minimum;
      std::printf(
          "%-20s %-8s | regret at %lld: %.5g one at a time, %.5g %d at a time; log10 "
          "%.3f vs %.3f (%.1f%% apart, %d at a time %s)\n",
          label.c_str(), "tpe-mv", static_cast<long long>(trials), one, many, concurrency,
          LogRegret(one), LogRegret(many),
          100 * std::abs(LogRegret(many) - LogRegret(one)) /
              std::max(1e-12, std::abs(LogRegret(one))),
          concurrency, LogRegret(many) <= LogRegret(one) ? "better" : "worse");
      // The median's percentage is unstable where log10 regret is near 0: the mean over seeds
      // of log10 regret, and its difference, are steadier.
      double mean_one = 0, mean_many = 0;
      for (const Trace& t : sequential) mean_one += LogRegret(t.best.back() - minimum) / seeds;
      for (double v : finals.back().second["tpe-mv"]) mean_many += LogRegret(v - minimum) / seeds;
      std::printf(
          "%-20s %-8s | mean over seeds of log10 regret at %lld: %.3f one at a time, %.3f %d at "
          "a time (%+.3f)\n",
          label.c_str(), "tpe-mv", static_cast<long long>(trials), mean_one, mean_many, concurrency,
          mean_many - mean_one);
    }
  }
  if (!peer_path.empty()) ComparePeer(finals, ReadPeer(peer_path, trials), trials);
}

}  // namespace

int main(int argc, char** argv) {
  int seeds = 20;
  int first_seed = 0;
  std::string peer_path;  // --peer: optuna_tpe.py quality output to compare with
  std::vector<std::string> samplers;
  int64_t trials = 100;
  int asks = 200;
  int dims = 10;
  int concurrency = 1;
  int steps = 0;      // --steps: running trials report learning curves of this many steps
  std::string model;  // --model: ask cost of only "multivariate" or "univariate"
  bool cost = true, quality = true;
  bool chosen = false;          // --function given: only those
  std::optional<double> above;  // --windows ABOVE: per-window stats of the proposed values
  std::vector<Problem> problems = {
      {"branin", 2, ""},          {"hartmann3", 3, ""},  {"hartmann6", 6, ""},
      {"rosenbrock", 5, ""},      {"ackley", 5, ""},     {"levy", 5, ""},
      {"styblinski_tang", 5, ""}, {"branin", 2, "grid"}, {"styblinski_tang", 3, "mixed"}};
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--seeds" && i + 1 < argc) {
      seeds = std::max(1, std::atoi(argv[++i]));
    } else if (a == "--first-seed" && i + 1 < argc) {
      first_seed = std::max(0, std::atoi(argv[++i]));
    } else if (a == "--peer" && i + 1 < argc) {
      peer_path = argv[++i];
    } else if (a == "--sampler" && i + 1 < argc) {
      samplers.push_back(argv[++i]);
    } else if (a == "--trials" && i + 1 < argc) {
      trials = std::max<int64_t>(10, std::atoll(argv[++i]));
    } else if (a == "--asks" && i + 1 < argc) {
      asks = std::max(1, std::atoi(argv[++i]));
    } else if (a == "--dims" && i + 1 < argc) {
      dims = std::max(1, std::atoi(argv[++i]));
    } else if (a == "--concurrency" && i + 1 < argc) {
      concurrency = std::max(1, std::atoi(argv[++i]));
    } else if (a == "--steps" && i + 1 < argc) {
      steps = std::max(0, std::atoi(argv[++i]));
    } else if (a == "--model" && i + 1 < argc) {
      model = argv[++i];
    } else if (a == "--windows" && i + 1 < argc) {
      above = std::atof(argv[++i]);
    } else if (a == "--cost-only") {
      quality = false;
    } else if (a == "--quality-only") {
      cost = false;
    } else if (a == "--function" && i + 1 < argc) {
      // NAME or NAME-DIMS ("levy-5"); a fixed-dimension function takes its own. branin-grid
      // and mixed-4 are the discrete problems.
      std::string spec = argv[++i];
      if (spec == "branin-grid" || spec == "mixed-4") {
        if (!chosen) problems.clear();
        chosen = true;
        problems.push_back(spec == "mixed-4" ? Problem{"styblinski_tang", 3, "mixed"}
                                             : Problem{"branin", 2, "grid"});
        continue;
      }
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
      problems.push_back({spec, info->dims > 0 ? info->dims : n, ""});
    } else {
      std::fprintf(stderr,
                   "usage: %s [--seeds N] [--first-seed S] [--trials N] [--asks N] [--dims N] "
                   "[--concurrency N] [--steps N] [--model multivariate|univariate] "
                   "[--cost-only | --quality-only] "
                   "[--function NAME[-DIMS]]... [--sampler tpe-mv|tpe|random]... [--peer FILE] "
                   "[--windows ABOVE]\n",
                   argv[0]);
      return 2;
    }
  }
  if (cost) AskCost(dims, asks, model);
  if (samplers.empty()) samplers = {"tpe-mv", "tpe", "random"};
  if (quality) {
    Quality(problems, first_seed, seeds, trials, concurrency, steps, samplers, peer_path, above);
  }
  return 0;
}
