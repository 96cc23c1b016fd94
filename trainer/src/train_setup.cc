// What a run starts from (train_setup.h): loading and splitting the data, the group's spec, the
// host memory check and the start point.
#include "train_setup.h"

#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "image_folder.h"
#include "model.h"

namespace sweep::trainer {
namespace {

// The memory this process may have, and how to say where the bound comes from: the machine's,
// its container's (cgroup), or the process's own limits (ulimit -v, ulimit -d).
struct MemoryLimit {
  double bytes = 0;
  const char* said = "this machine has";
  const char* why = "";  // after the figure: which limit
};

MemoryLimit HostMemoryLimit() {
  MemoryLimit m;
  m.bytes = static_cast<double>(::sysconf(_SC_PHYS_PAGES)) *
            static_cast<double>(::sysconf(_SC_PAGE_SIZE));
  for (const char* file :
       {"/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"}) {
    std::ifstream in(file);
    double limit = 0;
    if (in >> limit && limit > 0) m.bytes = std::min(m.bytes, limit);  // "max": no number
  }
  const std::pair<int, const char*> rlimits[] = {{RLIMIT_AS, " (ulimit -v)"},
                                                 {RLIMIT_DATA, " (ulimit -d)"}};
  for (const auto& [resource, why] : rlimits) {
    struct rlimit r {};
    if (::getrlimit(resource, &r) == 0 && r.rlim_cur != RLIM_INFINITY &&
        static_cast<double>(r.rlim_cur) < m.bytes) {
      m.bytes = static_cast<double>(r.rlim_cur);
      m.said = "this process may use";
      m.why = why;
    }
  }
  return m;
}

// The cache folder to use; empty: none. One that cannot be made (a read-only file system, a
// file in the way) costs speed, not the trial: the dataset decodes in memory, as it does beside
// a cache folder that cannot be written.
std::string CacheDir(const TrainOptions& o) {
  if (o.cache_dir.empty()) return DefaultCacheDir();
  std::error_code ec;
  std::filesystem::create_directories(o.cache_dir, ec);
  if (!std::filesystem::is_directory(o.cache_dir, ec)) return "";
  return o.cache_dir;
}

// The transform between the dataset and the model: csv channels reordered, the split's
// per-channel statistics when normalizing, and the augmentations, which need images.
Status MakeTransform(const TrainOptions& o, const Dataset& train, TensorShape input,
                     const std::vector<int32_t>& split_rows, InputTransform* t) {
  t->shape = input;
  t->chw = o.dataset.format == "csv" && input.c > 1;
  t->crop = o.augment_crop;
  t->flip = o.augment_flip;
  t->erasing = static_cast<float>(o.random_erasing);
  t->seed = o.seed;
  if (t->augments() && input.h == 1 && input.w == 1) {
    return Status::InvalidArgument(
        std::string(o.augment_crop > 0 ? "augment_crop"
                    : o.augment_flip   ? "augment_flip"
                                       : "random_erasing") +
        ": augmentation needs images, and " + train.source + " holds flat vectors" +
        (o.dataset.format == "csv" ? " (give dataset.shape = [C, H, W])" : ""));
  }
  if (o.normalize.value_or(o.model == "cnn")) {
    std::vector<float> stddev;
    ChannelStats(train, split_rows.data(), static_cast<int64_t>(split_rows.size()), input, t->chw,
                 &t->mean, &stddev);
    for (float sd : stddev) t->inv_std.push_back(1.0f / sd);
  }
  return Status::Ok();
}

}  // namespace

Result<RunData> LoadRunData(const TrainOptions& o) {
  RunData d;
  const std::string cache_dir = CacheDir(o);
  // A folder set decodes with the trial's threads unless told otherwise: a trial packed
  // beside others uses its share of the cores, for the one-off decode and for a stream's.
  DatasetSpec dataset = o.dataset;
  if (dataset.decode_threads == 0) dataset.decode_threads = std::max(1, o.threads);
  SWEEP_ASSIGN_OR_RETURN(d.train, LoadCached(dataset, /*test=*/false, cache_dir));
  const Dataset& train = *d.train;
  SWEEP_RETURN_IF_ERROR(CheckTrainingLabels(train));
  SWEEP_ASSIGN_OR_RETURN(d.input, SampleShape(train, o.dataset));
  if (!o.dataset.test_images.empty()) {
    SWEEP_ASSIGN_OR_RETURN(d.test, LoadCached(dataset, /*test=*/true, cache_dir));
    const Dataset& test = *d.test;
    const Result<TensorShape> test_shape = SampleShape(test, o.dataset);
    if (test.dim != train.dim) {
      return Status::InvalidArgument(o.dataset.test_images + ": samples have " +
                                     std::to_string(test.dim) + " features, the training set's " +
                                     std::to_string(train.dim));
    }
    // As many values, laid out otherwise (14x56 images against 28x28): the shapes say it.
    if (test_shape.ok() && !(*test_shape == d.input)) {
      auto text = [](const TensorShape& s) {
        return std::to_string(s.h) + "x" + std::to_string(s.w) +
               (s.c > 1 ? "x" + std::to_string(s.c) : "");
      };
      return Status::InvalidArgument(o.dataset.test_images + ": samples of " + text(*test_shape) +
                                     ", the training set's " + text(d.input));
    }
    if (test.class_names != train.class_names) {
      return Status::InvalidArgument(o.dataset.test_images +
                                     ": its class folders are not the training folder's (" +
                                     train.source + "); labels are the sorted class names");
    }
    if (test.num_classes > train.num_classes) {
      return Status::InvalidArgument(
          test.source + ": has label " + std::to_string(test.num_classes - 1) +
          ", but the training set has only " + std::to_string(train.num_classes) + " classes");
    }
  }

  SWEEP_RETURN_IF_ERROR(CheckTrainingSetSize(o, train.n));
  Split split = MakeSplit(train.n, o.validation_fraction);
  SWEEP_RETURN_IF_ERROR(MakeTransform(o, train, d.input, split.train, &d.transform));
  d.rows = std::move(split.train);
  d.val = std::move(split.val);
  // The split's order is a fixed permutation, so this subset is the same for every trial.
  if (o.max_train_samples > 0 && o.max_train_samples < static_cast<int64_t>(d.rows.size())) {
    d.rows.resize(static_cast<size_t>(o.max_train_samples));
  }
  // The last partial step of each epoch is dropped: every step then has the same shape and the
  // same gradient scale; the per-epoch shuffle means no sample is left out for long.
  d.steps_per_epoch = static_cast<int64_t>(d.rows.size()) / (int64_t{o.batch_size} * o.accum_steps);
  return d;
}

Status CheckTrainingSetSize(const TrainOptions& o, int64_t samples) {
  const int64_t n_val = ValidationCount(samples, o.validation_fraction);
  // Asked for a validation set and given none (0.01 of 60 samples rounds to 0): every val_
  // metric would be missing, and a sweep ranking by one would rank nothing.
  if (o.validation_fraction > 0 && n_val == 0) {
    std::ostringstream msg;
    msg << "validation_fraction = " << o.validation_fraction << " of " << samples
        << " training samples is less than one sample; give at least 1/" << samples
        << " of them, or a larger training set";
    return Status::InvalidArgument(msg.str());
  }
  int64_t n_train = samples - n_val;
  if (o.max_train_samples > 0) n_train = std::min(n_train, o.max_train_samples);
  const int K = o.accum_steps;
  const int64_t step_samples = int64_t{o.batch_size} * K;
  if (n_train < step_samples) {
    return Status::InvalidArgument(
        "training set has " + std::to_string(n_train) + (n_train == 1 ? " sample" : " samples") +
        (n_val > 0 ? " after the validation split" : "") + ", fewer than " +
        (K == 1 ? "batch_size " : "batch_size * accum_steps = ") + std::to_string(step_samples));
  }
  return Status::Ok();
}

Result<std::optional<int64_t>> TrainingSamples(const DatasetSpec& spec) {
  if (spec.train_images.empty()) return std::optional<int64_t>();
  // Each file a sample, unless on_bad_file = "skip" leaves some out (a load fails otherwise).
  if (spec.format == "folder" && spec.on_bad_file == "error") {
    SWEEP_ASSIGN_OR_RETURN(const int64_t n, CountFolderSamples(spec.train_images));
    return std::optional<int64_t>(n);
  }
  if (spec.format != "idx") return std::optional<int64_t>();
  SWEEP_ASSIGN_OR_RETURN(const IdxPair train,
                         ReadIdxPairHeaders(spec.train_images, spec.train_labels));
  if (!spec.test_images.empty()) {
    SWEEP_ASSIGN_OR_RETURN(const IdxPair test,
                           ReadIdxPairHeaders(spec.test_images, spec.test_labels));
    if (test.shape != train.shape) {
      return Status::InvalidArgument(spec.test_images + ": images of " + test.shape +
                                     ", the training set's " + train.shape);
    }
  }
  return std::optional<int64_t>(train.count);
}

Result<GroupSpec> GroupSpecOf(const TrainOptions& o, const RunData& d) {
  GroupSpec spec;
  SWEEP_ASSIGN_OR_RETURN(spec.model, BuildModel(o, d.input, d.train->num_classes));
  spec.label_smoothing = static_cast<float>(o.label_smoothing);
  spec.replicas = o.replicas;
  spec.max_rows = (o.batch_size + o.replicas - 1) / o.replicas;  // the largest shard
  spec.threads = o.threads;
  spec.optimizer.kind =
      o.optimizer == "adamw" ? OptimizerSpec::Kind::kAdamw : OptimizerSpec::Kind::kSgd;
  spec.optimizer.momentum = static_cast<float>(o.momentum);
  spec.optimizer.nesterov = o.nesterov;
  spec.optimizer.weight_decay = static_cast<float>(o.weight_decay);
  spec.optimizer.beta1 = static_cast<float>(o.beta1);
  spec.optimizer.beta2 = static_cast<float>(o.beta2);
  spec.optimizer.eps = static_cast<float>(o.eps);
  ParsePrecision(o.precision, &spec.precision);
  spec.devices = o.devices;
  spec.cuda_graphs = o.cuda_graphs;
  spec.cudnn_autotune = o.cudnn_autotune;
  return spec;
}

Status CheckImageSizeFits(const TrainOptions& o) {
  const std::vector<int>& size = o.dataset.image_size;
  if (o.dataset.format != "folder" || size.size() != 2) return Status::Ok();
  const int batches = (o.dataset.prefetch > 0 ? o.dataset.prefetch : 2) + 1;
  const double batch = static_cast<double>(o.batch_size) * size[0] * size[1] * sizeof(float);
  const MemoryLimit have = HostMemoryLimit();
  if (have.bytes <= 0 || batch * batches <= have.bytes) return Status::Ok();
  char msg[400];
  std::snprintf(msg, sizeof msg,
                "dataset.image_size = [%d, %d]: %d batches of %d images that size (those gathered "
                "ahead and the one in use) take at least %.1f GiB as floats, %s %.1f GiB%s; make "
                "image_size or batch_size smaller",
                size[0], size[1], batches, o.batch_size, batch * batches / 1073741824.0, have.said,
                have.bytes / 1073741824.0, have.why);
  return Status::InvalidArgument(msg);
}

Status CheckHostMemory(const GroupSpec& spec, bool on_cpu) {
  const ModelSpec& m = spec.model;
  const double params = static_cast<double>(m.num_params);
  const int states = spec.optimizer.kind == OptimizerSpec::Kind::kAdamw ? 2
                     : spec.optimizer.momentum > 0                      ? 1
                                                                        : 0;
  double floats = 2 * params;
  double activations = 0;
  if (on_cpu) {
    // Each layer's output and its gradient, for a micro-batch shard on every replica.
    activations = 2.0 * spec.replicas * spec.max_rows * static_cast<double>(m.ActivationFloats());
    floats += params * (spec.replicas + states) + activations;
  }
  const double need = floats * sizeof(float);
  const MemoryLimit have = HostMemoryLimit();
  if (have.bytes > 0 && need > have.bytes) {
    const bool cnn = std::any_of(m.layers.begin(), m.layers.end(),
                                 [](const Layer& l) { return l.kind == LayerKind::kConv; });
    // Name what dominates: the activations grow with the batch, the weights with the widths.
    const char* smaller = activations > params * (spec.replicas + states + 2)
                              ? (cnn ? "batch_size or channels" : "batch_size or hidden")
                              : (cnn ? "channels or hidden" : "hidden or batch_size");
    char msg[400];
    std::snprintf(msg, sizeof msg,
                  "the model does not fit in memory: %.0f parameters need at least %.1f GiB "
                  "(weights, gradients, optimizer state, activations of %d samples per "
                  "replica), %s %.1f GiB%s; make %s smaller",
                  params, need / 1073741824.0, spec.max_rows, have.said, have.bytes / 1073741824.0,
                  have.why, smaller);
    return Status::InvalidArgument(msg);
  }
  return Status::Ok();
}

Result<StartPoint> ReadStartPoint(const TrainOptions& o, const std::string& config,
                                  const ModelSpec& model, const RunData& d) {
  StartPoint start;
  if (o.checkpoint_path.empty()) return start;
  RemoveAbandonedCheckpointWrites(o.checkpoint_path);
  Result<Checkpoint> ckpt = ReadCheckpoint(o.checkpoint_path);
  if (!ckpt.ok()) {
    if (ckpt.status().code() != Status::Code::kNotFound) return ckpt.status();
    // None yet: find out now, not after the epochs before the first one, that one can be
    // written there.
    SWEEP_RETURN_IF_ERROR(ProbeCheckpointPath(o.checkpoint_path));
    return start;
  }
  SWEEP_RETURN_IF_ERROR(CheckSameConfig(o.checkpoint_path, *ckpt, config));
  SWEEP_RETURN_IF_ERROR(CheckSameModel(o.checkpoint_path, *ckpt, model));
  // Left by a longer run (its config differs only in epochs): going on from it would report a
  // model trained past what was asked as this run's.
  const int reached = ckpt->epoch + (ckpt->partial ? 1 : 0);
  const std::string at = (ckpt->partial ? "within epoch " : "at epoch ") + std::to_string(reached);
  if (reached > o.epochs) {
    return Status::InvalidArgument(o.checkpoint_path + ": checkpoint is " + at +
                                   ", past epochs = " + std::to_string(o.epochs) +
                                   " (a longer run's); delete it, or set epochs to at least " +
                                   std::to_string(reached));
  }
  // The validation split is drawn over the training file's samples: another count (files
  // added to a folder) would score as validation what the checkpoint's weights trained on.
  const Dataset& train = *d.train;
  if (!ckpt->partial && ckpt->set_samples > 0 && ckpt->set_samples != train.n) {
    return Status::InvalidArgument(o.checkpoint_path + ": checkpoint is " + at +
                                   " of a training set of " + std::to_string(ckpt->set_samples) +
                                   " samples, and " + train.source + " has " +
                                   std::to_string(train.n) +
                                   "; has it changed? delete the checkpoint to train from the "
                                   "start");
  }
  if (ckpt->partial) {
    // Its steps are the epoch's first ones only in the epoch's order, which depends on the
    // training set's size; and a run told to stop before that epoch cannot go back to it.
    const PartialEpoch& p = *ckpt->partial;
    if (p.set_samples != train.n || p.steps_per_epoch != d.steps_per_epoch) {
      return Status::InvalidArgument(
          o.checkpoint_path + ": checkpoint is " + at + " of a training set of " +
          std::to_string(p.set_samples) + " samples (" + std::to_string(p.steps_per_epoch) +
          " steps an epoch), and " + train.source + " has " + std::to_string(train.n) + " (" +
          std::to_string(d.steps_per_epoch) +
          "); has it changed? delete the checkpoint to train from the start");
    }
    if (o.stop_after_epoch > 0 && reached > o.stop_after_epoch) {
      return Status::InvalidArgument(o.checkpoint_path + ": checkpoint is " + at +
                                     ", past the epoch this run is to stop after (" +
                                     std::to_string(o.stop_after_epoch) +
                                     "); delete it to train from the start");
    }
    start.partial = p;
  }
  start.state = std::move(ckpt->state);
  start.epochs_done = ckpt->epoch;
  start.step = ckpt->step - start.partial.steps;
  start.report = ckpt->report;
  start.resumed = true;
  return start;
}

}  // namespace sweep::trainer
