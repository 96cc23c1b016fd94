// `sweep run CONFIG --from NAME`: a new sweep starts from an earlier sweep's trials, the way a
// user fixes a config without losing what was learned. The trials that are points of the new
// space, ended completed or pruned, and reported the new metric are copied into the new sweep
// (numbered from 0, their reports with them); its early stopping replays their reports, a grid
// skips their points, and a random search draws on past the earlier sweep's draws.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "base/status.h"
#include "store/store.h"
#include "sweep/config.h"

namespace sweep {

struct CarryPlan {
  std::string from;                             // the earlier sweep's name
  int64_t from_id = 0;                          // and id
  std::vector<store::TrialRecord> trials;       // to copy, numbered 0.., objective for the metric
  std::vector<int64_t> old_numbers;             // trials[i]'s number in the earlier sweep
  int64_t considered = 0;                       // the earlier sweep's trials
  std::map<std::string, int64_t> left;          // why the others stay there -> how many
  std::map<std::string, std::string> examples;  // why -> the first such trial, and what
  int64_t sample_shift = 0;                     // trial n draws the sampler's point n + this
  // "carried over 9 of 12 trials from 'old' (7 completed, 2 pruned); not carried: 2 failed,
  // 1 outside this space (trial 4: lr 0.2 is above its max 0.1)".
  std::string Summary() const;
};

// TPE's startup trials (the `carried` ones among them) must leave some of max_trials to TPE.
Status CheckTpeStartup(const SweepConfig& config, int64_t carried);

// Which of sweep `from`'s trials (in `store`) a new sweep of `config` takes over. NotFound (with
// a did-you-mean) for an unknown name; InvalidArgument when `from` is the new sweep's own name,
// its trials are of another kind, ranked in the other mode, or evaluated another function. A
// trial whose length (epochs, steps) or other settings (what the trainer learns from, a
// command's words) differ from what this config gives it stays behind.
Result<CarryPlan> PlanCarryOver(store::Store& store, const SweepConfig& config,
                                const std::string& from);

// Copies the plan's trials and their reports into sweep `sweep_id` (an event on each says where
// it came from) and records how many there are; appends the copied reports, in the order they
// arrived, to `reports` for early stopping to replay.
Status ApplyCarryOver(store::Store& store, int64_t sweep_id, const CarryPlan& plan, double now_s,
                      std::vector<store::ReportRecord>* reports);

}  // namespace sweep
