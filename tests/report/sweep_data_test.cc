// Tests for loading a sweep from a real store and completing its parameter specs.
#include "report/sweep_data.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>

#include "report_test_util.h"

namespace sweep::report {
namespace {

using nlohmann::json;

TEST(SweepDataTest, LoadsTrialsAndReportsInOrder) {
  char tmpl[] = "/tmp/sweep-report-XXXXXX";
  const std::filesystem::path dir = ::mkdtemp(tmpl);
  const std::string path = (dir / "s.db").string();
  {
    auto st = store::Store::Open(path, store::OpenMode::kReadWrite);
    ASSERT_TRUE(st.ok()) << st.status().message();
    store::NewSweep ns;
    ns.name = "s";
    ns.config_text = "[sweep]\nname = \"s\"\n";
    ns.metric = "value";
    auto id = (*st)->CreateSweep(ns);
    ASSERT_TRUE(id.ok()) << id.status().message();
    for (int64_t n : {1, 0}) {
      store::TrialRecord t;
      t.number = n;
      t.status = store::TrialStatus::kRunning;
      t.params_json = json{{"x", n}}.dump();
      ASSERT_TRUE((*st)->InsertTrial(*id, t).ok());
    }
    // Reports arrive interleaved between trials.
    for (auto [trial, step] :
         std::vector<std::pair<int64_t, int64_t>>{{1, 1}, {0, 1}, {1, 2}, {0, 2}}) {
      store::ReportRecord r;
      r.trial = trial;
      r.step = step;
      r.epoch = static_cast<double>(step);
      r.metrics_json = json{{"value", trial * 10 + step}}.dump();
      ASSERT_TRUE((*st)->AddReport(*id, r).ok());
    }
    ASSERT_TRUE((*st)->Commit().ok());
  }
  auto st = store::Store::Open(path, store::OpenMode::kReadOnly);
  ASSERT_TRUE(st.ok());
  auto sw = (*st)->FindSweep("s");
  ASSERT_TRUE(sw.ok());
  auto data = LoadSweepData(**st, *sw);
  ASSERT_TRUE(data.ok()) << data.status().message();
  ASSERT_EQ(data->trials.size(), 2u);
  EXPECT_EQ(data->trials[0].number, 0);
  ASSERT_EQ(data->reports.size(), 4u);
  std::vector<std::pair<int64_t, int64_t>> order;
  for (const auto& r : data->reports) order.emplace_back(r.trial, r.step);
  EXPECT_EQ(order, (std::vector<std::pair<int64_t, int64_t>>{{0, 1}, {0, 2}, {1, 1}, {1, 2}}));
  std::filesystem::remove_all(dir);
}

TEST(SweepDataTest, CompleteParamsGuessesScalesAndSkipsConstants) {
  SweepBuilder b("value", false);
  b.Param(Log("lr", 1e-3, 1));
  b.Trial({{"lr", 0.01}, {"layers", 2}, {"act", "relu"}, {"seed", 7}},
          store::TrialStatus::kCompleted, 1.0)
      .Trial({{"lr", 0.1}, {"layers", 4}, {"act", "tanh"}, {"seed", 7}},
             store::TrialStatus::kCompleted, 2.0);
  CompleteParams(b.data());
  const auto& p = b.data().params;
  ASSERT_EQ(p.size(), 3u);  // lr as declared, then act and layers; seed never varies
  EXPECT_EQ(p[0].scale, Scale::kLog);
  EXPECT_EQ(p[1].name, "act");
  EXPECT_EQ(p[1].scale, Scale::kCategorical);
  EXPECT_EQ(p[1].values, (std::vector<json>{"relu", "tanh"}));
  EXPECT_EQ(p[2].name, "layers");
  EXPECT_EQ(p[2].scale, Scale::kLinear);
  EXPECT_TRUE(p[2].integer);
  EXPECT_DOUBLE_EQ(p[2].min, 2);
  EXPECT_DOUBLE_EQ(p[2].max, 4);
}

}  // namespace
}  // namespace sweep::report
