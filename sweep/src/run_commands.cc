// run and resume: a sweep started from a config, or continued from its store, on this machine's
// slots and on remote agents; then the summary and the best trials.
#include "run_commands.h"

#include <unistd.h>

#include <cctype>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <map>
#include <optional>
#include <string>

#include <CLI/CLI.hpp>

#include "executor/net_auth.h"
#include "output.h"
#include "store/store.h"
#include "sweep/config.h"
#include "sweep/coordinator.h"
#include "trial_paths.h"
#include "view_commands.h"

namespace sweep {

namespace {

// `--listen HOST:PORT --token-file F [--no-local]` of run and resume.
struct RemoteArgs {
  std::string listen;
  std::string token_file;
  bool no_local = false;
};

// Fills in the remote-agent options; a usage error for a bad address, an unreadable token file,
// or a non-loopback address without a token.
Status ApplyRemoteArgs(const RemoteArgs& a, RunOptions* options) {
  namespace net = executor::net;
  if (a.listen.empty()) {
    if (!a.token_file.empty()) return Status::InvalidArgument("--token-file needs --listen");
    if (a.no_local) {
      return Status::InvalidArgument("--no-local needs --listen: trials need somewhere to run");
    }
    return Status::Ok();
  }
  auto host_port = net::ParseHostPort(a.listen);
  if (!host_port.ok()) {
    return host_port.status().WithMessage("--listen " + host_port.status().message());
  }
  if (!a.token_file.empty()) {
    SWEEP_RETURN_IF_ERROR(CheckTextPath("--token-file", a.token_file));
    SWEEP_ASSIGN_OR_RETURN(options->token, net::ReadTokenFile(a.token_file));
    std::error_code ec;
    const std::filesystem::path absolute = std::filesystem::absolute(a.token_file, ec);
    options->token_file = ec ? a.token_file : absolute.lexically_normal().string();
  }
  SWEEP_RETURN_IF_ERROR(net::ValidateListen(host_port->first, !options->token.empty()));
  options->listen_host = host_port->first;
  options->listen_port = host_port->second;
  options->local_slots = !a.no_local;
  return Status::Ok();
}

RunOptions MakeRunOptions(const char* argv0) {
  RunOptions options;
  options.worker_command = {SelfExe(argv0), "worker"};
  options.live_status = ::isatty(STDERR_FILENO) != 0;
  options.log = &std::cerr;
  options.interrupt = &InterruptRequested();
  options.interrupt_again = &InterruptAgain();
  // A closed terminal (SIGHUP) stops the sweep as Ctrl-C does: trials interrupted, resumable.
  StopOnSignals();
  return options;
}

// What to resume an interrupted sweep with: the agents' flags too (with the port they reached,
// where port 0 let the system pick one), so that its agents reconnect and no trial runs here
// that was kept off this machine.
std::string ResumeOptions(const RemoteArgs& remote, const RunSummary& summary) {
  if (remote.listen.empty()) return "";
  auto host_port = executor::net::ParseHostPort(remote.listen);
  if (!host_port.ok()) return "";  // refused before any run
  return AgentFlags(host_port->first,
                    summary.listen_port > 0 ? summary.listen_port : host_port->second,
                    remote.token_file, remote.no_local);
}

// What both commands print at the end: a one-line summary, then the best trials.
int ReportRun(store::Store& st, const std::string& name, const RunSummary& summary,
              const std::string& resume_options) {
  auto sw = st.FindSweep(name);
  if (!sw.ok()) return Fail(sw.status());
  // The file alone is the store once its writer ends, unless a reader holds the log back.
  if (Result<bool> folded = st.FoldLog(); folded.ok() && !*folded) {
    std::cerr << "sweep: " << st.path()
              << ": a reader (a sqlite3 shell in a transaction?) held the file open, so the "
                 "newest commits are still in "
              << st.path()
              << "-wal: copy both files, or run any sweep command that writes to it (it moves "
                 "them) once that reader ends\n";
  }
  const auto& c = summary.counts;
  if (summary.already_complete) {
    std::cerr << "sweep '" << name << "' is already complete (" << c.total()
              << " trials); nothing to resume. ";
    if (summary.no_budget_helps.empty()) {
      std::cerr << "To continue it with a larger budget: `"
                << SweepCommand("resume", name, st.path(), "--max-trials +10") << "` (or "
                << "--time-budget +30m)\n";
    } else {
      std::cerr << "A larger budget would not continue it: " << summary.no_budget_helps << "\n";
    }
  } else {
    std::cerr << "sweep '" << name << "' " << (summary.interrupted ? "interrupted" : "done")
              << " in " << static_cast<int64_t>(summary.elapsed_s) << " s: " << c.completed
              << " completed, " << c.pruned << " pruned, " << c.failed << " failed, "
              << c.interrupted << " interrupted";
    if (summary.interrupted) {
      std::cerr << "; continue with `" << SweepCommand("resume", name, st.path(), resume_options)
                << "`";
    }
    std::cerr << "\n";
  }
  auto best = st.BestTrials(summary.sweep_id, sw->maximize, 5);
  if (best.ok() && !best->empty()) {
    std::cout << "best trials of '" << name << "' by " << sw->metric << " ("
              << (sw->maximize ? "max" : "min") << "):\n";
    PrintTrialsTable(std::cout, *best, sw->metric);
  }
  if (summary.interrupted) return kExitRuntime;
  // A sweep that ends with failures and no result has failed: scripts must see that.
  // Some failed trials among good ones are ordinary (a learning rate that diverges).
  if (!summary.already_complete && c.failed > 0 && c.completed == 0 && c.pruned == 0) {
    std::cerr << "sweep '" << name << "': no trial completed (" << c.failed << " failed"
              << (c.interrupted > 0 ? ", " + std::to_string(c.interrupted) + " interrupted" : "")
              << "); their errors: `" << SweepCommand("trials", name, st.path(), "--status failed")
              << "`\n";
    return kExitRuntime;
  }
  return kExitOk;
}

// `resume --max-trials N|+N --time-budget D|+D` (empty: not given).
Result<BudgetChange> ParseBudgetChange(const std::string& max_trials,
                                       const std::string& time_budget) {
  BudgetChange change;
  if (!max_trials.empty()) {
    change.more_trials = max_trials[0] == '+';
    const std::string digits = max_trials.substr(change.more_trials ? 1 : 0);
    char* rest = nullptr;
    const long long n = std::strtoll(digits.c_str(), &rest, 10);
    if (digits.empty() || !std::isdigit(static_cast<unsigned char>(digits[0])) || *rest != '\0' ||
        n < 1 || n > 1'000'000'000) {
      return Status::InvalidArgument("--max-trials " + max_trials +
                                     ": expected the new total (e.g. 32) or +N for N more trials");
    }
    change.max_trials = n;
  }
  if (!time_budget.empty()) {
    change.more_time = time_budget[0] == '+';
    auto seconds = ParseDuration(time_budget.substr(change.more_time ? 1 : 0));
    if (!seconds || *seconds <= 0 || *seconds > 3650 * 86400.0) {
      return Status::InvalidArgument("--time-budget " + time_budget +
                                     ": expected the new total (e.g. 2h) or +D for that much more "
                                     "(e.g. +30m)");
    }
    change.time_budget_s = *seconds;
  }
  return change;
}

int CmdResume(const std::string& name, const std::string& db, const RemoteArgs& remote,
              std::optional<int> max_initial_failures, const BudgetChange& budget,
              const char* argv0) {
  // The remote options first: a usage error, whatever the database.
  RunOptions options = MakeRunOptions(argv0);
  options.max_initial_failures = max_initial_failures;
  options.budget = budget;
  if (Status s = ApplyRemoteArgs(remote, &options); !s.ok()) return Fail(s);
  std::error_code ec;
  if (!std::filesystem::exists(db, ec)) {
    return Fail(NoSuchDatabase(db));
  }
  if (Status s = CheckTextPath("--db", db); !s.ok()) return Fail(s);
  auto st = store::Store::Open(db, store::OpenMode::kReadWrite, SweepLockWait(options, db));
  if (!st.ok()) return Fail(st.status());
  if (remote.listen.empty()) {
    // Resumed without the agents it ran with: the user's choice, but said, with the way back.
    // (Not when it ended, or runs now under another coordinator: this resume refuses then.)
    auto sw = (*st)->FindSweep(name);
    if (sw.ok() && !sw->run_options.empty() && sw->status != store::SweepStatus::kCompleted &&
        !(sw->status == store::SweepStatus::kRunning && !CoordinatorGone(db, *sw))) {
      std::cerr << "sweep: '" << name << "' ran with agents (" << sw->run_options
                << "); this resume runs it on this machine's slots. To bring its agents back: `"
                << SweepCommand("resume", name, db, sw->run_options) << "`\n";
    }
  }
  auto summary = ResumeSweep(name, **st, options);
  if (!summary.ok()) return Fail(summary.status());
  return ReportRun(**st, name, *summary, ResumeOptions(remote, *summary));
}

// Where `run` makes or opens its database (`key` names where `db` came from): a folder that is
// not there is a mistyped path (a usage error), not a failing disk; so is a link to a file in one
// (the database is made where the link points).
Status CheckStorePath(const std::string& key, const std::string& db) {
  if (const std::filesystem::path folder = std::filesystem::path(db).parent_path();
      !folder.empty() && !std::filesystem::is_directory(folder)) {
    return Status::InvalidArgument(key + " " + db + ": the folder " + folder.string() +
                                   " does not exist");
  }
  if (std::error_code ec; std::filesystem::is_symlink(db, ec) && !std::filesystem::exists(db, ec)) {
    // Followed link by link (a chain of them), to the name the database would be made at.
    std::filesystem::path at = db;
    std::error_code missing;  // the last name is not there: that ends the chain
    for (int hops = 0; hops < 40 && std::filesystem::is_symlink(at, missing); ++hops) {
      const std::filesystem::path target = std::filesystem::read_symlink(at, ec);
      if (ec) break;
      at = target.is_absolute() ? target : at.parent_path() / target;
    }
    const std::filesystem::path where = at.parent_path();
    if (!ec && !where.empty() && !std::filesystem::is_directory(where)) {
      return Status::InvalidArgument(key + " " + db + " is a link to " + at.string() +
                                     ", in a folder that does not exist (" + where.string() + ")");
    }
  }
  return CheckTextPath(key, db);
}

// `run` of a sweep the store holds already (`taken`: RunSweep's AlreadyExists): what it is (running
// under another coordinator, completed, or stopped) and the command that goes on from there.
Status SweepTakenError(store::Store& st, const std::string& name, const std::string& db,
                       const RemoteArgs& remote, const Status& taken) {
  // Running now under another coordinator, resume would be refused too: say what it is.
  auto existing = st.FindSweep(name);
  const bool live = existing.ok() && existing->status == store::SweepStatus::kRunning &&
                    !CoordinatorGone(db, *existing);
  if (existing.ok() && existing->status == store::SweepStatus::kCompleted) {
    // Nothing for resume to do: say where its results are, and how to run it again.
    return taken.WithMessage(taken.message() + " and has completed; its results: `" +
                             SweepCommand("best", name, db, "") +
                             "`; to run the config again, give it a new name (--name)");
  }
  if (live) {
    return Status::Busy(taken.message() + " and " + DescribeOwner(existing->owner) +
                        " is running it now; follow it with `" +
                        SweepCommand("status", name, db, "--watch") + "`");
  }
  return taken.WithMessage(taken.message() + "; use `" +
                           SweepCommand("resume", name, db, ResumeOptions(remote, {})) + "`");
}

// --resume of a sweep the store holds goes on only with the config it started with (resume
// rebuilds from the store): an edited CONFIG would be silently ignored.
Status CheckSameConfig(const SweepConfig& cfg, const std::string& config_path,
                       const store::SweepRecord& existing, const std::string& db,
                       const RemoteArgs& remote) {
  if (existing.config_text == cfg.text) return Status::Ok();
  return Status::InvalidArgument(
      config_path + ": sweep '" + cfg.sweep.name + "' in " + db +
      " was started from another version of this config; --resume goes on only with the "
      "config a sweep started with. Continue it as it was with `" +
      SweepCommand("resume", cfg.sweep.name, db, ResumeOptions(remote, {})) +
      "`, or start the edited config under a new name (--name)");
}

// --resume --from of a sweep the store holds goes on as the sweep started: from the sweep it
// named then, or none; another name would be silently ignored.
Status CheckSameFrom(const std::string& from, const store::SweepRecord& existing,
                     const std::string& db) {
  if (from.empty() || from == existing.carried_from) return Status::Ok();
  return Status::InvalidArgument(
      "--from " + from + ": sweep '" + existing.name + "' in " + db + " was " +
      (existing.carried_from.empty() ? std::string("not started from another sweep")
                                     : "started from '" + existing.carried_from + "'") +
      "; --resume goes on as it started. Drop --from, or start the config under a new name "
      "(--name) to carry " +
      from + "'s trials over");
}

// `run --resume --dry-run`: what the resume of the sweep the store holds would go on with,
// read without a lock or a write. False: no such sweep there (the run would start it anew).
Result<bool> DryResume(const SweepConfig& cfg, const std::string& config_path,
                       const std::string& db, const std::string& from, const RemoteArgs& remote,
                       std::ostream& out) {
  if (std::error_code ec; !std::filesystem::exists(db, ec)) return false;
  SWEEP_ASSIGN_OR_RETURN(auto st, store::Store::Open(db, store::OpenMode::kReadOnly));
  auto existing = st->FindSweep(cfg.sweep.name);
  if (!existing.ok()) {
    if (existing.status().code() == Status::Code::kNotFound) return false;
    return existing.status();
  }
  SWEEP_RETURN_IF_ERROR(CheckSameConfig(cfg, config_path, *existing, db, remote));
  SWEEP_RETURN_IF_ERROR(CheckSameFrom(from, *existing, db));
  SWEEP_ASSIGN_OR_RETURN(auto trials, st->Trials(existing->id, store::TrialQuery{}));
  std::map<store::TrialStatus, int64_t> by_status;
  for (const store::TrialRecord& t : trials) ++by_status[t.status];
  out << "dry run of resuming sweep '" << cfg.sweep.name << "' in " << db << " ("
      << store::ToString(existing->status) << "): the config is the one it started with; "
      << trials.size() << " trial(s) so far";
  const char* sep = ": ";
  for (const auto& [status, n] : by_status) {
    out << sep << n << " " << store::ToString(status);
    sep = ", ";
  }
  out << "\n";
  const int64_t again = by_status[store::TrialStatus::kInterrupted] +
                        by_status[store::TrialStatus::kRunning] +
                        by_status[store::TrialStatus::kPending];
  if (existing->status == store::SweepStatus::kRunning && !CoordinatorGone(db, *existing)) {
    out << existing->owner << " runs it now: a resume is refused until that process ends\n";
  }
  if (again > 0) {
    out << again
        << " trial(s) not ended would run again first (from their checkpoints, where they have "
           "one)\n";
  }
  const int64_t limit = existing->max_trials.value_or(cfg.sweep.max_trials);
  if (!cfg.sweep.unbounded_trials || existing->max_trials) {
    // max_trials counts the sweep's own trials, not those carried over (--from).
    const int64_t own = static_cast<int64_t>(trials.size()) - existing->carried;
    const int64_t left = std::max<int64_t>(0, limit - own);
    out << left << " new trial(s) left of max_trials " << limit << "\n";
  }
  out << "nothing was started, and " << db << " was not touched\n";
  return true;
}

int CmdRun(const std::string& config_path, const std::string& db_flag,
           const std::optional<std::string>& name_flag, bool resume, bool dry_run,
           const std::string& from, const RemoteArgs& remote, const char* argv0) {
  // With --from, or --resume of a sweep that may have been started with it, the startup rule of
  // TPE waits for the count of carried trials (the coordinator's start checks it).
  auto cfg =
      LoadConfig(config_path, from.empty() && !resume ? ConfigUse::kSweep : ConfigUse::kSweepFrom);
  if (!cfg.ok()) return Fail(cfg.status());
  // Its folder is where the config's relative paths start.
  if (Status s = CheckTextPath("config", config_path); !s.ok()) return Fail(s);
  if (name_flag) {
    if (!IsValidSweepName(*name_flag)) {
      return Fail(
          Status::InvalidArgument("--name '" + *name_flag + "': " + std::string(kSweepNameRule)));
    }
    cfg->sweep.name = *name_flag;
  }
  std::string db = db_flag.empty() ? cfg->store.path : db_flag;
  const std::string db_key = db_flag.empty() ? config_path + ": [store] path" : "--db";
  if (Status s = CheckStorePath(db_key, db); !s.ok()) return Fail(s);
  // The remote options first: a usage error (a token file others can read) leaves no new,
  // empty database behind.
  RunOptions options = MakeRunOptions(argv0);
  if (Status s = ApplyRemoteArgs(remote, &options); !s.ok()) return Fail(s);
  options.from = from;
  // And what this machine refuses (trial.gpus past its slots, a program missing here): no
  // database is made for a run that cannot start.
  if (Status s = CheckRunHere(*cfg, options); !s.ok()) return Fail(s);
  if (dry_run) {
    if (resume) {
      Result<bool> resumed = DryResume(*cfg, config_path, db, from, remote, std::cout);
      if (!resumed.ok()) return Fail(resumed.status());
      if (*resumed) return CheckStandardOutput(kExitOk);
    }
    if (Status s = DryRun(*cfg, options, db, std::cout); !s.ok()) return Fail(s);
    return CheckStandardOutput(kExitOk);
  }
  // A port another program holds, said before a new store is made (an empty one would be left
  // behind); with a store already there, the run's own listening says it, after saying whether
  // this sweep runs elsewhere now (which would explain the port).
  if (std::error_code ec; !std::filesystem::exists(db, ec)) {
    // The sweep to start from is in this store: none, no such sweep (and no file made).
    if (!from.empty())
      return Fail(
          NoSuchDatabase(db).WithMessage("--from " + from + ": " + NoSuchDatabase(db).message()));
    if (Status s = CheckCanListen(options); !s.ok()) return Fail(s);
  }
  // A checkpoint or trials folder that cannot be made fails the run before any database is.
  if (Status s = TrialPaths::CheckCanMake(*cfg, StoreFile(db)); !s.ok()) return Fail(s);
  auto st = store::Store::Open(db, store::OpenMode::kReadWrite, SweepLockWait(options, db));
  if (!st.ok()) return Fail(st.status());
  if (resume) {
    if (auto existing = (*st)->FindSweep(cfg->sweep.name); existing.ok()) {
      if (Status s = CheckSameConfig(*cfg, config_path, *existing, db, remote); !s.ok()) {
        return Fail(s);
      }
      if (Status s = CheckSameFrom(from, *existing, db); !s.ok()) return Fail(s);
      return CmdResume(cfg->sweep.name, db, remote, std::nullopt, {}, argv0);
    }
  }

  auto summary = RunSweep(*cfg, **st, options);
  if (!summary.ok() && summary.status().code() == Status::Code::kAlreadyExists) {
    return Fail(SweepTakenError(**st, cfg->sweep.name, db, remote, summary.status()));
  }
  if (!summary.ok()) return Fail(summary.status());
  return ReportRun(**st, cfg->sweep.name, *summary, ResumeOptions(remote, *summary));
}

class RunCommandsImpl final : public CommandGroup {
 public:
  RunCommandsImpl(CLI::App& app, const char* argv0) : argv0_(argv0) {
    run_cmd_ = app.add_subcommand("run", "start a sweep from a TOML config");
    run_cmd_->add_option("CONFIG", config_path_, "sweep config (TOML)")->required();
    AddDbOption(*run_cmd_, db_flag_, "SQLite file (default: [store] path, else ./sweeps.db)",
                false);
    run_cmd_->add_option("--name", name_flag_, "sweep name (default: [sweep] name)");
    run_cmd_->add_flag("--resume", resume_flag_, "continue the sweep if it exists (see resume)");
    run_cmd_->add_flag("--dry-run", dry_run_flag_,
                       "check everything, print the first trials it would start, touch no store");
    run_cmd_->add_option(
        "--from", from_flag_,
        "start from that sweep's trials (in the same --db) where the spaces agree");
    AddRemoteOptions(run_cmd_);

    resume_cmd_ = app.add_subcommand("resume", "continue an interrupted sweep");
    resume_cmd_->add_option("NAME", name_, "sweep name")->required();
    AddDbOption(*resume_cmd_, resume_db_, "SQLite file", true);
    AddRemoteOptions(resume_cmd_);
    resume_cmd_
        ->add_option("--max-initial-failures", max_initial_failures_,
                     "this run's [trial] max_initial_failures (0: go on whatever fails)")
        ->check(WholeNumber(0, 1000000000));
    resume_cmd_->add_option(
        "--max-trials", more_trials_,
        "a new max_trials: the total, or +N for N more (a completed sweep too)");
    resume_cmd_->add_option(
        "--time-budget", more_time_,
        "a new time_budget: the total running time, or +D for D more (e.g. +30m)");
    resume_cmd_->footer(
        "Runs again the trials that were running when it stopped (from their checkpoints) and "
        "goes on where it left off.\nA new budget continues the sampler where it stopped, early "
        "stopping's rungs intact, and is kept for later resumes.\nExamples: sweep resume "
        "fashion-mlp; sweep resume fashion-mlp --max-trials +16");
    run_cmd_->footer(
        "Examples: sweep run configs/quickstart.toml --db results.db\n"
        "          sweep run fixed.toml --name fixed --from first  (carries first's trials over)");
  }

  std::optional<int> Run() override {
    if (run_cmd_->parsed()) {
      return CmdRun(config_path_, db_flag_, name_flag_, resume_flag_, dry_run_flag_, from_flag_,
                    remote_, argv0_);
    }
    if (resume_cmd_->parsed()) {
      auto budget = ParseBudgetChange(more_trials_, more_time_);
      if (!budget.ok()) return Fail(budget.status());
      return CmdResume(name_, resume_db_, remote_, max_initial_failures_, *budget, argv0_);
    }
    return std::nullopt;
  }

 private:
  void AddRemoteOptions(CLI::App* sub) {
    sub->add_option("--listen", remote_.listen,
                    "accept remote agents on HOST:PORT (port 0: any free port)");
    sub->add_option("--token-file", remote_.token_file,
                    "shared secret the agents prove they hold (needed off loopback)");
    sub->add_flag("--no-local", remote_.no_local, "run trials on remote agents only");
  }

  const char* argv0_;
  CLI::App* run_cmd_ = nullptr;
  CLI::App* resume_cmd_ = nullptr;
  // run
  std::string config_path_;
  std::string db_flag_;
  std::optional<std::string> name_flag_;
  bool resume_flag_ = false;
  bool dry_run_flag_ = false;
  std::string from_flag_;
  // resume
  std::string name_;
  std::string resume_db_ = "sweeps.db";
  std::optional<int> max_initial_failures_;
  std::string more_trials_;
  std::string more_time_;
  // both
  RemoteArgs remote_;
};

}  // namespace

std::unique_ptr<CommandGroup> AddRunCommands(CLI::App& app, const char* argv0) {
  return std::make_unique<RunCommandsImpl>(app, argv0);
}

}  // namespace sweep
