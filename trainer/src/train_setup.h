// What a training run starts from: its data (the sets, the split, the transform and the steps an
// epoch), its replica group's spec, a check that the model fits this host's memory, and its start
// point (fresh, or a checkpoint's). Owned by the trainer; Train() calls them in that order. Pure
// functions apart from the files they read (and, for a fresh start, a probe of the checkpoint's
// folder).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "augment.h"
#include "backend.h"
#include "base/status.h"
#include "checkpoint.h"
#include "data.h"
#include "trainer/trainer.h"

namespace sweep::trainer {

// The data a run trains on.
struct RunData {
  DatasetPtr train;
  DatasetPtr test;  // null without a test set
  TensorShape input;
  std::vector<int32_t> rows;  // the training rows: the split's, up to max_train_samples
  std::vector<int32_t> val;   // the validation rows
  InputTransform transform;
  // Whole steps of batch_size * accum_steps rows; the rest of the rows is left out each epoch.
  int64_t steps_per_epoch = 0;
};

// Loads the sets through the caches (the test set up front too: a bad test file should fail
// before hours of training), checks them against each other and the options, and splits them.
// Errors name the file or the key at fault.
Result<RunData> LoadRunData(const TrainOptions& o);

// The replica group's spec for `o`: its model built for the data's shape and classes.
Result<GroupSpec> GroupSpecOf(const TrainOptions& o, const RunData& data);

// A model too large for this machine fails its trial here, with its size, rather than at an
// allocation the kernel answers by killing the process (and perhaps others). The estimate is a
// lower bound: in host memory the weights, the state kept for checkpoints and, on the CPU, each
// replica's gradients, the optimizer's state and the activations of a micro-batch.
Status CheckHostMemory(const GroupSpec& spec, bool on_cpu);

// A folder set resized to dataset.image_size: its batches alone (those gathered ahead and the
// one in use, as floats, one channel at least) must fit, checked before any image is decoded at
// that size; the message names image_size.
Status CheckImageSizeFits(const TrainOptions& o);

// Where a run starts.
struct StartPoint {
  ModelState state;                   // the checkpoint's; empty: fresh weights
  int epochs_done = 0;                // whole epochs in the state
  int64_t step = 0;                   // optimizer steps of those epochs
  PartialEpoch partial;               // and of the next one, stopped part-way (steps = 0: none)
  std::optional<EpochReport> report;  // the last whole epoch's, as it was reported
  bool resumed = false;               // from a checkpoint
};

// Fresh without o.checkpoint_path, or when it holds no file yet (after checking that one can be
// written there). Otherwise the checkpoint's, refused (naming the file) when another training
// configuration (`config`, TrainingConfig(o)) or model wrote it, when it is past o.epochs, or when
// its partial epoch cannot go on here (another training set size; past stop_after_epoch).
Result<StartPoint> ReadStartPoint(const TrainOptions& o, const std::string& config,
                                  const ModelSpec& model, const RunData& data);

}  // namespace sweep::trainer
