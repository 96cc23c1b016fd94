// The data behind each chart of `sweep report`: computed here, in C++, and unit-tested; the
// page's JavaScript only draws it. Pure functions of a SweepData; results are plain values the
// caller owns, and ToJson gives exactly what the page embeds.
//
// Which trials count: a trial's value is its objective (the last reported value of the sweep's
// metric). History plots completed and pruned trials that have one; what ranks (best so far, the
// best-trials table) uses completed trials only, as `sweep best` does; what explains (parallel
// coordinates, importance) uses the trials ExplainingTrials picks.
#pragma once

#include <cstdint>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "report/sweep_data.h"

namespace sweep::report {

// ---- which trials explain the metric ----

// Fewer completed trials than this, and parallel coordinates and importance look to the rungs.
inline constexpr size_t kEnoughToExplain = 10;

// The trials that parallel coordinates and importance use, and their values. Normally the
// completed trials with a value, at their objective. With fewer than kEnoughToExplain of them,
// and more trials at an early-stopping rung, every completed or pruned trial's metric at one
// rung instead (its first report at or past the rung's resource): the deepest rung that
// kEnoughToExplain trials reached, else the one most reached. One resource for all, so that an
// early value is never compared with a late one; `note` says so.
struct Explaining {
  std::vector<const store::TrialRecord*> trials;  // by number
  std::vector<double> values;                     // values[i] is trials[i]'s
  double rung = 0;                                // the resource, when `note` is set
  std::string note;                               // empty: the completed trials, at their objective
};
Explaining ExplainingTrials(const SweepData& data);

// ---- optimisation history ----

struct HistoryPoint {
  int64_t trial = 0;
  double value = 0;
  bool completed = true;  // false: pruned (drawn apart; not in the best-so-far line)
  // What proposed it, for TPE's trials: "" (not TPE: carried over from another sweep), or
  // "startup random" (drawn hollow) or "tpe".
  std::string proposed_by;
};

struct HistoryData {
  std::string metric;
  bool maximize = true;
  std::vector<HistoryPoint> points;  // by trial number
  bool tpe = false;                  // some trial says what proposed it (algorithm = "tpe")
  // The best completed value among trials numbered up to `trial`, one step per completed trial.
  std::vector<std::pair<int64_t, double>> best_so_far;
};
HistoryData ComputeHistory(const SweepData& data);

// ---- parallel coordinates ----

struct Tick {
  double position = 0;  // on the axis, in [0, 1]
  std::string label;
};

struct Axis {
  std::string name;
  Scale scale = Scale::kLinear;
  double min = 0, max = 0;  // kLinear, kLog: the range the axis spans (the declared range,
                            // widened to every observed value)
  std::vector<Tick> ticks;  // kCategorical: one per value; kLog: decades (with 2 and 5 when
                            // the range spans less than two); kLinear: round numbers
};

struct ParallelLine {
  int64_t trial = 0;
  // One entry per axis, in [0, 1]; NaN where the parameter is inactive in this trial.
  std::vector<double> positions;
  double color = 0;  // the metric on [0, 1], 1 = best of the sweep
};

struct ParallelData {
  std::vector<Axis> axes;           // the parameters in declared order, then the metric
  std::vector<ParallelLine> lines;  // the ExplainingTrials, by number
  std::string note;                 // ExplainingTrials' note
};
ParallelData ComputeParallel(const SweepData& data);

// Where `value` sits on `axis`, in [0, 1] (NaN when it does not fit: a category the axis lacks,
// a non-number on a numeric axis, or a non-positive number on a log axis).
double AxisPosition(const Axis& axis, const nlohmann::json& value);

// ---- learning curves ----

struct Curve {
  int64_t trial = 0;
  double value = 0;                               // the trial's objective
  std::vector<std::pair<double, double>> points;  // (resource, metric), by resource
};

struct StopPoint {
  int64_t trial = 0;
  double resource = 0;  // where its last report was
  double value = 0;     // the metric there
};

struct CurvesData {
  std::string metric;
  std::string resource;           // "epoch" or "step"
  std::vector<Curve> top;         // the best `top_k` completed trials, best first
  std::vector<StopPoint> pruned;  // every pruned trial that reported the metric, by number
  // Running and interrupted trials with reports so far (value: their latest), best first, at
  // most `top_k`: a sweep under way, or stopped, shows its progress.
  std::vector<Curve> unfinished;
  std::vector<double> rungs;  // the rung resources (empty without ASHA / Hyperband)
};
// Each curve keeps at most `max_points` points (see Decimate).
CurvesData ComputeCurves(const SweepData& data, int top_k, size_t max_points = 400);

// At most `max_points` of `points` (sorted by x): the first and last, and in each of
// (max_points - 2) / 2 equal runs between them, the lowest and highest point in x order, so a
// spike survives. Returns the input when it already fits.
std::vector<std::pair<double, double>> Decimate(
    const std::vector<std::pair<double, double>>& points, size_t max_points);

// The rung resources: min_resource * reduction_factor^k for k = 0, 1, ... while below the
// spec's max_resource (or, when that is 0, up to `largest_resource`).
std::vector<double> RungResources(const RungSpec& spec, double largest_resource);

// ---- parameter importance ----
//
// A first-order, functional-ANOVA-like estimate from binned marginal means over the n
// ExplainingTrials (the completed trials with a finite value y, or all at one rung). For a
// parameter, trials are grouped: a categorical parameter by value; a numeric one into B =
// clamp(round(sqrt(n)), 2, 10) quantile bins of equal counts (equal values always share a bin);
// trials where a conditional parameter is absent form one more group. With group means m_g over n_g
// trials and the grand mean m,
//   SS_between = sum_g n_g (m_g - m)^2,  SS_within = SS_total - SS_between,
//   importance = max(0, SS_between - (G - 1) * SS_within / (n - G)) / SS_total
// is the fraction of the variance of y that the parameter's marginal mean explains, with the
// epsilon-squared correction for chance: a parameter that does not matter scores about 0, not
// (G - 1) / (n - 1) as the plain ratio would. With n = G the correction is undefined and the
// parameter scores 0. Interactions are not counted, so the fractions need not sum to 1.
struct Importance {
  std::string param;
  double fraction = 0;  // of the metric's variance explained, in [0, 1]
  int groups = 0;       // G
  int64_t trials = 0;   // n
};
// Sorted by fraction, largest first (ties: declared order). Empty with fewer than 3 trials or
// a metric that does not vary.
std::vector<Importance> ComputeImportance(const SweepData& data);

// ---- the best trials ----

// The best `top` completed trials by value (ties: lower number), as `sweep best --json` prints
// them plus "objective".
nlohmann::json BestTrialsJson(const SweepData& data, int top);

// ---- all of it ----

struct ReportOptions {
  int top_curves = 10;  // learning curves drawn
  int top_trials = 20;  // rows in the best-trials table
};

// The page's data: {"sweep", "history", "parallel", "curves", "importance", "explained",
// "best", "config"}; "explained" is ExplainingTrials' {"note", "rung", "trials"}.
// NaN positions become null.
nlohmann::json ReportJson(const SweepData& data, const ReportOptions& options);
nlohmann::json ToJson(const HistoryData& history);
nlohmann::json ToJson(const ParallelData& parallel);
nlohmann::json ToJson(const CurvesData& curves);
nlohmann::json ToJson(const std::vector<Importance>& importance);

}  // namespace sweep::report
