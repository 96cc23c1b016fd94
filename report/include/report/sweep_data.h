// SweepData: one sweep's trials and reports, read from the store once, plus what the charts need
// to know of its config (how each parameter is distributed, where the early-stopping rungs are).
// Everything the report library computes is a pure function of a SweepData. Plain values, owned
// by the caller; nothing here keeps the store open or is shared between threads.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/status.h"
#include "store/store.h"

namespace sweep::report {

// How a parameter's axis is drawn and binned.
enum class Scale { kLinear, kLog, kCategorical };
std::string_view ToString(Scale scale);  // "linear", "log", "categorical"

struct ParamSpec {
  std::string name;
  Scale scale = Scale::kLinear;
  bool integer = false;                // int_uniform, log_int_uniform
  double min = 0, max = 0;             // kLinear, kLog: the declared range (kLog: min > 0)
  std::vector<nlohmann::json> values;  // kCategorical: the choices, in declared order
};

// The rungs of ASHA and Hyperband: resources min_resource * reduction_factor^k below
// max_resource (every Hyperband bracket's rungs are a subset of these).
struct RungSpec {
  bool enabled = false;
  double min_resource = 1;
  double reduction_factor = 3;
  double max_resource = 0;  // 0: not known; the largest reported resource bounds the rungs
};

struct SweepData {
  store::SweepRecord sweep;
  std::vector<store::TrialRecord> trials;    // ordered by number
  std::vector<store::ReportRecord> reports;  // ordered by trial number, then step
  // The varied parameters in declared order (constants left out); see CompleteParams.
  std::vector<ParamSpec> params;
  std::string resource = "epoch";  // what a report's progress is: "epoch" (trainer) or "step"
  RungSpec rungs;
  std::string early_stopping = "none";  // the algorithm's name, for captions
};

// Reads every trial and report of `sweep`; params, resource and rungs are left for the caller
// (they come from the sweep's config, which this library does not parse).
Result<SweepData> LoadSweepData(store::Store& store, const store::SweepRecord& sweep);

// Adds a spec for each parameter that trials carry but `data.params` lacks (a config that no
// longer parses, or one written by another version): numbers give a linear axis, anything else
// a categorical one with the values in order of first appearance. A parameter with a single
// value over all trials is left out, as a constant would be.
void CompleteParams(SweepData& data);

// The value of `key` in a JSON object text, when it is a finite number.
std::optional<double> NumberIn(const nlohmann::json& object, const std::string& key);

// Parses a stored JSON object text; {} for empty or malformed text.
nlohmann::json ParseObject(const std::string& text);

}  // namespace sweep::report
