#include "trial_outcome.h"

namespace sweep {

using store::TrialStatus;
using Kind = executor::TrialOutcome::Kind;

TrialEnd StoppedEnd(const TrialFacts& t, const std::string& why) {
  TrialEnd end;
  end.retries = t.retries;
  end.agent_losses = t.agent_losses;
  if (!t.prune_reason.empty()) {
    end.status = TrialStatus::kPruned;
    end.note = t.prune_reason;
  } else if (t.met_target) {
    end.note = t.target_note;  // the result the sweep sought
  } else if (t.at_max_resource || t.reached_cap) {
    end.note = t.cap_note;
  } else {
    end.status = TrialStatus::kInterrupted;
    end.note = why;
  }
  return end;
}

namespace {

TrialEnd Completed(const TrialFacts& t) {
  TrialEnd end;
  if (!t.prune_reason.empty()) {
    end.status = TrialStatus::kPruned;
    end.note = t.prune_reason;
  } else if (t.at_max_resource) {
    end.note = t.cap_note;  // it ended by itself just as it was stopped there
  } else if (t.met_target) {
    end.note = t.target_note;  // its last report met it
  }
  return end;
}

TrialEnd RunAgain(TrialEnd end, int retries, int losses, bool never_ran) {
  end.status = TrialStatus::kInterrupted;
  end.then = TrialEnd::Then::kRunAgain;
  end.retries = retries;
  end.agent_losses = losses;
  end.never_ran = never_ran;
  return end;
}

TrialEnd Failed(const TrialFacts& t, const RunEnd& run) {
  TrialEnd end;
  end.status = TrialStatus::kFailed;
  end.note = run.error;
  const bool lost = run.worker_lost;
  if (t.at_max_resource) {  // F1: what ended it while it stopped does not undo that
    end.status = TrialStatus::kCompleted;
    end.note = t.cap_note;
  } else if (t.reached_cap && t.prune_reason.empty()) {  // F2
    end.status = TrialStatus::kCompleted;
    end.note = t.cap_note + "; after that: " + run.error;
  } else if (!t.prune_reason.empty()) {  // F3: as resume would record it
    end.status = TrialStatus::kPruned;
    end.note = t.prune_reason;
  } else if (t.met_target) {  // F4
    end.status = TrialStatus::kCompleted;
    end.note = t.target_note;
  } else if ((lost && t.stopping) || t.signalled) {
    // F5: a signal to every process (systemd's stop, a batch system's cancel) also ends the
    // trial's program or worker: it runs again on resume, without using up a retry.
    end.status = TrialStatus::kInterrupted;
  } else if (lost && run.server_stopped) {  // F6
    end.note += "; running it again";
    end = RunAgain(end, t.retries, t.agent_losses, t.first_run && run.never_started);
  } else if (lost && run.server_lost && !run.never_started &&
             t.agent_losses + 1 >= kMaxAgentLosses) {  // F7
    end.store_agent_losses = t.agent_losses + 1;
    end.note = "its agent was lost " + std::to_string(kMaxAgentLosses) +
               " times while it ran (is the trial what takes it down? out of memory?); the "
               "last time: " +
               run.error;
  } else if (lost && run.server_lost) {  // F8: the loss counts only if it ran there
    const int losses = t.agent_losses + (run.never_started ? 0 : 1);
    if (losses != t.agent_losses) end.store_agent_losses = losses;
    end.note += "; running it again";
    end = RunAgain(end, t.retries, losses, t.first_run && run.never_started);
  } else if (lost && t.retries < t.max_retries) {  // F9: the worker died, not the trial
    end.store_retries = t.retries + 1;
    end.note += "; running it again (retry " + std::to_string(t.retries + 1) + " of " +
                std::to_string(t.max_retries) + ")";
    end = RunAgain(end, t.retries + 1, t.agent_losses, false);
  } else if (lost && t.retries > 0) {  // F10
    end.note +=
        " (after " + std::to_string(t.retries) + " retr" + (t.retries == 1 ? "y" : "ies") + ")";
  }
  return end;
}

}  // namespace

TrialEnd DecideEnd(const TrialFacts& t, const RunEnd& run) {
  TrialEnd end;
  switch (run.outcome) {
    case Kind::kCompleted:
      end = Completed(t);
      break;
    case Kind::kStopped:
      end = StoppedEnd(t, "stopped: " + t.stop_reason);
      break;
    case Kind::kInterrupted:
      // The machine stopped it (a checkpoint that cannot be written), not the trial: no retry
      // used; its server's trouble unless the sweep is stopping anyway.
      end = StoppedEnd(t, run.error);
      if (end.status == TrialStatus::kInterrupted && !t.stopping) {
        end.then = TrialEnd::Then::kServerTrouble;
        end.never_ran = t.first_run && run.never_started;
      }
      break;
    case Kind::kFailed:
      end = Failed(t, run);
      break;
  }
  if (end.then == TrialEnd::Then::kNothing) {
    end.retries = t.retries;
    end.agent_losses = t.agent_losses;
  }
  const bool ran_out = run.outcome == Kind::kCompleted || run.outcome == Kind::kStopped;
  if (ran_out && !run.error.empty()) end.note += (end.note.empty() ? "" : "; ") + run.error;
  return end;
}

}  // namespace sweep
