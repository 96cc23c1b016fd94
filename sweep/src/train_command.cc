// `sweep train`: the trial a config and its --set values make, checked as a sweep would check
// it, run in this process; its reports printed as they come, its outcome as the exit code.
#include "train_command.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <iostream>
#include <string>
#include <thread>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "base/clock.h"
#include "base/utf8.h"
#include "executor/trial.h"
#include "output.h"
#include "sweep/config.h"
#include "sweep/coordinator.h"
#include "trainer/trainer.h"

namespace sweep {

namespace {

using nlohmann::json;

// One `--set KEY=VALUE` (`s`), checked as the trial's kind checks a value, into task->params.
// Returns KEY; `known` holds the keys --set may give.
Result<std::string> ApplySet(const SweepConfig& cfg, const std::vector<std::string>& known,
                             const std::string& s, executor::TrialTask* task) {
  auto eq = s.find('=');
  if (eq == std::string::npos || eq == 0) {
    return Status::InvalidArgument("--set " + s + ": expected KEY=VALUE");
  }
  std::string key = s.substr(0, eq);
  if (std::find(known.begin(), known.end(), key) == known.end()) {
    std::string msg = "--set " + s + ": unknown key '" + key + "'";
    if (key == "gpus" && cfg.trial.kind == TrialKind::kTrainer) {
      // A [trial] setting, not a hyperparameter: what it means here has options of its own.
      msg +=
          "; trial.gpus is the sweep's slots per trial: here, --set replicas=N trains N "
          "data-parallel replicas (on GPUs 0..N-1, or --set devices=[...]) and --threads N "
          "gives the CPU's threads";
    } else if (std::string hint = DidYouMean(key, known); !hint.empty()) {
      msg += "; did you mean '" + hint + "'?";
    }
    return Status::InvalidArgument(msg);
  }
  if (!IsValidUtf8(s)) {
    return Status::InvalidArgument(
        "--set " + Utf8Text(s) +
        ": not valid UTF-8; sweep keeps values as text (a path: rename the folder, or reach "
        "it through a link whose name is UTF-8)");
  }
  json value = ParseSetValue(s.substr(eq + 1));
  if (cfg.trial.kind == TrialKind::kTrainer) {
    Status ok = CheckTrainerOption(key, value);
    // The files it names, as a config's are checked: here, before the run.
    if (ok.ok() && key == "dataset") ok = CheckDatasetHere(value);
    if (!ok.ok()) return Status::InvalidArgument("--set " + s + ": " + ok.message());
  } else if (!value.is_number() || !std::isfinite(value.get<double>())) {
    return Status::InvalidArgument("--set " + s + ": expected a finite number");
  }
  task->params[key] = value;
  return key;
}

// The trial `sweep train` runs: the config's settings and constant parameters, then each --set.
// `varied` gets the parameters the config varies that no --set gave.
Result<executor::TrialTask> MakeTrainTask(const SweepConfig& cfg, const std::string& config_path,
                                          const std::vector<std::string>& sets, bool other_dataset,
                                          int threads, std::vector<std::string>* varied) {
  executor::TrialTask task;
  task.kind = cfg.trial.kind;
  task.settings = cfg.trial.kind == TrialKind::kTrainer ? cfg.trainer : cfg.function;
  if (other_dataset) task.settings.erase("dataset");
  task.params = json::object();
  task.seed = TrialSeed(cfg.sweep.seed, 0);
  task.threads = threads > 0 ? threads : cfg.trial.slots;
  for (const auto& p : cfg.search.space.parameters()) {
    if (p.distribution.kind == search::Distribution::Kind::kConstant) {
      task.params[p.name] = p.distribution.values[0];
    } else {
      varied->push_back(p.name);
    }
  }
  std::vector<std::string> known;
  if (cfg.trial.kind == TrialKind::kTrainer) {
    known = trainer::OptionKeys();
  } else {
    for (const auto& p : cfg.search.space.parameters()) known.push_back(p.name);
  }
  for (const std::string& s : sets) {
    SWEEP_ASSIGN_OR_RETURN(std::string key, ApplySet(cfg, known, s, &task));
    std::erase(*varied, key);
  }
  // Each value was checked alone above; here, how they go together (batch_size >= replicas,
  // nesterov with momentum, ...), as the trial would find at its start.
  if (cfg.trial.kind == TrialKind::kTrainer) {
    if (Status v = executor::CheckTrainerTask(task); !v.ok()) {
      return Status::InvalidArgument(config_path + (sets.empty() ? "" : " with --set") +
                                     ": the trainer options do not go together: " + v.message());
    }
  }
  if (cfg.trial.kind == TrialKind::kFunction && !varied->empty()) {
    // Each one missing, so that one more try runs.
    std::string names, flags;
    for (size_t i = 0; i < varied->size(); ++i) {
      const std::string& name = (*varied)[i];
      names += (i == 0 ? "" : i + 1 == varied->size() ? " and " : ", ") + name;
      flags += (i == 0 ? "--set " : " --set ") + name + "=VALUE";
    }
    return Status::InvalidArgument("give a value for " + names + " with " + flags);
  }
  return task;
}

// Said with --json too (on stderr): the run's parameters are otherwise not what the reader of
// the config expects.
void SayWhatTrainChose(const SweepConfig& cfg, const executor::TrialTask& task,
                       std::vector<std::string> varied) {
  const bool seed_varied = std::erase(varied, "seed") > 0;
  if (!varied.empty()) {
    std::cerr << "using the trainer's defaults for";
    for (const auto& v : varied) std::cerr << " " << v;
    std::cerr << " (vary them with --set)\n";
  }
  if (seed_varied) {
    std::cerr << "using seed " << task.seed
              << " (the config varies it: pick one with --set seed=N)\n";
  }
  if (cfg.trial.kind == TrialKind::kTrainer) {
    const json& from = task.params.contains("cache_dir") ? task.params : task.settings;
    const std::string dir = from.contains("cache_dir") && from["cache_dir"].is_string()
                                ? from["cache_dir"].get<std::string>()
                                : "";
    if (const std::string why = UnusableCacheDir(dir); !why.empty()) {
      std::cerr << "cache_dir '" << dir << "' cannot be used here (" << why
                << "): the dataset is decoded in memory\n";
    }
  }
}

// `--json`: as `sweep trials --json` gives a trial (epochs: the resource consumed), with every
// report. Named as the store names a trial's state: a run stopped by Ctrl-C is interrupted.
json TrainResultJson(const executor::TrialTask& task, TrialKind kind,
                     const executor::TrialOutcome& out, const json& last, double consumed,
                     const json& reports) {
  using Kind = executor::TrialOutcome::Kind;
  const char* status = out.kind == Kind::kCompleted ? "completed"
                       : out.kind == Kind::kFailed  ? "failed"
                                                    : "interrupted";
  json j = {{"status", status},
            {"params", task.params},
            {"metrics", last},
            {"epochs", consumed},
            {"reports", reports}};
  for (const char* k : {"samples_per_s", "data_wait_s", "test_acc"}) {
    j[k] = last.contains(k) ? last[k] : json(nullptr);
  }
  if (!out.error.empty()) j["error"] = out.error;
  if (out.info.is_object() && !out.info.empty()) j["info"] = out.info;  // as `show --json`'s
  // Mean over epochs is the figure of merit for throughput; the last epoch alone is noisy.
  double sps = 0, wait = 0;
  for (const auto& e : reports) {
    sps += e["metrics"].value("samples_per_s", 0.0);
    wait += e["metrics"].value("data_wait_s", 0.0);
  }
  if (!reports.empty() && kind == TrialKind::kTrainer) {
    j["samples_per_s"] = sps / static_cast<double>(reports.size());
    j["data_wait_s"] = wait;
  }
  return j;
}

// Runs `task` here until it ends or Ctrl-C stops it, printing each report (or, `as_json`, one
// object at the end); the exit code says how it ended.
int RunTrainTask(const executor::TrialTask& task, TrialKind kind, bool as_json) {
  json reports = json::array();
  json last = json::object();
  double consumed = 0;
  auto sink = [&](int64_t step, double epoch, const json& metrics) {
    // Shaped as `sweep show --json` gives a trial's reports.
    reports.push_back(
        {{"step", step}, {"epoch", epoch}, {"time", UnixSeconds()}, {"metrics", metrics}});
    consumed = epoch;
    for (auto& [k, v] : metrics.items()) last[k] = v;
    if (!as_json) {
      std::printf("epoch %-4g", epoch);
      for (auto& [k, v] : metrics.items()) {
        if (v.is_number()) std::printf("  %s %.5g", k.c_str(), v.get<double>());
      }
      std::printf("\n");
      std::fflush(stdout);
    }
  };
  StopTrainOnSignals();
  // Says at once what a Ctrl-C does: without a checkpoint_path a trainer run finishes its epoch
  // first, which may take minutes.
  std::string checkpoint_path;
  for (const json* t : {&task.params, &task.settings}) {
    if (checkpoint_path.empty() && t->is_object() && t->contains("checkpoint_path") &&
        (*t)["checkpoint_path"].is_string()) {
      checkpoint_path = (*t)["checkpoint_path"].get<std::string>();
    }
  }
  std::atomic<bool> done{false};
  std::thread announce([&] {
    while (!done.load() && !InterruptRequested().load()) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    // A stop the run heard before this thread did is said all the same, before its outcome.
    if (!InterruptRequested().load()) return;
    std::cerr << "sweep: stopping "
              << (kind != TrialKind::kTrainer ? "after the current step"
                  : checkpoint_path.empty()
                      ? "at the end of this epoch (without a checkpoint_path a stop within it "
                        "would lose it)"
                      : "at the next step (" + checkpoint_path + " keeps it)")
              << "; Ctrl-C again stops at once, unsaved\n";
  });
  executor::TrialOutcome out = executor::RunTrial(task, sink, InterruptRequested());
  done = true;
  announce.join();
  for (auto& [k, v] : out.end_metrics.items()) last[k] = v;
  if (out.resumed_from_epoch > 0 || out.resumed_epoch_steps > 0) {
    // Went on from checkpoint_path: epochs before it were trained by an earlier run.
    consumed = std::max(consumed, static_cast<double>(out.resumed_from_epoch));
    std::cerr << "went on from the checkpoint "
              << (out.resumed_epoch_steps > 0
                      ? trainer::WithinEpoch(out.resumed_from_epoch + 1, out.resumed_epoch_steps,
                                             out.steps_per_epoch)
                      : "at epoch " + std::to_string(out.resumed_from_epoch))
              << (reports.empty() && out.kind == executor::TrialOutcome::Kind::kCompleted
                      ? ": no epoch left to train; test_acc is that model's"
                      : "")
              << "\n";
  }
  if (as_json) {
    PrintJson(std::cout, TrainResultJson(task, kind, out, last, consumed, reports));
  } else {
    if (out.end_metrics.contains("test_acc")) {
      std::printf("test_acc %.4f\n", out.end_metrics["test_acc"].get<double>());
    }
    // An image folder's label map and the bad files left out, as `sweep show` says them.
    std::fflush(stdout);
    if (std::string labels = ClassLabelsText(out.info); !labels.empty()) {
      std::cerr << "labels: " << labels << "\n";
    }
    if (std::string skipped = SkippedFilesText(out.info); !skipped.empty()) {
      std::cerr << "skipped: " << skipped << "\n";
    }
  }
  if (out.kind == executor::TrialOutcome::Kind::kFailed) {
    std::cerr << "sweep: trial failed: " << out.error << "\n";
    return kExitRuntime;
  }
  if (out.kind == executor::TrialOutcome::Kind::kInterrupted) {
    // The machine stopped it (its checkpoint could not be written); run again, it goes on
    // from its last checkpoint.
    std::cerr << "sweep: interrupted at epoch " << consumed << ": " << out.error << "\n";
    return kExitRuntime;
  }
  if (out.kind == executor::TrialOutcome::Kind::kStopped) {
    // Not a finished run: a script's `sweep train ... && next` must not go on.
    // A trainer trial with a checkpoint_path says where within its epoch it stopped.
    std::cerr << "sweep: interrupted at epoch " << consumed << ", before the trial's end"
              << (out.error.empty() ? "" : "; " + out.error) << "\n";
    return kExitRuntime;
  }
  return kExitOk;
}

int CmdTrain(const std::string& config_path, const std::vector<std::string>& sets, bool as_json,
             int threads) {
  // A dataset given with --set replaces the config's, which need not exist here.
  const bool other_dataset = std::any_of(
      sets.begin(), sets.end(), [](const std::string& s) { return s.rfind("dataset=", 0) == 0; });
  auto cfg = LoadConfig(config_path,
                        other_dataset ? ConfigUse::kOneTrialOtherDataset : ConfigUse::kOneTrial);
  if (!cfg.ok()) return Fail(cfg.status());
  if (Status s = CheckTextPath("config", config_path); !s.ok()) return Fail(s);
  if (cfg->trial.kind != TrialKind::kTrainer && cfg->trial.kind != TrialKind::kFunction) {
    return Fail(Status::InvalidArgument("sweep train runs trainer or function trials only"));
  }
  std::vector<std::string> varied;
  auto task = MakeTrainTask(*cfg, config_path, sets, other_dataset, threads, &varied);
  if (!task.ok()) return Fail(task.status());
  SayWhatTrainChose(*cfg, *task, std::move(varied));
  return RunTrainTask(*task, cfg->trial.kind, as_json);
}

class TrainCommandImpl final : public CommandGroup {
 public:
  explicit TrainCommandImpl(CLI::App& app) {
    train_cmd_ = app.add_subcommand("train", "run one trial directly, no store");
    train_cmd_->add_option("CONFIG", config_path_, "sweep config (TOML)")->required();
    train_cmd_->add_option("--set", sets_, "KEY=VALUE hyperparameter (a TOML value); repeatable");
    train_cmd_->add_option("--threads", threads_, "CPU threads (default: [trial] gpus)")
        ->check(WholeNumber(1, 1024));
    train_cmd_->add_flag("--json", json_, "print one JSON object at the end");
    train_cmd_->footer(
        "Example: sweep train configs/quickstart.toml --set lr=0.05 --set hidden=[256,128]");
  }

  std::optional<int> Run() override {
    if (!train_cmd_->parsed()) return std::nullopt;
    // A process that trains sets NCCL's environment now, before any thread starts (parsing
    // starts none).
    trainer::ConnectNcclAtInit();
    return CmdTrain(config_path_, sets_, json_, threads_);
  }

 private:
  CLI::App* train_cmd_ = nullptr;
  std::string config_path_;
  std::vector<std::string> sets_;
  int threads_ = 0;
  bool json_ = false;
};

}  // namespace

std::unique_ptr<CommandGroup> AddTrainCommand(CLI::App& app) {
  return std::make_unique<TrainCommandImpl>(app);
}

}  // namespace sweep
