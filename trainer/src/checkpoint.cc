// Checkpoint files. Owned by the trainer. Layout (little-endian, as the hosts we run on):
//   "SWEEPCK1"                     8 bytes, magic and format version; "SWEEPCK2" for a file
//                                  with `partial`, which an older reader must refuse rather
//                                  than read as the end of `epoch`
//   header_bytes                   uint32
//   header                         JSON: config, epoch, step, rng_seed, replicas, params,
//                                  optimizer_buffers; model (the layer description) and stats
//                                  (batch norm's running statistics; both absent in files from
//                                  before them); fp16 also loss_scale {scale, good_steps,
//                                  skipped} (absent in files from before it: start afresh);
//                                  report, the last epoch's EpochReport (absent in older files;
//                                  a figure that is NaN is left out); partial (PartialEpoch);
//                                  set_samples (absent in older files)
//   params                         float[params]
//   optimizer buffers              optimizer_buffers x float[params]
//   running statistics             float[stats]
//   crc32                          uint32 over everything before it
#include "checkpoint.h"

#include <zlib.h>

#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <vector>

#include "file_util.h"

namespace sweep::trainer {
namespace {

using json = nlohmann::json;

constexpr char kMagic[8] = {'S', 'W', 'E', 'E', 'P', 'C', 'K', '1'};
constexpr char kPartialMagic[8] = {'S', 'W', 'E', 'E', 'P', 'C', 'K', '2'};
// A header is a few hundred bytes; anything near this is not one of ours.
constexpr uint32_t kMaxHeaderBytes = 1 << 20;

uint32_t Crc(uint32_t crc, const void* data, size_t size) {
  const auto* p = static_cast<const Bytef*>(data);
  while (size > 0) {  // zlib takes uInt lengths
    const uInt n = static_cast<uInt>(std::min<size_t>(size, 1u << 30));
    crc = static_cast<uint32_t>(crc32(crc, p, n));
    p += n;
    size -= n;
  }
  return crc;
}

Status Bad(const std::string& path, const std::string& why) {
  return Status::Corruption(path + ": not a valid checkpoint: " + why);
}

// The report's figures; JSON has no NaN (no validation set), so those are left out.
json ReportJson(const EpochReport& r) {
  json j = {{"epoch", r.epoch}, {"step", r.step}, {"skipped_steps", r.skipped_steps}};
  const std::pair<const char*, double> figures[] = {
      {"train_loss", r.train_loss},   {"val_loss", r.val_loss},
      {"val_acc", r.val_acc},         {"samples_per_s", r.samples_per_s},
      {"data_wait_s", r.data_wait_s}, {"epoch_s", r.epoch_s},
      {"allreduce_s", r.allreduce_s}, {"lr", r.lr}};
  for (const auto& [name, value] : figures) {
    if (std::isfinite(value)) j[name] = value;
  }
  return j;
}

EpochReport ReportFromJson(const json& j) {
  EpochReport r;
  for (const char* name : {"epoch", "step", "skipped_steps"}) {
    if (!j.at(name).is_number_integer()) {
      throw std::invalid_argument(std::string(name) + " is not an integer: " + j.at(name).dump());
    }
  }
  r.epoch = j.at("epoch").get<int>();
  r.step = j.at("step").get<int64_t>();
  r.skipped_steps = j.at("skipped_steps").get<int64_t>();
  constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
  auto figure = [&](const char* name) {
    return j.contains(name) ? j.at(name).get<double>() : kNaN;
  };
  r.train_loss = figure("train_loss");
  r.val_loss = figure("val_loss");
  r.val_acc = figure("val_acc");
  r.samples_per_s = figure("samples_per_s");
  r.data_wait_s = figure("data_wait_s");
  r.epoch_s = figure("epoch_s");
  r.allreduce_s = figure("allreduce_s");
  r.lr = figure("lr");
  return r;
}

json PartialJson(const PartialEpoch& p) {
  return {{"steps", p.steps},
          {"steps_per_epoch", p.steps_per_epoch},
          {"set_samples", p.set_samples},
          {"loss_sum", p.loss_sum},
          {"skipped_steps", p.skipped_steps},
          {"train_s", p.train_s},
          {"data_wait_s", p.data_wait_s},
          {"allreduce_s", p.allreduce_s},
          {"epoch_s", p.epoch_s}};
}

PartialEpoch PartialFromJson(const json& j) {
  PartialEpoch p;
  for (const char* name : {"steps", "steps_per_epoch", "set_samples", "skipped_steps"}) {
    if (!j.at(name).is_number_integer()) {
      throw std::invalid_argument(std::string(name) + " is not an integer: " + j.at(name).dump());
    }
  }
  p.steps = j.at("steps").get<int64_t>();
  p.steps_per_epoch = j.at("steps_per_epoch").get<int64_t>();
  p.set_samples = j.at("set_samples").get<int64_t>();
  p.loss_sum = j.at("loss_sum").get<double>();
  p.skipped_steps = j.at("skipped_steps").get<int64_t>();
  p.train_s = j.at("train_s").get<double>();
  p.data_wait_s = j.at("data_wait_s").get<double>();
  p.allreduce_s = j.at("allreduce_s").get<double>();
  p.epoch_s = j.at("epoch_s").get<double>();
  if (p.steps < 1 || p.steps >= p.steps_per_epoch || p.set_samples < 1 || p.skipped_steps < 0 ||
      p.skipped_steps > p.steps || !std::isfinite(p.loss_sum)) {
    throw std::invalid_argument(j.dump());
  }
  return p;
}

}  // namespace

namespace {

// A dataset file as one name whatever way it was given: absolute, without "." or "..", without a
// trailing '/'. A relative path is the current folder's, as the trainer opens it; kept relative,
// it would match the same words in another folder.
std::string OneName(const std::string& path) {
  if (path.empty()) return path;
  std::error_code ec;
  std::filesystem::path p = std::filesystem::absolute(path, ec);
  if (ec) return path;
  p = p.lexically_normal();
  if (!p.has_filename() && p.has_parent_path() && p != p.root_path()) p = p.parent_path();
  return p.string();
}

// A configuration's dataset files by OneName, for one written before they were.
json WithOneNames(json config) {
  if (!config.is_object() || !config.contains("dataset") || !config["dataset"].is_object()) {
    return config;
  }
  for (const char* key : {"train_images", "train_labels"}) {
    json& path = config["dataset"][key];
    if (path.is_string()) path = OneName(path.get<std::string>());
  }
  return config;
}

}  // namespace

std::string TrainingConfig(const TrainOptions& o) {
  json j = {
      {"dataset",
       {{"format", o.dataset.format},
        {"train_images", OneName(o.dataset.train_images)},
        {"train_labels", OneName(o.dataset.train_labels)},
        {"label_column", o.dataset.label_column}}},
      {"model", o.model},
      {"hidden", o.hidden},
      {"activation", o.activation},
      {"init", o.init},
      {"dropout", o.dropout},
      {"optimizer", o.optimizer},
      {"lr", o.lr},
      {"weight_decay", o.weight_decay},
      {"lr_schedule", o.lr_schedule},
      {"warmup_epochs", o.warmup_epochs},
      {"scale_lr", o.scale_lr},
      {"batch_size", o.batch_size},
      {"accum_steps", o.accum_steps},
      {"validation_fraction", o.validation_fraction},
      {"max_train_samples", o.max_train_samples},
      {"precision", o.precision},
      {"seed", o.seed},
  };
  // Only when given, so a checkpoint written before the key existed still matches.
  if (o.dataset.header) j["dataset"]["header"] = *o.dataset.header;
  if (o.optimizer == "sgd") {
    j["momentum"] = o.momentum;
    j["nesterov"] = o.nesterov;
  } else {
    j["beta1"] = o.beta1;
    j["beta2"] = o.beta2;
    j["eps"] = o.eps;
  }
  if (o.lr_schedule == "step") {
    j["step_size"] = o.step_size;
    j["gamma"] = o.gamma;
  }
  if (o.lr_schedule == "cosine") j["epochs"] = o.epochs;
  if (o.scale_lr) j["base_batch"] = o.base_batch;
  // Keys that came with convolutional models: only when they change what is computed, so a
  // checkpoint of an MLP written before them still matches.
  if (o.model == "cnn") {
    j["channels"] = o.channels;
    j["convs_per_stage"] = o.convs_per_stage;
    j["kernel_size"] = o.kernel_size;
    j["batch_norm"] = o.batch_norm;
    j["residual"] = o.residual;
    j["pool"] = o.pool;
    j["global_pool"] = o.global_pool;
    if (o.batch_norm) {
      j["bn_momentum"] = o.bn_momentum;
      j["bn_eps"] = o.bn_eps;
    }
  }
  if (o.normalize.has_value()) j["normalize"] = *o.normalize;
  if (o.augment_crop > 0) j["augment_crop"] = o.augment_crop;
  if (o.augment_flip) j["augment_flip"] = true;
  if (o.random_erasing > 0) j["random_erasing"] = o.random_erasing;
  if (o.label_smoothing > 0) j["label_smoothing"] = o.label_smoothing;
  if (!o.dataset.shape.empty()) j["dataset"]["shape"] = o.dataset.shape;
  // What a folder set decodes to (a format that came later: only for it).
  if (o.dataset.format == "folder") {
    j["dataset"]["image_size"] = o.dataset.image_size;
    j["dataset"]["on_bad_file"] = o.dataset.on_bad_file;
  }
  return j.dump();
}

namespace {

Status WriteInCheckpointFolder(const std::string& path, const std::vector<ByteRange>& pieces) {
  // A trial run by a remote agent gets the coordinator's path, which may not exist there yet.
  std::error_code ec;
  const std::filesystem::path dir = std::filesystem::path(path).parent_path();
  if (!dir.empty()) std::filesystem::create_directories(dir, ec);
  // Whatever stops the write (disk full, a quota, a read-only file system, a file-size limit)
  // is the machine's trouble, not the trial's: kUnavailable, so that the trial can go on from
  // its last checkpoint once that is put right.
  if (ec) {
    return Status::Unavailable(dir.string() +
                               ": cannot create the checkpoint directory: " + ec.message());
  }
  const Status written = WriteFileAtomically(path, pieces, Publish::kReplace);
  if (written.code() == Status::Code::kIoError) {
    return Status::Unavailable("cannot write the checkpoint: " + written.message());
  }
  return written;
}

}  // namespace

Status WriteCheckpoint(const std::string& path, const Checkpoint& c) {
  json header = {{"config", c.config},
                 {"epoch", c.epoch},
                 {"step", c.step},
                 {"rng_seed", c.rng_seed},
                 {"replicas", c.replicas},
                 {"params", c.state.params.size()},
                 {"optimizer_buffers", c.state.optimizer.size()}};
  if (c.state.loss_scale.has_value()) {
    const LossScaleState& ls = *c.state.loss_scale;
    header["loss_scale"] = {
        {"scale", ls.scale}, {"good_steps", ls.good_steps}, {"skipped", ls.skipped}};
  }
  if (c.report.has_value()) header["report"] = ReportJson(*c.report);
  if (c.model.has_value()) header["model"] = *c.model;
  if (!c.state.stats.empty()) header["stats"] = c.state.stats.size();
  if (c.partial.has_value()) header["partial"] = PartialJson(*c.partial);
  if (c.set_samples > 0) header["set_samples"] = c.set_samples;
  const std::string text = header.dump();
  const uint32_t header_bytes = static_cast<uint32_t>(text.size());
  std::vector<ByteRange> pieces = {{c.partial.has_value() ? kPartialMagic : kMagic, sizeof kMagic},
                                   {&header_bytes, sizeof header_bytes},
                                   {text.data(), text.size()},
                                   {c.state.params.data(), c.state.params.size() * sizeof(float)}};
  for (const std::vector<float>& o : c.state.optimizer) {
    if (o.size() != c.state.params.size()) {
      return Status::Internal(path + ": optimizer state and weights differ in size");
    }
    pieces.push_back({o.data(), o.size() * sizeof(float)});
  }
  if (!c.state.stats.empty()) {
    pieces.push_back({c.state.stats.data(), c.state.stats.size() * sizeof(float)});
  }
  uint32_t crc = Crc(0, nullptr, 0);
  for (const ByteRange& p : pieces) crc = Crc(crc, p.data, p.size);
  pieces.push_back({&crc, sizeof crc});
  return WriteInCheckpointFolder(path, pieces);
}

Status ProbeCheckpointPath(const std::string& path) {
  const std::string probe = path + ".probe";
  const char byte = 0;
  SWEEP_RETURN_IF_ERROR(WriteInCheckpointFolder(probe, {{&byte, 1}}));
  std::error_code ec;
  std::filesystem::remove(probe, ec);
  return Status::Ok();
}

void RemoveAbandonedCheckpointWrites(const std::string& path) {
  const std::filesystem::path at(path);
  const std::string name = at.filename().string();
  RemoveAbandonedTemporaries(at.parent_path().string(), [&](std::string_view target) {
    return target == name || target == name + ".probe";
  });
}

Result<Checkpoint> ReadCheckpoint(const std::string& path) {
  // A folder opens as a stream and fails on the first read, with the library's words only.
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) {
    return Status::InvalidArgument(path + ": checkpoint_path names a directory, not a file");
  }
  errno = 0;
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    // A file where a folder of the path should be: there is no checkpoint (writing one says why
    // it cannot be there).
    if (errno == ENOENT || errno == ENOTDIR) return Status::NotFound(path + ": no checkpoint");
    // The machine's refusal (permissions, an I/O error), not the file's content.
    return Status::Unavailable(path + ": cannot open the checkpoint: " + std::strerror(errno));
  }
  // istream::read, not a streambuf iterator: a read error (EIO) sets badbit there, where the
  // iterator lets the library's exception through with no file named.
  std::vector<char> bytes;
  char chunk[1 << 16];
  errno = 0;
  while (in.read(chunk, sizeof chunk) || in.gcount() > 0) {
    bytes.insert(bytes.end(), chunk, chunk + in.gcount());
    if (!in) break;
  }
  if (in.bad()) {
    return Status::Unavailable(path + ": cannot read the checkpoint" +
                               (errno != 0 ? std::string(": ") + std::strerror(errno) : ""));
  }
  const size_t fixed = sizeof kMagic + sizeof(uint32_t);
  const bool partial_magic =
      bytes.size() >= sizeof kMagic && std::memcmp(bytes.data(), kPartialMagic, 8) == 0;
  if (bytes.size() < fixed + sizeof(uint32_t) ||
      (std::memcmp(bytes.data(), kMagic, 8) != 0 && !partial_magic)) {
    return Bad(path, "no checkpoint header (" + std::to_string(bytes.size()) + " bytes)");
  }
  // The checksum first: any damage shows as this one message, whatever it hit.
  uint32_t stored = 0;
  std::memcpy(&stored, bytes.data() + bytes.size() - sizeof stored, sizeof stored);
  if (Crc(Crc(0, nullptr, 0), bytes.data(), bytes.size() - sizeof stored) != stored) {
    return Status::Corruption(path +
                              ": checkpoint checksum mismatch (the file is damaged or cut short)");
  }
  uint32_t header_bytes = 0;
  std::memcpy(&header_bytes, bytes.data() + sizeof kMagic, sizeof header_bytes);
  if (header_bytes > kMaxHeaderBytes || fixed + header_bytes > bytes.size() - sizeof stored) {
    return Bad(path, "header length " + std::to_string(header_bytes));
  }
  Checkpoint c;
  size_t n = 0, buffers = 0, stats = 0;
  try {
    const json h = json::parse(bytes.begin() + fixed, bytes.begin() + fixed + header_bytes);
    c.config = h.at("config").get<std::string>();
    c.epoch = h.at("epoch").get<int>();
    c.step = h.at("step").get<int64_t>();
    c.rng_seed = h.at("rng_seed").get<uint64_t>();
    c.replicas = h.at("replicas").get<int>();
    n = h.at("params").get<size_t>();
    buffers = h.at("optimizer_buffers").get<size_t>();
    if (h.contains("model")) c.model = h.at("model");
    if (h.contains("stats")) stats = h.at("stats").get<size_t>();
    if (h.contains("set_samples")) c.set_samples = h.at("set_samples").get<int64_t>();
    if (h.contains("loss_scale")) {
      const json& ls = h.at("loss_scale");
      c.state.loss_scale =
          LossScaleState{ls.at("scale").get<float>(), ls.at("good_steps").get<int32_t>(),
                         ls.at("skipped").get<uint64_t>()};
      if (!(c.state.loss_scale->scale > 0) || !std::isfinite(c.state.loss_scale->scale) ||
          c.state.loss_scale->good_steps < 0) {
        return Bad(path, "loss_scale " + ls.dump());
      }
    }
    if (h.contains("report")) {
      try {
        c.report = ReportFromJson(h.at("report"));
      } catch (const std::exception& e) {
        return Bad(path, std::string("report: ") + e.what());
      }
    }
    if (h.contains("partial") != partial_magic) {
      return Bad(path, partial_magic ? "no partial epoch in a file marked with one"
                                     : "a partial epoch in a file not marked with one");
    }
    if (partial_magic) {
      try {
        c.partial = PartialFromJson(h.at("partial"));
      } catch (const std::exception& e) {
        return Bad(path, std::string("partial: ") + e.what());
      }
    }
    // The report is of the last whole epoch, before any steps of a partial one.
    const int64_t epoch_end = c.step - (c.partial ? c.partial->steps : 0);
    if (epoch_end < 0) {
      return Bad(path, "a partial epoch of " + std::to_string(c.partial->steps) +
                           " steps in a checkpoint at step " + std::to_string(c.step));
    }
    if (c.report && (c.report->epoch != c.epoch || c.report->step != epoch_end)) {
      return Bad(path, "report of epoch " + std::to_string(c.report->epoch) + ", step " +
                           std::to_string(c.report->step) + " in a checkpoint of epoch " +
                           std::to_string(c.epoch) + ", step " + std::to_string(epoch_end));
    }
  } catch (const std::exception& e) {
    return Bad(path, std::string("header: ") + e.what());
  }
  const size_t payload = bytes.size() - sizeof stored - fixed - header_bytes;
  if (buffers > 16 || n > std::numeric_limits<size_t>::max() / sizeof(float) / 17 ||
      stats > std::numeric_limits<uint32_t>::max() ||
      payload != n * sizeof(float) * (1 + buffers) + stats * sizeof(float)) {
    return Bad(path, std::to_string(payload) + " bytes of state for " + std::to_string(n) +
                         " parameters and " + std::to_string(buffers) + " optimizer buffers");
  }
  const char* at = bytes.data() + fixed + header_bytes;
  c.state.params.resize(n);
  std::memcpy(c.state.params.data(), at, n * sizeof(float));
  at += n * sizeof(float);
  c.state.optimizer.resize(buffers);
  for (std::vector<float>& o : c.state.optimizer) {
    o.resize(n);
    std::memcpy(o.data(), at, n * sizeof(float));
    at += n * sizeof(float);
  }
  c.state.stats.resize(stats);
  if (stats > 0) std::memcpy(c.state.stats.data(), at, stats * sizeof(float));
  return c;
}

Status CheckSameModel(const std::string& path, const Checkpoint& ckpt, const ModelSpec& model) {
  const auto refuse = [&](const std::string& why) {
    return Status::InvalidArgument(path + ": checkpoint holds another model (" + why +
                                   "); delete it or point checkpoint_path elsewhere");
  };
  if (!ckpt.model.has_value()) {
    // Written before models were layers: an MLP, in the layout ModelSpec::Mlp keeps.
    MlpView mlp;
    if (!AsMlp(model, &mlp)) {
      return refuse("an MLP from an older version, and this model is not an MLP");
    }
  } else {
    const Result<ModelSpec> theirs = ModelSpec::FromJson(*ckpt.model);
    if (!theirs.ok()) return Bad(path, "model: " + theirs.status().message());
    if (theirs->ToJson() != model.ToJson()) {
      return refuse(
          "its layers differ from this model's: " + std::to_string(theirs->layers.size()) +
          " layers against " + std::to_string(model.layers.size()));
    }
  }
  if (ckpt.state.params.size() != static_cast<size_t>(model.num_params)) {
    return refuse(std::to_string(ckpt.state.params.size()) + " parameters, this model has " +
                  std::to_string(model.num_params));
  }
  if (!ckpt.state.stats.empty() &&
      ckpt.state.stats.size() != static_cast<size_t>(model.num_buffers)) {
    return refuse(std::to_string(ckpt.state.stats.size()) +
                  " batch norm statistics, this model has " + std::to_string(model.num_buffers));
  }
  return Status::Ok();
}

Status CheckSameConfig(const std::string& path, const Checkpoint& ckpt, const std::string& config) {
  if (ckpt.config == config) return Status::Ok();
  std::string diff;
  try {
    const json mine = json::parse(config), theirs = WithOneNames(json::parse(ckpt.config));
    if (mine == theirs) return Status::Ok();
    auto differ = [&diff](const std::string& key, const json& value, const json& other) {
      if (!diff.empty()) diff += ", ";
      diff += key + " " + (value.is_null() ? "unset" : value.dump()) + " here, " +
              (other.is_null() ? "unset" : other.dump()) + " in the checkpoint";
    };
    for (const auto& [key, value] : mine.items()) {
      const json other = theirs.contains(key) ? theirs[key] : json();
      if (other == value) continue;
      if (!value.is_object() || !other.is_object()) {
        differ(key, value, other);
        continue;
      }
      // The dataset's fields one by one: "dataset.train_images ... here".
      for (const auto& [inner, v] : value.items()) {
        const json o = other.contains(inner) ? other[inner] : json();
        if (o != v) differ(key + "." + inner, v, o);
      }
      for (const auto& [inner, o] : other.items()) {
        if (!value.contains(inner)) differ(key + "." + inner, json(), o);
      }
    }
    for (const auto& [key, value] : theirs.items()) {
      if (mine.contains(key)) continue;
      if (!diff.empty()) diff += ", ";
      diff += key + " unset here, " + value.dump() + " in the checkpoint";
    }
  } catch (const std::exception&) {
    diff = "its configuration does not parse";
  }
  return Status::InvalidArgument(path +
                                 ": checkpoint belongs to a different training configuration (" +
                                 diff + "); delete it or point checkpoint_path elsewhere");
}

}  // namespace sweep::trainer
