// Trainer trials: the embedded trainer (trainer/trainer.h), checkpointing every epoch. Its config
// is [trainer] and the parameters it receives, each checked by the trainer's own rules.
#include <sys/vfs.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <vector>

#include "executor/command.h"
#include "executor/trial.h"
#include "kind_config.h"
#include "sweep/coordinator.h"
#include "trainer/trainer.h"
#include "trial_kind.h"

namespace sweep {

using nlohmann::json;

Status CheckTrainerOption(std::string_view key, const json& value) {
  trainer::TrainOptions scratch;
  // A stand-in dataset, so that checking one option does not trip over the absent others.
  scratch.dataset.train_images = scratch.dataset.train_labels = "-";
  Status s = trainer::ApplyOption(&scratch, key, value);
  if (s.ok()) s = trainer::Validate(scratch, trainer::ValidateScope::kEachOption);
  return s;
}

namespace config_internal {
namespace {

// Checks a trainer option's values through the trainer itself, so types and ranges are the
// trainer's own rules.
Status CheckTrainerValue(const Checker& c, const toml::node& where, const std::string& key,
                         const std::string& option, const json& value) {
  Status s = CheckTrainerOption(option, value);
  if (!s.ok()) return c.Error(where, key, s.message());
  return Status::Ok();
}

Status CheckTrainerParameter(const Checker& c, const ParamEntry& e, bool stored) {
  const auto& d = e.parameter.distribution;
  const std::string key = "parameters." + e.parameter.name;
  const auto& known = trainer::OptionKeys();
  if (std::find(known.begin(), known.end(), e.parameter.name) == known.end()) {
    std::string msg = "the trainer has no hyperparameter '" + e.parameter.name + "'";
    std::string hint = DidYouMean(e.parameter.name, known);
    if (!hint.empty()) msg += "; did you mean '" + hint + "'?";
    return c.Error(e.key_source, key, msg);
  }
  if (e.parameter.name == "checkpoint_path") {
    return c.Error(e.key_source, key,
                   "each trial gets a checkpoint file of its own; set [trial] checkpoint_dir to "
                   "choose where they go");
  }
  using Kind = search::Distribution::Kind;
  if (d.kind == Kind::kConstant || d.kind == Kind::kCategorical) {
    for (const json& v : d.values) {
      SWEEP_RETURN_IF_ERROR(CheckTrainerValue(c, *e.node, key, e.parameter.name, v));
    }
    return Status::Ok();
  }
  bool integral = d.kind == Kind::kIntUniform || d.kind == Kind::kLogIntUniform;
  for (double bound : {d.min, d.max}) {
    json v = integral ? json(static_cast<int64_t>(bound)) : json(bound);
    SWEEP_RETURN_IF_ERROR(CheckTrainerValue(c, *e.node, key, e.parameter.name, v));
  }
  if (!integral && d.max > d.min && !stored) {
    // A continuous distribution draws fractions: an option of whole numbers (epochs,
    // batch_size) would fail every trial as it starts.
    double inside = d.min + (d.max - d.min) * 0.382;
    if (inside == std::floor(inside)) inside = d.min + (d.max - d.min) * 0.618;
    if (search::StepCount(d) > 0) {
      // Its values are all whole when min and step are (16 to 256 by 16); otherwise min or
      // min + step is a fraction.
      inside = search::StepValue(d, d.min == std::floor(d.min) ? 1 : 0).get<double>();
    }
    if (!CheckTrainerOption(e.parameter.name, json(inside)).ok() &&
        CheckTrainerOption(e.parameter.name, json(static_cast<int64_t>(std::floor(inside)))).ok()) {
      const bool log = d.kind == Kind::kLogUniform;
      return c.Error(*e.node, key,
                     std::string(log ? "log_uniform" : "uniform") + " draws fractions and " +
                         e.parameter.name + " takes whole numbers: use distribution = \"" +
                         (log ? "log_int_uniform" : "int_uniform") + "\"");
    }
  }
  return Status::Ok();
}

// `dataset` with its relative paths made relative to `base`, the config's folder: a config
// means the same files wherever sweep runs (and when a sweep is resumed from another folder).
// A relative path in a config starts at the config's folder (`base`), not where sweep runs.
void ResolveRelativeTo(json& path, const std::filesystem::path& base) {
  if (!path.is_string()) return;
  const std::filesystem::path p = path.get<std::string>();
  if (!p.empty() && p.is_relative()) path = (base / p).lexically_normal().string();
}

json DatasetRelativeTo(json value, const std::filesystem::path& base) {
  auto resolve = [&](json& path) { ResolveRelativeTo(path, base); };
  if (value.is_string()) resolve(value);
  if (value.is_object()) {
    for (const char* k :
         {"train_images", "train_labels", "test_images", "test_labels", "train", "test"}) {
      if (value.contains(k)) resolve(value[k]);
    }
  }
  return value;
}

// What is wrong with the files a dataset names here: the file's key ("train_images", or empty
// for the dataset as a whole) and why; an empty `why` when nothing is.
struct DatasetProblem {
  std::string field;
  std::string why;
};
DatasetProblem DatasetFilesProblem(const trainer::DatasetSpec& ds) {
  // Folders of class folders: the trainer checks them without decoding (no images, test
  // classes that are not the training ones, an empty class folder).
  if (ds.format == "folder") {
    std::string field;
    const Status s = trainer::CheckImageFolders(ds, &field);
    if (s.ok()) return {};
    return {field, s.message()};
  }
  const std::pair<const char*, const std::string*> files[] = {{"train_images", &ds.train_images},
                                                              {"train_labels", &ds.train_labels},
                                                              {"test_images", &ds.test_images},
                                                              {"test_labels", &ds.test_labels}};
  for (auto [name, file] : files) {
    if (file->empty()) continue;
    std::error_code ec;
    const auto type = std::filesystem::status(*file, ec).type();
    if (type == std::filesystem::file_type::not_found) {
      std::string msg = "no such file '" + *file + "'";
      if (file->find("fashion-mnist") != std::string::npos) {
        msg += " (Debian's dataset-fashion-mnist package installs it)";
      }
      return {name, msg};
    }
    if (ec) return {name, "cannot reach '" + *file + "': " + ec.message()};
    if (type != std::filesystem::file_type::regular) {
      return {name, "'" + *file + "' is " +
                        (type == std::filesystem::file_type::directory
                             ? "a folder, not a file"
                             : "not a regular file (a device, pipe or socket)")};
    }
    errno = 0;
    std::ifstream probe(*file);
    if (!probe) {
      const int err = errno;
      return {name, "cannot read '" + *file + "'" +
                        (err != 0 ? ": " + std::string(std::strerror(err)) : "")};
    }
  }
  if (ds.train_images.empty()) return {"", "no training data given"};
  return {};
}

// Every dataset file the options name must exist and be readable before the sweep starts, and
// an IDX pair's headers must read as a load reads them (a file of another type, images and
// labels swapped or of different counts would fail every trial). The training set's size, where
// the files say it.
Result<std::optional<int64_t>> CheckDatasetFiles(const Checker& c, const toml::node& where,
                                                 const std::string& key,
                                                 const trainer::DatasetSpec& ds) {
  const DatasetProblem p = DatasetFilesProblem(ds);
  if (!p.why.empty()) return c.Error(where, p.field.empty() ? key : key + "." + p.field, p.why);
  Result<std::optional<int64_t>> samples = trainer::TrainingSamples(ds);
  if (!samples.ok()) return c.Error(where, key, samples.status().message());
  return samples;
}

// The options every trial shares ([trainer] and the constant parameters), and where the file
// gives the dataset.
struct SharedOptions {
  trainer::TrainOptions merged;
  const toml::node* dataset_node = nullptr;
  std::string dataset_key;
  std::optional<int64_t> samples;  // in the training set, where its files say (check_dataset)
};

// A dataset's paths, checked for their form only (without check_dataset): a stand-in for the
// options.
Status ApplyDataset(bool check_dataset, const json& value, trainer::TrainOptions* merged) {
  if (check_dataset) return trainer::ApplyOption(merged, "dataset", value);
  if (!value.is_string() && !value.is_object()) {
    return trainer::ApplyOption(merged, "dataset", value);  // its type error
  }
  merged->dataset.train_images = merged->dataset.train_labels = "-";
  return Status::Ok();
}

// A trial on a GPU slot trains on that slot's GPUs whatever `devices` says, and one on a CPU
// slot fails with it: in a sweep it is never what was meant.
constexpr std::string_view kDevicesInASweep =
    "a sweep gives each trial the GPUs of the slots it runs on (trial.gpus of them); to keep a "
    "sweep to some GPUs, start it (and each agent) with CUDA_VISIBLE_DEVICES set";

// [trainer]: each option checked by the trainer's own rules, its relative paths made the config
// folder's (`base`).
Status ParseTrainerKeys(const Checker& c, const ParseState& ps, const toml::table& table,
                        const std::filesystem::path& base, SharedOptions* shared,
                        SweepConfig* cfg) {
  SWEEP_RETURN_IF_ERROR(c.KnownKeys(table, "[trainer]", trainer::OptionKeys()));
  for (auto&& [k, v] : table) {
    std::string key(k.str());
    json value = ToJson(v);
    if (key == "checkpoint_path") {
      return c.Error(v, "trainer." + key,
                     "each trial gets a checkpoint file of its own; set [trial] "
                     "checkpoint_dir to choose where they go");
    }
    if (key == "devices" && ps.new_sweep) {
      return c.Error(v, "trainer." + key, std::string(kDevicesInASweep));
    }
    if (key == "backend") cfg->where.backend = c.Where(v.source());
    const bool dataset = key == "dataset";
    if (dataset) value = DatasetRelativeTo(std::move(value), base);
    if (key == "cache_dir") ResolveRelativeTo(value, base);
    if (!dataset || ps.check_dataset) {  // the dataset's check reads its files
      SWEEP_RETURN_IF_ERROR(CheckTrainerValue(c, v, "trainer." + key, key, value));
    }
    Status s = dataset ? ApplyDataset(ps.check_dataset, value, &shared->merged)
                       : trainer::ApplyOption(&shared->merged, key, value);
    if (!s.ok()) return c.Error(v, "trainer." + key, s.message());
    cfg->trainer[key] = value;
    if (key == "dataset") {
      shared->dataset_node = &v;
      shared->dataset_key = "trainer.dataset";
    }
  }
  return Status::Ok();
}

// The parameters the trainer receives, each checked as its option; the constant ones join the
// shared options.
Status ApplyTrainerParameters(const Checker& c, ParseState* ps, const std::filesystem::path& base,
                              SharedOptions* shared, SweepConfig* cfg) {
  for (ParamEntry& e : ps->params) {
    if (e.parameter.name == "dataset" &&
        e.parameter.distribution.kind == search::Distribution::Kind::kConstant) {
      json& value = e.parameter.distribution.values[0];
      value = DatasetRelativeTo(std::move(value), base);
    }
    if (e.parameter.name == "cache_dir" &&
        e.parameter.distribution.kind == search::Distribution::Kind::kConstant) {
      ResolveRelativeTo(e.parameter.distribution.values[0], base);
    }
    if (e.parameter.name == "devices" && ps->new_sweep) {
      return c.Error(*e.node, "parameters.devices", std::string(kDevicesInASweep));
    }
    if (e.parameter.name == "backend") cfg->where.backend = c.Where(e.node->source());
    if (e.parameter.name != "dataset" || ps->check_dataset) {
      SWEEP_RETURN_IF_ERROR(CheckTrainerParameter(c, e, ps->stored));
    }
    if (e.parameter.distribution.kind == search::Distribution::Kind::kConstant) {
      const json& value = e.parameter.distribution.values[0];
      (void)(e.parameter.name == "dataset"
                 ? ApplyDataset(ps->check_dataset, value, &shared->merged)
                 : trainer::ApplyOption(&shared->merged, e.parameter.name, value));
      if (e.parameter.name == "dataset") {
        shared->dataset_node = e.node;
        shared->dataset_key = "parameters.dataset";
      }
    } else if (e.parameter.name == "dataset") {
      return c.Error(*e.node, "parameters.dataset",
                     "vary one dataset per sweep; put it in [trainer]");
    }
  }
  return Status::Ok();
}

// What every trial shares: a dataset whose files are here, and options that go together.
Status CheckSharedOptions(const Checker& c, const ParseState& ps, const toml::table* table,
                          const SweepConfig& cfg, SharedOptions* shared) {
  if (shared->dataset_node == nullptr) {
    const std::string msg =
        "[trainer] needs a `dataset` (e.g. dataset = \"/usr/share/datasets/fashion-mnist\", or "
        "{ format = \"idx\", train_images = \"...\", train_labels = \"...\" })";
    return table != nullptr ? c.Error(*table, "trainer.dataset", msg) : c.FileError(msg);
  }
  if (ps.check_dataset) {
    SWEEP_ASSIGN_OR_RETURN(
        shared->samples,
        CheckDatasetFiles(c, *shared->dataset_node, shared->dataset_key, shared->merged.dataset));
  }
  // Rules across options (nesterov needs momentum, ...) on what every trial shares: [trainer]
  // and the constant parameters. Varied values are checked per trial when it runs. A trial's
  // replicas are its slots unless the config says otherwise (see TrainerLayoutOf).
  const bool replicas_given =
      cfg.trainer.contains("replicas") ||
      std::any_of(ps.params.begin(), ps.params.end(),
                  [](const ParamEntry& e) { return e.parameter.name == "replicas"; });
  // Only for a new sweep: `sweep train` sets its own layout (--threads, --set replicas=...)
  // after this, and a stored sweep is taken as it was recorded.
  if (!replicas_given && ps.new_sweep) shared->merged.replicas = cfg.trial.slots;
  // A varied parameter overrides [trainer] in each trial: what fails here may not fail in any.
  // Then a new sweep's trials are checked one by one (CheckTrainerTrials), and `sweep train`'s
  // once its --set values are in.
  const bool varied = std::any_of(ps.params.begin(), ps.params.end(), [](const ParamEntry& e) {
    return e.parameter.distribution.kind != search::Distribution::Kind::kConstant;
  });
  if (Status v = trainer::Validate(shared->merged); !v.ok() && !varied) {
    const std::string msg = "the options every trial shares do not go together: " + v.message();
    return table != nullptr ? c.Error(*table, "trainer", msg) : c.FileError(msg);
  }
  // The training set's size against one step's batch, when no trial varies what it depends on.
  const bool size_varies = std::any_of(ps.params.begin(), ps.params.end(), [](const ParamEntry& e) {
    static const std::set<std::string, std::less<>> kSizeKeys = {
        "batch_size", "accum_steps", "validation_fraction", "max_train_samples"};
    return e.parameter.distribution.kind != search::Distribution::Kind::kConstant &&
           kSizeKeys.contains(e.parameter.name);
  });
  if (!shared->samples || size_varies) return Status::Ok();
  if (Status v = trainer::CheckTrainingSetSize(shared->merged, *shared->samples); !v.ok()) {
    // Said at the batch size, where it was set.
    const toml::node* at = table != nullptr ? table->get("batch_size") : nullptr;
    std::string key = "trainer.batch_size";
    for (const ParamEntry& e : ps.params) {
      if (at == nullptr && e.parameter.name == "batch_size") {
        at = e.node, key = "parameters.batch_size";
      }
    }
    const std::string msg = "every trial would fail as it starts: " + v.message();
    if (at != nullptr) return c.Error(*at, key, msg);
    return table != nullptr ? c.Error(*table, "trainer", msg) : c.FileError(msg);
  }
  return Status::Ok();
}

// The trainer's metric: val_acc (max) by default, one the trainer reports, and a validation
// split (or a test set) to measure it on.
Status CheckTrainerMetric(const Checker& c, ParseState* ps, const toml::table* table,
                          const trainer::TrainOptions& merged) {
  std::optional<std::string>& metric = ps->metric;
  const toml::node* metric_node = ps->metric_node;
  if (!metric) metric = "val_acc", ps->mode = ps->mode.value_or("max");
  const auto names = executor::TrialMetricNames(TrialKind::kTrainer);
  if (std::find(names.begin(), names.end(), *metric) == names.end()) {
    std::string list;
    for (const auto& n : names) list += (list.empty() ? "" : ", ") + n;
    std::string msg = "trainer trials never report '" + *metric + "'; they report " + list;
    std::string hint = DidYouMean(*metric, names);
    if (!hint.empty()) msg += " (did you mean '" + hint + "'?)";
    return c.Error(*metric_node, "sweep.metric", msg);
  }
  // (`sweep train` runs one trial and ranks nothing: it may train on every sample.)
  const bool needs_val = !ps->one_trial && metric->rfind("val_", 0) == 0;
  if (needs_val && merged.validation_fraction <= 0) {
    if (metric_node != nullptr) {
      return c.Error(*metric_node, "sweep.metric",
                     "'" + *metric +
                         "' needs a validation split; set trainer.validation_fraction "
                         "> 0");
    }
    // The metric is the default one: point at the 0 that leaves nothing to measure it on.
    const toml::node* zero = table != nullptr ? table->get("validation_fraction") : nullptr;
    std::string zero_key = "trainer.validation_fraction";
    for (const ParamEntry& e : ps->params) {
      if (e.parameter.name == "validation_fraction") {
        zero = e.node;
        zero_key = "parameters.validation_fraction";
      }
    }
    const std::string msg =
        "0 leaves no validation split to measure the sweep's metric, '" + *metric +
        "' (the default), on; keep it > 0, or set sweep.metric and sweep.mode (e.g. "
        "\"train_loss\" and \"min\")";
    return zero != nullptr ? c.Error(*zero, zero_key, msg) : c.FileError(msg);
  }
  // A varied validation_fraction must give every trial a split to measure the metric on.
  for (const ParamEntry& e : ps->params) {
    if (!needs_val || e.parameter.name != "validation_fraction") continue;
    const auto& d = e.parameter.distribution;
    const bool listed = d.kind == search::Distribution::Kind::kCategorical ||
                        d.kind == search::Distribution::Kind::kConstant;
    bool zero = !listed && d.min <= 0;
    for (const json& v : d.values) zero = zero || (v.is_number() && v.get<double>() <= 0);
    if (zero) {
      return c.Error(*e.node, "parameters.validation_fraction",
                     "a trial with 0 has no validation split to measure '" + *metric +
                         "' on; keep every value > 0");
    }
  }
  if (*metric == "test_acc" && merged.dataset.test_images.empty()) {
    return c.Error(*metric_node, "sweep.metric", "'test_acc' needs a test set in trainer.dataset");
  }
  return Status::Ok();
}

// Rules across a trainer's options (nesterov needs momentum > 0, a sample of each batch per
// replica) on the trials the sweep will run, drawn as it draws them (up to 10,000): a
// combination that breaks one would fail its trial when it starts. [trainer] and the constant
// parameters were checked together already; this finds what a varied value does with them, or
// two varied values with each other.
Status CheckTrainerTrials(const Checker& c, const SweepConfig& cfg, const toml::node* where) {
  trainer::TrainOptions shared;
  shared.dataset.train_images = shared.dataset.train_labels = "-";  // checked on its own
  for (const auto& [key, value] : cfg.trainer.items()) {
    if (key != "dataset") SWEEP_RETURN_IF_ERROR(trainer::ApplyOption(&shared, key, value));
  }
  // The dataset as given, when it reads: a CNN's stages are checked against its images' shape.
  if (cfg.trainer.contains("dataset")) {
    trainer::TrainOptions with_data = shared;
    if (trainer::ApplyOption(&with_data, "dataset", cfg.trainer["dataset"]).ok()) {
      shared.dataset = with_data.dataset;
    }
  }
  // A trial's replicas are its slots unless the config says otherwise (see TrainerLayoutOf).
  if (!cfg.trainer.contains("replicas")) shared.replicas = cfg.trial.slots;
  // The training set's size where its headers say (an IDX pair), for each trial's batch.
  std::optional<int64_t> samples;
  if (cfg.trainer.contains("dataset")) {
    Result<std::optional<int64_t>> n = trainer::TrainingSamples(shared.dataset);
    if (n.ok()) samples = *n;
  }
  SWEEP_ASSIGN_OR_RETURN(std::unique_ptr<search::Sampler> sampler, MakeSampler(cfg));
  const int64_t n = std::min<int64_t>(cfg.sweep.max_trials, 10000);
  for (int64_t i = 0; i < n; ++i) {
    std::optional<json> params = sampler->Sample(i);
    if (!params) break;
    trainer::TrainOptions options = shared;
    Status s;
    for (const auto& [key, value] : params->items()) {
      if (key == "dataset") continue;
      s = trainer::ApplyOption(&options, key, value);
      if (!s.ok()) break;
    }
    if (s.ok()) s = trainer::Validate(options);
    if (s.ok() && samples) s = trainer::CheckTrainingSetSize(options, *samples);
    if (!s.ok()) {
      const std::string msg = "trial " + std::to_string(i) + " would fail as it starts, with " +
                              executor::Abbreviate(params->dump(), 300) + ": " + s.message();
      return where != nullptr ? c.Error(*where, "parameters", msg) : c.FileError(msg);
    }
  }
  return Status::Ok();
}

Status ParseTrainerTable(const Checker& c, ParseState* ps, SweepConfig* cfg) {
  const toml::table* table = ps->Table("trainer");
  const std::filesystem::path base = std::filesystem::absolute(cfg->path).parent_path();
  SharedOptions shared;
  if (table != nullptr) {
    SWEEP_RETURN_IF_ERROR(ParseTrainerKeys(c, *ps, *table, base, &shared, cfg));
  }
  SWEEP_RETURN_IF_ERROR(ApplyTrainerParameters(c, ps, base, &shared, cfg));
  SWEEP_RETURN_IF_ERROR(CheckSharedOptions(c, *ps, table, *cfg, &shared));
  bool epochs_vary = std::any_of(ps->params.begin(), ps->params.end(), [](const ParamEntry& e) {
    return e.parameter.name == "epochs" &&
           e.parameter.distribution.kind != search::Distribution::Kind::kConstant;
  });
  if (!epochs_vary) ps->natural_max_resource = shared.merged.epochs;
  return CheckTrainerMetric(c, ps, table, shared.merged);
}

// The trainer measures test_acc once, after its last epoch: no rung or median ever sees it.
Status CheckTrainerEarlyStopping(const Checker& c, const toml::node& where,
                                 const SweepConfig& cfg) {
  if (cfg.sweep.metric == "test_acc") {
    return c.Error(where, "early_stopping",
                   "early stopping compares trials on a metric they report every epoch; the "
                   "trainer reports 'test_acc' only at the end: use metric = \"val_acc\" or "
                   "\"val_loss\"");
  }
  return Status::Ok();
}

// stop_when is checked on each report; test_acc comes once, after a trial's last epoch.
Status CheckTrainerStopWhen(const Checker& c, const toml::node& written,
                            const SweepConfig::Target& target, const ParseState& ps) {
  if (target.metric == "test_acc" && !ps.stored) {
    return c.Error(written, "sweep.stop_when",
                   "stop_when is checked on every report, and the trainer measures 'test_acc' "
                   "only after a trial's last epoch: use \"val_acc\" or \"val_loss\"");
  }
  return Status::Ok();
}

}  // namespace

const KindConfig kTrainerConfig{.kind = TrialKind::kTrainer,
                                .table = "trainer",
                                .unit = "epochs",
                                .checkpoints = true,
                                .work_estimate = true,
                                .parse = ParseTrainerTable,
                                .check_early_stopping = CheckTrainerEarlyStopping,
                                .check_stop_when = CheckTrainerStopWhen,
                                .check_trials = CheckTrainerTrials};

}  // namespace config_internal

Status CheckDatasetHere(const json& value) {
  trainer::TrainOptions scratch;
  SWEEP_RETURN_IF_ERROR(trainer::ApplyOption(&scratch, "dataset", value));
  const config_internal::DatasetProblem p = config_internal::DatasetFilesProblem(scratch.dataset);
  if (!p.why.empty()) {
    return Status::InvalidArgument((p.field.empty() ? "" : p.field + ": ") + p.why);
  }
  const Status headers = trainer::TrainingSamples(scratch.dataset).status();
  return headers.ok() ? headers : Status::InvalidArgument(headers.message());
}

namespace {

// The name of the local file system `path` (or its nearest existing folder) is on: "ext4",
// "xfs", ...; empty for a network one (NFS, Lustre, ...) or one not known to be local.
std::string LocalFileSystem(std::filesystem::path path) {
  std::error_code ec;
  while (!path.empty() && !std::filesystem::exists(path, ec)) path = path.parent_path();
  struct statfs st {};
  if (path.empty() || ::statfs(path.c_str(), &st) != 0) return "";
  static const std::pair<unsigned long, const char*> kLocal[] = {
      {0xEF53, "ext4"},          {0x58465342, "xfs"}, {0x9123683E, "btrfs"}, {0x01021994, "tmpfs"},
      {0x794C7630, "overlayfs"}, {0x2FC12FC1, "zfs"}, {0xF2F52010, "f2fs"},  {0x858458F6, "ramfs"}};
  for (const auto& [magic, name] : kLocal) {
    if (static_cast<unsigned long>(st.f_type) == magic) return name;
  }
  return "";
}

class TrainerKind final : public TrialKindRules {
 public:
  explicit TrainerKind(const SweepConfig& config) : config_(config) {}
  TrialKind kind() const override { return TrialKind::kTrainer; }
  std::optional<double> Length(const nlohmann::json& params) override {
    std::optional<trainer::TrainOptions> options = Options(params);
    if (!options) return std::nullopt;
    return static_cast<double>(options->epochs);
  }
  // The options the trainer counts as deciding what it learns, the test set, and normalize
  // as it applies when unset.
  std::optional<nlohmann::json> Computes(const nlohmann::json& params) override {
    std::optional<trainer::TrainOptions> options = Options(params);
    if (!options) return std::nullopt;
    nlohmann::json computes = nlohmann::json::parse(trainer::TrainingConfig(*options));
    computes["normalize"] = options->normalize.value_or(options->model == "cnn");
    computes["dataset"]["test_images"] = options->dataset.test_images;
    computes["dataset"]["test_labels"] = options->dataset.test_labels;
    if (!config_.trainer.contains("seed") && !params.contains("seed")) computes["seed"] = nullptr;
    return computes;
  }
  // Multiply-adds a trial will do (0 when its parameters are unreadable: it will fail at its
  // start, which may as well come late).
  double Work(const nlohmann::json& params) override {
    std::optional<trainer::TrainOptions> options = Options(params);
    return options ? trainer::EstimatedWork(*options) : 0;
  }
  nlohmann::json Settings(const TrialPlace& place) const override {
    nlohmann::json settings = config_.trainer;
    settings["checkpoint_path"] = place.checkpoint;
    if (!settings.contains("checkpoint_every")) settings["checkpoint_every"] = 1;
    return settings;
  }
  bool checkpoints() const override { return true; }
  // Its checkpoint keeps the steps of an epoch stopped part-way.
  std::string HowTrialsStop() const override {
    return " at their next step (their checkpoints keep it); interrupt again to stop them at "
           "once";
  }
  // A trial that moves to another agent (its agent stopped, preempted, lost) goes on from its
  // checkpoint only where every agent reaches the same folder.
  void WarnRemote(std::ostream& log) const override {
    const std::string& dir = config_.trial.checkpoint_dir;
    std::string why;
    if (dir.empty() || std::filesystem::path(dir).is_relative()) {
      why = dir.empty() ? "trial.checkpoint_dir is not set, so each agent keeps checkpoints in its "
                          "own folder"
                        : "trial.checkpoint_dir '" + dir +
                              "' is relative, so each agent keeps checkpoints in its own folder";
    } else if (const std::string fs = LocalFileSystem(dir); !fs.empty()) {
      why = "trial.checkpoint_dir '" + dir + "' is on a local disk here (" + fs +
            "), so unless every agent mounts shared storage there, each keeps its own";
    }
    if (!why.empty()) {
      log << "sweep: " << config_.path << ": " << why
          << ": a trial moved to another agent starts again from epoch 1 (set checkpoint_dir "
             "to a folder every server shares; docs/clusters.md)\n";
    }
  }
  // backend = "cuda" fails a trial as it starts on a CPU slot, as it would every trial here.
  // The first trials the sweep draws show whether a varied backend asks for it.
  Status CheckHere(bool gpus) const override {
    if (gpus) return Status::Ok();
    const auto backend_of = [](const nlohmann::json& options) {
      const auto b = options.find("backend");
      return b != options.end() && b->is_string() ? b->get<std::string>() : "";
    };
    std::string why;
    if (backend_of(config_.trainer) == "cuda") why = "trainer.backend = \"cuda\"";
    const search::Parameter* param = config_.search.space.Find("backend");
    const bool constant_backend =
        param != nullptr && param->distribution.kind == search::Distribution::Kind::kConstant;
    Result<std::unique_ptr<search::Sampler>> sampler = MakeSampler(config_);
    const int64_t n = std::min<int64_t>(config_.sweep.max_trials, 10000);
    for (int64_t i = 0; sampler.ok() && i < n; ++i) {
      const std::optional<nlohmann::json> params = (*sampler)->Sample(i);
      if (!params) break;
      const std::string backend = backend_of(*params);
      if (backend.empty()) continue;
      why = backend != "cuda" ? ""
            : constant_backend
                ? "parameters.backend = \"cuda\""
                : "parameters.backend: trial " + std::to_string(i) + " draws \"cuda\"";
      if (!why.empty()) break;
    }
    if (why.empty()) return Status::Ok();
    const std::string& where = config_.where.backend.empty() ? config_.path : config_.where.backend;
    return Status::InvalidArgument(
        where + ": " + why +
        ", and this machine has no GPU (its slots are CPU cores): such trials would fail as "
        "they start here. Train on the CPU with backend = \"auto\" or \"cpu\", or run the "
        "trials on GPU agents with --listen and --no-local");
  }
  // A cache folder the trials here cannot use costs every one of them the dataset's decoding
  // (they go on without it).
  void WarnHere(std::ostream& log) const override {
    const auto set = config_.trainer.find("cache_dir");
    const std::string dir =
        set != config_.trainer.end() && set->is_string() ? set->get<std::string>() : "";
    if (const std::string why = UnusableCacheDir(dir); !why.empty()) {
      log << "sweep: " << config_.path << ": trainer.cache_dir '" << dir
          << "' cannot be used here (" << why << "): each trial decodes the dataset itself\n";
    }
  }

 private:
  // A trial's options: [trainer], then its parameters; none when they do not apply.
  std::optional<trainer::TrainOptions> Options(const nlohmann::json& params) {
    if (!base_) {  // [trainer] once (a dataset directory is resolved on disk), not per trial
      base_.emplace();
      for (const auto& [key, value] : config_.trainer.items()) {
        (void)trainer::ApplyOption(&*base_, key, value);
      }
    }
    trainer::TrainOptions options = *base_;
    for (const auto& [key, value] : params.items()) {
      if (!trainer::ApplyOption(&options, key, value).ok()) return std::nullopt;
    }
    return options;
  }

  const SweepConfig& config_;
  std::optional<trainer::TrainOptions> base_;
};

}  // namespace

std::unique_ptr<TrialKindRules> MakeTrainerKind(const SweepConfig& config) {
  return std::make_unique<TrainerKind>(config);
}

}  // namespace sweep
