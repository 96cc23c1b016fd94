// `sweep export`, and `sweep trials/best --csv`: a sweep's trials, or every report, as one flat
// table that pandas (read_csv / read_json) or a spreadsheet opens as it is. Pure functions.
//
// Columns, in this order (absent values are empty cells in CSV and null in JSON):
//   trials:  trial, status, objective, epochs, retries, started, ended, duration_s, placement,
//            param.<name>..., metric.<name>..., error
//   reports: trial, status, step, epoch, time, param.<name>..., metric.<name>...
// Parameters and metrics carry a "param." / "metric." prefix so that a metric and a parameter
// of the same name never collide and `df.filter(like="param.")` picks one kind; within a kind
// the names are sorted. Times are Unix seconds.
// CSV follows RFC 4180: a field with a comma, a quote, CR or LF is quoted and its quotes
// doubled; lines end in LF. Numbers print in the shortest form that reads back to the same
// double; a list- or object-valued parameter is its JSON text in one cell; a string is itself.
// JSON is an array of flat objects with the same keys as the CSV columns (pandas'
// orient="records"), with list parameters as JSON arrays.
#pragma once

#include <ostream>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "report/sweep_data.h"

namespace sweep::report {

enum class ExportFormat { kCsv, kJson };

// One flat table: column names, then rows of JSON cells (null for absent).
struct Table {
  std::vector<std::string> columns;
  std::vector<std::vector<nlohmann::json>> rows;
};

Table TrialsTable(const SweepData& data);
// The rows of `rows` (a filtered or sorted list) under the columns of every trial in `all` (the
// whole sweep), so that the lists of one sweep have one layout and their files concatenate.
Table TrialsTable(const std::vector<store::TrialRecord>& rows,
                  const std::vector<store::TrialRecord>& all);
Table ReportsTable(const SweepData& data);

void WriteCsv(std::ostream& out, const Table& table);
void WriteJson(std::ostream& out, const Table& table);

// RFC 4180 quoting of one field.
std::string CsvQuote(std::string_view field);
// One cell's CSV text: "" for null, a string as itself, a number in its shortest round-trip
// form, anything else as compact JSON.
std::string CsvCell(const nlohmann::json& cell);

// Reads RFC 4180 CSV (LF or CRLF line ends, quoted fields spanning lines) into rows of fields.
// InvalidArgument, naming the line, for a quote inside an unquoted field or an unclosed quote.
Result<std::vector<std::vector<std::string>>> ParseCsv(std::string_view text);

}  // namespace sweep::report
