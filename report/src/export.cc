// Flat tables of trials and reports, and their CSV and JSON forms.
#include "report/export.h"

#include <cmath>
#include <limits>
#include <map>
#include <set>

namespace sweep::report {

using nlohmann::json;

namespace {

json Opt(const std::optional<double>& v) { return v ? json(*v) : json(nullptr); }
json NonEmpty(const std::string& s) { return s.empty() ? json(nullptr) : json(s); }

json Lookup(const json& object, const std::string& key) {
  auto it = object.find(key);
  return it == object.end() ? json(nullptr) : *it;
}

// A metric's cell: absent is null (an empty CSV cell); a value reported as NaN or infinity,
// stored as null (JSON holds neither), is NaN (CSV "nan"; JSON null again).
json MetricCell(const json& metrics, const std::string& key) {
  auto it = metrics.find(key);
  if (it == metrics.end()) return json(nullptr);
  return it->is_null() ? json(std::numeric_limits<double>::quiet_NaN()) : *it;
}

}  // namespace

Table TrialsTable(const SweepData& data) { return TrialsTable(data.trials, data.trials); }

Table TrialsTable(const std::vector<store::TrialRecord>& rows,
                  const std::vector<store::TrialRecord>& all) {
  std::set<std::string> pkeys, mkeys;
  for (const store::TrialRecord& t : all) {
    const json p = ParseObject(t.params_json), m = ParseObject(t.metrics_json);
    for (auto& [k, v] : p.items()) pkeys.insert(k);
    for (auto& [k, v] : m.items()) mkeys.insert(k);
  }
  std::vector<json> params, metrics;
  for (const store::TrialRecord& t : rows) {
    params.push_back(ParseObject(t.params_json));
    metrics.push_back(ParseObject(t.metrics_json));
    for (auto& [k, v] : params.back().items()) pkeys.insert(k);
    for (auto& [k, v] : metrics.back().items()) mkeys.insert(k);
  }
  Table table;
  table.columns = {"trial",   "status", "objective",  "epochs",   "retries",
                   "started", "ended",  "duration_s", "placement"};
  for (const auto& k : pkeys) table.columns.push_back("param." + k);
  for (const auto& k : mkeys) table.columns.push_back("metric." + k);
  table.columns.push_back("error");
  // Columns that appear when some trial has them: what proposed it (TPE's trials), and where
  // its files are for the kinds that have them (the trainer's checkpoint, a command's logs).
  using Path = std::string store::TrialRecord::*;
  const std::vector<std::pair<const char*, Path>> optional = {
      {"proposed_by", &store::TrialRecord::proposed_by},
      {"checkpoint", &store::TrialRecord::checkpoint},
      {"stdout_log", &store::TrialRecord::stdout_log},
      {"stderr_log", &store::TrialRecord::stderr_log}};
  std::vector<Path> present;
  for (const auto& [name, member] : optional) {
    for (const store::TrialRecord& t : all) {
      if (!(t.*member).empty()) {
        table.columns.push_back(name);
        present.push_back(member);
        break;
      }
    }
  }
  for (size_t i = 0; i < rows.size(); ++i) {
    const store::TrialRecord& t = rows[i];
    std::vector<json> row = {t.number,
                             store::ToString(t.status),
                             Opt(t.objective),
                             t.epochs,
                             t.retries,
                             Opt(t.started_s),
                             Opt(t.ended_s),
                             t.started_s && t.ended_s ? json(*t.ended_s - *t.started_s) : json(),
                             NonEmpty(t.placement)};
    for (const auto& k : pkeys) row.push_back(Lookup(params[i], k));
    for (const auto& k : mkeys) row.push_back(MetricCell(metrics[i], k));
    row.push_back(NonEmpty(t.error));
    for (Path member : present) row.push_back(NonEmpty(t.*member));
    table.rows.push_back(std::move(row));
  }
  return table;
}

Table ReportsTable(const SweepData& data) {
  std::map<int64_t, size_t> trial_index;
  std::vector<json> params;
  std::set<std::string> pkeys, mkeys;
  for (size_t i = 0; i < data.trials.size(); ++i) {
    trial_index[data.trials[i].number] = i;
    params.push_back(ParseObject(data.trials[i].params_json));
    for (auto& [k, v] : params.back().items()) pkeys.insert(k);
  }
  std::vector<json> metrics;
  for (const store::ReportRecord& r : data.reports) {
    metrics.push_back(ParseObject(r.metrics_json));
    for (auto& [k, v] : metrics.back().items()) mkeys.insert(k);
  }
  Table table;
  table.columns = {"trial", "status", "step", "epoch", "time"};
  for (const auto& k : pkeys) table.columns.push_back("param." + k);
  for (const auto& k : mkeys) table.columns.push_back("metric." + k);
  for (size_t i = 0; i < data.reports.size(); ++i) {
    const store::ReportRecord& r = data.reports[i];
    auto t = trial_index.find(r.trial);
    std::vector<json> row = {r.trial,
                             t == trial_index.end()
                                 ? json(nullptr)
                                 : json(store::ToString(data.trials[t->second].status)),
                             r.step, r.epoch, r.time_s};
    for (const auto& k : pkeys) {
      row.push_back(t == trial_index.end() ? json(nullptr) : Lookup(params[t->second], k));
    }
    for (const auto& k : mkeys) row.push_back(MetricCell(metrics[i], k));
    table.rows.push_back(std::move(row));
  }
  return table;
}

std::string CsvQuote(std::string_view field) {
  if (field.find_first_of(",\"\r\n") == std::string_view::npos) return std::string(field);
  std::string q = "\"";
  for (char c : field) {
    if (c == '"') q += '"';
    q += c;
  }
  return q + "\"";
}

std::string CsvCell(const json& cell) {
  if (cell.is_null()) return "";
  if (cell.is_string()) return cell.get<std::string>();
  if (cell.is_number_float()) {
    const double v = cell.get<double>();
    if (std::isnan(v)) return "nan";
    if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  }
  // nlohmann prints a double in the shortest form that reads back to the same value.
  return cell.dump(-1, ' ', false, json::error_handler_t::replace);
}

void WriteCsv(std::ostream& out, const Table& table) {
  for (size_t c = 0; c < table.columns.size(); ++c) {
    out << (c ? "," : "") << CsvQuote(table.columns[c]);
  }
  out << "\n";
  for (const auto& row : table.rows) {
    for (size_t c = 0; c < row.size(); ++c) out << (c ? "," : "") << CsvQuote(CsvCell(row[c]));
    out << "\n";
  }
}

void WriteJson(std::ostream& out, const Table& table) {
  out << "[";
  for (size_t r = 0; r < table.rows.size(); ++r) {
    nlohmann::ordered_json record = nlohmann::ordered_json::object();  // keeps column order
    for (size_t c = 0; c < table.columns.size(); ++c) record[table.columns[c]] = table.rows[r][c];
    out << (r ? ",\n " : "\n ")
        << record.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
  }
  out << (table.rows.empty() ? "]\n" : "\n]\n");
}

Result<std::vector<std::vector<std::string>>> ParseCsv(std::string_view text) {
  std::vector<std::vector<std::string>> rows;
  std::vector<std::string> row;
  std::string field;
  bool quoted = false;      // inside a quoted field
  bool was_quoted = false;  // the current field was quoted (only a separator may follow)
  size_t line = 1, quote_line = 1;
  auto end_field = [&] {
    row.push_back(std::move(field));
    field.clear();
    was_quoted = false;
  };
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (quoted) {
      if (c == '"') {
        if (i + 1 < text.size() && text[i + 1] == '"') {
          field += '"';
          ++i;
        } else {
          quoted = false;
        }
      } else {
        if (c == '\n') ++line;
        field += c;
      }
      continue;
    }
    if (c == ',') {
      end_field();
    } else if (c == '\n' || (c == '\r' && i + 1 < text.size() && text[i + 1] == '\n')) {
      if (c == '\r') ++i;
      end_field();
      rows.push_back(std::move(row));
      row.clear();
      ++line;
    } else if (c == '"') {
      if (!field.empty() || was_quoted) {
        return Status::InvalidArgument("line " + std::to_string(line) +
                                       ": a quote inside an unquoted field");
      }
      quoted = was_quoted = true;
      quote_line = line;
    } else {
      if (was_quoted) {
        return Status::InvalidArgument("line " + std::to_string(line) +
                                       ": text after a closing quote");
      }
      field += c;
    }
  }
  if (quoted) {
    return Status::InvalidArgument("line " + std::to_string(quote_line) +
                                   ": a quoted field is never closed");
  }
  if (!field.empty() || was_quoted || !row.empty()) {
    end_field();
    rows.push_back(std::move(row));
  }
  return rows;
}

}  // namespace sweep::report
