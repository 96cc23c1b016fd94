// Train(): loads (through the cache), splits, trains one CPU replica with SGD+momentum and
// reports each epoch. Owned by the trainer. Each call owns its model, buffers and prefetch
// thread, so calls may run concurrently; the one process-wide thing it sets is OpenBLAS's
// thread count.
#include "trainer/trainer.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "batcher.h"
#include "cpu/mlp.h"
#include "cpu/ops.h"
#include "data.h"
#include "model.h"
#include "rng.h"

namespace sweep::trainer {
namespace {

using Clock = std::chrono::steady_clock;

constexpr uint64_t kShuffleStream = 0x5F1Eull;  // keeps shuffle draws apart from init draws

double Seconds(Clock::time_point since) {
  return std::chrono::duration<double>(Clock::now() - since).count();
}

std::string LossText(double loss) {
  if (std::isnan(loss)) return "nan";
  return loss > 0 ? "inf" : "-inf";
}

// Mean loss and accuracy over rows[0..n) of `data`, in chunks of the model's batch size; the last
// chunk may be short, so every row counts. NaN for both when n == 0.
void Evaluate(cpu::Mlp* model, const Dataset& data, const int32_t* rows, int64_t n, int batch,
              std::vector<float>* x, std::vector<int32_t>* y, double* loss, double* acc) {
  if (n == 0) {
    *loss = *acc = std::numeric_limits<double>::quiet_NaN();
    return;
  }
  double loss_sum = 0;
  int64_t correct = 0;
  for (int64_t at = 0; at < n; at += batch) {
    const int b = static_cast<int>(std::min<int64_t>(batch, n - at));
    data.Gather(rows + at, b, x->data(), y->data());
    model->Evaluate(x->data(), y->data(), b, &loss_sum, &correct);
  }
  *loss = loss_sum / static_cast<double>(n);
  *acc = static_cast<double>(correct) / static_cast<double>(n);
}

Result<TrainResult> TrainImpl(const TrainOptions& o, const EpochCallback& on_epoch) {
  SWEEP_RETURN_IF_ERROR(Validate(o));
  Activation act = Activation::kRelu;
  ParseActivation(o.activation, &act);

  // The test set loads up front too: a bad test file should fail before hours of training.
  SWEEP_ASSIGN_OR_RETURN(DatasetPtr train, LoadCached(o.dataset, /*test=*/false));
  DatasetPtr test;
  if (!o.dataset.test_images.empty()) {
    SWEEP_ASSIGN_OR_RETURN(test, LoadCached(o.dataset, /*test=*/true));
    if (test->dim != train->dim) {
      return Status::InvalidArgument(o.dataset.test_images + ": samples have " +
                                     std::to_string(test->dim) + " features, the training set's " +
                                     std::to_string(train->dim));
    }
    if (test->num_classes > train->num_classes) {
      return Status::InvalidArgument(
          test->source + ": has label " + std::to_string(test->num_classes - 1) +
          ", but the training set has only " + std::to_string(train->num_classes) + " classes");
    }
  }

  Split split = MakeSplit(train->n, o.validation_fraction);
  std::vector<int32_t>& rows = split.train;
  // The split's order is a fixed permutation, so this subset is the same for every trial.
  if (o.max_train_samples > 0 && o.max_train_samples < static_cast<int64_t>(rows.size())) {
    rows.resize(static_cast<size_t>(o.max_train_samples));
  }
  const int B = o.batch_size;
  const int64_t n_train = static_cast<int64_t>(rows.size());
  if (n_train < B) {
    return Status::InvalidArgument("training set has " + std::to_string(n_train) +
                                   " samples after the validation split, fewer than batch_size " +
                                   std::to_string(B));
  }
  // The last partial batch of each epoch is dropped: every step then has the same shape (what a
  // later all-reduce and CUDA graphs want) and the same gradient scale; the per-epoch shuffle
  // means no sample is left out for long.
  const int64_t steps_per_epoch = n_train / B;

  cpu::set_blas_threads(o.threads);

  cpu::Mlp model(MlpShape::Make(static_cast<int>(train->dim), o.hidden, train->num_classes), act,
                 B);
  InitParams(model.shape(), act, o.seed, model.params());

  // Declared before the batcher, so it outlives the producer thread reading it.
  std::vector<int32_t> order(rows.size());
  Batcher batcher(train, B);
  std::vector<float> eval_x(static_cast<size_t>(B) * static_cast<size_t>(train->dim));
  std::vector<int32_t> eval_y(static_cast<size_t>(B));
  const float lr = static_cast<float>(o.lr);
  const float momentum = static_cast<float>(o.momentum);
  const float dloss_scale = 1.0f / static_cast<float>(B);

  TrainResult result;
  int64_t step = 0;
  for (int epoch = 1; epoch <= o.epochs; ++epoch) {
    const Clock::time_point epoch_start = Clock::now();
    order = rows;
    Rng(MixSeed(o.seed, kShuffleStream, static_cast<uint64_t>(epoch)))
        .Shuffle(order.data(), n_train);
    batcher.StartEpoch(order.data(), steps_per_epoch);

    EpochReport report;
    report.epoch = epoch;
    double loss_sum = 0;
    const Clock::time_point train_start = Clock::now();
    for (int64_t s = 0; s < steps_per_epoch; ++s) {
      const Batcher::Batch batch = batcher.Next(&report.data_wait_s);
      const double loss = model.ForwardBackward(batch.x, batch.y, B, dloss_scale) / B;
      ++step;
      if (!std::isfinite(loss)) {
        return Status::InvalidArgument("diverged at epoch " + std::to_string(epoch) + ", step " +
                                       std::to_string(step) + " (loss " + LossText(loss) + ")");
      }
      loss_sum += loss;
      model.SgdStep(lr, momentum, /*weight_decay=*/0.0f);
    }
    const double train_s = Seconds(train_start);
    report.step = step;
    report.train_loss = loss_sum / static_cast<double>(steps_per_epoch);
    report.samples_per_s = static_cast<double>(steps_per_epoch * B) / std::max(train_s, 1e-9);
    Evaluate(&model, *train, split.val.data(), static_cast<int64_t>(split.val.size()), B, &eval_x,
             &eval_y, &report.val_loss, &report.val_acc);
    // A last step that blows up shows only here, in weights that no longer give a number.
    if (!split.val.empty() && !std::isfinite(report.val_loss)) {
      return Status::InvalidArgument("diverged at epoch " + std::to_string(epoch) + ", step " +
                                     std::to_string(step) + " (validation loss " +
                                     LossText(report.val_loss) + ")");
    }
    report.epoch_s = Seconds(epoch_start);
    result.epochs_done = epoch;
    if (on_epoch && !on_epoch(report)) {
      result.stopped = true;
      break;
    }
  }

  if (test != nullptr && !result.stopped) {
    std::vector<int32_t> all(static_cast<size_t>(test->n));
    for (int64_t i = 0; i < test->n; ++i) all[static_cast<size_t>(i)] = static_cast<int32_t>(i);
    double test_loss = 0, test_acc = 0;
    Evaluate(&model, *test, all.data(), test->n, B, &eval_x, &eval_y, &test_loss, &test_acc);
    result.test_acc = test_acc;
  }
  return result;
}

}  // namespace

Result<TrainResult> Train(const TrainOptions& options, const EpochCallback& on_epoch) {
  try {
    return TrainImpl(options, on_epoch);
  } catch (const std::exception& e) {  // bad_alloc, std::system_error from a thread, a callback
    return Status::Internal(std::string("trainer: ") + e.what());
  }
}

}  // namespace sweep::trainer
