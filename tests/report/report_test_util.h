// Builders for the report tests: a SweepData assembled in memory, trial by trial.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "report/sweep_data.h"

namespace sweep::report {

class SweepBuilder {
 public:
  SweepBuilder(std::string metric, bool maximize) {
    data_.sweep.name = "test";
    data_.sweep.metric = std::move(metric);
    data_.sweep.maximize = maximize;
  }

  // A trial with `params`, `status` and objective `value` (no value: nullopt), whose metric
  // curve is `curve` (resource, value) reported as steps 1, 2, ...
  SweepBuilder& Trial(nlohmann::json params, store::TrialStatus status, std::optional<double> value,
                      std::vector<std::pair<double, double>> curve = {}) {
    store::TrialRecord t;
    t.number = static_cast<int64_t>(data_.trials.size());
    t.status = status;
    t.params_json = params.dump();
    t.objective = value;
    nlohmann::json metrics = nlohmann::json::object();
    if (value) metrics[data_.sweep.metric] = *value;
    t.metrics_json = metrics.dump();
    t.started_s = 1000.0 + static_cast<double>(t.number);
    t.ended_s = *t.started_s + 2.5;
    t.epochs = curve.empty() ? 0 : curve.back().first;
    int64_t step = 1;
    for (const auto& [x, y] : curve) {
      store::ReportRecord r;
      r.trial = t.number;
      r.step = step++;
      r.epoch = x;
      r.metrics_json = nlohmann::json{{data_.sweep.metric, y}}.dump();
      r.time_s = *t.started_s + x;
      data_.reports.push_back(r);
    }
    data_.trials.push_back(std::move(t));
    return *this;
  }

  SweepBuilder& Param(ParamSpec spec) {
    data_.params.push_back(std::move(spec));
    return *this;
  }

  SweepData& data() { return data_; }

 private:
  SweepData data_;
};

inline ParamSpec Linear(std::string name, double min, double max, bool integer = false) {
  ParamSpec p;
  p.name = std::move(name);
  p.scale = Scale::kLinear;
  p.min = min;
  p.max = max;
  p.integer = integer;
  return p;
}

inline ParamSpec Log(std::string name, double min, double max) {
  ParamSpec p = Linear(std::move(name), min, max);
  p.scale = Scale::kLog;
  return p;
}

inline ParamSpec Categorical(std::string name, std::vector<nlohmann::json> values) {
  ParamSpec p;
  p.name = std::move(name);
  p.scale = Scale::kCategorical;
  p.values = std::move(values);
  return p;
}

}  // namespace sweep::report
