// Tests for the charts' data: history, parallel coordinates, learning curves, importance.
#include "report/charts.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "base/hash.h"
#include "report_test_util.h"

namespace sweep::report {
namespace {

using nlohmann::json;
using store::TrialStatus;

// ---- optimisation history ----

TEST(HistoryTest, BestSoFarFollowsCompletedTrialsWhenMaximizing) {
  SweepBuilder b("val_acc", /*maximize=*/true);
  b.Trial({{"x", 1}}, TrialStatus::kCompleted, 0.5)
      .Trial({{"x", 2}}, TrialStatus::kCompleted, 0.7)
      .Trial({{"x", 3}}, TrialStatus::kPruned, 0.9)  // pruned: drawn, never the best
      .Trial({{"x", 4}}, TrialStatus::kFailed, std::nullopt)
      .Trial({{"x", 5}}, TrialStatus::kCompleted, 0.6)
      .Trial({{"x", 6}}, TrialStatus::kCompleted, 0.8);
  HistoryData h = ComputeHistory(b.data());
  ASSERT_EQ(h.points.size(), 5u);
  EXPECT_EQ(h.points[2].trial, 2);
  EXPECT_FALSE(h.points[2].completed);
  EXPECT_DOUBLE_EQ(h.points[2].value, 0.9);
  std::vector<std::pair<int64_t, double>> expected = {{0, 0.5}, {1, 0.7}, {4, 0.7}, {5, 0.8}};
  EXPECT_EQ(h.best_so_far, expected);
}

TEST(HistoryTest, BestSoFarFollowsCompletedTrialsWhenMinimizing) {
  SweepBuilder b("value", /*maximize=*/false);
  b.Trial({}, TrialStatus::kCompleted, 3.0)
      .Trial({}, TrialStatus::kCompleted, 5.0)
      .Trial({}, TrialStatus::kPruned, 0.1)
      .Trial({}, TrialStatus::kCompleted, 1.0)
      .Trial({}, TrialStatus::kRunning, std::nullopt)
      .Trial({}, TrialStatus::kCompleted, 2.0);
  HistoryData h = ComputeHistory(b.data());
  EXPECT_FALSE(h.maximize);
  EXPECT_EQ(h.points.size(), 5u);
  std::vector<std::pair<int64_t, double>> expected = {{0, 3.0}, {1, 3.0}, {3, 1.0}, {5, 1.0}};
  EXPECT_EQ(h.best_so_far, expected);
}

// TPE's trials say what proposed them; the startup ones are drawn apart (hollow).
TEST(HistoryTest, MarksTpesStartupTrials) {
  SweepBuilder b("value", /*maximize=*/false);
  b.Trial({}, TrialStatus::kCompleted, 3.0)
      .Trial({}, TrialStatus::kPruned, 5.0)
      .Trial({}, TrialStatus::kCompleted, 1.0);
  HistoryData plain = ComputeHistory(b.data());
  EXPECT_FALSE(plain.tpe);
  EXPECT_EQ(ToJson(plain)["points"][0].size(), 3u);
  SweepData data = b.data();
  data.trials[0].proposed_by = "startup random";
  data.trials[1].proposed_by = "startup random";
  data.trials[2].proposed_by = "tpe";
  HistoryData h = ComputeHistory(data);
  EXPECT_TRUE(h.tpe);
  ASSERT_EQ(h.points.size(), 3u);
  EXPECT_EQ(h.points[0].proposed_by, "startup random");
  EXPECT_EQ(h.points[2].proposed_by, "tpe");
  json j = ToJson(h);
  EXPECT_EQ(j["tpe"], true);
  EXPECT_EQ(j["points"][1], json::array({1, 5.0, 0, 1}));
  EXPECT_EQ(j["points"][2], json::array({2, 1.0, 1, 2}));
  // A trial TPE did not propose (carried over from a random sweep) says so.
  data.trials[0].proposed_by = "";
  j = ToJson(ComputeHistory(data));
  EXPECT_EQ(j["points"][0], json::array({0, 3.0, 1, 0}));
}

// ---- parallel coordinates ----

TEST(ParallelTest, LogAxisPlacesDecadesEvenly) {
  SweepBuilder b("val_acc", true);
  b.Param(Log("lr", 1e-4, 1e-1));
  b.Trial({{"lr", 1e-3}}, TrialStatus::kCompleted, 0.8)
      .Trial({{"lr", 1e-2}}, TrialStatus::kCompleted, 0.9);
  ParallelData p = ComputeParallel(b.data());
  ASSERT_EQ(p.axes.size(), 2u);  // lr, then the metric
  const Axis& lr = p.axes[0];
  EXPECT_EQ(lr.scale, Scale::kLog);
  ASSERT_EQ(lr.ticks.size(), 4u);
  const char* labels[] = {"0.0001", "0.001", "0.01", "0.1"};
  for (size_t i = 0; i < 4; ++i) {
    EXPECT_EQ(lr.ticks[i].label, labels[i]);
    EXPECT_NEAR(lr.ticks[i].position, static_cast<double>(i) / 3, 1e-12);
  }
  ASSERT_EQ(p.lines.size(), 2u);
  EXPECT_NEAR(p.lines[0].positions[0], 1.0 / 3, 1e-12);
  EXPECT_NEAR(p.lines[1].positions[0], 2.0 / 3, 1e-12);
  EXPECT_TRUE(std::isnan(AxisPosition(lr, json(0.0))));  // not on a log axis
  EXPECT_TRUE(std::isnan(AxisPosition(lr, json("x"))));
}

TEST(ParallelTest, NarrowLogAxisGetsTwoAndFiveTicks) {
  SweepBuilder b("val_acc", true);
  b.Param(Log("wd", 0.15, 0.6));
  b.Trial({{"wd", 0.3}}, TrialStatus::kCompleted, 0.8);
  ParallelData p = ComputeParallel(b.data());
  std::vector<std::string> labels;
  for (const Tick& t : p.axes[0].ticks) labels.push_back(t.label);
  EXPECT_EQ(labels, (std::vector<std::string>{"0.2", "0.5"}));
}

TEST(ParallelTest, LinearAxisWidensToObservedValuesAndIntegerTicksAreWhole) {
  SweepBuilder b("val_acc", true);
  b.Param(Linear("layers", 1, 3, /*integer=*/true));
  b.Trial({{"layers", 1}}, TrialStatus::kCompleted, 0.8)
      .Trial({{"layers", 5}}, TrialStatus::kCompleted, 0.9);  // outside the declared range
  ParallelData p = ComputeParallel(b.data());
  const Axis& a = p.axes[0];
  EXPECT_DOUBLE_EQ(a.min, 1);
  EXPECT_DOUBLE_EQ(a.max, 5);
  ASSERT_GE(a.ticks.size(), 2u);
  for (const Tick& t : a.ticks) {
    double v = std::stod(t.label);
    EXPECT_EQ(v, std::round(v)) << t.label;
    EXPECT_NEAR(t.position, (v - 1) / 4, 1e-12);
  }
  EXPECT_DOUBLE_EQ(p.lines[1].positions[0], 1.0);
}

TEST(ParallelTest, CategoricalTicksAndInactiveParameters) {
  SweepBuilder b("val_acc", true);
  b.Param(Categorical("opt", {"sgd", "adamw", json::array({1, 2})}));
  b.Param(Linear("momentum", 0.8, 0.99));
  b.Trial({{"opt", "adamw"}}, TrialStatus::kCompleted, 0.7)
      .Trial({{"opt", "sgd"}, {"momentum", 0.9}}, TrialStatus::kCompleted, 0.9)
      .Trial({{"opt", json::array({1, 2})}, {"momentum", 0.8}}, TrialStatus::kCompleted, 0.8)
      .Trial({{"opt", "sgd"}, {"momentum", 0.85}}, TrialStatus::kPruned, 0.95);
  ParallelData p = ComputeParallel(b.data());
  ASSERT_EQ(p.axes.size(), 3u);
  const Axis& opt = p.axes[0];
  EXPECT_EQ(opt.scale, Scale::kCategorical);
  ASSERT_EQ(opt.ticks.size(), 3u);
  EXPECT_EQ(opt.ticks[0].label, "sgd");
  EXPECT_EQ(opt.ticks[1].label, "adamw");
  EXPECT_EQ(opt.ticks[2].label, "[1,2]");
  EXPECT_DOUBLE_EQ(opt.ticks[1].position, 0.5);
  ASSERT_EQ(p.lines.size(), 3u);  // completed only
  EXPECT_DOUBLE_EQ(p.lines[0].positions[0], 0.5);
  EXPECT_TRUE(std::isnan(p.lines[0].positions[1]));  // momentum absent with adamw
  EXPECT_DOUBLE_EQ(p.lines[2].positions[0], 1.0);
  // The metric axis is last; colour 1 is the best trial, 0 the worst.
  EXPECT_EQ(p.axes[2].name, "val_acc");
  EXPECT_DOUBLE_EQ(p.lines[1].color, 1.0);
  EXPECT_DOUBLE_EQ(p.lines[0].color, 0.0);
  EXPECT_NEAR(p.lines[2].color, 0.5, 1e-12);
}

TEST(ParallelTest, ColourIsFlippedWhenMinimizing) {
  SweepBuilder b("loss", false);
  b.Param(Linear("x", 0, 1));
  b.Trial({{"x", 0.1}}, TrialStatus::kCompleted, 1.0)
      .Trial({{"x", 0.2}}, TrialStatus::kCompleted, 3.0);
  ParallelData p = ComputeParallel(b.data());
  EXPECT_DOUBLE_EQ(p.lines[0].color, 1.0);
  EXPECT_DOUBLE_EQ(p.lines[1].color, 0.0);
  // On the metric axis the position is the value's, whatever the mode.
  EXPECT_LT(p.lines[0].positions.back(), p.lines[1].positions.back());
}

// Values where half a unit is lost in rounding (1e20), and a spread wider than the largest
// double: every line still has a place on every axis, and the ticks are finite.
TEST(ParallelTest, HugeValuesAndSpreadsKeepTheirPlaces) {
  constexpr double kMax = std::numeric_limits<double>::max();
  SweepBuilder same("m", true);
  same.Param(Linear("x", 0, 1));
  same.Trial({{"x", 0.5}}, TrialStatus::kCompleted, 1e20)
      .Trial({{"x", 0.5}}, TrialStatus::kCompleted, 1e20);
  SweepBuilder wide("m", true);
  wide.Param(Linear("x", -kMax, kMax));
  wide.Trial({{"x", -kMax}}, TrialStatus::kCompleted, -kMax)
      .Trial({{"x", kMax}}, TrialStatus::kCompleted, kMax)
      .Trial({{"x", 0.0}}, TrialStatus::kCompleted, 0.0);
  for (SweepBuilder* b : {&same, &wide}) {
    ParallelData p = ComputeParallel(b->data());
    for (const ParallelLine& line : p.lines) {
      for (double pos : line.positions) {
        EXPECT_TRUE(pos >= 0 && pos <= 1) << pos;
      }
      EXPECT_TRUE(line.color >= 0 && line.color <= 1) << line.color;
    }
    for (const Axis& a : p.axes) {
      EXPECT_GE(a.ticks.size(), 1u) << a.name;
      for (const Tick& t : a.ticks) EXPECT_TRUE(std::isfinite(t.position)) << a.name;
    }
  }
  ParallelData w = ComputeParallel(wide.data());
  EXPECT_DOUBLE_EQ(w.lines[2].positions[0], 0.5);
  EXPECT_DOUBLE_EQ(w.lines[2].positions[1], 0.5);
  EXPECT_DOUBLE_EQ(w.lines[1].color, 1.0);
}

// A log axis over 600 decades labels a few of them, not every one.
TEST(ParallelTest, LogAxisOverManyDecadesKeepsItsTicksFew) {
  SweepBuilder b("val_acc", true);
  b.Param(Log("lr", 1e-300, 1e300));
  b.Trial({{"lr", 1e-3}}, TrialStatus::kCompleted, 0.8);
  ParallelData p = ComputeParallel(b.data());
  EXPECT_GE(p.axes[0].ticks.size(), 2u);
  EXPECT_LE(p.axes[0].ticks.size(), 11u);
}

// ---- learning curves ----

TEST(CurvesTest, TopTrialsBestFirstAndPrunedStopPoints) {
  SweepBuilder b("val_acc", true);
  b.Trial({}, TrialStatus::kCompleted, 0.7, {{1, 0.5}, {2, 0.6}, {3, 0.7}})
      .Trial({}, TrialStatus::kPruned, 0.4, {{1, 0.4}})
      .Trial({}, TrialStatus::kCompleted, 0.9, {{1, 0.6}, {2, 0.8}, {3, 0.9}})
      .Trial({}, TrialStatus::kPruned, 0.55, {{1, 0.5}, {2, 0.55}, {3, 0.58}, {3.5, 0.55}})
      .Trial({}, TrialStatus::kCompleted, 0.8, {{1, 0.6}, {2, 0.7}, {3, 0.8}});
  CurvesData c = ComputeCurves(b.data(), /*top_k=*/2);
  ASSERT_EQ(c.top.size(), 2u);
  EXPECT_EQ(c.top[0].trial, 2);
  EXPECT_EQ(c.top[1].trial, 4);
  EXPECT_EQ(c.top[0].points.size(), 3u);
  EXPECT_EQ(c.top[0].points.back(), (std::pair<double, double>{3, 0.9}));
  ASSERT_EQ(c.pruned.size(), 2u);
  EXPECT_EQ(c.pruned[0].trial, 1);
  EXPECT_DOUBLE_EQ(c.pruned[0].resource, 1);
  EXPECT_EQ(c.pruned[1].trial, 3);
  EXPECT_DOUBLE_EQ(c.pruned[1].resource, 3.5);
  EXPECT_DOUBLE_EQ(c.pruned[1].value, 0.55);
  EXPECT_TRUE(c.rungs.empty());  // no early stopping
}

// A sweep under way or stopped: its running and interrupted trials' curves so far, best latest
// value first, at most top_k; trials without reports have none.
TEST(CurvesTest, UnfinishedTrialsShowTheirProgress) {
  SweepBuilder b("loss", false);
  b.Trial({}, TrialStatus::kRunning, std::nullopt, {{1, 0.9}, {2, 0.7}})
      .Trial({}, TrialStatus::kInterrupted, std::nullopt, {{1, 0.8}, {2, 0.5}, {3, 0.4}})
      .Trial({}, TrialStatus::kRunning, std::nullopt, {})
      .Trial({}, TrialStatus::kRunning, std::nullopt, {{1, 0.95}});
  CurvesData c = ComputeCurves(b.data(), /*top_k=*/2);
  EXPECT_TRUE(c.top.empty());
  ASSERT_EQ(c.unfinished.size(), 2u);
  EXPECT_EQ(c.unfinished[0].trial, 1);  // latest 0.4, the lowest (mode min)
  EXPECT_DOUBLE_EQ(c.unfinished[0].value, 0.4);
  EXPECT_EQ(c.unfinished[0].points.size(), 3u);
  EXPECT_EQ(c.unfinished[1].trial, 0);
}

TEST(CurvesTest, RungsOfAshaAndHyperband) {
  RungSpec spec;
  spec.enabled = true;
  spec.min_resource = 1;
  spec.reduction_factor = 3;
  spec.max_resource = 27;
  EXPECT_EQ(RungResources(spec, 100), (std::vector<double>{1, 3, 9}));
  spec.max_resource = 0;  // unknown: bounded by what was reported
  EXPECT_EQ(RungResources(spec, 10), (std::vector<double>{1, 3, 9}));
  EXPECT_EQ(RungResources(spec, 9), (std::vector<double>{1, 3}));
  spec.min_resource = 2;
  spec.reduction_factor = 2;
  spec.max_resource = 20;
  EXPECT_EQ(RungResources(spec, 0), (std::vector<double>{2, 4, 8, 16}));
  spec.enabled = false;
  EXPECT_TRUE(RungResources(spec, 100).empty());

  SweepBuilder b("value", false);
  b.data().rungs = {true, 1, 3, 27};
  b.Trial({}, TrialStatus::kCompleted, 1.0, {{1, 2.0}, {27, 1.0}});
  EXPECT_EQ(ComputeCurves(b.data(), 5).rungs, (std::vector<double>{1, 3, 9}));
}

TEST(CurvesTest, StepResourceUsesReportSteps) {
  SweepBuilder b("value", false);
  b.data().resource = "step";
  b.Trial({}, TrialStatus::kCompleted, 1.0, {{0.5, 2.0}, {0.75, 1.0}});
  CurvesData c = ComputeCurves(b.data(), 5);
  ASSERT_EQ(c.top.size(), 1u);
  EXPECT_EQ(c.top[0].points, (std::vector<std::pair<double, double>>{{1, 2.0}, {2, 1.0}}));
}

TEST(CurvesTest, DecimateKeepsEndsAndSpikesWithinTheLimit) {
  std::vector<std::pair<double, double>> points;
  for (int i = 0; i < 10000; ++i) points.emplace_back(i, std::sin(i * 0.01));
  points[5003].second = 50;  // a spike
  auto d = Decimate(points, 100);
  EXPECT_LE(d.size(), 100u);
  EXPECT_GE(d.size(), 90u);
  EXPECT_EQ(d.front(), points.front());
  EXPECT_EQ(d.back(), points.back());
  EXPECT_NE(std::find(d.begin(), d.end(), points[5003]), d.end());
  EXPECT_TRUE(std::is_sorted(d.begin(), d.end()));
  EXPECT_EQ(Decimate(points, 20000).size(), points.size());
}

// ---- parameter importance ----

// Uniform in [0, 1) from (seed, i): the same draws on every run.
double Draw(uint64_t seed, int i) {
  return UnitInterval(SplitMix64(seed * 0x9e3779b97f4a7c15ULL + static_cast<uint64_t>(i)));
}

TEST(ImportanceTest, TheParameterThatMattersRanksFirstByAMargin) {
  SweepBuilder b("loss", false);
  b.Param(Log("lr", 1e-4, 1));
  b.Param(Linear("noise_a", 0, 1));
  b.Param(Categorical("noise_b", {"x", "y", "z"}));
  b.Param(Linear("noise_c", 0, 100, true));
  const char* cats[] = {"x", "y", "z"};
  for (int i = 0; i < 300; ++i) {
    const double lr = std::pow(10, -4 + 4 * Draw(1, i));
    // The loss is a bowl in log(lr) plus noise the other parameters do not explain.
    const double loss = std::pow(std::log10(lr) + 2, 2) + 0.3 * Draw(5, i);
    b.Trial({{"lr", lr},
             {"noise_a", Draw(2, i)},
             {"noise_b", cats[static_cast<int>(Draw(3, i) * 3)]},
             {"noise_c", static_cast<int>(Draw(4, i) * 100)}},
            TrialStatus::kCompleted, loss);
  }
  std::vector<Importance> imp = ComputeImportance(b.data());
  ASSERT_EQ(imp.size(), 4u);
  EXPECT_EQ(imp[0].param, "lr");
  EXPECT_GT(imp[0].fraction, 0.8);
  EXPECT_EQ(imp[0].trials, 300);
  EXPECT_EQ(imp[0].groups, 10);
  for (size_t i = 1; i < imp.size(); ++i) {
    EXPECT_LT(imp[i].fraction, 0.05) << imp[i].param;
    EXPECT_GT(imp[0].fraction, 10 * imp[i].fraction) << imp[i].param;
  }
}

TEST(ImportanceTest, ACategoricalParameterCanMatter) {
  SweepBuilder b("acc", true);
  b.Param(Linear("noise", 0, 1));
  b.Param(Categorical("act", {"relu", "tanh"}));
  for (int i = 0; i < 100; ++i) {
    const bool relu = Draw(7, i) < 0.5;
    b.Trial({{"noise", Draw(8, i)}, {"act", relu ? "relu" : "tanh"}}, TrialStatus::kCompleted,
            (relu ? 0.9 : 0.7) + 0.02 * Draw(9, i));
  }
  std::vector<Importance> imp = ComputeImportance(b.data());
  ASSERT_EQ(imp.size(), 2u);
  EXPECT_EQ(imp[0].param, "act");
  EXPECT_GT(imp[0].fraction, 0.9);
  EXPECT_EQ(imp[0].groups, 2);
  EXPECT_LT(imp[1].fraction, 0.05);
}

TEST(ImportanceTest, NothingToExplain) {
  SweepBuilder b("acc", true);
  b.Param(Linear("x", 0, 1));
  b.Trial({{"x", 0.1}}, TrialStatus::kCompleted, 0.5)
      .Trial({{"x", 0.2}}, TrialStatus::kCompleted, 0.6);
  EXPECT_TRUE(ComputeImportance(b.data()).empty());  // fewer than 3 trials
  b.Trial({{"x", 0.3}}, TrialStatus::kCompleted, 0.5)
      .Trial({{"x", 0.4}}, TrialStatus::kCompleted, 0.5);
  b.data().trials[1].objective = 0.5;
  EXPECT_TRUE(ComputeImportance(b.data()).empty());  // a flat metric
  // Flat at a value whose mean in doubles is not exactly itself: still nothing to explain.
  SweepBuilder c("loss", false);
  c.Param(Linear("x", 0, 1));
  for (int i = 0; i < 18; ++i) {
    c.Trial({{"x", 0.05 * i}}, TrialStatus::kCompleted, 1.0 + 1.0 / 9.0);
  }
  EXPECT_TRUE(ComputeImportance(c.data()).empty());
}

// Early stopping pruned most trials and two completed: too few to explain the metric, so
// parallel coordinates and importance take every trial's value at the deepest rung that ten
// reached (the rungs are epochs 1 and 3; epoch 1 has more trials, but is earlier), and say so.
TEST(ImportanceTest, TooFewCompletedUsesEveryTrialAtARung) {
  SweepBuilder b("acc", true);
  b.Param(Linear("lr", 0, 1));
  b.data().rungs = {true, 1, 3, 9};
  b.data().resource = "epoch";
  for (int i = 0; i < 16; ++i) {
    const double lr = i / 16.0;
    // The accuracy rises with lr, at every epoch; the first 4 stop at epoch 1, the next 10 at
    // epoch 3, the last 2 run to epoch 9.
    const int last = i < 4 ? 1 : i < 14 ? 3 : 9;
    std::vector<std::pair<double, double>> curve;
    for (int e = 1; e <= last; ++e) curve.emplace_back(e, 0.5 + 0.3 * lr + 0.01 * e);
    b.Trial({{"lr", lr}}, i < 14 ? TrialStatus::kPruned : TrialStatus::kCompleted,
            curve.back().second, curve);
  }
  Explaining e = ExplainingTrials(b.data());
  EXPECT_EQ(e.rung, 3);
  ASSERT_EQ(e.trials.size(), 12u);  // the 10 pruned at epoch 3 and the 2 completed
  EXPECT_EQ(e.trials[0]->number, 4);
  EXPECT_DOUBLE_EQ(e.values[0], 0.5 + 0.3 * 4 / 16.0 + 0.03);  // at epoch 3, not its last
  EXPECT_EQ(e.note,
            "2 trial(s) completed, too few to explain acc: this uses 12 trials' acc at epoch 3 "
            "(an early-stopping rung), pruned trials included");
  EXPECT_EQ(ComputeParallel(b.data()).lines.size(), 12u);
  EXPECT_EQ(ComputeParallel(b.data()).note, e.note);
  std::vector<Importance> imp = ComputeImportance(b.data());
  ASSERT_EQ(imp.size(), 1u);
  EXPECT_EQ(imp[0].trials, 12);
  EXPECT_GT(imp[0].fraction, 0.8);
  EXPECT_EQ(ReportJson(b.data(), {})["explained"]["rung"], 3);

  // Without early stopping, or with enough completed, the completed trials alone, unsaid.
  b.data().rungs.enabled = false;
  EXPECT_EQ(ExplainingTrials(b.data()).trials.size(), 2u);
  EXPECT_EQ(ExplainingTrials(b.data()).note, "");
  b.data().rungs.enabled = true;
  for (auto& t : b.data().trials) t.status = TrialStatus::kCompleted;
  EXPECT_EQ(ExplainingTrials(b.data()).trials.size(), 16u);
  EXPECT_EQ(ExplainingTrials(b.data()).note, "");
}

// ---- best trials and the page's data ----

TEST(ReportJsonTest, BestTrialsRankCompletedOnesAndThePageHasEveryChart) {
  SweepBuilder b("value", false);
  b.Param(Linear("x", 0, 1));
  b.Trial({{"x", 0.1}}, TrialStatus::kCompleted, 3.0)
      .Trial({{"x", 0.2}}, TrialStatus::kPruned, 0.5)
      .Trial({{"x", 0.3}}, TrialStatus::kCompleted, 1.0)
      .Trial({{"x", 0.4}}, TrialStatus::kCompleted, 1.0);
  json best = BestTrialsJson(b.data(), 2);
  ASSERT_EQ(best.size(), 2u);
  EXPECT_EQ(best[0]["trial"], 2);  // ties: lower number first
  EXPECT_EQ(best[1]["trial"], 3);
  EXPECT_EQ(best[0]["params"]["x"], 0.3);
  EXPECT_DOUBLE_EQ(best[0]["duration_s"].get<double>(), 2.5);

  json page = ReportJson(b.data(), ReportOptions{});
  for (const char* key :
       {"sweep", "history", "parallel", "curves", "importance", "best", "config"}) {
    EXPECT_TRUE(page.contains(key)) << key;
  }
  EXPECT_EQ(page["sweep"]["counts"]["completed"], 3);
  EXPECT_EQ(page["sweep"]["counts"]["pruned"], 1);
  EXPECT_EQ(page["history"]["points"].size(), 4u);
  EXPECT_EQ(page["parallel"]["lines"].size(), 3u);
  // A line is [trial, colour, position per axis...].
  EXPECT_EQ(page["parallel"]["lines"][0].size(), 4u);
}

}  // namespace
}  // namespace sweep::report
