// TrainOptions from JSON (ApplyOption), the key and metric lists, and Validate(). Owned by the
// trainer. Pure functions over the caller's TrainOptions, except that a `dataset` string naming
// a directory is resolved against the file system. nlohmann exceptions stop here.
#include "trainer/trainer.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "augment.h"
#include "model.h"

namespace sweep::trainer {
namespace {

using json = nlohmann::json;

// What the user gave, shortened so one wrong 10 MB value doesn't flood a log.
std::string Shown(const json& value) {
  // JSON has no infinity or NaN (dump() writes null): name them.
  if (value.is_number_float() && !std::isfinite(value.get<double>())) {
    const double v = value.get<double>();
    return std::isnan(v) ? "nan" : (v > 0 ? "inf" : "-inf");
  }
  std::string s = value.dump();
  if (s.size() > 80) s = s.substr(0, 77) + "...";
  return s;
}

// %g, not std::to_string's fixed six decimals: "got 0.0001", "got 1e-09".
// The shortest %g form that reads back as v (0.99999999, not 1).
std::string Num(double v) {
  char buf[32];
  for (int digits = 6; digits <= 17; ++digits) {
    std::snprintf(buf, sizeof buf, "%.*g", digits, v);
    if (std::strtod(buf, nullptr) == v) break;
  }
  return buf;
}

Status TypeError(std::string_view key, std::string_view expected, const json& value) {
  return Status::InvalidArgument(std::string(key) + ": expected " + std::string(expected) +
                                 ", got " + Shown(value));
}

// An integer in [lo, hi]; a float with an integral value (128.0, what a numeric search space may
// hand over) counts as one.
bool GetInt(const json& v, int64_t lo, int64_t hi, int64_t* out) {
  if (v.is_number_unsigned()) {
    const uint64_t u = v.get<uint64_t>();
    if (u > static_cast<uint64_t>(hi)) return false;
    *out = static_cast<int64_t>(u);
  } else if (v.is_number_integer()) {
    *out = v.get<int64_t>();
  } else if (v.is_number_float()) {
    const double d = v.get<double>();
    if (!(d == std::floor(d)) || d < -9.2e18 || d > 9.2e18) return false;
    *out = static_cast<int64_t>(d);
  } else {
    return false;
  }
  return *out >= lo && *out <= hi;
}

// v as a list of integers in [lo, hi], exactly `size` of them where size > 0.
bool GetIntList(const json& v, size_t size, int64_t lo, int64_t hi, std::vector<int>* out) {
  if (!v.is_array() || (size > 0 && v.size() != size)) return false;
  std::vector<int> list;
  for (const json& item : v) {
    int64_t n = 0;
    if (!GetInt(item, lo, hi, &n)) return false;
    list.push_back(static_cast<int>(n));
  }
  *out = std::move(list);
  return true;
}

Status SetInt(std::string_view key, const json& v, int64_t lo, int64_t hi, std::string_view what,
              int64_t* out) {
  if (!GetInt(v, lo, hi, out)) return TypeError(key, what, v);
  return Status::Ok();
}

Status SetDouble(std::string_view key, const json& v, double* out) {
  if (!v.is_number()) return TypeError(key, "a number", v);
  if (!std::isfinite(v.get<double>())) return TypeError(key, "a finite number", v);
  *out = v.get<double>();
  return Status::Ok();
}

Status SetBool(std::string_view key, const json& v, bool* out) {
  if (!v.is_boolean()) return TypeError(key, "true or false", v);
  *out = v.get<bool>();
  return Status::Ok();
}

Status SetString(std::string_view key, const json& v, std::string* out) {
  if (!v.is_string()) return TypeError(key, "a string", v);
  *out = v.get<std::string>();
  return Status::Ok();
}

// "<dir>/<name>.gz" when it exists, else "<dir>/<name>" when that does, else "".
std::string FindIdx(const std::filesystem::path& dir, const std::string& name) {
  std::error_code ec;
  for (const std::string& candidate : {name + ".gz", name}) {
    const std::filesystem::path p = dir / candidate;
    if (std::filesystem::is_regular_file(p, ec)) return p.string();
  }
  return "";
}

// A directory in MNIST's layout: train-images-idx3-ubyte[.gz] and friends. The test pair is
// optional; the training pair is not.
Status DatasetFromDirectory(const std::string& dir, DatasetSpec* spec) {
  std::error_code ec;
  if (!std::filesystem::is_directory(dir, ec)) {
    return Status::InvalidArgument("dataset: \"" + dir + "\" is not a directory");
  }
  DatasetSpec s;
  s.format = "idx";
  s.train_images = FindIdx(dir, "train-images-idx3-ubyte");
  s.train_labels = FindIdx(dir, "train-labels-idx1-ubyte");
  s.test_images = FindIdx(dir, "t10k-images-idx3-ubyte");
  s.test_labels = FindIdx(dir, "t10k-labels-idx1-ubyte");
  for (const auto& [path, name] : {std::pair{s.train_images, "train-images-idx3-ubyte"},
                                   std::pair{s.train_labels, "train-labels-idx1-ubyte"}}) {
    if (path.empty()) {
      return Status::InvalidArgument("dataset: directory \"" + dir + "\" has no " + name + " (or " +
                                     name + ".gz)");
    }
  }
  if (s.test_images.empty() != s.test_labels.empty()) {
    return Status::InvalidArgument("dataset: directory \"" + dir +
                                   "\" has only one of the t10k image and label files");
  }
  *spec = std::move(s);
  return Status::Ok();
}

// The dataset keys that belong to one format (the rest are the files' of idx and csv).
bool FolderOnlyKey(const std::string& k) {
  return k == "train" || k == "test" || k == "image_size" || k == "on_bad_file" ||
         k == "decode_threads";
}
bool FileOnlyKey(const std::string& k) {
  return k == "train_images" || k == "train_labels" || k == "test_images" || k == "test_labels" ||
         k == "label_column" || k == "header" || k == "shape";
}

// The formats a dataset table may name; each one's keys are checked by it.
bool KnownFormat(const std::string& f) { return f == "idx" || f == "csv" || f == "folder"; }

Status FormatError(const std::string& format) {
  return Status::InvalidArgument("dataset.format: expected \"idx\", \"csv\" or \"folder\", got \"" +
                                 format + "\"");
}

Status DatasetFromObject(const json& v, DatasetSpec* spec) {
  DatasetSpec s;
  if (v.contains("format") && v["format"].is_string()) s.format = v["format"].get<std::string>();
  // A misspelt format first: the keys of the one meant would otherwise be called misplaced.
  if (!KnownFormat(s.format)) return FormatError(s.format);
  const bool folder = s.format == "folder";
  for (const auto& [k, item] : v.items()) {
    const std::string key = "dataset." + k;
    if (folder && FileOnlyKey(k)) {
      return Status::InvalidArgument(key +
                                     ": not a key of format = \"folder\" (it takes train, test, "
                                     "image_size, on_bad_file, decode_threads, cache, prefetch)");
    }
    if (!folder && FolderOnlyKey(k)) {
      return Status::InvalidArgument(key + ": only for format = \"folder\"");
    }
    if (k == "format") {
      SWEEP_RETURN_IF_ERROR(SetString(key, item, &s.format));
    } else if (k == "train") {
      SWEEP_RETURN_IF_ERROR(SetString(key, item, &s.train_images));
    } else if (k == "test") {
      SWEEP_RETURN_IF_ERROR(SetString(key, item, &s.test_images));
    } else if (k == "image_size") {
      if (!GetIntList(item, 2, 1, 1 << 15, &s.image_size)) {
        return TypeError(key, "[height, width], integers from 1 to 32768", item);
      }
    } else if (k == "on_bad_file") {
      SWEEP_RETURN_IF_ERROR(SetString(key, item, &s.on_bad_file));
    } else if (k == "decode_threads") {
      int64_t n = 0;
      SWEEP_RETURN_IF_ERROR(SetInt(
          key, item, 0, 1024, "a number of threads in [0, 1024] (0: the trial's threads)", &n));
      s.decode_threads = static_cast<int>(n);
    } else if (k == "cache") {
      SWEEP_RETURN_IF_ERROR(SetString(key, item, &s.cache));
    } else if (k == "prefetch") {
      int64_t n = 0;
      SWEEP_RETURN_IF_ERROR(
          SetInt(key, item, 0, 64, "a number of batches in [0, 64] (0: the default, 2)", &n));
      s.prefetch = static_cast<int>(n);
    } else if (k == "train_images") {
      SWEEP_RETURN_IF_ERROR(SetString(key, item, &s.train_images));
    } else if (k == "train_labels") {
      SWEEP_RETURN_IF_ERROR(SetString(key, item, &s.train_labels));
    } else if (k == "test_images") {
      SWEEP_RETURN_IF_ERROR(SetString(key, item, &s.test_images));
    } else if (k == "test_labels") {
      SWEEP_RETURN_IF_ERROR(SetString(key, item, &s.test_labels));
    } else if (k == "label_column") {
      int64_t col = 0;
      SWEEP_RETURN_IF_ERROR(SetInt(key, item, -100000, 100000, "an integer column index", &col));
      s.label_column = static_cast<int>(col);
    } else if (k == "shape") {
      if (!GetIntList(item, 3, 1, 1 << 20, &s.shape)) {
        return TypeError(key, "[channels, height, width], positive integers", item);
      }
    } else if (k == "header") {
      if (item.is_string() && item.get<std::string>() == "auto") {
        s.header.reset();
      } else if (item.is_boolean()) {
        s.header = item.get<bool>();
      } else {
        return Status::InvalidArgument(key +
                                       ": expected true, false or \"auto\" (a first row "
                                       "whose label is not a number is a header), got " +
                                       item.dump());
      }
    } else {
      return Status::InvalidArgument(
          "dataset: unknown key \"" + k +
          "\" (expected format, train_images, train_labels, test_images, test_labels, "
          "label_column, header, shape, cache, prefetch; or for format = \"folder\": train, "
          "test, image_size, on_bad_file, decode_threads)");
    }
  }
  *spec = std::move(s);
  return Status::Ok();
}

Status ApplyOptionImpl(TrainOptions* o, std::string_view key, const json& v) {
  int64_t i = 0;
  if (key == "dataset") {
    if (v.is_string()) return DatasetFromDirectory(v.get<std::string>(), &o->dataset);
    if (v.is_object()) return DatasetFromObject(v, &o->dataset);
    return TypeError(key, "an object {format, train_images, ...} or a directory name", v);
  }
  if (key == "hidden" || key == "channels") {
    // One integer is taken as a single layer; [] means none (hidden: a linear head).
    const char* what = "a list of positive integers (or one, for one layer), each at most 1048576";
    std::vector<int> widths;
    if (v.is_array()) {
      if (!GetIntList(v, 0, 1, 1 << 20, &widths)) return TypeError(key, what, v);
    } else if (GetInt(v, 1, 1 << 20, &i)) {
      widths.push_back(static_cast<int>(i));
    } else {
      return TypeError(key, what, v);
    }
    (key == "hidden" ? o->hidden : o->channels) = std::move(widths);
    return Status::Ok();
  }
  if (key == "normalize") {
    if (v.is_string() && v.get<std::string>() == "auto") {
      o->normalize.reset();
      return Status::Ok();
    }
    bool on = false;
    SWEEP_RETURN_IF_ERROR(SetBool(key, v, &on));
    o->normalize = on;
    return Status::Ok();
  }
  if (key == "devices") {
    if (!GetIntList(v, 0, 0, 1 << 20, &o->devices)) {
      return TypeError(key, "a list of CUDA device ordinals (integers >= 0)", v);
    }
    return Status::Ok();
  }
  // Strings and numbers: Validate() says which values are allowed.
  const std::pair<std::string_view, std::string*> strings[] = {
      {"model", &o->model},
      {"activation", &o->activation},
      {"init", &o->init},
      {"optimizer", &o->optimizer},
      {"lr_schedule", &o->lr_schedule},
      {"precision", &o->precision},
      {"backend", &o->backend},
      {"pool", &o->pool},
      {"checkpoint_path", &o->checkpoint_path},
      {"cache_dir", &o->cache_dir}};
  for (const auto& [name, field] : strings) {
    if (key == name) return SetString(key, v, field);
  }
  const std::pair<std::string_view, double*> doubles[] = {
      {"lr", &o->lr},
      {"momentum", &o->momentum},
      {"weight_decay", &o->weight_decay},
      {"beta1", &o->beta1},
      {"beta2", &o->beta2},
      {"eps", &o->eps},
      {"dropout", &o->dropout},
      {"warmup_epochs", &o->warmup_epochs},
      {"gamma", &o->gamma},
      {"validation_fraction", &o->validation_fraction},
      {"bn_momentum", &o->bn_momentum},
      {"bn_eps", &o->bn_eps},
      {"random_erasing", &o->random_erasing},
      {"label_smoothing", &o->label_smoothing}};
  for (const auto& [name, field] : doubles) {
    if (key == name) return SetDouble(key, v, field);
  }
  if (key == "nesterov") return SetBool(key, v, &o->nesterov);
  if (key == "scale_lr") return SetBool(key, v, &o->scale_lr);
  if (key == "dataset_on_gpu") return SetBool(key, v, &o->dataset_on_gpu);
  if (key == "cuda_graphs") return SetBool(key, v, &o->cuda_graphs);
  if (key == "cudnn_autotune") return SetBool(key, v, &o->cudnn_autotune);
  if (key == "batch_norm") return SetBool(key, v, &o->batch_norm);
  if (key == "residual") return SetBool(key, v, &o->residual);
  if (key == "global_pool") return SetBool(key, v, &o->global_pool);
  if (key == "augment_flip") return SetBool(key, v, &o->augment_flip);
  const std::pair<std::string_view, int*> ints[] = {
      {"batch_size", &o->batch_size},
      {"accum_steps", &o->accum_steps},
      {"epochs", &o->epochs},
      {"step_size", &o->step_size},
      {"base_batch", &o->base_batch},
      {"threads", &o->threads},
      {"replicas", &o->replicas},
      {"checkpoint_every", &o->checkpoint_every},
      {"checkpoint_every_steps", &o->checkpoint_every_steps},
      {"convs_per_stage", &o->convs_per_stage},
      {"kernel_size", &o->kernel_size},
      {"augment_crop", &o->augment_crop}};
  for (const auto& [name, field] : ints) {
    if (key != name) continue;
    SWEEP_RETURN_IF_ERROR(SetInt(key, v, std::numeric_limits<int>::min(),
                                 std::numeric_limits<int>::max(), "an integer", &i));
    *field = static_cast<int>(i);
    return Status::Ok();
  }
  if (key == "max_train_samples") {
    SWEEP_RETURN_IF_ERROR(SetInt(key, v, std::numeric_limits<int64_t>::min(),
                                 std::numeric_limits<int64_t>::max(), "an integer", &i));
    o->max_train_samples = i;
    return Status::Ok();
  }
  if (key == "seed") {
    // Seeds span uint64: a negative one is an error rather than a silent wrap.
    if (v.is_number_unsigned()) {
      o->seed = v.get<uint64_t>();
    } else if (GetInt(v, 0, std::numeric_limits<int64_t>::max(), &i)) {
      o->seed = static_cast<uint64_t>(i);
    } else {
      return TypeError(key, "a non-negative integer", v);
    }
    return Status::Ok();
  }
  return Status::InvalidArgument("unknown trainer option \"" + std::string(key) + "\"");
}

}  // namespace

Status ApplyOption(TrainOptions* options, std::string_view key, const nlohmann::json& value) {
  try {
    return ApplyOptionImpl(options, key, value);
  } catch (const std::exception& e) {  // nlohmann type errors, bad_alloc: values, not throws
    return Status::InvalidArgument(std::string(key) + ": " + e.what());
  }
}

const std::vector<std::string>& OptionKeys() {
  static const std::vector<std::string> keys = {"dataset",
                                                "model",
                                                "hidden",
                                                "activation",
                                                "init",
                                                "dropout",
                                                "channels",
                                                "convs_per_stage",
                                                "kernel_size",
                                                "batch_norm",
                                                "residual",
                                                "pool",
                                                "global_pool",
                                                "bn_momentum",
                                                "bn_eps",
                                                "normalize",
                                                "augment_crop",
                                                "augment_flip",
                                                "random_erasing",
                                                "label_smoothing",
                                                "optimizer",
                                                "lr",
                                                "momentum",
                                                "nesterov",
                                                "weight_decay",
                                                "beta1",
                                                "beta2",
                                                "eps",
                                                "lr_schedule",
                                                "warmup_epochs",
                                                "step_size",
                                                "gamma",
                                                "scale_lr",
                                                "base_batch",
                                                "batch_size",
                                                "accum_steps",
                                                "epochs",
                                                "validation_fraction",
                                                "max_train_samples",
                                                "precision",
                                                "seed",
                                                "threads",
                                                "replicas",
                                                "backend",
                                                "devices",
                                                "dataset_on_gpu",
                                                "cuda_graphs",
                                                "cudnn_autotune",
                                                "checkpoint_path",
                                                "checkpoint_every",
                                                "checkpoint_every_steps",
                                                "cache_dir"};
  return keys;
}

const std::vector<std::string>& MetricNames() {
  static const std::vector<std::string> names = {
      "train_loss",  "val_loss", "val_acc",       "samples_per_s", "data_wait_s",  "epoch_s",
      "allreduce_s", "lr",       "skipped_steps", "test_acc",      "skipped_files"};
  return names;
}

double EstimatedWork(const TrainOptions& o) {
  constexpr double kImages = 60000;
  constexpr int kClasses = 10;
  double samples = kImages * (1.0 - std::clamp(o.validation_fraction, 0.0, 1.0));
  if (o.max_train_samples > 0)
    samples = std::min(samples, static_cast<double>(o.max_train_samples));
  // The dataset's own image shape when its header says it cheaply, else Fashion-MNIST's.
  TensorShape input{1, 28, 28};
  if (o.dataset.shape.size() == 3) {
    input = {o.dataset.shape[0], o.dataset.shape[1], o.dataset.shape[2]};
  }
  if (o.dataset.image_size.size() == 2)
    input = {1, o.dataset.image_size[0], o.dataset.image_size[1]};
  if (o.model == "mlp") input = {static_cast<int>(input.size()), 1, 1};
  const Result<ModelSpec> model = BuildModel(o, input, kClasses);
  if (!model.ok()) return 0;
  // Forward, and backward for the inputs' and the weights' gradients: three GEMMs per layer.
  return 3.0 * model->ForwardMacs() * samples * std::max(0, o.epochs);
}

namespace {

// In [0, 1) as the 32-bit float training uses: 0.99999999 rounds to 1.0f, which makes dropout
// divide by zero and AdamW's bias correction 1 - beta^t zero.
bool BelowOne(double v) { return v >= 0 && static_cast<float>(v) < 1.0f; }
const std::string kFloat = " as a 32-bit float (at most 0.99999994), got ";

}  // namespace

namespace {

bool Augments(const TrainOptions& o) {
  return o.augment_crop > 0 || o.augment_flip || o.random_erasing > 0;
}

// The cnn keys' own ranges, and with `together` how they go with the data and the batch.
Status ValidateModelOptions(const TrainOptions& o, bool together) {
  auto bad = [](std::string msg) { return Status::InvalidArgument(std::move(msg)); };
  if (o.channels.empty()) return bad("channels: needs at least one stage, got []");
  if (o.convs_per_stage < 1 || o.convs_per_stage > 64) {
    return bad("convs_per_stage: must be in [1, 64], got " + std::to_string(o.convs_per_stage));
  }
  if (o.kernel_size < 1 || o.kernel_size > 31 || o.kernel_size % 2 == 0) {
    return bad("kernel_size: must be odd and in [1, 31] (\"same\" padding), got " +
               std::to_string(o.kernel_size));
  }
  if (o.pool != "max" && o.pool != "avg") {
    return bad("pool: expected \"max\" or \"avg\", got \"" + o.pool + "\"");
  }
  if (!(o.bn_momentum >= 0 && o.bn_momentum <= 1)) {
    return bad("bn_momentum: must be in [0, 1], got " + Num(o.bn_momentum));
  }
  if (!(static_cast<float>(o.bn_eps) > 0) || !std::isfinite(o.bn_eps)) {
    return bad("bn_eps: must be > 0, got " + Num(o.bn_eps));
  }
  if (o.augment_crop < 0 || o.augment_crop > 64) {
    return bad("augment_crop: must be in [0, 64] pixels (0: off), got " +
               std::to_string(o.augment_crop));
  }
  if (!(o.random_erasing >= 0 && o.random_erasing <= 1)) {
    return bad("random_erasing: must be a probability in [0, 1], got " + Num(o.random_erasing));
  }
  if (!(o.label_smoothing >= 0 && o.label_smoothing < 1)) {
    return bad("label_smoothing: must be in [0, 1), got " + Num(o.label_smoothing));
  }
  if (!together) return Status::Ok();
  const bool images =
      o.dataset.format == "idx" || o.dataset.format == "folder" || !o.dataset.shape.empty();
  if (!images && o.model == "cnn") {
    return bad("model: \"cnn\" needs images; give a csv dataset its dataset.shape = [C, H, W]");
  }
  if (!images && Augments(o)) {
    return bad(std::string(o.augment_crop > 0 ? "augment_crop"
                           : o.augment_flip   ? "augment_flip"
                                              : "random_erasing") +
               ": augmentation needs images; give a csv dataset its dataset.shape = [C, H, W]");
  }
  if (o.model == "cnn" && o.batch_norm && o.batch_size / o.replicas < 2) {
    return bad("batch_norm: batch_size " + std::to_string(o.batch_size) +
               " over replicas = " + std::to_string(o.replicas) +
               " leaves a replica one sample, and batch statistics need two; make batch_size "
               "larger or set batch_norm = false");
  }
  // The model against the data's shape, when the files say it without decoding them (a missing
  // file is reported by the dataset's own checks).
  // (MLP sweeps, which need no shape, open no file here.)
  if (o.model != "cnn" && !Augments(o) && o.dataset.shape.empty()) return Status::Ok();
  const Result<TensorShape> input = ProbeInputShape(o.dataset);
  if (input.ok()) {
    if (Augments(o) && input->h == 1 && input->w == 1) {
      return bad("augment_crop, augment_flip, random_erasing: " + o.dataset.train_images +
                 " holds flat vectors, not images");
    }
    if (o.model == "cnn") {
      const Result<ModelSpec> model = BuildModel(o, *input, 2);
      if (!model.ok()) return model.status();
    }
  } else if (input.status().code() == Status::Code::kInvalidArgument) {
    return input.status();
  }
  return Status::Ok();
}

}  // namespace

Status Validate(const TrainOptions& o, ValidateScope scope) {
  const bool together = scope == ValidateScope::kAll;
  const DatasetSpec& d = o.dataset;
  auto bad = [](std::string msg) { return Status::InvalidArgument(std::move(msg)); };
  if (!KnownFormat(d.format)) return FormatError(d.format);
  if (d.cache != "auto" && d.cache != "off" && d.cache != "stream") {
    return bad("dataset.cache: expected \"auto\", \"off\" or \"stream\", got \"" + d.cache + "\"");
  }
  if (d.cache == "stream" && d.format != "folder") {
    return bad("dataset.cache = \"stream\": only for format = \"folder\" (" + d.format +
               " files are decoded once and held)");
  }
  if (d.prefetch < 0 || d.prefetch > 64) return bad("dataset.prefetch: expected 0 to 64 batches");
  if (d.format == "folder") {
    if (d.train_images.empty()) return bad("dataset: folder needs dataset.train (a folder)");
    if (!d.train_labels.empty() || !d.test_labels.empty() || d.header || !d.shape.empty()) {
      return bad(
          "dataset: folder takes labels and shapes from its images; leave *_labels, "
          "header and shape unset");
    }
    if (d.on_bad_file != "error" && d.on_bad_file != "skip") {
      return bad("dataset.on_bad_file: expected \"error\" or \"skip\", got \"" + d.on_bad_file +
                 "\"");
    }
    if (!d.image_size.empty() &&
        (d.image_size.size() != 2 ||
         *std::min_element(d.image_size.begin(), d.image_size.end()) < 1)) {
      return bad("dataset.image_size: expected [height, width], positive integers");
    }
    if (d.decode_threads < 0) return bad("dataset.decode_threads: must be >= 0");
  } else if (!d.image_size.empty() || d.on_bad_file != "error" || d.decode_threads != 0) {
    return bad("dataset: image_size, on_bad_file and decode_threads are for format = \"folder\"");
  }
  if (d.train_images.empty()) return bad("dataset: no training file (dataset.train_images)");
  if (d.format == "idx") {
    if (d.train_labels.empty()) return bad("dataset: idx needs dataset.train_labels");
    if (d.test_images.empty() != d.test_labels.empty()) {
      return bad("dataset: idx needs both dataset.test_images and dataset.test_labels, or neither");
    }
    if (d.header) return bad("dataset.header: only for format = \"csv\" (idx files have none)");
  } else if (!d.train_labels.empty() || !d.test_labels.empty()) {
    return bad("dataset: csv takes labels from dataset.label_column; leave *_labels empty");
  }
  if (o.model != "mlp" && o.model != "cnn") {
    return bad("model: expected \"mlp\" or \"cnn\", got \"" + o.model + "\"");
  }
  SWEEP_RETURN_IF_ERROR(ValidateModelOptions(o, together));
  for (int h : o.hidden) {
    if (h < 1) return bad("hidden: widths must be positive, got " + std::to_string(h));
  }
  Activation act;
  if (!ParseActivation(o.activation, &act)) {
    return bad("activation: expected relu, tanh or gelu, got \"" + o.activation + "\"");
  }
  InitScheme init;
  if (!ParseInit(o.init, &init)) {
    return bad("init: expected he, xavier, pytorch or auto, got \"" + o.init + "\"");
  }
  if (!BelowOne(o.dropout)) return bad("dropout: must be in [0, 1)" + kFloat + Num(o.dropout));
  if (o.optimizer != "sgd" && o.optimizer != "adamw") {
    return bad("optimizer: expected \"sgd\" or \"adamw\", got \"" + o.optimizer + "\"");
  }
  // As a float too, as the optimizer applies it: 1e-320 would be 0 and train nothing.
  if (!(static_cast<float>(o.lr) > 0) || !std::isfinite(static_cast<float>(o.lr))) {
    return bad(
        "lr: must be a positive number that a 32-bit float holds (about 1.4e-45 to "
        "3.4e38), got " +
        Num(o.lr));
  }
  if (!BelowOne(o.momentum)) return bad("momentum: must be in [0, 1)" + kFloat + Num(o.momentum));
  if (together && o.nesterov && o.optimizer == "sgd" && o.momentum == 0) {
    return bad("nesterov: needs momentum > 0 (Nesterov momentum without momentum is plain SGD)");
  }
  if (!(o.weight_decay >= 0) || !std::isfinite(o.weight_decay)) {
    return bad("weight_decay: must be >= 0, got " + Num(o.weight_decay));
  }
  if (!BelowOne(o.beta1)) return bad("beta1: must be in [0, 1)" + kFloat + Num(o.beta1));
  if (!BelowOne(o.beta2)) return bad("beta2: must be in [0, 1)" + kFloat + Num(o.beta2));
  // As a float too: 1e-50 would be 0, and AdamW would divide by it.
  if (!(static_cast<float>(o.eps) > 0) || !std::isfinite(static_cast<float>(o.eps))) {
    return bad("eps: must be > 0 as a 32-bit float (at least about 1.4e-45), got " + Num(o.eps));
  }
  if (o.lr_schedule != "constant" && o.lr_schedule != "step" && o.lr_schedule != "cosine") {
    return bad("lr_schedule: expected constant, step or cosine, got \"" + o.lr_schedule + "\"");
  }
  if (!(o.warmup_epochs >= 0) || !std::isfinite(o.warmup_epochs)) {
    return bad("warmup_epochs: must be >= 0, got " + Num(o.warmup_epochs));
  }
  if (o.step_size < 1)
    return bad("step_size: must be >= 1 (epochs), got " + std::to_string(o.step_size));
  if (!(o.gamma > 0) || !std::isfinite(o.gamma)) {
    return bad("gamma: must be > 0, got " + Num(o.gamma));
  }
  if (o.base_batch < 1) return bad("base_batch: must be >= 1, got " + std::to_string(o.base_batch));
  if (o.batch_size < 1) return bad("batch_size: must be >= 1, got " + std::to_string(o.batch_size));
  if (o.accum_steps < 1 || o.accum_steps > 65536) {
    return bad("accum_steps: must be in [1, 65536], got " + std::to_string(o.accum_steps));
  }
  if (o.epochs < 1) return bad("epochs: must be >= 1, got " + std::to_string(o.epochs));
  if (!(o.validation_fraction >= 0 && o.validation_fraction < 1)) {
    return bad("validation_fraction: must be in [0, 1), got " + Num(o.validation_fraction));
  }
  if (o.max_train_samples < 0) {
    return bad("max_train_samples: must be >= 0 (0: all), got " +
               std::to_string(o.max_train_samples));
  }
  Precision precision;
  if (!ParsePrecision(o.precision, &precision)) {
    return bad("precision: expected fp32, bf16 or fp16, got \"" + o.precision + "\"");
  }
  if (o.backend != "auto" && o.backend != "cpu" && o.backend != "cuda") {
    return bad("backend: expected auto, cpu or cuda, got \"" + o.backend + "\"");
  }
  if (o.threads < 1 || o.threads > 1024) {
    return bad("threads: must be in [1, 1024], got " + std::to_string(o.threads));
  }
  if (o.replicas < 1 || o.replicas > 1024) {
    return bad("replicas: must be in [1, 1024], got " + std::to_string(o.replicas));
  }
  // Knowable before the dataset is read: the set's own size is checked when it is.
  if (together && o.max_train_samples > 0 &&
      o.max_train_samples < int64_t{o.batch_size} * o.accum_steps) {
    return bad("max_train_samples: " + std::to_string(o.max_train_samples) +
               " samples make no optimizer step of batch_size " + std::to_string(o.batch_size) +
               (o.accum_steps > 1 ? " x accum_steps " + std::to_string(o.accum_steps) : "") +
               ": give at least " + std::to_string(int64_t{o.batch_size} * o.accum_steps));
  }
  if (together && o.batch_size < o.replicas) {
    return bad("batch_size: " + std::to_string(o.batch_size) + " is smaller than replicas = " +
               std::to_string(o.replicas) + " (every replica needs a sample of each batch)");
  }
  if (!o.devices.empty()) {
    if (together && static_cast<int>(o.devices.size()) != o.replicas) {
      return bad("devices: " + std::to_string(o.devices.size()) + " GPUs given for replicas = " +
                 std::to_string(o.replicas) + " (one device per replica)");
    }
    for (size_t a = 0; a < o.devices.size(); ++a) {
      for (size_t b = a + 1; b < o.devices.size(); ++b) {
        if (o.devices[a] == o.devices[b]) {
          return bad("devices: GPU " + std::to_string(o.devices[a]) +
                     " is given twice (one replica per device)");
        }
      }
    }
    if (together && o.backend == "cpu") {
      return bad("devices: GPUs are given, but backend = \"cpu\"");
    }
  }
  if (o.checkpoint_every < 0) {
    return bad("checkpoint_every: must be >= 0 (0: only when stopped and at the end), got " +
               std::to_string(o.checkpoint_every));
  }
  if (o.checkpoint_every_steps < 0) {
    return bad("checkpoint_every_steps: must be >= 0 (0: none within an epoch), got " +
               std::to_string(o.checkpoint_every_steps));
  }
  return Status::Ok();
}

}  // namespace sweep::trainer
