// What a running sweep says on its log: the opening line, each trial's end, why it stops, and
// the live status line on a terminal.
#pragma once

#include <cstdint>
#include <optional>
#include <ostream>
#include <string>

#include "executor/packer.h"
#include "store/store.h"
#include "sweep/config.h"

namespace sweep {

std::string FormatElapsed(double s);  // "mm:ss", or "h:mm:ss" from an hour
std::string FormatMetric(double v);   // "%.6g"

class Progress {
 public:
  // `log` null: quiet. `live`: one status line rewritten in place (a terminal).
  Progress(std::ostream* log, bool live) : log_(log), live_(live) {}

  std::ostream* log() const { return log_; }
  bool live() const { return live_; }

  // "sweep 'NAME': 12 trial(s), random search, max val_acc; 2 CPU slot(s), ..."
  void Announce(const SweepConfig& config, const executor::Packer& packer,
                const std::string& store_path, const std::string& extra);
  // "trial 3 completed val_acc=0.88 (12.5 s)": one line a trial, or only failures when live.
  void TrialEnded(int64_t number, store::TrialStatus status, const std::string& metric,
                  std::optional<double> objective, double seconds, const std::string& note);
  // "sweep: stopping: WHY" (with how many running trials finish their epoch when given).
  void Stopping(const std::string& why, size_t running_after_epoch);
  // An interrupt: "stopping N running trial(s)" and `how` they stop (the kind's words).
  void Interrupted(size_t running, const std::string& how);
  // The live line, at most ten times a second unless `final`.
  struct Line {
    store::StatusCounts counts;
    std::optional<int64_t> limit;  // the trial budget, when there is one
    std::optional<double> best;
    int64_t best_trial = -1;
    double active_s = 0;
  };
  void Show(const std::string& name, const std::string& metric, const Line& line, double now,
            bool final);

 private:
  std::ostream* log_;
  bool live_;
  double last_s_ = 0;
};

}  // namespace sweep
