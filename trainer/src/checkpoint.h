// Checkpoints: weights, optimizer state, RNG state, epoch and step in one file, written
// atomically (temp file, fsync, rename) with a CRC-32, so readers see a whole file and detect a
// damaged one. The trainer's random streams are counter-based functions of (seed, epoch, step),
// so the seed with the epoch and step is the whole RNG state. Pure functions apart from the file
// system; safe from several threads on different files.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "backend.h"
#include "base/status.h"
#include "trainer/trainer.h"

namespace sweep::trainer {

// A run stopped within an epoch (TrainOptions::stop_requested): how far into the epoch after
// Checkpoint::epoch its state is, and what that epoch's report has summed so far, so that a
// resume goes on as if never stopped. The random streams are functions of (seed, epoch, step),
// so the steps done say where each of them is.
struct PartialEpoch {
  int64_t steps = 0;            // of the epoch's optimizer steps, done (1 ..)
  int64_t steps_per_epoch = 0;  // the run's
  // The training file's samples: the epoch's order depends on them, so a set of another size
  // (files added to a folder, or one left out) does not go on.
  int64_t set_samples = 0;
  double loss_sum = 0;  // the losses of those steps, summed in step order
  int64_t skipped_steps = 0;
  double train_s = 0;  // time in those steps
  double data_wait_s = 0;
  double allreduce_s = 0;
  double epoch_s = 0;  // wall time of the epoch so far
};

struct Checkpoint {
  std::string config;  // TrainingConfig() of the options that wrote it
  int epoch = 0;       // epochs completed
  int64_t step = 0;    // optimizer steps completed (partial ones too)
  uint64_t rng_seed = 0;
  int replicas = 1;  // of the writer (a resume may use another count: rounding differs)
  // The layer description (ModelSpec::ToJson) of the model it holds; absent in files from
  // before models were layers, which hold MLPs.
  std::optional<nlohmann::json> model;
  ModelState state;  // with batch norm's running statistics
  // The report of its last epoch (absent in files from before it was kept), so that a resume
  // can report it again to a caller that never kept it (see TrainOptions::report_resumed_epoch).
  std::optional<EpochReport> report;
  std::optional<PartialEpoch> partial;  // stopped within epoch `epoch + 1`
  // The training file's samples (0 in files from before it was kept): the validation split and
  // each epoch's order depend on them, so a set of another size does not go on.
  int64_t set_samples = 0;
};

// Writes atomically. Unavailable, naming the file and the system's reason, when the machine
// refuses the write (disk full, quota, read-only file system, file-size limit).
Status WriteCheckpoint(const std::string& path, const Checkpoint& ckpt);
// Whether a checkpoint can be written at `path` (its folder made, a small file written there
// and removed), so that a trial learns it at its start rather than when it first checkpoints,
// possibly at its end; the same statuses as WriteCheckpoint.
Status ProbeCheckpointPath(const std::string& path);
// Deletes what writes of this checkpoint that were killed midway left beside it (a process
// killed while it wrote leaves its temporary file, as large as the checkpoint).
void RemoveAbandonedCheckpointWrites(const std::string& path);
// NotFound when there is no file; Unavailable (naming the file) when the system refuses to open
// or read it; Corruption (naming the file) for a bad checksum, a cut-short or malformed file.
Result<Checkpoint> ReadCheckpoint(const std::string& path);
// InvalidArgument naming the file when ckpt holds another model than `model`: other layers, or
// an MLP of an older file (no description) for a model that is not that MLP.
Status CheckSameModel(const std::string& path, const Checkpoint& ckpt, const ModelSpec& model);
// InvalidArgument naming the file and the differing options when ckpt was written by another
// training configuration than `config`.
Status CheckSameConfig(const std::string& path, const Checkpoint& ckpt, const std::string& config);

}  // namespace sweep::trainer
