// The early-stopping schedulers behind search/early_stopping.h: configuration checks, the median
// rule, ASHA and Hyperband (one class: ASHA is Hyperband with a single bracket), and Replay.
// Everything here is a deterministic function of the reports fed in; see the header for rules.
// A scheduler is not thread-safe; the caller owns it.
#include "search/early_stopping.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <map>
#include <memory>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "order_statistics.h"

namespace sweep::search {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// A Hyperband cycle is stored as one byte per trial; beyond this the brackets' sizes are so
// skewed (eta^K trials in bracket 0) that the configuration is almost certainly a mistake.
constexpr int64_t kMaxHyperbandCycle = int64_t{1} << 20;

// Rungs within this relative distance of max_resource are max_resource itself: a rung there
// would judge trials that are finishing anyway, and min * eta^k is not always exact in doubles.
constexpr double kRungTolerance = 1e-9;

std::string Number(double x) {
  char buffer[32];
  std::snprintf(buffer, sizeof buffer, "%.6g", x);
  return buffer;
}

// The sweep's metric as "larger is better", with NaN below every number: the heaps need a strict
// weak order, and a diverged trial is the worst there is.
double Score(double value, bool maximize) {
  if (std::isnan(value)) return -kInf;
  return maximize ? value : -value;
}

double Unscore(double score, bool maximize) { return maximize ? score : -score; }

Decision Continue(int rung = -1) {
  Decision d;
  d.rung = rung;
  return d;
}

Decision Stop(int rung, std::string reason) {
  Decision d;
  d.action = Decision::Action::kStop;
  d.rung = rung;
  d.reason = std::move(reason);
  return d;
}

// min_resource * eta^k for every k whose value lies below max_resource. Each rung past the first
// is rounded to 15 significant digits: 0.1 * 3 is 0.30000000000000004 in doubles, and a trial
// reporting epoch 0.3 must reach (and, in its worker, wait at) the rung written 0.3.
std::vector<double> RungLadder(const SchedulerConfig& c) {
  std::vector<double> ladder;
  for (int k = 0;; ++k) {
    const double r = c.min_resource * std::pow(c.reduction_factor, k);
    if (!(r < c.max_resource * (1 - kRungTolerance))) break;
    if (k == 0) {
      ladder.push_back(r);
      continue;
    }
    char text[32];
    std::snprintf(text, sizeof text, "%.15g", r);
    ladder.push_back(std::strtod(text, nullptr));
  }
  return ladder;
}

// Hyperband's s_max = floor(log_eta(max_resource / min_resource)): brackets 0..K-1 stop early,
// bracket b from rung b on, and bracket K runs every trial to max_resource. Where max / min is
// not a power of eta the ladder has one rung more than K (min * eta^K < max); no bracket starts
// there, as none would judge a trial only just before its end.
size_t HyperbandStoppingBrackets(const SchedulerConfig& c) {
  size_t k = 0;
  for (double r = c.min_resource * c.reduction_factor; r <= c.max_resource * (1 + kRungTolerance);
       r *= c.reduction_factor) {
    ++k;
  }
  return k;
}

// n_b for b = 0..K (Hyperband's bracket sizes, s = K - b), as doubles so that a huge
// configuration can be refused before anything is converted.
std::vector<double> BracketSizes(size_t rungs, double eta) {
  const auto k = static_cast<double>(rungs);
  std::vector<double> sizes;
  for (size_t b = 0; b <= rungs; ++b) {
    const size_t s = rungs - b;
    double eta_s = 1;
    for (size_t i = 0; i < s; ++i) eta_s *= eta;
    // (K + 1) * eta^s first, then divide: exact whenever eta is an integer.
    const double n = (k + 1) * eta_s / static_cast<double>(s + 1);
    sizes.push_back(std::ceil(n * (1 - 1e-12)));
  }
  return sizes;
}

// ---- none ----

class NoScheduler final : public Scheduler {
 public:
  Decision OnReport(int64_t, double, double, bool) override { return Continue(); }
  int Rung(int64_t) const override { return -1; }
  bool Stopped(int64_t) const override { return false; }
  int Bracket(int64_t) const override { return 0; }
  double MaxResource(int64_t) const override { return kInf; }
  const std::vector<double>& RungResources() const override { return no_rungs_; }

 private:
  std::vector<double> no_rungs_;
};

// ---- median ----

class MedianScheduler final : public Scheduler {
 public:
  explicit MedianScheduler(SchedulerConfig config) : config_(std::move(config)) {}

  Decision OnReport(int64_t trial, double resource, double value, bool last) override {
    if (auto stop = stops_.find(trial); stop != stops_.end()) return stop->second;
    TrialState& t = trials_[trial];
    if (!std::isfinite(resource) || resource <= t.last_resource) return Continue();
    t.last_resource = resource;
    const double score = Score(value, config_.maximize);
    ++t.reports;
    t.sum += score;
    t.best = std::max(t.best, score);
    t.any_number = t.any_number || !std::isnan(value);
    // +inf and -inf scores together would make the sum NaN; such a trial is as bad as NaN.
    const double average = std::isnan(t.sum) ? -kInf : t.sum / static_cast<double>(t.reports);

    internal::RunningMedian& step = steps_[resource];
    Decision decision;
    if (!last && t.reports > config_.grace_period &&
        step.size() >= static_cast<size_t>(config_.min_trials)) {
      const double median = step.Median();
      if (t.best < median) {
        std::string reason = "pruned at step " + Number(resource) + ": ";
        const std::string others = "the median running average of the " +
                                   std::to_string(step.size()) + " other trials at this step";
        const std::string median_text = Number(Unscore(median, config_.maximize));
        if (t.any_number) {
          reason += "best " + config_.metric + " so far " +
                    Number(Unscore(t.best, config_.maximize)) + " is worse than " + median_text +
                    ", " + others;
        } else {
          reason += config_.metric + " has been NaN at every report so far; " + others + " is " +
                    median_text;
        }
        decision = Stop(-1, std::move(reason));
        stops_.emplace(trial, decision);
      }
    }
    // Recorded whatever the decision: the trial did reach this step.
    step.Insert(average);
    return decision;
  }

  int Rung(int64_t) const override { return -1; }
  bool Stopped(int64_t trial) const override { return stops_.contains(trial); }
  int Bracket(int64_t) const override { return 0; }
  double MaxResource(int64_t) const override { return kInf; }
  const std::vector<double>& RungResources() const override { return no_rungs_; }

 private:
  struct TrialState {
    double last_resource = -kInf;
    int64_t reports = 0;
    double sum = 0;       // of scores
    double best = -kInf;  // score
    bool any_number = false;
  };

  SchedulerConfig config_;
  std::unordered_map<int64_t, TrialState> trials_;
  std::unordered_map<int64_t, Decision> stops_;
  // Running averages (scores) of the trials that reported at each step. Keyed by the exact
  // resource: trials that report on different grids of steps are not compared.
  std::map<double, internal::RunningMedian> steps_;
  std::vector<double> no_rungs_;
};

// ---- asha and hyperband ----

class HyperbandScheduler final : public Scheduler {
 public:
  // `cycle` empty: plain ASHA, a single bracket 0. Otherwise brackets 0..K, K the cycle's
  // largest: bracket b < K judges at rungs b.. of the ladder, bracket K nowhere.
  HyperbandScheduler(SchedulerConfig config, std::vector<double> ladder, std::vector<uint8_t> cycle)
      : config_(std::move(config)), ladder_(std::move(ladder)), cycle_(std::move(cycle)) {
    if (cycle_.empty()) {
      rungs_.assign(1, std::vector<internal::TopFraction>(
                           ladder_.size(), internal::TopFraction(config_.reduction_factor)));
      return;
    }
    const size_t last = *std::max_element(cycle_.begin(), cycle_.end());
    rungs_.resize(last + 1);
    for (size_t b = 0; b < last; ++b) {
      rungs_[b].assign(ladder_.size() - std::min(b, ladder_.size()),
                       internal::TopFraction(config_.reduction_factor));
    }
  }

  Decision OnReport(int64_t trial, double resource, double value, bool last) override {
    if (auto stop = stops_.find(trial); stop != stops_.end()) return stop->second;
    TrialState& t = trials_[trial];
    if (!std::isfinite(resource) || resource <= t.last_resource) return Continue();
    t.last_resource = resource;

    // The highest rung this report reaches; judged there only, and only once. A rung is
    // min * eta^k in doubles: 0.1 * 3 is 0.30000000000000004, which a report at epoch 0.3 reaches.
    const int reached =
        static_cast<int>(std::upper_bound(ladder_.begin(), ladder_.end(),
                                          resource + std::abs(resource) * kRungTolerance) -
                         ladder_.begin()) -
        1;
    const int bracket = Bracket(trial);
    if (reached < bracket || reached <= t.recorded) return Continue();
    const auto& bracket_rungs = rungs_[static_cast<size_t>(bracket)];
    if (static_cast<size_t>(reached - bracket) >= bracket_rungs.size()) return Continue();
    t.recorded = reached;

    internal::TopFraction& rung =
        rungs_[static_cast<size_t>(bracket)][static_cast<size_t>(reached - bracket)];
    const double score = Score(value, config_.maximize);
    const double cutoff = rung.Insert(score);
    const bool bootstrap = static_cast<int64_t>(rung.size()) <= config_.bootstrap_count;
    if (!std::isnan(value) && score >= cutoff && !bootstrap) {
      t.survived = reached;
      return Continue(reached);
    }
    // A report that jumped from below the top rung to the trial's end (10 steps, the rung at
    // 9.375) is recorded there, but the trial has run its budget: it completes.
    if (last || resource >= config_.max_resource * (1 - kRungTolerance)) return Continue(reached);

    std::string reason = "pruned at rung " + std::to_string(reached) + " (resource " +
                         Number(ladder_[static_cast<size_t>(reached)]) + ")";
    if (!cycle_.empty()) reason += " of bracket " + std::to_string(bracket);
    reason += ": " + config_.metric;
    const std::string n = std::to_string(rung.size());
    if (std::isnan(value)) {
      reason += " is NaN";
    } else if (bootstrap) {
      const std::string k = std::to_string(config_.bootstrap_count);
      reason += " " + Number(value) + ": among the first " + k +
                " trials to reach the rung, which bootstrap_count = " + k + " stops";
    } else if (static_cast<double>(rung.size()) < config_.reduction_factor) {
      reason += " " + Number(value) + " not the best of the " + n + " trials there (best " +
                Number(Unscore(cutoff, config_.maximize)) + "; a rung with fewer than " +
                Number(config_.reduction_factor) + " trials keeps only its best)";
    } else {
      reason += " " + Number(value) + " not in the top 1/" + Number(config_.reduction_factor) +
                " of " + n + " trials (cutoff " + Number(Unscore(cutoff, config_.maximize)) + ")";
    }
    Decision decision = Stop(reached, std::move(reason));
    stops_.emplace(trial, decision);
    return decision;
  }

  int Rung(int64_t trial) const override {
    auto t = trials_.find(trial);
    return t == trials_.end() ? -1 : t->second.survived;
  }
  bool Stopped(int64_t trial) const override { return stops_.contains(trial); }
  void SetBracket(int64_t trial, int bracket) override {
    if (!cycle_.empty() && bracket >= 0 && static_cast<size_t>(bracket) < rungs_.size()) {
      brackets_[trial] = bracket;
    }
  }
  int Bracket(int64_t trial) const override {
    if (cycle_.empty()) return 0;
    if (auto set = brackets_.find(trial); set != brackets_.end()) return set->second;
    const auto n = static_cast<int64_t>(cycle_.size());
    const int64_t block = trial >= 0 ? trial / n : -1 - (-1 - trial) / n;
    uint64_t at = static_cast<uint64_t>(trial - block * n);
    if (config_.grid_order) {
      at = internal::PermuteBelow(at, static_cast<uint64_t>(n), static_cast<uint64_t>(block));
    }
    return cycle_[static_cast<size_t>(at)];
  }
  double MaxResource(int64_t) const override { return config_.max_resource; }
  const std::vector<double>& RungResources() const override { return ladder_; }

 private:
  struct TrialState {
    double last_resource = -kInf;
    int recorded = -1;  // the highest rung the trial has been judged at
    int survived = -1;  // the highest rung it passed
  };

  SchedulerConfig config_;
  std::vector<double> ladder_;       // rung k's resource
  std::vector<uint8_t> cycle_;       // trial number mod size -> bracket (hyperband only)
  std::map<int64_t, int> brackets_;  // SetBracket's, over the cycle's
  // [bracket][k - bracket]: the values recorded at global rung k by that bracket's trials.
  std::vector<std::vector<internal::TopFraction>> rungs_;
  std::unordered_map<int64_t, TrialState> trials_;
  std::unordered_map<int64_t, Decision> stops_;
};

}  // namespace

uint64_t internal::PermuteBelow(uint64_t x, uint64_t n, uint64_t key) {
  if (n <= 1) return 0;
  // A balanced Feistel network on the smallest even number of bits that holds n, walked until
  // it lands below n (each step is a bijection on [0, 2^bits), so the walk is one on [0, n)).
  int bits = 2;
  while ((uint64_t{1} << bits) < n) bits += 2;
  const int half = bits / 2;
  const uint64_t mask = (uint64_t{1} << half) - 1;
  auto round = [&](uint64_t v, uint64_t r) {
    uint64_t h = v ^ (key * 0x9E3779B97F4A7C15ull) ^ (r * 0xBF58476D1CE4E5B9ull);
    h ^= h >> 31;
    h *= 0x94D049BB133111EBull;
    h ^= h >> 29;
    return h & mask;
  };
  do {
    uint64_t left = x >> half, right = x & mask;
    for (uint64_t r = 0; r < 4; ++r) {
      const uint64_t next = left ^ round(right, r);
      left = right;
      right = next;
    }
    x = (left << half) | right;
  } while (x >= n);
  return x;
}

namespace {

// Smooth weighted round-robin over the bracket sizes: each bracket appears exactly n_b times per
// cycle, spread evenly, the heaviest first on ties.
Result<std::vector<uint8_t>> HyperbandCycle(const SchedulerConfig& c, size_t rungs) {
  const std::vector<double> sizes = BracketSizes(rungs, c.reduction_factor);
  double total = 0;
  for (double n : sizes) total += n;
  if (!(total <= static_cast<double>(kMaxHyperbandCycle))) {
    return Status::InvalidArgument("early_stopping: hyperband with max_resource / min_resource = " +
                                   Number(c.max_resource / c.min_resource) +
                                   " and reduction_factor = " + Number(c.reduction_factor) +
                                   " needs " + std::to_string(rungs + 1) +
                                   " brackets and a cycle of " + Number(total) +
                                   " trials (at most " + std::to_string(kMaxHyperbandCycle) +
                                   "); raise min_resource or reduction_factor");
  }
  const auto length = static_cast<int64_t>(total);
  std::vector<int64_t> weight;
  for (double n : sizes) weight.push_back(static_cast<int64_t>(n));
  std::vector<int64_t> credit(sizes.size(), 0);
  std::vector<uint8_t> cycle;
  cycle.reserve(static_cast<size_t>(length));
  for (int64_t i = 0; i < length; ++i) {
    size_t pick = 0;
    for (size_t b = 0; b < weight.size(); ++b) {
      credit[b] += weight[b];
      if (credit[b] > credit[pick]) pick = b;
    }
    credit[pick] -= length;
    cycle.push_back(static_cast<uint8_t>(pick));
  }
  return cycle;
}

}  // namespace

// ---- configuration ----

std::string_view EarlyStoppingName(EarlyStopping algorithm) {
  switch (algorithm) {
    case EarlyStopping::kNone:
      return "none";
    case EarlyStopping::kMedian:
      return "median";
    case EarlyStopping::kAsha:
      return "asha";
    case EarlyStopping::kHyperband:
      return "hyperband";
  }
  return "unknown";
}

std::optional<EarlyStopping> EarlyStoppingFromName(std::string_view name) {
  for (EarlyStopping a : {EarlyStopping::kNone, EarlyStopping::kMedian, EarlyStopping::kAsha,
                          EarlyStopping::kHyperband}) {
    if (EarlyStoppingName(a) == name) return a;
  }
  return std::nullopt;
}

Status Validate(const SchedulerConfig& c) {
  auto got = [](double x) { return " (got " + Number(x) + ")"; };
  switch (c.algorithm) {
    case EarlyStopping::kNone:
      return Status::Ok();
    case EarlyStopping::kMedian:
      if (c.grace_period < 0) {
        return Status::InvalidArgument("early_stopping.grace_period must be >= 0" +
                                       got(static_cast<double>(c.grace_period)));
      }
      if (c.min_trials < 1) {
        return Status::InvalidArgument("early_stopping.min_trials must be >= 1" +
                                       got(static_cast<double>(c.min_trials)));
      }
      return Status::Ok();
    case EarlyStopping::kAsha:
    case EarlyStopping::kHyperband:
      if (!std::isfinite(c.min_resource) || c.min_resource <= 0) {
        return Status::InvalidArgument("early_stopping.min_resource must be > 0" +
                                       got(c.min_resource));
      }
      if (!std::isfinite(c.max_resource) || c.max_resource <= c.min_resource) {
        return Status::InvalidArgument(
            "early_stopping.max_resource must be greater than early_stopping.min_resource (" +
            Number(c.min_resource) + "): the epochs or steps a surviving trial runs to" +
            got(c.max_resource));
      }
      if (!std::isfinite(c.reduction_factor) || c.reduction_factor < 2) {
        return Status::InvalidArgument("early_stopping.reduction_factor must be >= 2" +
                                       got(c.reduction_factor));
      }
      if (c.bootstrap_count < 0) {
        return Status::InvalidArgument("early_stopping.bootstrap_count must be >= 0" +
                                       got(static_cast<double>(c.bootstrap_count)));
      }
      if (c.algorithm == EarlyStopping::kHyperband) {
        if (HyperbandStoppingBrackets(c) == 0) {
          return Status::InvalidArgument(
              "early_stopping: hyperband with max_resource / min_resource = " +
              Number(c.max_resource / c.min_resource) +
              ", below reduction_factor = " + Number(c.reduction_factor) +
              ", has a single bracket that runs every trial to max_resource and stops nothing; "
              "lower min_resource or reduction_factor, or use asha");
        }
        auto cycle = HyperbandCycle(c, HyperbandStoppingBrackets(c));
        if (!cycle.ok()) return cycle.status();
      }
      return Status::Ok();
  }
  return Status::InvalidArgument("early_stopping.algorithm: unknown value " +
                                 std::to_string(static_cast<int>(c.algorithm)));
}

Result<std::unique_ptr<Scheduler>> MakeScheduler(const SchedulerConfig& config) {
  SWEEP_RETURN_IF_ERROR(Validate(config));
  switch (config.algorithm) {
    case EarlyStopping::kNone:
      return std::unique_ptr<Scheduler>(std::make_unique<NoScheduler>());
    case EarlyStopping::kMedian:
      return std::unique_ptr<Scheduler>(std::make_unique<MedianScheduler>(config));
    case EarlyStopping::kAsha:
      return std::unique_ptr<Scheduler>(
          std::make_unique<HyperbandScheduler>(config, RungLadder(config), std::vector<uint8_t>()));
    case EarlyStopping::kHyperband: {
      std::vector<double> ladder = RungLadder(config);
      SWEEP_ASSIGN_OR_RETURN(std::vector<uint8_t> cycle,
                             HyperbandCycle(config, HyperbandStoppingBrackets(config)));
      return std::unique_ptr<Scheduler>(
          std::make_unique<HyperbandScheduler>(config, std::move(ladder), std::move(cycle)));
    }
  }
  return Status::Internal("MakeScheduler: unhandled algorithm");
}

std::vector<Decision> Replay(Scheduler& scheduler, std::span<const Report> reports) {
  std::vector<Decision> decisions;
  decisions.reserve(reports.size());
  for (const Report& r : reports) {
    decisions.push_back(scheduler.OnReport(r.trial, r.resource, r.value, r.last));
  }
  return decisions;
}

}  // namespace sweep::search
