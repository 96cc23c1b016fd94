// The rules of a trial's end (sweep/src/trial_outcome.h), one by one.
#include "trial_outcome.h"

#include <gtest/gtest.h>

namespace sweep {
namespace {

using Kind = executor::TrialOutcome::Kind;
using store::TrialStatus;

TrialFacts Facts() {
  TrialFacts f;
  f.max_retries = 1;
  f.first_run = true;
  f.cap_note = "cap";
  f.target_note = "target";
  f.stop_reason = "why";
  return f;
}

RunEnd Lost() {
  RunEnd run;
  run.outcome = Kind::kFailed;
  run.worker_lost = true;
  run.error = "worker died";
  return run;
}

TEST(TrialOutcomeTest, ACompletedRunKeepsAPruneDecidedMeanwhile) {
  TrialFacts f = Facts();
  f.prune_reason = "rung 1";
  const TrialEnd end = DecideEnd(f, RunEnd{});
  EXPECT_EQ(end.status, TrialStatus::kPruned);
  EXPECT_EQ(end.note, "rung 1");
  EXPECT_EQ(end.then, TrialEnd::Then::kNothing);
}

TEST(TrialOutcomeTest, AStoppedRunIsInterruptedWithTheSweepsReason) {
  RunEnd run;
  run.outcome = Kind::kStopped;
  const TrialEnd end = DecideEnd(Facts(), run);
  EXPECT_EQ(end.status, TrialStatus::kInterrupted);
  EXPECT_EQ(end.note, "stopped: why");
  TrialFacts at_cap = Facts();
  at_cap.at_max_resource = true;
  EXPECT_EQ(DecideEnd(at_cap, run).status, TrialStatus::kCompleted);
  EXPECT_EQ(DecideEnd(at_cap, run).note, "cap");
}

TEST(TrialOutcomeTest, TheMachineInterruptingARunIsItsServersTrouble) {
  RunEnd run;
  run.outcome = Kind::kInterrupted;
  run.error = "disk full";
  TrialEnd end = DecideEnd(Facts(), run);
  EXPECT_EQ(end.status, TrialStatus::kInterrupted);
  EXPECT_EQ(end.then, TrialEnd::Then::kServerTrouble);
  TrialFacts stopping = Facts();
  stopping.stopping = true;
  EXPECT_EQ(DecideEnd(stopping, run).then, TrialEnd::Then::kNothing);
}

TEST(TrialOutcomeTest, ALostWorkerUsesARetryThenFails) {
  TrialEnd end = DecideEnd(Facts(), Lost());
  EXPECT_EQ(end.status, TrialStatus::kInterrupted);
  EXPECT_EQ(end.then, TrialEnd::Then::kRunAgain);
  EXPECT_EQ(end.retries, 1);
  EXPECT_EQ(end.store_retries, 1);
  EXPECT_EQ(end.note, "worker died; running it again (retry 1 of 1)");
  TrialFacts used = Facts();
  used.retries = 1;
  end = DecideEnd(used, Lost());
  EXPECT_EQ(end.status, TrialStatus::kFailed);
  EXPECT_EQ(end.note, "worker died (after 1 retry)");
}

TEST(TrialOutcomeTest, ALostAgentCostsNoRetryUntilItsThirdLoss) {
  RunEnd run = Lost();
  run.server_lost = true;
  TrialFacts f = Facts();
  TrialEnd end = DecideEnd(f, run);
  EXPECT_EQ(end.then, TrialEnd::Then::kRunAgain);
  EXPECT_EQ(end.retries, 0);
  EXPECT_EQ(end.agent_losses, 1);
  EXPECT_EQ(end.store_agent_losses, 1);
  f.agent_losses = kMaxAgentLosses - 1;
  end = DecideEnd(f, run);
  EXPECT_EQ(end.status, TrialStatus::kFailed);
  EXPECT_EQ(end.store_agent_losses, kMaxAgentLosses);
  // An agent stopped on purpose costs nothing, however often.
  run.server_stopped = true;
  end = DecideEnd(f, run);
  EXPECT_EQ(end.then, TrialEnd::Then::kRunAgain);
  EXPECT_EQ(end.agent_losses, kMaxAgentLosses - 1);
  EXPECT_FALSE(end.store_agent_losses);
}

TEST(TrialOutcomeTest, ASignalInterruptsAFailingRunForResume) {
  TrialFacts f = Facts();
  f.signalled = true;
  RunEnd run;
  run.outcome = Kind::kFailed;
  run.error = "killed by SIGTERM";
  const TrialEnd end = DecideEnd(f, run);
  EXPECT_EQ(end.status, TrialStatus::kInterrupted);
  EXPECT_EQ(end.then, TrialEnd::Then::kNothing);
  EXPECT_EQ(end.note, "killed by SIGTERM");
}

TEST(TrialOutcomeTest, ACommandFailingAfterItsCapReportCompletes) {
  TrialFacts f = Facts();
  f.reached_cap = true;
  RunEnd run;
  run.outcome = Kind::kFailed;
  run.error = "exit 1";
  const TrialEnd end = DecideEnd(f, run);
  EXPECT_EQ(end.status, TrialStatus::kCompleted);
  EXPECT_EQ(end.note, "cap; after that: exit 1");
}

}  // namespace
}  // namespace sweep
