// Early-stopping schedulers (median, ASHA, Hyperband): given each report a trial makes, decide
// whether it continues or is stopped. A scheduler is a pure function of the reports fed to it, in
// order: no clock, no I/O, no randomness, so replaying the stored reports rebuilds it exactly.
// A Scheduler is owned by its caller and is not thread-safe: one thread feeds it.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace sweep::search {

// ---- configuration ----

enum class EarlyStopping { kNone, kMedian, kAsha, kHyperband };

// "none", "median", "asha", "hyperband", and back; nullopt for a name it does not know.
std::string_view EarlyStoppingName(EarlyStopping algorithm);
std::optional<EarlyStopping> EarlyStoppingFromName(std::string_view name);

// The [early_stopping] table. The resource is what a trial reports progress in: the epoch for
// trainer trials, the step for function and command trials.
struct SchedulerConfig {
  EarlyStopping algorithm = EarlyStopping::kNone;
  // asha, hyperband: the first rung's resource (> 0) and the resource a surviving trial runs to
  // (> min_resource). Rungs sit at min_resource * reduction_factor^k below max_resource.
  double min_resource = 1;
  double max_resource = 0;
  double reduction_factor = 3;  // asha, hyperband: keep the top 1/reduction_factor (>= 2)
  // asha, hyperband: the first bootstrap_count trials to reach a rung stop there (>= 0). With 0
  // a rung of fewer than reduction_factor trials passes its best; reduction_factor - 1 passes
  // none until a top 1/reduction_factor exists, as the ASHA paper's promotions do, but a trial
  // stopped here never resumes: if those first trials were the best, none may pass the rung.
  int64_t bootstrap_count = 0;
  int64_t grace_period = 1;      // median: reports a trial makes before it can be stopped (>= 0)
  int64_t min_trials = 3;        // median: other trials needed at a step to judge there (>= 1)
  bool maximize = true;          // the sweep's mode
  std::string metric = "value";  // only for the text of reasons
  // hyperband: trial numbers follow the order of a grid (its last axis varies fastest), which
  // the brackets' interleave could line up with (every full-budget trial with one batch size).
  // Each block of the bracket cycle is then read in an order scrambled by the block's number:
  // the same counts per block, no pattern along the grid.
  bool grid_order = false;
};

// Checks the fields the algorithm uses; a message names the key, e.g.
// "early_stopping.reduction_factor must be >= 2 (got 1)".
Status Validate(const SchedulerConfig& config);

// ---- decisions ----

struct Decision {
  enum class Action { kContinue, kStop };
  Action action = Action::kContinue;
  // The rung (global index k of resource min_resource * reduction_factor^k) this report was
  // recorded (and, unless last, judged) at, or -1 when it reached no new rung (and always -1
  // for median and none).
  int rung = -1;
  // Why, for a stop ("pruned at rung 1 (resource 3): val_acc 0.71 not in the top 1/3 of 9
  // trials (cutoff 0.78)"); empty for continue. Meant to be stored with the pruned trial.
  std::string reason;

  bool stop() const { return action == Action::kStop; }
};

// One stored report, as the scheduler sees it.
struct Report {
  int64_t trial = 0;    // the trial's number in the sweep
  double resource = 0;  // epoch (trainer) or step (function, command)
  double value = 0;     // the sweep's metric; NaN allowed
  // The trial's last report: it has run its whole length (its epochs or steps), so stopping it
  // would save nothing. Such a report is recorded but never stops its trial.
  bool last = false;
};

// Rules every scheduler follows, whatever its algorithm:
//  - A report's value is read in the sweep's mode; NaN ranks below every number.
//  - Reports of one trial must advance: a report whose resource is not above the trial's
//    largest so far (a trial resumed from a checkpoint re-reporting an epoch), or is not finite,
//    changes nothing and gets kContinue with rung -1.
//  - Once a trial is stopped, every later report of it gets that same stop Decision again and
//    changes nothing: reports that were already on their way when STOP was sent are harmless.
//  - Decisions depend only on the sequence of OnReport calls. Rebuilding after a restart is
//    replaying the stored reports, in the order they were stored, into a fresh scheduler (see
//    Replay); it reproduces every decision, Rung() and Stopped() exactly. For the same reason
//    there is no trial start or end hook: nothing outside the reports may change state.
//  - A trial's last report (`last`), and one at or past max_resource, is recorded as any other
//    (it counts against later trials) but never stops its trial: it has run its budget, and its
//    value is its result (Ray Tune's max_t: a trial reaching it ends as finished, not stopped).
//
// median: at a trial's report at step t, once it has made more than grace_period reports and at
//   least min_trials other trials have reported at exactly step t, it is stopped when its best
//   value so far is strictly worse than the median of those trials' running averages (the mean
//   of all their values up to and including step t). Ties continue. Even counts take the mean
//   of the two middle values (numpy.median). This is Ray Tune's MedianStoppingRule with the
//   grace period counted in reports and steps matched exactly rather than by "reached".
//   O(log n) per report in the trials at that step (two heaps).
//
// asha: rung k sits at resource r_k = min_resource * reduction_factor^k, for every r_k below
//   max_resource; a trial reaches rung k with its first report whose resource is >= r_k. A
//   report that jumps over several rungs is judged at the highest one only (Ray Tune's
//   AsyncHyperBand does the same). Each rung records the value of every trial that reached it
//   (stopped ones included). With n trials recorded there including this one, the trial
//   continues when its value is at least as good as the keep-th best, keep = floor(n / eta):
//   the paper's top_k(rung, |rung| / eta). Ties with that cutoff continue (Ray Tune stops only
//   when value < cutoff; Optuna's SuccessiveHalvingPruner keeps value >= cutoff).
//   Too few trials: where the paper (Li et al., "A System for Massively Parallel Hyperparameter
//   Tuning", Algorithm 2) would leave a trial waiting at the rung until floor(n / eta) >= 1, a
//   running trial cannot wait, so keep is at least 1: while a rung holds fewer than eta trials
//   only a trial at least as good as the best there continues (Optuna's rule for the same case;
//   the first trial at a rung always continues, as in Ray Tune). A NaN value never survives a
//   rung. Reaching max_resource is not a stop: the trial simply completes.
//   O(log n) per report in the trials recorded at that rung (two heaps split at the keep-th).
//
// hyperband: brackets b = 0..K, K the number of ASHA rungs. Bracket b is ASHA whose first rung is
//   rung b (so bracket K has no rungs: its trials run to max_resource, the paper's s = 0). Rung
//   indices are global across brackets, so Rung() compares across brackets. Trial i's bracket is
//   a pure function of i: in each cycle of sum(n_b) consecutive trials, bracket b receives the
//   paper's n_b = ceil((K + 1) / (s + 1) * eta^s) trials, s = K - b (Li et al., "Hyperband",
//   Algorithm 1), interleaved by smooth weighted round-robin so brackets advance together
//   instead of one after another (trial 0 goes to bracket 0, the most aggressive). Each bracket
//   ranks only its own trials.
class Scheduler {
 public:
  virtual ~Scheduler() = default;

  // Judges one report. O(log n), n the trials recorded at the rung or step concerned.
  virtual Decision OnReport(int64_t trial, double resource, double value, bool last) = 0;
  // A report that is not the trial's last.
  Decision OnReport(int64_t trial, double resource, double value) {
    return OnReport(trial, resource, value, /*last=*/false);
  }

  // The highest rung the trial survived, -1 for none (and for median/none). The coordinator
  // places trials with a higher rung first when slots free up.
  virtual int Rung(int64_t trial) const = 0;
  // Whether a stop Decision was ever given for the trial.
  virtual bool Stopped(int64_t trial) const = 0;
  // Hyperband's bracket for the trial (pure in the trial number, unless SetBracket gave one);
  // 0 for the other algorithms.
  virtual int Bracket(int64_t trial) const = 0;
  // Hyperband: the trial's bracket is `bracket`, not its number's (a trial carried over from
  // another sweep keeps the one it ran in there). Before the trial's first report; ignored by
  // the other algorithms and for a bracket outside 0..K.
  virtual void SetBracket(int64_t /*trial*/, int /*bracket*/) {}
  // The resource the trial should run to: max_resource for asha and hyperband, +infinity for
  // median and none (they set no limit; the trial's own epochs or steps decide).
  virtual double MaxResource(int64_t trial) const = 0;
  // The rungs' resources, index = rung (empty for median and none).
  virtual const std::vector<double>& RungResources() const = 0;
};

// A fresh scheduler, or the message of Validate(config). kNone gives one that always continues.
Result<std::unique_ptr<Scheduler>> MakeScheduler(const SchedulerConfig& config);

namespace internal {
// A bijection of [0, n) chosen by `key` (a keyed Feistel network): x's place in that order.
uint64_t PermuteBelow(uint64_t x, uint64_t n, uint64_t key);
}  // namespace internal

// Rebuilds state: feeds `reports` in order to `scheduler` (normally fresh from MakeScheduler)
// and returns the Decision for each, identical to the ones given when they were first fed.
std::vector<Decision> Replay(Scheduler& scheduler, std::span<const Report> reports);

}  // namespace sweep::search
