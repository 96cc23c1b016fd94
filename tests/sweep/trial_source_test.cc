// What TPE learns from under each early-stopping rule (the BOHB rule): the TrialSource's
// proposals against a TpeSampler fed by hand with the values at the level that should be used.
#include "trial_source.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "sweep/config.h"

namespace sweep {
namespace {

using nlohmann::json;

SweepConfig Config(const std::string& early_stopping) {
  const std::string text =
      "[sweep]\nname = \"s\"\nmax_trials = 40\nseed = 7\n[search]\nalgorithm = \"tpe\"\n"
      "n_startup_trials = 3\n[trial]\nkind = \"function\"\n[function]\nname = \"branin\"\n"
      "steps = 9\n" +
      early_stopping +
      "[parameters]\nx1 = { distribution = \"uniform\", min = -5, max = 10 }\n"
      "x2 = { distribution = \"uniform\", min = 0, max = 15 }\n";
  auto config = ParseConfig(text, "s.toml");
  EXPECT_TRUE(config.ok()) << config.status().message();
  return config.ok() ? *config : SweepConfig{};
}

class TrialSourceTest : public ::testing::Test {
 protected:
  void Start(const std::string& early_stopping, std::vector<double> rungs) {
    config_ = Config(early_stopping);
    auto source = TrialSource::Make(
        config_, [](const json&) { return 1.0; }, std::move(rungs));
    ASSERT_TRUE(source.ok()) << source.status().message();
    source_ = std::move(source).value();
  }

  // The next trial, with running_ running.
  NewTrial Next() {
    std::optional<NewTrial> t = source_->Next([this] { return running_; });
    EXPECT_TRUE(t.has_value());
    if (!t) return {};
    params_.push_back(t->params);
    return *t;
  }

  // What TPE proposes for `number` having learnt exactly `values` (trial -> value), with
  // running_ running (`observed` of them among `values`: the first, without early stopping), or
  // `order` where given.
  json Expected(int64_t number, const std::vector<std::pair<int64_t, double>>& values,
                size_t observed = 0, const std::vector<NewTrial>* order = nullptr) const {
    const bool provisional = config_.early_stopping.algorithm == search::EarlyStopping::kNone;
    auto tpe = search::MakeTpeSampler(config_.search.space, config_.sweep.seed, config_.search.tpe,
                                      config_.sweep.maximize);
    EXPECT_TRUE(tpe.ok());
    for (const auto& [trial, value] : values) {
      (*tpe)->Observe(trial, params_[static_cast<size_t>(trial)], value);
    }
    std::vector<json> running;
    for (const NewTrial& t : order != nullptr ? *order : running_) running.push_back(t.params);
    return (*tpe)->Suggest(number, running, observed, provisional).params;
  }

  void Report(int64_t trial, double resource, double value) {
    source_->NoteReport(trial, resource, value, params_[static_cast<size_t>(trial)]);
  }

  SweepConfig config_;
  std::unique_ptr<TrialSource> source_;
  std::vector<json> params_;
  std::vector<NewTrial> running_;  // what Next is told runs
};

// The median rule has no rungs: each step reported is a level. Startup ends once
// n_startup_trials trials have reported (not completed), and TPE learns from the highest step
// that many reached, pruned trials included up to where they stopped.
TEST_F(TrialSourceTest, UnderTheMedianRuleTpeLearnsFromTheHighestStepEnoughTrialsReached) {
  Start("[early_stopping]\nalgorithm = \"median\"\n", {});
  for (int n = 0; n < 4; ++n) {
    Next();
    EXPECT_EQ(source_->TakeProposer(n), "startup random") << n;
  }
  // Trials 0-3 report steps 1 and 2; 0-2 also step 3; 3 stops at 2 (pruned); none ends.
  for (int n = 0; n < 4; ++n) {
    Report(n, 1, 10.0 + n);
    Report(n, 2, 5.0 + n);
  }
  for (int n = 0; n < 3; ++n) Report(n, 3, 3.0 - n);
  const NewTrial t4 = Next();
  EXPECT_EQ(source_->TakeProposer(4), "tpe");
  EXPECT_EQ(t4.params, Expected(4, {{0, 3.0}, {1, 2.0}, {2, 1.0}}));
  // Once three trials end, their final values are what it learns from.
  source_->NoteEnd(0, 0.5, params_[0]);
  source_->NoteEnd(1, 0.7, params_[1]);
  source_->NoteEnd(4, 0.9, params_[4]);
  const NewTrial t5 = Next();
  EXPECT_EQ(t5.params, Expected(5, {{0, 0.5}, {1, 0.7}, {4, 0.9}}));
}

// Before any trial has reported, nothing is known: random search's points, counted by the
// startup rule with the running trials.
TEST_F(TrialSourceTest, UnderTheMedianRuleStartupCountsTrialsThatReported) {
  Start("[early_stopping]\nalgorithm = \"median\"\n", {});
  for (int n = 0; n < 3; ++n) Next();
  Report(0, 1, 1.0);
  Report(1, 1, 2.0);
  Next();
  EXPECT_EQ(source_->TakeProposer(3), "startup random");
  Report(2, 4, 3.0);  // another step: levels hold their own trials
  Next();
  EXPECT_EQ(source_->TakeProposer(4), "startup random");
  Report(3, 1, 0.5);
  const NewTrial t5 = Next();
  EXPECT_EQ(source_->TakeProposer(5), "tpe");
  EXPECT_EQ(t5.params, Expected(5, {{0, 1.0}, {1, 2.0}, {3, 0.5}}));
}

// A running trial that has reported is observed at that step, and a running one (a pessimistic
// observation) too, so that suggestions keep off its point; but it counts once towards
// n_startup_trials.
TEST_F(TrialSourceTest, ARunningTrialThatReportedCountsOnce) {
  Start("[early_stopping]\nalgorithm = \"median\"\n", {});
  running_.push_back(Next());
  running_.push_back(Next());
  Report(0, 1, 2.0);
  // One observed (trial 0) and one running without a value (trial 1): two of three.
  Next();
  EXPECT_EQ(source_->TakeProposer(2), "startup random");
  running_.push_back({2, params_[2]});
  Report(1, 1, 1.0);
  Report(2, 1, 3.0);
  // Trials 0-2 observed at step 1, all still running: three trials, TPE's turn.
  const NewTrial t3 = Next();
  EXPECT_EQ(source_->TakeProposer(3), "tpe");
  EXPECT_EQ(t3.params, Expected(3, {{0, 2.0}, {1, 1.0}, {2, 3.0}}, 3));
}

// ASHA: a trial's value at a rung is its first report at or past it; the highest rung with
// n_startup_trials values is used, then the trials' ends.
TEST_F(TrialSourceTest, UnderAshaTpeLearnsFromTheHighestRungWithEnoughValues) {
  Start("[early_stopping]\nalgorithm = \"asha\"\n", {1, 3});
  for (int n = 0; n < 4; ++n) Next();
  for (int n = 0; n < 4; ++n) Report(n, 2, 4.0 + n);  // rung 1 (resource 1) only
  EXPECT_EQ(Next().params, Expected(4, {{0, 4.0}, {1, 5.0}, {2, 6.0}, {3, 7.0}}));
  Report(0, 4, 2.0);  // past rung 3, the first report there
  Report(0, 5, 1.0);
  Report(2, 3, 2.5);
  Report(3, 3, 3.5);
  EXPECT_EQ(Next().params, Expected(5, {{0, 2.0}, {2, 2.5}, {3, 3.5}}));
}

// Without early stopping, a running trial's report at the highest resource so far is a
// provisional observation (counted once), replaced by its final value when it ends and
// forgotten when it leaves without one (it failed).
TEST_F(TrialSourceTest, WithoutEarlyStoppingARunningTrialsLatestReportStandsInForItsResult) {
  Start("", {});
  for (int n = 0; n < 3; ++n) running_.push_back(Next());
  Report(0, 1, 5.0);
  Report(0, 3, 4.0);
  Report(0, 2, 9.0);  // a lower step again (a rerun): the highest stands
  Report(1, 2, 0.5);
  // Two of the three running have a value: three trials known, TPE's turn.
  const NewTrial t3 = Next();
  EXPECT_EQ(source_->TakeProposer(3), "tpe");
  EXPECT_EQ(t3.params, Expected(3, {{0, 4.0}, {1, 0.5}}, 2));
  // Trial 0 ends; trial 1, the best so far, leaves without a result; trial 3 runs and reports.
  source_->NoteEnd(0, 1.0, params_[0]);
  running_ = {{2, params_[2]}, t3};
  Report(2, 1, 6.0);
  Report(3, 1, 8.0);
  const NewTrial t4 = Next();
  EXPECT_EQ(t4.params, Expected(4, {{0, 1.0}, {2, 6.0}, {3, 8.0}}, 2));
  // TPE takes those with a value first, whatever the order they run in.
  running_ = {t4, {2, params_[2]}, t3};
  const std::vector<NewTrial> known_first = {{2, params_[2]}, t3, t4};
  EXPECT_EQ(Next().params, Expected(5, {{0, 1.0}, {2, 6.0}, {3, 8.0}}, 2, &known_first));
}

}  // namespace
}  // namespace sweep
