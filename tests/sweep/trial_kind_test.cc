// The table of trial kinds: every kind has its config rules and its coordinator rules, under the
// name the wire and the config use.
#include "kinds/trial_kind.h"

#include <gtest/gtest.h>

#include <sstream>

#include "kinds/kind_config.h"
#include "sweep/config.h"

namespace sweep {
namespace {

TEST(TrialKindTest, EveryKindHasItsRulesUnderItsName) {
  const auto names = executor::TrialKindNames();
  ASSERT_EQ(names.size(), config_internal::AllKindConfigs().size());
  for (const std::string& name : names) {
    const std::optional<TrialKind> kind = executor::TrialKindFromString(name);
    ASSERT_TRUE(kind.has_value()) << name;
    EXPECT_EQ(ToString(*kind), name);
    EXPECT_EQ(config_internal::KindConfigOf(*kind).kind, *kind) << name;
    SweepConfig config;
    config.trial.kind = *kind;
    EXPECT_EQ(MakeTrialKindRules(config)->kind(), *kind) << name;
  }
  EXPECT_FALSE(executor::TrialKindFromString("Trainer").has_value());
  EXPECT_FALSE(executor::TrialKindFromString("").has_value());
}

// With agents, a trainer sweep whose checkpoints each agent keeps for itself says that a moved
// trial starts again from epoch 1; one on storage not known to be local says nothing.
TEST(TrialKindTest, TrainerTrialsSayWhenAMovedTrialLosesItsCheckpoint) {
  SweepConfig config;
  config.path = "c.toml";
  config.trial.kind = TrialKind::kTrainer;
  auto said = [&](const std::string& dir) {
    config.trial.checkpoint_dir = dir;
    std::ostringstream log;
    MakeTrialKindRules(config)->WarnRemote(log);
    return log.str();
  };
  EXPECT_NE(said("").find("c.toml: trial.checkpoint_dir is not set, so each agent keeps "
                          "checkpoints in its own folder: a trial moved to another agent starts "
                          "again from epoch 1"),
            std::string::npos)
      << said("");
  EXPECT_NE(said("ckpt").find("'ckpt' is relative"), std::string::npos) << said("ckpt");
  EXPECT_EQ(said("/proc/sweep-checkpoints"), "");  // procfs: not a local disk it knows
  config.trial.kind = TrialKind::kFunction;
  EXPECT_EQ(said(""), "");
}

// Each kind's own table is refused under another kind, naming both.
TEST(TrialKindTest, AnotherKindsTableIsRefusedNamingBoth) {
  const std::string text =
      "[sweep]\nname = \"f\"\nmetric = \"score\"\nmode = \"max\"\nmax_trials = 2\n"
      "[trial]\nkind = \"command\"\ncommand = [\"true\"]\n"
      "[parameters]\nx = { values = [1, 2] }\n"
      "[function]\nname = \"branin\"\n";
  auto cfg = ParseConfig(text, "f.toml");
  ASSERT_FALSE(cfg.ok());
  EXPECT_EQ(cfg.status().message(),
            "f.toml:11:1: function: [function] applies to kind = \"function\" only (this sweep's "
            "trial.kind is \"command\")");
}

}  // namespace
}  // namespace sweep
