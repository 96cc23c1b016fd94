// The charts' data: history, parallel coordinates, learning curves, importance, best trials.
#include "report/charts.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <numeric>

#include "report/terminal.h"

namespace sweep::report {

using nlohmann::json;

namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

bool Better(double a, double b, bool maximize) { return maximize ? a > b : a < b; }

// Completed trials with a finite objective, in number order.
std::vector<const store::TrialRecord*> CompletedWithValue(const SweepData& data) {
  std::vector<const store::TrialRecord*> out;
  for (const store::TrialRecord& t : data.trials) {
    if (t.status == store::TrialStatus::kCompleted && t.objective && std::isfinite(*t.objective)) {
      out.push_back(&t);
    }
  }
  return out;
}

// Best first; ties: lower number.
std::vector<const store::TrialRecord*> RankedCompleted(const SweepData& data) {
  std::vector<const store::TrialRecord*> ranked = CompletedWithValue(data);
  const bool maximize = data.sweep.maximize;
  std::stable_sort(ranked.begin(), ranked.end(), [&](const auto* a, const auto* b) {
    return Better(*a->objective, *b->objective, maximize);
  });
  return ranked;
}

// Where v lies from lo (0) to hi (1). Halves first: hi - lo of values near the largest double
// would overflow to infinity.
double Fraction(double v, double lo, double hi) { return (v / 2 - lo / 2) / (hi / 2 - lo / 2); }

// A range of one value (every trial reported the same) made wide enough to draw: by half a unit,
// or by 5% of the value where half a unit would be lost in its rounding (1e20 + 0.5 == 1e20).
void WidenEmptyRange(double* lo, double* hi) {
  if (*hi > *lo) return;
  const double d = std::max(0.5, std::abs(*lo) * 0.05);
  constexpr double kMax = std::numeric_limits<double>::max();
  *lo = std::max(*lo - d, -kMax);
  *hi = std::min(*hi + d, kMax);
}

// Round numbers spanning [lo, hi]: steps of 1, 2 or 5 times a power of ten, about 5 of them.
std::vector<double> NiceTicks(double lo, double hi, bool integer) {
  std::vector<double> ticks;
  if (!(hi > lo)) return {lo};
  double raw = hi / 4 - lo / 4;
  double mag = std::pow(10, std::floor(std::log10(raw)));
  double step = mag;
  for (double m : {1.0, 2.0, 5.0, 10.0}) {
    if (!std::isfinite(m * mag)) break;  // past the largest double: the last step that was not
    step = m * mag;
    if (step >= raw) break;
  }
  if (integer) step = std::max(1.0, std::round(step));
  const double last = std::min(hi + step * 1e-9, std::numeric_limits<double>::max());
  for (double v = std::ceil(lo / step) * step; v <= last; v += step) {
    ticks.push_back(std::abs(v) < step * 1e-9 ? 0.0 : v);
    if (ticks.size() > 20) break;
  }
  return ticks;
}

std::vector<double> LogTicks(double lo, double hi) {
  std::vector<double> ticks;
  const int first = static_cast<int>(std::floor(std::log10(lo)));
  const int last = static_cast<int>(std::ceil(std::log10(hi)));
  auto in = [&](double v) { return v >= lo * (1 - 1e-12) && v <= hi * (1 + 1e-12); };
  // Every power of ten, or every second, fifth, ... where the range spans more than ten of them.
  const int every = std::max(1, (last - first + 9) / 10);
  for (int k = first; k <= last; ++k) {
    if (in(std::pow(10, k)) && (k % every == 0)) ticks.push_back(std::pow(10, k));
  }
  if (ticks.size() < 2) {
    ticks.clear();
    for (int k = first; k <= last; ++k) {
      for (double m : {1.0, 2.0, 5.0}) {
        if (in(m * std::pow(10, k))) ticks.push_back(m * std::pow(10, k));
      }
    }
  }
  if (ticks.size() < 2) ticks = {lo, hi};
  return ticks;
}

std::string Label(const json& v) { return v.is_string() ? v.get<std::string>() : v.dump(); }

double Resource(const SweepData& data, const store::ReportRecord& r) {
  return data.resource == "epoch" ? r.epoch : static_cast<double>(r.step);
}

// The reports of each trial: [begin, end) into data.reports (which is sorted by trial).
std::map<int64_t, std::pair<size_t, size_t>> ReportRanges(const SweepData& data) {
  std::map<int64_t, std::pair<size_t, size_t>> ranges;
  for (size_t i = 0; i < data.reports.size(); ++i) {
    auto [it, inserted] = ranges.try_emplace(data.reports[i].trial, i, i + 1);
    if (!inserted) it->second.second = i + 1;
  }
  return ranges;
}

json NumberOrNull(double v, double round_to = 0) {
  if (!std::isfinite(v)) return nullptr;
  if (round_to > 0) return std::round(v / round_to) * round_to;
  return v;
}

}  // namespace

// ---- which trials explain the metric ----

Explaining ExplainingTrials(const SweepData& data) {
  Explaining out;
  out.trials = CompletedWithValue(data);
  for (const auto* t : out.trials) out.values.push_back(*t->objective);
  if (out.trials.size() >= kEnoughToExplain) return out;
  double largest = 0;
  for (const store::ReportRecord& r : data.reports) largest = std::max(largest, Resource(data, r));
  const std::vector<double> rungs = RungResources(data.rungs, largest);
  if (rungs.empty()) return out;
  const auto ranges = ReportRanges(data);
  // Each ended trial's metric at each rung: its first report at or past the rung.
  std::vector<std::vector<std::pair<const store::TrialRecord*, double>>> at(rungs.size());
  for (const store::TrialRecord& t : data.trials) {
    if (t.status != store::TrialStatus::kCompleted && t.status != store::TrialStatus::kPruned) {
      continue;
    }
    auto range = ranges.find(t.number);
    if (range == ranges.end()) continue;
    for (size_t k = 0; k < rungs.size(); ++k) {
      const store::ReportRecord* first = nullptr;
      for (size_t i = range->second.first; i < range->second.second; ++i) {
        const store::ReportRecord& r = data.reports[i];
        if (Resource(data, r) >= rungs[k] &&
            (first == nullptr || Resource(data, r) < Resource(data, *first))) {
          first = &r;
        }
      }
      if (first == nullptr) continue;
      auto v = NumberIn(ParseObject(first->metrics_json), data.sweep.metric);
      if (v) at[k].emplace_back(&t, *v);
    }
  }
  size_t pick = 0;
  for (size_t k = 0; k < rungs.size(); ++k) {
    if (at[k].size() >= kEnoughToExplain || at[k].size() > at[pick].size()) pick = k;
  }
  if (at[pick].size() <= out.trials.size()) return out;
  out.trials.clear();
  out.values.clear();
  for (const auto& [t, v] : at[pick]) {
    out.trials.push_back(t);
    out.values.push_back(v);
  }
  out.rung = rungs[pick];
  out.note = std::to_string(CompletedWithValue(data).size()) +
             " trial(s) completed, too few to explain " + data.sweep.metric + ": this uses " +
             std::to_string(at[pick].size()) + " trials' " + data.sweep.metric + " at " +
             data.resource + " " + ShortNumber(rungs[pick]) +
             " (an early-stopping rung), pruned trials included";
  return out;
}

// ---- optimisation history ----

HistoryData ComputeHistory(const SweepData& data) {
  HistoryData h;
  h.metric = data.sweep.metric;
  h.maximize = data.sweep.maximize;
  std::optional<double> best;
  for (const store::TrialRecord& t : data.trials) {
    const bool completed = t.status == store::TrialStatus::kCompleted;
    if (!completed && t.status != store::TrialStatus::kPruned) continue;
    if (!t.objective || !std::isfinite(*t.objective)) continue;
    h.tpe = h.tpe || !t.proposed_by.empty();
    h.points.push_back({t.number, *t.objective, completed, t.proposed_by});
    if (!completed) continue;
    if (!best || Better(*t.objective, *best, h.maximize)) best = *t.objective;
    h.best_so_far.emplace_back(t.number, *best);
  }
  return h;
}

// ---- parallel coordinates ----

double AxisPosition(const Axis& axis, const json& value) {
  switch (axis.scale) {
    case Scale::kCategorical: {
      const std::string label = Label(value);
      for (const Tick& tick : axis.ticks) {
        if (tick.label == label) return tick.position;
      }
      return kNaN;
    }
    case Scale::kLog: {
      if (!value.is_number()) return kNaN;
      double v = value.get<double>();
      if (!(v > 0) || !(axis.max > axis.min)) return kNaN;
      return (std::log(v) - std::log(axis.min)) / (std::log(axis.max) - std::log(axis.min));
    }
    case Scale::kLinear: {
      if (!value.is_number()) return kNaN;
      double v = value.get<double>();
      if (!std::isfinite(v) || !(axis.max > axis.min)) return kNaN;
      return Fraction(v, axis.min, axis.max);
    }
  }
  return kNaN;
}

ParallelData ComputeParallel(const SweepData& data) {
  ParallelData out;
  const Explaining explaining = ExplainingTrials(data);
  const std::vector<const store::TrialRecord*>& trials = explaining.trials;
  const std::vector<double>& metric_values = explaining.values;
  out.note = explaining.note;
  std::vector<json> params;
  params.reserve(trials.size());
  for (const auto* t : trials) params.push_back(ParseObject(t->params_json));

  for (const ParamSpec& spec : data.params) {
    Axis axis;
    axis.name = spec.name;
    axis.scale = spec.scale;
    if (spec.scale == Scale::kCategorical) {
      std::vector<json> values = spec.values;
      for (const json& p : params) {  // a value the config does not list still gets a tick
        auto it = p.find(spec.name);
        if (it != p.end() && std::find(values.begin(), values.end(), *it) == values.end()) {
          values.push_back(*it);
        }
      }
      for (size_t i = 0; i < values.size(); ++i) {
        double pos = values.size() == 1 ? 0.5 : static_cast<double>(i) / (values.size() - 1);
        axis.ticks.push_back({pos, Label(values[i])});
      }
    } else {
      const bool log = spec.scale == Scale::kLog;
      axis.min = spec.min;
      axis.max = spec.max;
      for (const json& p : params) {
        auto v = NumberIn(p, spec.name);
        if (!v || (log && !(*v > 0))) continue;
        axis.min = std::min(axis.min, *v);
        axis.max = std::max(axis.max, *v);
      }
      if (log && !(axis.min > 0)) axis.min = axis.max > 0 ? axis.max / 10 : 1;
      if (log && !(axis.max > axis.min)) {
        axis.min /= 2;
        axis.max *= 2;
      } else {
        WidenEmptyRange(&axis.min, &axis.max);
      }
      std::vector<double> ticks =
          log ? LogTicks(axis.min, axis.max) : NiceTicks(axis.min, axis.max, spec.integer);
      for (double v : ticks) axis.ticks.push_back({AxisPosition(axis, json(v)), ShortNumber(v)});
    }
    out.axes.push_back(std::move(axis));
  }

  Axis metric;
  metric.name = data.sweep.metric;
  metric.scale = Scale::kLinear;
  if (!metric_values.empty()) {
    metric.min = *std::min_element(metric_values.begin(), metric_values.end());
    metric.max = *std::max_element(metric_values.begin(), metric_values.end());
  }
  const double lo = metric.min, hi = metric.max;
  WidenEmptyRange(&metric.min, &metric.max);
  for (double v : NiceTicks(metric.min, metric.max, false)) {
    metric.ticks.push_back({AxisPosition(metric, json(v)), ShortNumber(v)});
  }
  out.axes.push_back(metric);

  for (size_t i = 0; i < trials.size(); ++i) {
    ParallelLine line;
    line.trial = trials[i]->number;
    for (size_t a = 0; a + 1 < out.axes.size(); ++a) {
      auto it = params[i].find(out.axes[a].name);
      line.positions.push_back(it == params[i].end() ? kNaN : AxisPosition(out.axes[a], *it));
    }
    const double v = metric_values[i];
    line.positions.push_back(AxisPosition(out.axes.back(), json(v)));
    double c = hi > lo ? Fraction(v, lo, hi) : 1.0;
    line.color = data.sweep.maximize ? c : 1 - c;
    if (!(hi > lo)) line.color = 1.0;
    out.lines.push_back(std::move(line));
  }
  return out;
}

// ---- learning curves ----

std::vector<std::pair<double, double>> Decimate(
    const std::vector<std::pair<double, double>>& points, size_t max_points) {
  if (points.size() <= max_points || max_points < 4) return points;
  const size_t runs = (max_points - 2) / 2;
  const size_t interior = points.size() - 2;
  std::vector<std::pair<double, double>> out;
  out.push_back(points.front());
  for (size_t r = 0; r < runs; ++r) {
    size_t begin = 1 + r * interior / runs;
    size_t end = 1 + (r + 1) * interior / runs;
    if (begin >= end) continue;
    size_t lo = begin, hi = begin;
    for (size_t i = begin; i < end; ++i) {
      if (points[i].second < points[lo].second) lo = i;
      if (points[i].second > points[hi].second) hi = i;
    }
    out.push_back(points[std::min(lo, hi)]);
    if (lo != hi) out.push_back(points[std::max(lo, hi)]);
  }
  out.push_back(points.back());
  return out;
}

std::vector<double> RungResources(const RungSpec& spec, double largest_resource) {
  std::vector<double> rungs;
  if (!spec.enabled || !(spec.min_resource > 0) || !(spec.reduction_factor > 1)) return rungs;
  const double bound = spec.max_resource > 0 ? spec.max_resource : largest_resource;
  for (double r = spec.min_resource; r < bound && rungs.size() < 64; r *= spec.reduction_factor) {
    rungs.push_back(r);
  }
  return rungs;
}

CurvesData ComputeCurves(const SweepData& data, int top_k, size_t max_points) {
  CurvesData out;
  out.metric = data.sweep.metric;
  out.resource = data.resource;
  auto ranges = ReportRanges(data);
  auto curve_of = [&](int64_t trial) {
    std::vector<std::pair<double, double>> points;
    auto it = ranges.find(trial);
    if (it == ranges.end()) return points;
    for (size_t i = it->second.first; i < it->second.second; ++i) {
      const store::ReportRecord& r = data.reports[i];
      auto v = NumberIn(ParseObject(r.metrics_json), out.metric);
      if (v) points.emplace_back(Resource(data, r), *v);
    }
    std::stable_sort(points.begin(), points.end(),
                     [](const auto& a, const auto& b) { return a.first < b.first; });
    return points;
  };

  std::vector<const store::TrialRecord*> ranked = RankedCompleted(data);
  for (const auto* t : ranked) {
    if (static_cast<int>(out.top.size()) >= top_k) break;
    out.top.push_back({t->number, *t->objective, Decimate(curve_of(t->number), max_points)});
  }
  for (const store::TrialRecord& t : data.trials) {
    if (t.status != store::TrialStatus::kPruned) continue;
    auto points = curve_of(t.number);
    if (points.empty()) continue;
    out.pruned.push_back({t.number, points.back().first, points.back().second});
  }
  for (const store::TrialRecord& t : data.trials) {
    if (t.status != store::TrialStatus::kRunning && t.status != store::TrialStatus::kInterrupted) {
      continue;
    }
    auto points = curve_of(t.number);
    if (points.empty()) continue;
    const double latest = points.back().second;
    out.unfinished.push_back({t.number, latest, Decimate(points, max_points)});
  }
  const bool maximize = data.sweep.maximize;
  std::stable_sort(
      out.unfinished.begin(), out.unfinished.end(),
      [&](const Curve& a, const Curve& b) { return Better(a.value, b.value, maximize); });
  if (static_cast<int>(out.unfinished.size()) > top_k)
    out.unfinished.resize(static_cast<size_t>(top_k));
  double largest = 0;
  for (const store::ReportRecord& r : data.reports) largest = std::max(largest, Resource(data, r));
  out.rungs = RungResources(data.rungs, largest);
  return out;
}

// ---- parameter importance ----

std::vector<Importance> ComputeImportance(const SweepData& data) {
  std::vector<Importance> out;
  const Explaining explaining = ExplainingTrials(data);
  const int64_t n = static_cast<int64_t>(explaining.trials.size());
  if (n < 3) return out;
  std::vector<double> y = explaining.values;
  std::vector<json> params;
  for (const auto* t : explaining.trials) params.push_back(ParseObject(t->params_json));
  // A metric the same in every trial has nothing to explain; its mean in doubles need not be
  // exactly that value (1.1111111111111112 eighteen times), and a variance of rounding alone
  // would be shared out as if it meant something.
  const auto [lowest, highest] = std::minmax_element(y.begin(), y.end());
  if (*highest - *lowest <= 1e-12 * std::max(std::abs(*lowest), std::abs(*highest))) return out;
  const double mean = std::accumulate(y.begin(), y.end(), 0.0) / static_cast<double>(n);
  double ss_total = 0;
  for (double v : y) ss_total += (v - mean) * (v - mean);
  if (!(ss_total > 0)) return out;

  for (const ParamSpec& spec : data.params) {
    // group[i]: trial i's group; 0 is "absent", numbered groups follow.
    std::vector<int> group(static_cast<size_t>(n), 0);
    if (spec.scale == Scale::kCategorical) {
      std::map<std::string, int> ids;
      for (int64_t i = 0; i < n; ++i) {
        auto it = params[i].find(spec.name);
        if (it == params[i].end()) continue;
        auto [id, inserted] = ids.try_emplace(it->dump(), static_cast<int>(ids.size()) + 1);
        group[i] = id->second;
      }
    } else {
      std::vector<std::pair<double, int64_t>> present;  // (value, trial index)
      for (int64_t i = 0; i < n; ++i) {
        if (auto v = NumberIn(params[i], spec.name)) present.emplace_back(*v, i);
      }
      std::sort(present.begin(), present.end());
      const size_t m = present.size();
      size_t distinct = 0;
      for (size_t i = 0; i < m; ++i)
        distinct += (i == 0 || present[i].first != present[i - 1].first);
      const size_t bins = std::min<size_t>(
          distinct,
          std::clamp<size_t>(static_cast<size_t>(std::lround(std::sqrt(double(m)))), 2, 10));
      for (size_t i = 0; i < m; ++i) {
        int bin = static_cast<int>(i * bins / std::max<size_t>(m, 1)) + 1;
        if (i > 0 && present[i].first == present[i - 1].first) bin = group[present[i - 1].second];
        group[present[i].second] = bin;
      }
    }
    std::map<int, std::pair<double, int64_t>> sums;  // group -> (sum of y, count)
    for (int64_t i = 0; i < n; ++i) {
      auto& s = sums[group[i]];
      s.first += y[i];
      s.second += 1;
    }
    double ss_between = 0;
    for (const auto& [g, s] : sums) {
      const double m = s.first / static_cast<double>(s.second);
      ss_between += static_cast<double>(s.second) * (m - mean) * (m - mean);
    }
    const int64_t groups = static_cast<int64_t>(sums.size());
    double fraction = 0;
    if (groups >= 2 && n > groups) {
      const double ms_within =
          std::max(0.0, ss_total - ss_between) / static_cast<double>(n - groups);
      fraction = std::max(0.0, ss_between - static_cast<double>(groups - 1) * ms_within) / ss_total;
      fraction = std::min(fraction, 1.0);
    }
    out.push_back({spec.name, fraction, static_cast<int>(groups), n});
  }
  std::stable_sort(out.begin(), out.end(), [](const Importance& a, const Importance& b) {
    return a.fraction > b.fraction;
  });
  return out;
}

// ---- best trials and the whole page's data ----

json BestTrialsJson(const SweepData& data, int top) {
  json arr = json::array();
  for (const auto* t : RankedCompleted(data)) {
    if (static_cast<int>(arr.size()) >= top) break;
    json j = {{"trial", t->number},
              {"status", store::ToString(t->status)},
              {"objective", *t->objective},
              {"params", ParseObject(t->params_json)},
              {"metrics", ParseObject(t->metrics_json)},
              {"epochs", t->epochs},
              {"placement", t->placement}};
    if (!t->proposed_by.empty()) j["proposed_by"] = t->proposed_by;
    j["started"] = t->started_s ? json(*t->started_s) : json(nullptr);
    j["ended"] = t->ended_s ? json(*t->ended_s) : json(nullptr);
    j["duration_s"] =
        t->started_s && t->ended_s ? json(*t->ended_s - *t->started_s) : json(nullptr);
    if (!t->error.empty()) j["error"] = t->error;
    arr.push_back(std::move(j));
  }
  return arr;
}

json ToJson(const HistoryData& history) {
  json points = json::array();
  for (const HistoryPoint& p : history.points) {
    json point = json::array({p.trial, p.value, p.completed ? 1 : 0});
    // With TPE: 1 for a startup trial, 2 for TPE's own, 0 for one it did not propose.
    if (history.tpe) {
      point.push_back(p.proposed_by == "startup random" ? 1 : p.proposed_by.empty() ? 0 : 2);
    }
    points.push_back(std::move(point));
  }
  json best = json::array();
  for (const auto& [trial, v] : history.best_so_far) best.push_back(json::array({trial, v}));
  return {{"metric", history.metric},
          {"mode", history.maximize ? "max" : "min"},
          {"points", std::move(points)},
          {"tpe", history.tpe},
          {"best", std::move(best)}};
}

json ToJson(const ParallelData& parallel) {
  json axes = json::array();
  for (const Axis& a : parallel.axes) {
    json ticks = json::array();
    for (const Tick& t : a.ticks) ticks.push_back(json::array({NumberOrNull(t.position), t.label}));
    axes.push_back({{"name", a.name},
                    {"scale", ToString(a.scale)},
                    {"min", a.min},
                    {"max", a.max},
                    {"ticks", std::move(ticks)}});
  }
  // [trial, color, position per axis...], rounded to 1e-4 of the axis: drawing data, compact.
  json lines = json::array();
  for (const ParallelLine& l : parallel.lines) {
    json row = json::array({l.trial, NumberOrNull(l.color, 1e-4)});
    for (double p : l.positions) row.push_back(NumberOrNull(p, 1e-4));
    lines.push_back(std::move(row));
  }
  return {{"axes", std::move(axes)}, {"lines", std::move(lines)}, {"note", parallel.note}};
}

json ToJson(const CurvesData& curves) {
  auto list = [](const std::vector<Curve>& curves_of) {
    json arr = json::array();
    for (const Curve& c : curves_of) {
      json points = json::array();
      for (const auto& [x, y] : c.points) points.push_back(json::array({x, y}));
      arr.push_back({{"trial", c.trial}, {"value", c.value}, {"points", std::move(points)}});
    }
    return arr;
  };
  json top = list(curves.top);
  json pruned = json::array();
  for (const StopPoint& s : curves.pruned) {
    pruned.push_back(json::array({s.trial, s.resource, s.value}));
  }
  return {{"metric", curves.metric},     {"resource", curves.resource},
          {"top", std::move(top)},       {"unfinished", list(curves.unfinished)},
          {"pruned", std::move(pruned)}, {"rungs", curves.rungs}};
}

json ToJson(const std::vector<Importance>& importance) {
  json arr = json::array();
  for (const Importance& i : importance) {
    arr.push_back(
        {{"param", i.param}, {"fraction", i.fraction}, {"groups", i.groups}, {"trials", i.trials}});
  }
  return arr;
}

namespace {
json ExplainedJson(const SweepData& data) {
  const Explaining e = ExplainingTrials(data);
  return {{"note", e.note},
          {"rung", e.note.empty() ? json(nullptr) : json(e.rung)},
          {"trials", e.trials.size()}};
}
}  // namespace

json ReportJson(const SweepData& data, const ReportOptions& options) {
  store::StatusCounts counts;
  for (const store::TrialRecord& t : data.trials) {
    switch (t.status) {
      case store::TrialStatus::kPending:
        ++counts.pending;
        break;
      case store::TrialStatus::kRunning:
        ++counts.running;
        break;
      case store::TrialStatus::kCompleted:
        ++counts.completed;
        break;
      case store::TrialStatus::kPruned:
        ++counts.pruned;
        break;
      case store::TrialStatus::kFailed:
        ++counts.failed;
        break;
      case store::TrialStatus::kInterrupted:
        ++counts.interrupted;
        break;
    }
  }
  const store::SweepRecord& s = data.sweep;
  json sweep = {{"name", s.name},
                {"metric", s.metric},
                {"mode", s.maximize ? "max" : "min"},
                {"status", store::ToString(s.status)},
                {"created", s.created_s},
                {"ended", s.ended_s ? json(*s.ended_s) : json(nullptr)},
                {"active_s", s.active_s},
                {"resource", data.resource},
                {"early_stopping", data.early_stopping},
                {"counts",
                 {{"total", counts.total()},
                  {"completed", counts.completed},
                  {"pruned", counts.pruned},
                  {"failed", counts.failed},
                  {"interrupted", counts.interrupted},
                  {"running", counts.running},
                  {"pending", counts.pending}}}};
  return {{"sweep", std::move(sweep)},
          {"history", ToJson(ComputeHistory(data))},
          {"parallel", ToJson(ComputeParallel(data))},
          {"curves", ToJson(ComputeCurves(data, options.top_curves))},
          {"importance", ToJson(ComputeImportance(data))},
          {"explained", ExplainedJson(data)},
          {"best", BestTrialsJson(data, options.top_trials)},
          {"config", s.config_text}};
}

}  // namespace sweep::report
