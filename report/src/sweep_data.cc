// Loading a sweep's rows and completing its parameter specs.
#include "report/sweep_data.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>

namespace sweep::report {

using nlohmann::json;

std::string_view ToString(Scale scale) {
  switch (scale) {
    case Scale::kLinear:
      return "linear";
    case Scale::kLog:
      return "log";
    case Scale::kCategorical:
      return "categorical";
  }
  return "linear";
}

json ParseObject(const std::string& text) {
  if (text.empty()) return json::object();
  json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  return j.is_object() ? j : json::object();
}

std::optional<double> NumberIn(const json& object, const std::string& key) {
  auto it = object.find(key);
  if (it == object.end() || !it->is_number()) return std::nullopt;
  double v = it->get<double>();
  if (!std::isfinite(v)) return std::nullopt;
  return v;
}

Result<SweepData> LoadSweepData(store::Store& store, const store::SweepRecord& sweep) {
  SweepData data;
  data.sweep = sweep;
  // One state of the file: a running sweep's commits between the two reads would give reports
  // of trials the first did not see.
  SWEEP_RETURN_IF_ERROR(store.ReadTogether([&]() -> Status {
    SWEEP_ASSIGN_OR_RETURN(data.trials, store.Trials(sweep.id, store::TrialQuery{}));
    SWEEP_ASSIGN_OR_RETURN(data.reports, store.AllReports(sweep.id));
    return Status::Ok();
  }));
  std::stable_sort(data.reports.begin(), data.reports.end(),
                   [](const store::ReportRecord& a, const store::ReportRecord& b) {
                     return a.trial != b.trial ? a.trial < b.trial : a.step < b.step;
                   });
  return data;
}

void CompleteParams(SweepData& data) {
  std::set<std::string> known;
  for (const ParamSpec& p : data.params) known.insert(p.name);
  // Values of each undeclared parameter in order of first appearance.
  std::map<std::string, std::vector<json>> seen;
  std::vector<std::string> order;
  for (const store::TrialRecord& t : data.trials) {
    json params = ParseObject(t.params_json);
    for (auto& [name, value] : params.items()) {
      if (known.count(name)) continue;
      auto [it, inserted] = seen.try_emplace(name);
      if (inserted) order.push_back(name);
      if (std::find(it->second.begin(), it->second.end(), value) == it->second.end()) {
        it->second.push_back(value);
      }
    }
  }
  for (const std::string& name : order) {
    const std::vector<json>& values = seen[name];
    if (values.size() < 2) continue;
    ParamSpec spec;
    spec.name = name;
    bool numeric =
        std::all_of(values.begin(), values.end(), [](const json& v) { return v.is_number(); });
    if (numeric) {
      spec.scale = Scale::kLinear;
      spec.integer = std::all_of(values.begin(), values.end(),
                                 [](const json& v) { return v.is_number_integer(); });
      spec.min = spec.max = values.front().get<double>();
      for (const json& v : values) {
        spec.min = std::min(spec.min, v.get<double>());
        spec.max = std::max(spec.max, v.get<double>());
      }
    } else {
      spec.scale = Scale::kCategorical;
      spec.values = values;
    }
    data.params.push_back(std::move(spec));
  }
}

}  // namespace sweep::report
