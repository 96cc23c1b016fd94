// What Train() does, with the final model state handed back: for tests that compare weights
// bit for bit (resume, replicas, accumulation) and for benchmarks. Private to the trainer and
// its tests; same threading as Train().
#pragma once

#include "backend.h"
#include "trainer/trainer.h"

namespace sweep::trainer {

// Train(), and on success *final_state (when not null) holds the weights and optimizer state
// training ended with (also when stopped by the callback), and *comm (when not null) rank 0's
// all-reduce timings summed over the run's epochs.
Result<TrainResult> TrainWithState(const TrainOptions& options, const EpochCallback& on_epoch,
                                   ModelState* final_state, CommStats* comm = nullptr);

}  // namespace sweep::trainer
