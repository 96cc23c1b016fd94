// Rendering stored trials and sweeps for the CLI: aligned tables for people, JSON and CSV for
// programs. The JSON shape is the stable contract of `best`, `trials`, `status` and `list`.
#pragma once

#include <ostream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "store/store.h"

namespace sweep {

nlohmann::json TrialJson(const store::TrialRecord& t);
void PrintTrialsJson(std::ostream& out, const std::vector<store::TrialRecord>& trials);
void PrintTrialsCsv(std::ostream& out, const std::vector<store::TrialRecord>& trials);
// `metric` is shown as its own column, first.
void PrintTrialsTable(std::ostream& out, const std::vector<store::TrialRecord>& trials,
                      const std::string& metric);

std::string CsvField(const std::string& text);

}  // namespace sweep
