// The embedded trainer: trains one model on one dataset with one set of hyperparameters and
// reports each epoch. It knows nothing of sweeps: callers fill TrainOptions (from JSON
// hyperparameters via ApplyOption) and receive EpochReports through a callback.
// Train() is synchronous and uses options.threads threads; separate calls may run concurrently.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/status.h"

namespace sweep::trainer {

struct DatasetSpec {
  std::string format = "idx";  // "idx" (MNIST layout, gzipped or not) or "csv"
  // idx: image and label files. csv: train_images / test_images hold the CSV files (one row per
  // sample, the label in `label_column`, features in every other column; a header row is
  // detected and skipped); the *_labels fields stay empty.
  std::string train_images, train_labels, test_images, test_labels;
  int label_column = 0;  // csv only; negative counts from the end (-1: the last column)
};

struct TrainOptions {
  DatasetSpec dataset;
  std::string model = "mlp";
  std::vector<int> hidden = {256, 128};  // hidden layer widths
  std::string activation = "relu";       // relu | tanh | gelu
  std::string optimizer = "sgd";         // sgd
  double lr = 0.05;
  double momentum = 0.9;
  int batch_size = 128;
  int epochs = 10;
  double validation_fraction = 0.1;  // held out of the training file, deterministic split
  int64_t max_train_samples = 0;     // 0: all; else the first N of the shuffled training set
  std::string precision = "fp32";    // fp32 on CPU
  uint64_t seed = 0;
  int threads = 1;  // CPU threads for this trial
};

// Sets one option from a JSON value: `key` is a TrainOptions field name ("lr", "hidden",
// "batch_size", "dataset", ...). InvalidArgument names the key and what was expected.
Status ApplyOption(TrainOptions* options, std::string_view key, const nlohmann::json& value);
// Every key ApplyOption accepts.
const std::vector<std::string>& OptionKeys();
// Metrics Train() reports: train_loss, val_loss, val_acc, samples_per_s, data_wait_s, epoch_s,
// and test_acc (at the end, when a test set is given).
const std::vector<std::string>& MetricNames();
// Checks values that need no data: positive sizes, known names, lr > 0, fraction in [0, 1).
Status Validate(const TrainOptions& options);

struct EpochReport {
  int epoch = 0;             // 1-based
  int64_t step = 0;          // optimizer steps so far
  double train_loss = 0;     // mean over the epoch
  double val_loss = 0;       // NaN when validation_fraction == 0
  double val_acc = 0;        // NaN when validation_fraction == 0
  double samples_per_s = 0;  // training samples per second of this epoch's training steps
  double data_wait_s = 0;    // time the compute waited for batches this epoch
  double epoch_s = 0;        // wall time of the epoch
};

struct TrainResult {
  int epochs_done = 0;
  bool stopped = false;            // the callback asked to stop
  std::optional<double> test_acc;  // when a test set is given and training was not stopped
};

// Return false to stop training after this epoch.
using EpochCallback = std::function<bool(const EpochReport&)>;

// Trains and reports. Errors: a missing or malformed dataset (names the file), a NaN or
// infinite loss ("diverged at epoch E, step S"), bad options.
Result<TrainResult> Train(const TrainOptions& options, const EpochCallback& on_epoch);

}  // namespace sweep::trainer
