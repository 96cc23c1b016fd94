// StepNumbering: the step each `sweep-report` line of a command trial's program is stored as,
// live and when a rerun replays an earlier run's log. Private to sweep_executor. Pure: one
// object per run, used from one thread.
#pragma once

#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "executor/command.h"

namespace sweep::executor {

// How a run numbers its reports (see TrialTask::stored_step): a report's own step; else the
// step of the line before when both give the same epoch without a step and the line adds
// metrics that step lacks (an epoch's training line, then its validation line: one report; a
// line repeating a metric, as a program logging every few batches does, is a report of its
// own); else, run again after stored reports, an epoch past the stored ones follows them, the
// last stored one is that step again (what the store lacks of it is added), and one before it
// is not recorded (nullopt); else its count in the run. Replay numbers an earlier run's reports
// the same way, from the stored reports that run followed (and, for a run of an earlier version,
// as it did: every line a report of its own, `by_line`).
struct StepNumbering {
  int64_t stored_step = 0;
  double stored_epoch = 0;
  int64_t stored_epoch_steps = 1;  // see TrialTask
  bool by_line = false;            // numbering 1 (RunRecord)
  int64_t reports = 0;             // report lines read in the run
  int64_t numbered = 0;            // steps numbered by count
  int64_t appended = 0;            // steps numbered after the stored ones

  std::optional<int64_t> Next(const CommandReport& r);

  // The epoch of a report numbered `step`: its own; else, on a later line of the step the last
  // report had (one step's metrics printed on several lines), that step's; else the step.
  // Sets *disagrees when the report gives an epoch other than the one its step already has.
  double EpochOf(const CommandReport& r, int64_t step, bool* disagrees = nullptr);
  std::optional<int64_t> last_step;  // the last report's step, and its epoch
  double last_epoch = 0;

 private:
  // The epoch the last report gave without a step, the step it got (nullopt: not recorded),
  // and the metrics the lines of that step have given.
  struct EpochStep {
    double epoch = 0;
    std::optional<int64_t> step;
    std::set<std::string> names;
    // The metric names a report gives: its numbers and its NaNs or infinities.
    static std::vector<std::string> NamesOf(const CommandReport& r) {
      std::vector<std::string> out = r.nonfinite;
      for (const auto& [name, value] : r.metrics.items()) out.push_back(name);
      return out;
    }
    bool Repeats(const CommandReport& r) const {
      for (const std::string& name : NamesOf(r)) {
        if (names.contains(name)) return true;
      }
      return false;
    }
    void Add(const CommandReport& r) {
      for (std::string& name : NamesOf(r)) names.insert(std::move(name));
    }
  };
  std::optional<EpochStep> epoch_step_;
  int64_t stored_epoch_seen_ = 0;  // steps of the last stored epoch printed again so far
};

}  // namespace sweep::executor
