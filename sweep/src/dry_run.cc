// `sweep run CONFIG --dry-run`: the first trials a run would start, without a store.
#include <algorithm>
#include <filesystem>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "carry_over.h"
#include "executor/slots.h"
#include "executor/trial.h"
#include "kinds/trial_kind.h"
#include "output.h"
#include "store/store.h"
#include "sweep/config.h"
#include "sweep/coordinator.h"
#include "trial_paths.h"
#include "trial_source.h"

namespace sweep {

Status DryRun(const SweepConfig& config, const RunOptions& options, const std::string& db,
              std::ostream& out) {
  SWEEP_RETURN_IF_ERROR(CheckRunHere(config, options));
  SWEEP_RETURN_IF_ERROR(CheckCanListen(options));
  const std::vector<executor::Slot> slots =
      options.local_slots ? executor::DiscoverLocalSlots(config.executor.cpu_slots)
                          : std::vector<executor::Slot>{};
  const int per_trial = std::max(1, config.trial.slots);
  // The trials that start at once on this machine's slots (one when trials wait for agents).
  int64_t at_once = std::max<int64_t>(1, static_cast<int64_t>(slots.size()) / per_trial);
  if (config.sweep.max_concurrent > 0)
    at_once = std::min<int64_t>(at_once, config.sweep.max_concurrent);
  at_once = std::min<int64_t>({at_once, config.sweep.max_trials, 10});
  const std::string db_file = StoreFile(db);
  SWEEP_RETURN_IF_ERROR(TrialPaths::CheckCanMake(config, db_file));
  // --from: the trials the run would carry over, read as the run reads them (an unknown name,
  // a mode that clashes, TPE's startup rule); the new trials are numbered after them and draw
  // what the run would draw.
  std::optional<CarryPlan> carry;
  if (!options.from.empty()) {
    const std::string said = "--from " + options.from + ": ";
    if (std::error_code ec; !std::filesystem::exists(db, ec)) {
      return NoSuchDatabase(db).WithMessage(said + NoSuchDatabase(db).message());
    }
    SWEEP_ASSIGN_OR_RETURN(auto st, store::Store::Open(db, store::OpenMode::kReadOnly));
    SWEEP_ASSIGN_OR_RETURN(carry, PlanCarryOver(*st, config, options.from));
  }
  // The run's own source of trials, so the dry run draws what the run would draw: after the
  // carried trials, past the grid points they ran, and with longest_first the heaviest first.
  std::unique_ptr<TrialKindRules> kind = MakeTrialKindRules(config);
  SWEEP_ASSIGN_OR_RETURN(
      std::unique_ptr<TrialSource> source,
      TrialSource::Make(config, [&kind](const nlohmann::json& p) { return kind->Work(p); }, {}));
  const int64_t carried = carry ? static_cast<int64_t>(carry->trials.size()) : 0;
  if (carry) {
    source->SetCarried(carried, carry->sample_shift);
    if (config.search.algorithm == "grid") {
      for (const store::TrialRecord& t : carry->trials) source->CarriedPoint(t.params_json);
    }
  }

  out << "dry run of sweep '" << config.sweep.name << "' (" << config.search.algorithm
      << " search, "
      << (config.sweep.unbounded_trials ? std::string("no trial limit")
                                        : std::to_string(config.sweep.max_trials) + " trial(s)")
      << "): the config and this machine check out; ";
  if (carry) out << carry->Summary() << "; ";
  if (slots.empty()) {
    // How many start at once is up to the agents that join.
    out << "the first trial it would start, once an agent joins:\n";
  } else {
    out << "the first " << at_once << " trial(s) it would start:\n";
  }
  if (config.trial.longest_first) {
    out << "(order = \"longest_first\": the heaviest of the whole sweep first)\n";
  }
  // Trial k of those starting at once takes the k-th run of per_trial slots, if there is one.
  auto place = [&](int64_t k, executor::TrialTask& task) {
    const size_t first = static_cast<size_t>(k) * static_cast<size_t>(per_trial);
    if (first + static_cast<size_t>(per_trial) > slots.size()) {
      task.threads = per_trial;
      return std::string("an agent's slots");
    }
    const bool gpu = slots[first].gpu;
    task.threads = gpu ? 1 : per_trial;
    std::string where;
    for (size_t i = first; i < first + static_cast<size_t>(per_trial); ++i) {
      where += (where.empty() ? "local:" : ",") + slots[i].name;
      if (gpu) task.gpus.push_back(slots[i].device);
    }
    return where;
  };
  for (int64_t k = 0; k < at_once; ++k) {
    executor::TrialTask task;
    const std::string where = place(k, task);
    // Past its startup trials (the carried ones among them), TPE proposes from the results
    // before: none yet here.
    if (config.search.algorithm == "tpe" && carried + k >= config.search.tpe.n_startup_trials) {
      out << "trial " << carried + k << " on " << where
          << ": proposed by TPE from the results of the trials before it\n";
      continue;
    }
    std::optional<NewTrial> drawn = source->Next([] { return std::vector<NewTrial>{}; });
    if (!drawn) break;
    const int64_t n = drawn->number;
    task.number = n;
    task.params = std::move(drawn->params);
    task.seed = TrialSeed(config.sweep.seed, n);
    out << "trial " << n << " on " << where << ": "
        << task.params.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
    if (config.trial.kind != TrialKind::kCommand) continue;
    task.kind = TrialKind::kCommand;
    task.settings = CommandSettings(
        config, CommandTrialsDir(config, db_file) + "/trial-" + std::to_string(n), "");
    SWEEP_ASSIGN_OR_RETURN(executor::CommandLaunch launch, executor::DescribeCommand(task));
    std::string argv;
    for (const std::string& a : launch.argv) argv += (argv.empty() ? "" : " ") + ShellQuote(a);
    out << "  argv: " << argv << "\n";
    if (!launch.program.empty() && !launch.argv.empty() && launch.program != launch.argv[0]) {
      out << "  program: " << launch.program << "\n";
    }
    out << "  in: " << config.trial.workdir << "\n";
    for (const auto& [key, value] : launch.env) {
      out << "  env: " << key << "=" << ShellQuote(value) << "\n";
    }
  }
  out << "nothing was started, and " << db << " was not touched\n";
  return Status::Ok();
}

}  // namespace sweep
