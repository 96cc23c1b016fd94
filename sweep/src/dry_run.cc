// `sweep run CONFIG --dry-run`: the first trials a run would start, without a store.
#include <algorithm>
#include <filesystem>
#include <optional>
#include <ostream>
#include <set>
#include <string>
#include <vector>

#include "carry_over.h"
#include "executor/slots.h"
#include "executor/trial.h"
#include "output.h"
#include "search/space.h"
#include "store/store.h"
#include "sweep/config.h"
#include "sweep/coordinator.h"
#include "trial_paths.h"

namespace sweep {

Status DryRun(const SweepConfig& config, const RunOptions& options, const std::string& db,
              std::ostream& out) {
  SWEEP_RETURN_IF_ERROR(CheckRunHere(config, options));
  SWEEP_RETURN_IF_ERROR(CheckCanListen(options));
  SWEEP_ASSIGN_OR_RETURN(std::unique_ptr<search::Sampler> sampler, MakeSampler(config));
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
  const int64_t carried = carry ? static_cast<int64_t>(carry->trials.size()) : 0;
  std::set<std::string> carried_points;  // a grid skips them
  if (carry && config.search.algorithm == "grid") {
    for (const store::TrialRecord& t : carry->trials) {
      carried_points.insert(search::PointKey(nlohmann::json::parse(t.params_json)));
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
    out << "(order = \"longest_first\" starts the heaviest of the whole sweep first; these are "
           "the sampler's first)\n";
  }
  int64_t grid_cursor = 0;
  for (int64_t k = 0; k < at_once; ++k) {
    const int64_t n = carried + k;  // the trial's number
    // Past its startup trials (the carried ones among them), TPE proposes from the results
    // before: none yet here.
    const bool by_tpe = config.search.algorithm == "tpe" && n >= config.search.tpe.n_startup_trials;
    std::optional<nlohmann::json> params;
    if (carried_points.empty()) {
      params = sampler->Sample(n + (carry ? carry->sample_shift : 0));
    } else {
      do {
        params = sampler->Sample(grid_cursor++);
      } while (params && carried_points.contains(search::PointKey(*params)));
    }
    if (!params) break;
    executor::TrialTask task;
    task.number = n;
    task.params = *params;
    task.seed = TrialSeed(config.sweep.seed, n);
    std::string where;
    const size_t first = static_cast<size_t>(k) * static_cast<size_t>(per_trial);
    if (first + static_cast<size_t>(per_trial) <= slots.size()) {
      const bool gpu = slots[first].gpu;
      task.threads = gpu ? 1 : per_trial;
      for (size_t i = first; i < first + static_cast<size_t>(per_trial); ++i) {
        where += (where.empty() ? "local:" : ",") + slots[i].name;
        if (gpu) task.gpus.push_back(slots[i].device);
      }
    } else {
      where = "an agent's slots";
      task.threads = per_trial;
    }
    if (by_tpe) {
      out << "trial " << n << " on " << where
          << ": proposed by TPE from the results of the trials before it\n";
      continue;
    }
    out << "trial " << n << " on " << where << ": "
        << params->dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
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
