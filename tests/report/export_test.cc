// Tests for `sweep export`'s tables: columns, RFC 4180 quoting, and that what is written reads
// back to the same values.
#include "report/export.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <limits>
#include <sstream>

#include "report_test_util.h"

namespace sweep::report {
namespace {

using nlohmann::json;
using store::TrialStatus;

TEST(CsvTest, QuotesOnlyWhatNeedsIt) {
  EXPECT_EQ(CsvQuote("plain"), "plain");
  EXPECT_EQ(CsvQuote(""), "");
  EXPECT_EQ(CsvQuote("a,b"), "\"a,b\"");
  EXPECT_EQ(CsvQuote("say \"hi\""), "\"say \"\"hi\"\"\"");
  EXPECT_EQ(CsvQuote("two\nlines"), "\"two\nlines\"");
  EXPECT_EQ(CsvQuote("cr\r"), "\"cr\r\"");
  EXPECT_EQ(CsvQuote("[256,128]"), "\"[256,128]\"");
}

TEST(CsvTest, CellsAreShortestRoundTripNumbersAndJsonText) {
  EXPECT_EQ(CsvCell(json(nullptr)), "");
  EXPECT_EQ(CsvCell(json("sgd")), "sgd");
  EXPECT_EQ(CsvCell(json(42)), "42");
  EXPECT_EQ(CsvCell(json(0.1)), "0.1");
  EXPECT_EQ(CsvCell(json(true)), "true");
  EXPECT_EQ(CsvCell(json::array({256, 128})), "[256,128]");
  EXPECT_EQ(CsvCell(json(std::numeric_limits<double>::quiet_NaN())), "nan");
  EXPECT_EQ(CsvCell(json(-std::numeric_limits<double>::infinity())), "-inf");
  for (double v : {0.1, 1.0 / 3, 1e-300, 5e-324, 123456789.123456789, -2.5e-7, 1e21,
                   0.30000000000000004, std::numeric_limits<double>::max()}) {
    const std::string text = CsvCell(json(v));
    EXPECT_EQ(std::strtod(text.c_str(), nullptr), v) << text;
  }
}

TEST(CsvTest, ParseReadsQuotedFieldsAndRefusesBrokenOnes) {
  auto rows = ParseCsv("a,\"b,c\",\"d\"\"e\"\r\n\"multi\nline\",,x\n");
  ASSERT_TRUE(rows.ok()) << rows.status().message();
  ASSERT_EQ(rows->size(), 2u);
  EXPECT_EQ((*rows)[0], (std::vector<std::string>{"a", "b,c", "d\"e"}));
  EXPECT_EQ((*rows)[1], (std::vector<std::string>{"multi\nline", "", "x"}));
  auto open = ParseCsv("a,\"never closed\n");
  ASSERT_FALSE(open.ok());
  EXPECT_NE(open.status().message().find("line 1"), std::string::npos);
  EXPECT_FALSE(ParseCsv("a,b\"c\n").ok());
  EXPECT_FALSE(ParseCsv("\"a\"b\n").ok());
}

SweepData Tricky() {
  SweepBuilder b("val_acc", true);
  b.Trial({{"lr", 0.1}, {"hidden", json::array({256, 128})}, {"note", "a, \"quoted\"\nvalue"}},
          TrialStatus::kCompleted, 1.0 / 3, {{1, 0.25}, {2, 1.0 / 3}})
      .Trial({{"lr", 1e-05}, {"hidden", json::array()}, {"note", "plain"}}, TrialStatus::kPruned,
             0.1, {{1, 0.1}})
      .Trial({{"lr", 2.5}}, TrialStatus::kFailed, std::nullopt);
  SweepData d = b.data();
  d.trials[2].error = "worker died: exit status 139\nlast output: \"segfault\", at 0x0";
  // A metric named like a parameter stays a separate column.
  d.trials[0].metrics_json = R"({"val_acc":0.3333333333333333,"lr":0.1})";
  return d;
}

TEST(ExportTest, TrialsTableColumns) {
  Table t = TrialsTable(Tricky());
  std::vector<std::string> expected = {"trial",     "status",         "objective", "epochs",
                                       "retries",   "started",        "ended",     "duration_s",
                                       "placement", "param.hidden",   "param.lr",  "param.note",
                                       "metric.lr", "metric.val_acc", "error"};
  EXPECT_EQ(t.columns, expected);
  ASSERT_EQ(t.rows.size(), 3u);
  EXPECT_TRUE(t.rows[2][2].is_null());  // failed: no objective
  EXPECT_TRUE(t.rows[2][9].is_null());  // no hidden
  EXPECT_EQ(t.rows[0][1], "completed");

  // Trials with files (a trainer's checkpoint, a command's logs) get a column for each kind,
  // null where a trial has none.
  SweepData with_files = Tricky();
  with_files.trials[1].stdout_log = "/runs/trial-1/stdout.log";
  with_files.trials[1].stderr_log = "/runs/trial-1/stderr.log";
  Table f = TrialsTable(with_files);
  ASSERT_EQ(f.columns.size(), expected.size() + 2);
  EXPECT_EQ(f.columns[expected.size()], "stdout_log");
  EXPECT_EQ(f.columns[expected.size() + 1], "stderr_log");
  EXPECT_EQ(f.rows[1][expected.size()], "/runs/trial-1/stdout.log");
  EXPECT_TRUE(f.rows[0][expected.size()].is_null());

  // A filtered list (`sweep trials --status failed --csv`), or an empty one, keeps the sweep's
  // columns, so that its files concatenate with the whole's.
  const SweepData whole = Tricky();
  Table failed = TrialsTable({whole.trials[2]}, whole.trials);
  EXPECT_EQ(failed.columns, expected);
  ASSERT_EQ(failed.rows.size(), 1u);
  EXPECT_EQ(failed.rows[0][0], 2);
  EXPECT_EQ(TrialsTable({}, whole.trials).columns, expected);
}

TEST(ExportTest, CsvRoundTrip) {
  SweepData d = Tricky();
  Table t = TrialsTable(d);
  std::ostringstream out;
  WriteCsv(out, t);
  auto rows = ParseCsv(out.str());
  ASSERT_TRUE(rows.ok()) << rows.status().message();
  ASSERT_EQ(rows->size(), 4u);
  EXPECT_EQ((*rows)[0], t.columns);
  for (size_t r = 0; r < t.rows.size(); ++r) {
    ASSERT_EQ((*rows)[r + 1].size(), t.columns.size()) << "row " << r;
    for (size_t c = 0; c < t.columns.size(); ++c) {
      const json& cell = t.rows[r][c];
      const std::string& text = (*rows)[r + 1][c];
      if (cell.is_null()) {
        EXPECT_EQ(text, "") << t.columns[c];
      } else if (cell.is_number_float()) {
        EXPECT_EQ(std::strtod(text.c_str(), nullptr), cell.get<double>()) << t.columns[c];
      } else if (cell.is_string()) {
        EXPECT_EQ(text, cell.get<std::string>()) << t.columns[c];
      } else {
        EXPECT_EQ(json::parse(text), cell) << t.columns[c];  // lists: JSON text in one cell
      }
    }
  }
  EXPECT_EQ((*rows)[1][9], "[256,128]");
  EXPECT_EQ((*rows)[1][11], "a, \"quoted\"\nvalue");
  EXPECT_EQ(std::strtod((*rows)[1][2].c_str(), nullptr), 1.0 / 3);
}

TEST(ExportTest, ReportsTableHasOneRowPerReportWithItsTrialsParameters) {
  SweepData d = Tricky();
  Table t = ReportsTable(d);
  EXPECT_EQ(t.columns,
            (std::vector<std::string>{"trial", "status", "step", "epoch", "time", "param.hidden",
                                      "param.lr", "param.note", "metric.val_acc"}));
  ASSERT_EQ(t.rows.size(), 3u);
  EXPECT_EQ(t.rows[0][0], 0);
  EXPECT_EQ(t.rows[1][2], 2);  // step
  EXPECT_EQ(t.rows[1][8], 1.0 / 3);
  EXPECT_EQ(t.rows[2][1], "pruned");
  EXPECT_EQ(t.rows[2][6], 1e-05);
}

TEST(ExportTest, JsonRecordsKeepColumnsAndValues) {
  SweepData d = Tricky();
  Table t = TrialsTable(d);
  std::ostringstream out;
  WriteJson(out, t);
  nlohmann::ordered_json records = nlohmann::ordered_json::parse(out.str());
  ASSERT_TRUE(records.is_array());
  ASSERT_EQ(records.size(), 3u);
  std::vector<std::string> keys;
  for (auto& [k, v] : records[0].items()) keys.push_back(k);
  EXPECT_EQ(keys, t.columns);
  EXPECT_EQ(records[0]["param.hidden"], json::array({256, 128}));
  EXPECT_EQ(records[0]["objective"].get<double>(), 1.0 / 3);
  EXPECT_TRUE(records[2]["objective"].is_null());
  EXPECT_EQ(records[2]["error"], d.trials[2].error);

  std::ostringstream none;
  WriteJson(none, Table{t.columns, {}});
  EXPECT_EQ(json::parse(none.str()), json::array());
}

}  // namespace
}  // namespace sweep::report
