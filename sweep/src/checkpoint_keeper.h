// Which trials keep their checkpoint files when `[trial] keep_checkpoints = N` is set: the N
// best completed trials by the sweep's objective, ranked as `sweep best` ranks them (objective,
// then the lower trial number). A pruned or failed trial, or a completed one without the
// objective, keeps none once it ends; a completed trial that falls out of the N best loses
// its own. Trials still running or interrupted are not its business: they need theirs to go on.
#pragma once

#include <cstdint>
#include <optional>
#include <set>
#include <utility>
#include <vector>

namespace sweep {

class CheckpointKeeper {
 public:
  CheckpointKeeper(int64_t keep, bool maximize) : keep_(keep), maximize_(maximize) {}

  // A trial ended (completed or not). Returns the trials whose checkpoints are to go now: it
  // itself, or a trial it pushed out of the best, or none.
  std::vector<int64_t> Ended(int64_t number, bool completed, std::optional<double> objective);

  // The trials whose checkpoints are kept, best first.
  std::vector<int64_t> Kept() const;

 private:
  // Ordered worst first: a lower score (the objective, negated when minimising) is worse,
  // and of two equal scores the higher number is worse.
  using Key = std::pair<double, int64_t>;  // (score, -number)

  int64_t keep_;
  bool maximize_;
  std::set<Key> kept_;
};

}  // namespace sweep
