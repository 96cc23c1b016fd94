// The `sweep` command line: run, resume, agent, train, the queries (best, trials, status, list,
// show, export, report), and the hidden worker.
// Exit codes: 0 success; 1 runtime failure; 2 usage or config error. Errors go to stderr as one
// line naming the file, key, sweep or trial at fault.
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <map>
#include <optional>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "base/clock.h"
#include "base/utf8.h"
#include "build_info.h"
#include "executor/agent.h"
#include "executor/functions.h"
#include "executor/net_auth.h"
#include "executor/slots.h"
#include "executor/trial.h"
#include "executor/worker.h"
#include "manage_commands.h"
#include "output.h"
#include "report/export.h"
#include "store/store.h"
#include "sweep/config.h"
#include "sweep/coordinator.h"
#include "trainer/trainer.h"
#include "view_commands.h"

namespace {

using nlohmann::json;
using sweep::Status;

using sweep::Fail;
using sweep::kExitOk;
using sweep::kExitRuntime;
using sweep::kExitUsage;
std::atomic<bool> g_interrupt{false};
std::atomic<bool> g_interrupt_again{false};  // a second Ctrl-C / SIGTERM: stop at once
extern "C" void OnInterrupt(int sig) {
  // A hangup comes twice when a terminal closes (from the kernel and from the shell to its
  // jobs): it never means "at once".
  if (g_interrupt.load() && sig != SIGHUP) g_interrupt_again = true;
  g_interrupt = true;
}
// `sweep train`: the first Ctrl-C / SIGTERM stops after the current epoch; a second ends the
// process at once, by that signal (only async-signal-safe calls).
extern "C" void OnTrainInterrupt(int sig) {
  if (g_interrupt.load()) {
    std::signal(sig, SIG_DFL);
    std::raise(sig);
    return;
  }
  g_interrupt = true;
}

std::string SelfExe(const char* argv0) {
  std::error_code ec;
  auto p = std::filesystem::read_symlink("/proc/self/exe", ec);
  return ec ? std::string(argv0) : p.string();
}

const char* kExamples = R"(
Examples:
  sweep run configs/quickstart.toml          run a sweep (results in ./sweeps.db)
  sweep best quickstart --top 5              the best trials so far
  sweep resume quickstart                    continue after a crash or Ctrl-C
  sweep trials quickstart --status failed    trials by state, with their errors
  sweep status quickstart --json             counts, running trials, best so far
  sweep train configs/quickstart.toml --set lr=0.1 --set hidden=[512,256]
                                             one trial, no store, per-epoch metrics
)";

// ---- queries ----

struct QueryArgs {
  std::string db = "sweeps.db";
  std::string name;
  bool json = false;
  bool csv = false;
};

sweep::Result<std::unique_ptr<sweep::store::Store>> OpenForQuery(const QueryArgs& a) {
  return sweep::OpenToRead(a.db);
}

int CmdBest(const QueryArgs& a, int64_t top) {
  auto st = OpenForQuery(a);
  if (!st.ok()) return Fail(st.status());
  auto sw = sweep::FindSweepOrSuggest(**st, a.name);
  if (!sw.ok()) return Fail(sw.status());
  auto trials = (*st)->BestTrials(sw->id, sw->maximize, top);
  if (!trials.ok()) return Fail(trials.status());
  if (a.json) {
    sweep::PrintTrialsJson(std::cout, *trials);
  } else if (a.csv) {
    auto all = (*st)->Trials(sw->id, sweep::store::TrialQuery{});
    if (!all.ok()) return Fail(all.status());
    sweep::report::WriteCsv(std::cout, sweep::report::TrialsTable(*trials, *all));
  } else if (trials->empty()) {
    std::cout << "no completed trial with a value of " << sw->metric << " yet\n";
  } else {
    sweep::PrintTrialsTable(std::cout, *trials, sw->metric);
  }
  return kExitOk;
}

int CmdTrials(const QueryArgs& a, const std::string& status, const std::string& sort) {
  auto st = OpenForQuery(a);
  if (!st.ok()) return Fail(st.status());
  auto sw = sweep::FindSweepOrSuggest(**st, a.name);
  if (!sw.ok()) return Fail(sw.status());
  sweep::store::TrialQuery q;
  if (!status.empty()) {
    q.status = sweep::store::ParseTrialStatus(status);
    if (!q.status) {
      return Fail(Status::InvalidArgument(
          "--status: unknown state '" + status +
          "'; expected pending, running, completed, pruned, failed or interrupted"));
    }
  }
  q.sort = sort;
  auto trials = (*st)->Trials(sw->id, q);
  if (!trials.ok()) return Fail(trials.status());
  // A key that is no column is a metric (metric.NAME, or NAME) or a hyperparameter (param.NAME,
  // or NAME). A bare NAME that is both is the hyperparameter, as the CSV's columns name them
  // (`lr`, the trainer's metric too, and `metric.lr`). One that no trial has would sort nothing:
  // say so, with what would.
  const bool descending = sort.starts_with("-");
  std::string key = sort.substr(descending ? 1 : 0);
  const std::vector<std::string> columns = {"number",  "status", "objective",
                                            "started", "ended",  "epochs"};
  const bool by_key = std::find(columns.begin(), columns.end(), key) == columns.end();
  // Keys (to sort by, and the CSV's columns) are those of every trial of the sweep, not only
  // of the ones --status lists.
  std::vector<sweep::store::TrialRecord> whole;
  if (q.status && (by_key || a.csv)) {
    auto all = (*st)->Trials(sw->id, sweep::store::TrialQuery{});
    if (!all.ok()) return Fail(all.status());
    whole = std::move(*all);
  }
  if (by_key) {
    std::vector<std::string> metrics, params;
    const bool as_param = key.starts_with("param."), as_metric = key.starts_with("metric.");
    const std::string bare = as_param ? key.substr(6) : as_metric ? key.substr(7) : key;
    // The sweep's own metric is a key before any trial has reported it.
    bool metric_seen = !as_param && bare == sw->metric, param_seen = false;
    auto add = [](std::vector<std::string>* names, const std::string& k) {
      if (std::find(names->begin(), names->end(), k) == names->end()) names->push_back(k);
    };
    const auto& every = q.status ? whole : *trials;
    for (const auto& t : every) {
      json m = json::parse(t.metrics_json, nullptr, /*allow_exceptions=*/false);
      json p = json::parse(t.params_json, nullptr, /*allow_exceptions=*/false);
      if (m.is_object()) {
        metric_seen = metric_seen || (!as_param && m.contains(bare));
        for (auto& [k, v] : m.items()) add(&metrics, k);
      }
      if (p.is_object()) {
        param_seen = param_seen || (!as_metric && p.contains(bare));
        for (auto& [k, v] : p.items()) add(&params, k);
      }
    }
    if (param_seen && !as_param && !as_metric) {
      q.sort = std::string(descending ? "-" : "") + "param." + key;
      trials = (*st)->Trials(sw->id, q);
      if (!trials.ok()) return Fail(trials.status());
    } else if (!metric_seen && !param_seen && !every.empty()) {
      // (A sweep with no trial yet has no keys to tell a typo by.)
      std::vector<std::string> all = columns;
      all.insert(all.end(), metrics.begin(), metrics.end());
      for (const auto& p : params) all.push_back("param." + p);
      std::string list;
      for (const auto& k : all) list += (list.empty() ? "" : ", ") + k;
      std::string msg = "--sort " + sort + ": no trial of '" + a.name + "' has '" + key + "'";
      std::vector<std::string> near = all;  // a hyperparameter may be named bare, too
      near.insert(near.end(), params.begin(), params.end());
      std::string hint = sweep::DidYouMean(key, near);
      if (!hint.empty()) msg += "; did you mean '" + hint + "'?";
      msg += " (sort keys: " + list + ")";
      return Fail(Status::InvalidArgument(msg));
    }
  }
  if (a.json) {
    sweep::PrintTrialsJson(std::cout, *trials);
  } else if (a.csv) {
    // The layout of `export --format csv`: the columns of every trial of the sweep.
    sweep::report::WriteCsv(std::cout,
                            sweep::report::TrialsTable(*trials, q.status ? whole : *trials));
  } else {
    sweep::PrintTrialsTable(std::cout, *trials, sw->metric);
  }
  return kExitOk;
}

int CmdStatus(const QueryArgs& a) {
  auto st = OpenForQuery(a);
  if (!st.ok()) return Fail(st.status());
  auto sw = sweep::FindSweepOrSuggest(**st, a.name);
  if (!sw.ok()) return Fail(sw.status());
  auto counts = (*st)->CountByStatus(sw->id);
  if (!counts.ok()) return Fail(counts.status());
  sweep::store::TrialQuery q;
  q.status = sweep::store::TrialStatus::kRunning;
  auto running = (*st)->Trials(sw->id, q);
  if (!running.ok()) return Fail(running.status());
  auto best = (*st)->BestTrials(sw->id, sw->maximize, 1);
  if (!best.ok()) return Fail(best.status());
  double elapsed = (sw->ended_s ? *sw->ended_s : sweep::UnixSeconds()) - sw->created_s;
  const auto& c = *counts;
  const bool gone = sweep::CoordinatorGone(a.db, *sw);
  if (a.json) {
    json j = {{"name", sw->name},
              {"status", sweep::store::ToString(sw->status)},
              {"coordinator_gone", gone},
              {"metric", sw->metric},
              {"mode", sw->maximize ? "max" : "min"},
              {"counts",
               {{"pending", c.pending},
                {"running", c.running},
                {"completed", c.completed},
                {"pruned", c.pruned},
                {"failed", c.failed},
                {"interrupted", c.interrupted},
                {"total", c.total()}}},
              {"elapsed_s", elapsed},
              {"running_s", sw->active_s}};
    json r = json::array();
    for (const auto& t : *running) {
      r.push_back({{"trial", t.number}, {"placement", t.placement}, {"started", *t.started_s}});
    }
    j["running"] = r;
    j["best"] = best->empty() ? json(nullptr) : sweep::TrialJson(best->front());
    sweep::PrintJson(std::cout, j);
    return kExitOk;
  }
  sweep::PrintStatusText(std::cout, *sw, c, *running, *best, sweep::UnixSeconds(), gone, a.db);
  return kExitOk;
}

int CmdList(const QueryArgs& a) {
  auto st = OpenForQuery(a);
  std::error_code ec;
  // A database made this instant, or left empty, holds no sweep, which is no error.
  const bool empty_file = !st.ok() && st.status().code() == Status::Code::kNotFound &&
                          std::filesystem::is_regular_file(a.db, ec);
  if (!st.ok() && !empty_file) return Fail(st.status());
  auto list = empty_file ? sweep::Result<std::vector<sweep::store::SweepSummary>>(
                               std::vector<sweep::store::SweepSummary>{})
                         : (*st)->ListSweeps();
  if (!list.ok()) return Fail(list.status());
  // Per sweep, its record read once: a sweep stored as running whose coordinator died says so
  // (the command that resumes it, else ""), and what it holds on this machine's disk
  // (checkpoints, trial folders).
  struct Extra {
    std::string resume;
    int64_t disk_bytes = 0;
  };
  auto extra = [&](const sweep::store::SweepSummary& s) {
    Extra e;
    auto sw = (*st)->FindSweep(s.name);
    if (!sw.ok()) return e;
    e.disk_bytes = sweep::FootprintOf(*sw, a.db).bytes;
    if (s.status == sweep::store::SweepStatus::kRunning && sweep::CoordinatorGone(a.db, *sw)) {
      e.resume = sweep::ResumeCommand(*sw, a.db);
    }
    return e;
  };
  if (a.json) {
    json arr = json::array();
    for (const auto& s : *list) {
      const Extra e = extra(s);
      arr.push_back({{"name", s.name},
                     {"status", sweep::store::ToString(s.status)},
                     {"coordinator_gone", !e.resume.empty()},
                     {"trials", s.trials},
                     {"metric", s.metric},
                     {"mode", s.maximize ? "max" : "min"},
                     {"best", s.best ? json(*s.best) : json(nullptr)},
                     {"disk_bytes", e.disk_bytes}});
    }
    sweep::PrintJson(std::cout, arr);
    return kExitOk;
  }
  if (list->empty()) std::cout << "no sweeps in " << a.db << "\n";
  for (const auto& s : *list) {
    const Extra e = extra(s);
    std::cout << s.name << "  " << sweep::store::ToString(s.status)
              << (e.resume.empty() ? "" : " (coordinator gone: " + e.resume + ")") << "  "
              << s.trials << " trials  best " << s.metric << " = "
              << (s.best ? sweep::FormatNumber(*s.best) : "-") << "  disk "
              << sweep::HumanBytes(e.disk_bytes) << "\n";
  }
  return kExitOk;
}

// ---- devices ----

// What a sweep run here, or `sweep agent`, would place trials on: every GPU this process can use
// with its model, memory, compute capability, the GPUs it has peer access to, and link group (GPUs
// of one group reach each other over the fastest link, where a multi-GPU trial's replicas are
// placed), or the CPU slots.
int CmdDevices(bool as_json, int cpu_slots) {
  const std::vector<sweep::executor::Slot> slots = sweep::executor::DiscoverLocalSlots(cpu_slots);
  if (as_json) {
    json arr = json::array();
    for (const auto& s : slots) {
      arr.push_back({{"slot", s.name},
                     {"gpu", s.gpu},
                     {"device", s.device},
                     {"model", s.model},
                     {"memory_bytes", s.memory_bytes},
                     {"compute_capability", s.compute_capability},
                     {"link_group", s.link_group},
                     {"peers", s.peers}});
    }
    sweep::PrintJson(std::cout, arr);
    return kExitOk;
  }
  if (slots.empty() || !slots[0].gpu) {
    std::cout << "no CUDA device this process can use: " << slots.size()
              << " CPU slots (trials with gpus = n take n of them)\n";
    return kExitOk;
  }
  std::map<int, std::vector<int>> groups;
  for (const auto& s : slots) {
    char line[256];
    std::snprintf(line, sizeof line,
                  "%-6s %-28s %7.1f GiB  sm_%d  link group %d  peer access: ", s.name.c_str(),
                  s.model.c_str(), static_cast<double>(s.memory_bytes) / (1024.0 * 1024 * 1024),
                  s.compute_capability, s.link_group);
    std::cout << line;
    if (s.peers.empty()) std::cout << "none";
    for (size_t i = 0; i < s.peers.size(); ++i)
      std::cout << (i == 0 ? "gpu" : ",gpu") << s.peers[i];
    std::cout << "\n";
    groups[s.link_group].push_back(s.device);
  }
  for (const auto& [group, devices] : groups) {
    if (devices.size() < 2) continue;
    std::cout << "GPUs";
    for (size_t i = 0; i < devices.size(); ++i) std::cout << (i == 0 ? " " : ",") << devices[i];
    std::cout << " share the fastest link (peer access): multi-GPU trials are placed within one "
                 "group first\n";
  }
  return kExitOk;
}

// ---- run and resume ----

// `--listen HOST:PORT --token-file F [--no-local]` of run and resume.
struct RemoteArgs {
  std::string listen;
  std::string token_file;
  bool no_local = false;
};

// The store, the workers' tasks and --json carry paths as JSON text, which is UTF-8: a path
// (made absolute, as they carry it) that is not is refused where it enters, by name.
Status CheckTextPath(const std::string& what, const std::string& path) {
  std::error_code ec;
  const std::string full = std::filesystem::absolute(path, ec).string();
  if (sweep::IsValidUtf8(path) && (ec || sweep::IsValidUtf8(full))) return Status::Ok();
  return Status::InvalidArgument(
      what + " " + sweep::Utf8Text(path) +
      (sweep::IsValidUtf8(path) ? ": its full path " + sweep::Utf8Text(full) : std::string()) +
      " is not valid UTF-8; sweep keeps paths as text (in its store, its tasks and --json): "
      "rename the folder, or reach it through a link whose name is UTF-8");
}

// Fills in the remote-agent options; a usage error for a bad address, an unreadable token file,
// or a non-loopback address without a token.
Status ApplyRemoteArgs(const RemoteArgs& a, sweep::RunOptions* options) {
  namespace net = sweep::executor::net;
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

sweep::RunOptions MakeRunOptions(const char* argv0) {
  sweep::RunOptions options;
  options.worker_command = {SelfExe(argv0), "worker"};
  options.live_status = ::isatty(STDERR_FILENO) != 0;
  options.log = &std::cerr;
  options.interrupt = &g_interrupt;
  options.interrupt_again = &g_interrupt_again;
  // A closed terminal (SIGHUP) stops the sweep as Ctrl-C does: trials interrupted, resumable.
  for (int sig : {SIGINT, SIGTERM, SIGHUP}) std::signal(sig, OnInterrupt);
  return options;
}

// What both commands print at the end: a one-line summary, then the best trials.
// What to resume an interrupted sweep with: the agents' flags too (with the port they reached,
// where port 0 let the system pick one), so that its agents reconnect and no trial runs here
// that was kept off this machine.
std::string ResumeOptions(const RemoteArgs& remote, const sweep::RunSummary& summary) {
  if (remote.listen.empty()) return "";
  auto host_port = sweep::executor::net::ParseHostPort(remote.listen);
  if (!host_port.ok()) return "";  // refused before any run
  return sweep::AgentFlags(host_port->first,
                           summary.listen_port > 0 ? summary.listen_port : host_port->second,
                           remote.token_file, remote.no_local);
}

int ReportRun(sweep::store::Store& st, const std::string& name, const sweep::RunSummary& summary,
              const std::string& resume_options) {
  auto sw = st.FindSweep(name);
  if (!sw.ok()) return Fail(sw.status());
  const auto& c = summary.counts;
  if (summary.already_complete) {
    std::cerr << "sweep '" << name << "' is already complete (" << c.total()
              << " trials); nothing to resume. To continue it with a larger budget: `"
              << sweep::SweepCommand("resume", name, st.path(), "--max-trials +10") << "` (or "
              << "--time-budget +30m)\n";
  } else {
    std::cerr << "sweep '" << name << "' " << (summary.interrupted ? "interrupted" : "done")
              << " in " << static_cast<int64_t>(summary.elapsed_s) << " s: " << c.completed
              << " completed, " << c.pruned << " pruned, " << c.failed << " failed, "
              << c.interrupted << " interrupted";
    if (summary.interrupted) {
      std::cerr << "; continue with `"
                << sweep::SweepCommand("resume", name, st.path(), resume_options) << "`";
    }
    std::cerr << "\n";
  }
  auto best = st.BestTrials(summary.sweep_id, sw->maximize, 5);
  if (best.ok() && !best->empty()) {
    std::cout << "best trials of '" << name << "' by " << sw->metric << " ("
              << (sw->maximize ? "max" : "min") << "):\n";
    sweep::PrintTrialsTable(std::cout, *best, sw->metric);
  }
  if (summary.interrupted) return kExitRuntime;
  // A sweep that ends with failures and no result has failed: scripts must see that.
  // Some failed trials among good ones are ordinary (a learning rate that diverges).
  if (!summary.already_complete && c.failed > 0 && c.completed == 0 && c.pruned == 0) {
    std::cerr << "sweep '" << name << "': no trial completed (" << c.failed << " failed"
              << (c.interrupted > 0 ? ", " + std::to_string(c.interrupted) + " interrupted" : "")
              << "); their errors: `"
              << sweep::SweepCommand("trials", name, st.path(), "--status failed") << "`\n";
    return kExitRuntime;
  }
  return kExitOk;
}

// `resume --max-trials N|+N --time-budget D|+D` (empty: not given).
sweep::Result<sweep::BudgetChange> ParseBudgetChange(const std::string& max_trials,
                                                     const std::string& time_budget) {
  sweep::BudgetChange change;
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
    auto seconds = sweep::ParseDuration(time_budget.substr(change.more_time ? 1 : 0));
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
              std::optional<int> max_initial_failures, const sweep::BudgetChange& budget,
              const char* argv0) {
  // The remote options first: a usage error, whatever the database.
  sweep::RunOptions options = MakeRunOptions(argv0);
  options.max_initial_failures = max_initial_failures;
  options.budget = budget;
  if (Status s = ApplyRemoteArgs(remote, &options); !s.ok()) return Fail(s);
  std::error_code ec;
  if (!std::filesystem::exists(db, ec)) {
    return Fail(sweep::NoSuchDatabase(db));
  }
  if (Status s = CheckTextPath("--db", db); !s.ok()) return Fail(s);
  auto st = sweep::store::Store::Open(db, sweep::store::OpenMode::kReadWrite,
                                      sweep::SweepLockWait(options, db));
  if (!st.ok()) return Fail(st.status());
  if (remote.listen.empty()) {
    // Resumed without the agents it ran with: the user's choice, but said, with the way back.
    // (Not when it ended, or runs now under another coordinator: this resume refuses then.)
    auto sw = (*st)->FindSweep(name);
    if (sw.ok() && !sw->run_options.empty() &&
        sw->status != sweep::store::SweepStatus::kCompleted &&
        !(sw->status == sweep::store::SweepStatus::kRunning && !sweep::CoordinatorGone(db, *sw))) {
      std::cerr << "sweep: '" << name << "' ran with agents (" << sw->run_options
                << "); this resume runs it on this machine's slots. To bring its agents back: `"
                << sweep::SweepCommand("resume", name, db, sw->run_options) << "`\n";
    }
  }
  auto summary = sweep::ResumeSweep(name, **st, options);
  if (!summary.ok()) return Fail(summary.status());
  return ReportRun(**st, name, *summary, ResumeOptions(remote, *summary));
}

int CmdRun(const std::string& config_path, const std::string& db_flag,
           const std::optional<std::string>& name_flag, bool resume, bool dry_run,
           const std::string& from, const RemoteArgs& remote, const char* argv0) {
  auto cfg = sweep::LoadConfig(config_path);
  if (!cfg.ok()) return Fail(cfg.status());
  // Its folder is where the config's relative paths start.
  if (Status s = CheckTextPath("config", config_path); !s.ok()) return Fail(s);
  if (name_flag) {
    if (!sweep::IsValidSweepName(*name_flag)) {
      return Fail(Status::InvalidArgument("--name '" + *name_flag +
                                          "': " + std::string(sweep::kSweepNameRule)));
    }
    cfg->name = *name_flag;
  }
  std::string db = db_flag.empty() ? cfg->store_path : db_flag;
  // A folder that is not there is a mistyped path (a usage error), not a failing disk; so is
  // a link to a file in one (the database is made where the link points).
  const std::string db_key = db_flag.empty() ? config_path + ": [store] path" : "--db";
  if (const std::filesystem::path folder = std::filesystem::path(db).parent_path();
      !folder.empty() && !std::filesystem::is_directory(folder)) {
    return Fail(Status::InvalidArgument(db_key + " " + db + ": the folder " + folder.string() +
                                        " does not exist"));
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
      return Fail(Status::InvalidArgument(db_key + " " + db + " is a link to " + at.string() +
                                          ", in a folder that does not exist (" + where.string() +
                                          ")"));
    }
  }
  if (Status s = CheckTextPath(db_key, db); !s.ok()) {
    return Fail(s);
  }
  // The remote options first: a usage error (a token file others can read) leaves no new,
  // empty database behind.
  sweep::RunOptions options = MakeRunOptions(argv0);
  if (Status s = ApplyRemoteArgs(remote, &options); !s.ok()) return Fail(s);
  options.from = from;
  // And what this machine refuses (trial.gpus past its slots, a program missing here): no
  // database is made for a run that cannot start.
  if (Status s = sweep::CheckRunHere(*cfg, options); !s.ok()) return Fail(s);
  if (dry_run) {
    if (Status s = sweep::DryRun(*cfg, options, db, std::cout); !s.ok()) return Fail(s);
    if (!from.empty()) {
      std::cout << "with --from " << from << ", the run first carries over that sweep's trials "
                << "that are points of this space (the dry run does not read them)\n";
    }
    return sweep::CheckStandardOutput(kExitOk);
  }
  // A port another program holds, said before a new store is made (an empty one would be left
  // behind); with a store already there, the run's own listening says it, after saying whether
  // this sweep runs elsewhere now (which would explain the port).
  if (std::error_code ec; !std::filesystem::exists(db, ec)) {
    // The sweep to start from is in this store: none, no such sweep (and no file made).
    if (!from.empty())
      return Fail(sweep::NoSuchDatabase(db).WithMessage("--from " + from + ": " +
                                                        sweep::NoSuchDatabase(db).message()));
    if (Status s = sweep::CheckCanListen(options); !s.ok()) return Fail(s);
  }
  auto st = sweep::store::Store::Open(db, sweep::store::OpenMode::kReadWrite,
                                      sweep::SweepLockWait(options, db));
  if (!st.ok()) return Fail(st.status());
  if (resume) {
    if (auto existing = (*st)->FindSweep(cfg->name); existing.ok()) {
      // It goes on with the config it started with (resume rebuilds from the store): an edited
      // CONFIG would be silently ignored.
      if (existing->config_text != cfg->text) {
        return Fail(Status::InvalidArgument(
            config_path + ": sweep '" + cfg->name + "' in " + db +
            " was started from another version of this config; --resume goes on only with the "
            "config a sweep started with. Continue it as it was with `" +
            sweep::SweepCommand("resume", cfg->name, db, ResumeOptions(remote, {})) +
            "`, or start the edited config under a new name (--name)"));
      }
      return CmdResume(cfg->name, db, remote, std::nullopt, {}, argv0);
    }
  }

  auto summary = sweep::RunSweep(*cfg, **st, options);
  if (!summary.ok() && summary.status().code() == Status::Code::kAlreadyExists) {
    // Running now under another coordinator, resume would be refused too: say what it is.
    auto existing = (*st)->FindSweep(cfg->name);
    const bool live = existing.ok() && existing->status == sweep::store::SweepStatus::kRunning &&
                      !sweep::CoordinatorGone(db, *existing);
    if (existing.ok() && existing->status == sweep::store::SweepStatus::kCompleted) {
      // Nothing for resume to do: say where its results are, and how to run it again.
      return Fail(summary.status().WithMessage(
          summary.status().message() + " and has completed; its results: `" +
          sweep::SweepCommand("best", cfg->name, db, "") +
          "`; to run the config again, give it a new name (--name)"));
    }
    if (live) {
      return Fail(Status::Busy(summary.status().message() + " and " +
                               sweep::DescribeOwner(existing->owner) +
                               " is running it now; follow it with `" +
                               sweep::SweepCommand("status", cfg->name, db, "--watch") + "`"));
    }
    return Fail(summary.status().WithMessage(
        summary.status().message() + "; use `" +
        sweep::SweepCommand("resume", cfg->name, db, ResumeOptions(remote, {})) + "`"));
  }
  if (!summary.ok()) return Fail(summary.status());
  return ReportRun(**st, cfg->name, *summary, ResumeOptions(remote, *summary));
}

// ---- agent ----

struct AgentArgs {
  std::string connect;
  std::string token_file;
  std::string gpus;  // "0,1"; empty: every GPU
  int cpu_slots = 0;
  std::string name;
  bool stay = false;
  std::string retry_for;  // a duration or "forever"; empty: 10m, forever with --stay
};

int CmdAgent(const AgentArgs& a, const char* argv0) {
  namespace ex = sweep::executor;
  auto host_port = ex::net::ParseHostPort(a.connect);
  if (!host_port.ok()) {
    return Fail(host_port.status().WithMessage("--connect " + host_port.status().message()));
  }
  ex::AgentOptions options;
  options.host = host_port->first;
  options.port = host_port->second;
  // Its trials' folders and checkpoints go under the folder it runs in.
  std::error_code cwd_error;
  const std::string cwd = std::filesystem::current_path(cwd_error).string();
  if (Status s = CheckTextPath("the agent's folder", cwd); !cwd_error && !s.ok()) return Fail(s);
  if (!a.token_file.empty()) {
    auto token = ex::net::ReadTokenFile(a.token_file);
    if (!token.ok()) return Fail(token.status());
    options.token = *token;
  } else if (!ex::net::IsLoopback(options.host)) {
    // As a coordinator will not listen there without one: with no token, whoever answers at
    // that address (or sits on the path) could prove it "holds" the empty token, and send
    // command trials for this agent to run.
    return Fail(Status::InvalidArgument(
        "--connect " + a.connect +
        ": a coordinator off this machine needs --token-file (the same token as its own); "
        "without one, anyone who answers at that address could run commands here"));
  }
  std::optional<std::vector<int>> gpus;
  if (!a.gpus.empty()) {
    gpus.emplace();
    size_t start = 0;
    while (start <= a.gpus.size()) {
      size_t end = a.gpus.find(',', start);
      if (end == std::string::npos) end = a.gpus.size();
      std::string item = a.gpus.substr(start, end - start);
      char* rest = nullptr;
      long v = std::strtol(item.c_str(), &rest, 10);
      if (item.empty() || *rest != '\0' || v < 0 || v > 1023) {
        return Fail(Status::InvalidArgument("--gpus " + a.gpus +
                                            ": expected GPU ordinals separated by commas, e.g. "
                                            "0,1"));
      }
      gpus->push_back(static_cast<int>(v));
      start = end + 1;
    }
  } else if (a.cpu_slots > 0 && sweep::executor::CudaDeviceCount() > 0) {
    gpus.emplace();  // --cpu-slots on a machine with GPUs: offer CPU shares only
  }
  auto slots = ex::AgentSlots(gpus, a.cpu_slots);
  if (!slots.ok()) return Fail(slots.status());
  options.slots = std::move(*slots);
  for (const ex::Slot& s : options.slots) {
    if (s.gpu) options.link_group.push_back(s.link_group);
  }
  // Shown in the coordinator's log and in placements, where it must read as one name.
  if (a.name.size() > 256 || !sweep::IsValidUtf8(a.name) ||
      std::any_of(a.name.begin(), a.name.end(),
                  [](unsigned char c) { return c < 0x20 || c == 0x7f; })) {
    return Fail(Status::InvalidArgument(
        "--name: at most 256 bytes of UTF-8, without control characters (line breaks, "
        "escapes)"));
  }
  options.name = a.name;
  options.stay = a.stay;
  if (a.retry_for == "forever" || (a.retry_for.empty() && a.stay)) {
    options.retry_for_ms = -1;
  } else if (!a.retry_for.empty()) {
    auto seconds = sweep::ParseDuration(a.retry_for);
    if (!seconds || *seconds > 366 * 86400.0) {
      return Fail(Status::InvalidArgument("--retry-for " + a.retry_for +
                                          ": expected a duration such as 90s, 10m or 2h, or "
                                          "'forever'"));
    }
    options.retry_for_ms = static_cast<int64_t>(*seconds * 1000);
  }
  // Test hook: how long token refusals must go on before the agent ends (default a minute).
  if (const char* w = std::getenv("SWEEP_TEST_AUTH_REFUSAL_WINDOW_MS")) {
    options.auth_refusal_window_ms = std::atoi(w);
  }
  options.worker_command = {SelfExe(argv0), "worker"};
  options.log = &std::cerr;
  options.stop_now = &g_interrupt_again;
  for (int sig : {SIGINT, SIGTERM, SIGHUP}) std::signal(sig, OnInterrupt);
  Status s = ex::RunAgent(options, g_interrupt);
  // A refusal by the coordinator (the only InvalidArgument once the options above are checked)
  // and giving up without one (Unavailable) were logged as they came: their exit codes, not a
  // second copy of the line.
  if (!s.ok() && s.code() == Status::Code::kInvalidArgument) return kExitUsage;
  if (!s.ok() && s.code() == Status::Code::kUnavailable) return kExitRuntime;
  if (!s.ok()) return Fail(s);
  return kExitOk;
}

// ---- train ----

int CmdTrain(const std::string& config_path, const std::vector<std::string>& sets, bool as_json,
             int threads) {
  // A dataset given with --set replaces the config's, which need not exist here.
  const bool other_dataset = std::any_of(
      sets.begin(), sets.end(), [](const std::string& s) { return s.rfind("dataset=", 0) == 0; });
  auto cfg = sweep::LoadConfig(config_path, other_dataset ? sweep::ConfigUse::kOneTrialOtherDataset
                                                          : sweep::ConfigUse::kOneTrial);
  if (!cfg.ok()) return Fail(cfg.status());
  if (Status s = CheckTextPath("config", config_path); !s.ok()) return Fail(s);
  if (cfg->kind != sweep::TrialKind::kTrainer && cfg->kind != sweep::TrialKind::kFunction) {
    return Fail(Status::InvalidArgument("sweep train runs trainer or function trials only"));
  }
  sweep::executor::TrialTask task;
  task.kind = std::string(sweep::ToString(cfg->kind));
  task.settings = cfg->kind == sweep::TrialKind::kTrainer ? cfg->trainer : cfg->function;
  if (other_dataset) task.settings.erase("dataset");
  task.params = json::object();
  task.seed = sweep::TrialSeed(cfg->seed, 0);
  task.threads = threads > 0 ? threads : cfg->gpus;
  std::vector<std::string> varied;
  for (const auto& p : cfg->space.parameters()) {
    if (p.distribution.kind == sweep::search::Distribution::Kind::kConstant) {
      task.params[p.name] = p.distribution.values[0];
    } else {
      varied.push_back(p.name);
    }
  }
  std::vector<std::string> known;
  if (cfg->kind == sweep::TrialKind::kTrainer) {
    known = sweep::trainer::OptionKeys();
  } else {
    for (const auto& p : cfg->space.parameters()) known.push_back(p.name);
  }
  for (const std::string& s : sets) {
    auto eq = s.find('=');
    if (eq == std::string::npos || eq == 0) {
      return Fail(Status::InvalidArgument("--set " + s + ": expected KEY=VALUE"));
    }
    std::string key = s.substr(0, eq);
    if (std::find(known.begin(), known.end(), key) == known.end()) {
      std::string msg = "--set " + s + ": unknown key '" + key + "'";
      if (key == "gpus" && cfg->kind == sweep::TrialKind::kTrainer) {
        // A [trial] setting, not a hyperparameter: what it means here has options of its own.
        msg +=
            "; trial.gpus is the sweep's slots per trial: here, --set replicas=N trains N "
            "data-parallel replicas (on GPUs 0..N-1, or --set devices=[...]) and --threads N "
            "gives the CPU's threads";
      } else if (std::string hint = sweep::DidYouMean(key, known); !hint.empty()) {
        msg += "; did you mean '" + hint + "'?";
      }
      return Fail(Status::InvalidArgument(msg));
    }
    if (!sweep::IsValidUtf8(s)) {
      return Fail(Status::InvalidArgument(
          "--set " + sweep::Utf8Text(s) +
          ": not valid UTF-8; sweep keeps values as text (a path: rename the folder, or reach "
          "it through a link whose name is UTF-8)"));
    }
    json value = sweep::ParseSetValue(s.substr(eq + 1));
    if (cfg->kind == sweep::TrialKind::kTrainer) {
      Status ok = sweep::CheckTrainerOption(key, value);
      // The files it names, as a config's are checked: here, before the run.
      if (ok.ok() && key == "dataset") ok = sweep::CheckDatasetHere(value);
      if (!ok.ok()) return Fail(Status::InvalidArgument("--set " + s + ": " + ok.message()));
    } else if (!value.is_number() || !std::isfinite(value.get<double>())) {
      return Fail(Status::InvalidArgument("--set " + s + ": expected a finite number"));
    }
    task.params[key] = value;
    std::erase(varied, key);
  }
  // Each value was checked alone above; here, how they go together (batch_size >= replicas,
  // nesterov with momentum, ...), as the trial would find at its start.
  if (cfg->kind == sweep::TrialKind::kTrainer) {
    if (Status v = sweep::executor::CheckTrainerTask(task); !v.ok()) {
      return Fail(
          Status::InvalidArgument(config_path + (sets.empty() ? "" : " with --set") +
                                  ": the trainer options do not go together: " + v.message()));
    }
  }
  if (cfg->kind == sweep::TrialKind::kFunction && !varied.empty()) {
    return Fail(Status::InvalidArgument("give a value for " + varied.front() + " with --set " +
                                        varied.front() + "=VALUE"));
  }
  // Said with --json too (on stderr): the run's parameters are otherwise not what the reader
  // of the config expects.
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
  if (cfg->kind == sweep::TrialKind::kTrainer) {
    const json& from = task.params.contains("cache_dir") ? task.params : task.settings;
    const std::string dir = from.contains("cache_dir") && from["cache_dir"].is_string()
                                ? from["cache_dir"].get<std::string>()
                                : "";
    if (const std::string why = sweep::UnusableCacheDir(dir); !why.empty()) {
      std::cerr << "cache_dir '" << dir << "' cannot be used here (" << why
                << "): the dataset is decoded in memory\n";
    }
  }

  json reports = json::array();
  json last = json::object();
  double consumed = 0;
  auto sink = [&](int64_t step, double epoch, const json& metrics) {
    // Shaped as `sweep show --json` gives a trial's reports.
    reports.push_back(
        {{"step", step}, {"epoch", epoch}, {"time", sweep::UnixSeconds()}, {"metrics", metrics}});
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
  std::signal(SIGINT, OnTrainInterrupt);
  std::signal(SIGTERM, OnTrainInterrupt);
  sweep::executor::TrialOutcome out = sweep::executor::RunTrial(task, sink, g_interrupt);
  for (auto& [k, v] : out.end_metrics.items()) last[k] = v;
  if (out.resumed_from_epoch > 0) {
    // Went on from checkpoint_path: epochs before it were trained by an earlier run.
    consumed = std::max(consumed, static_cast<double>(out.resumed_from_epoch));
    std::cerr << "went on from the checkpoint at epoch " << out.resumed_from_epoch
              << (reports.empty() && out.kind == sweep::executor::TrialOutcome::Kind::kCompleted
                      ? ": no epoch left to train; test_acc is that model's"
                      : "")
              << "\n";
  }
  if (as_json) {
    // As `sweep trials --json` gives a trial (epochs: the resource consumed), with every report.
    // Named as the store names a trial's state: a run stopped by Ctrl-C is interrupted.
    using Kind = sweep::executor::TrialOutcome::Kind;
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
    // Mean over epochs is the figure of merit for throughput; the last epoch alone is noisy.
    double sps = 0, wait = 0;
    for (const auto& e : reports) {
      sps += e["metrics"].value("samples_per_s", 0.0);
      wait += e["metrics"].value("data_wait_s", 0.0);
    }
    if (!reports.empty() && cfg->kind == sweep::TrialKind::kTrainer) {
      j["samples_per_s"] = sps / static_cast<double>(reports.size());
      j["data_wait_s"] = wait;
    }
    sweep::PrintJson(std::cout, j);
  } else if (out.end_metrics.contains("test_acc")) {
    std::printf("test_acc %.4f\n", out.end_metrics["test_acc"].get<double>());
  }
  if (out.kind == sweep::executor::TrialOutcome::Kind::kFailed) {
    std::cerr << "sweep: trial failed: " << out.error << "\n";
    return kExitRuntime;
  }
  if (out.kind == sweep::executor::TrialOutcome::Kind::kInterrupted) {
    // The machine stopped it (its checkpoint could not be written); run again, it goes on
    // from its last checkpoint.
    std::cerr << "sweep: interrupted at epoch " << consumed << ": " << out.error << "\n";
    return kExitRuntime;
  }
  if (out.kind == sweep::executor::TrialOutcome::Kind::kStopped) {
    // Not a finished run: a script's `sweep train ... && next` must not go on.
    std::cerr << "sweep: interrupted at epoch " << consumed << ", before the trial's end\n";
    return kExitRuntime;
  }
  return kExitOk;
}

// argv with a leading `--db PATH` (or `--db=PATH`) moved after the command that follows it.
std::vector<char*> DbFlagAfterCommand(int argc, char** argv) {
  std::vector<char*> args(argv, argv + argc);
  if (argc < 3) return args;
  const std::string_view first = argv[1];
  const size_t taken = first == "--db" ? 2 : first.starts_with("--db=") ? 1 : 0;
  if (taken == 0 || argc < 1 + static_cast<int>(taken) + 1) return args;
  char* command = argv[1 + taken];
  if (command[0] == '-') return args;
  args.erase(args.begin() + 1, args.begin() + 1 + static_cast<ptrdiff_t>(taken));
  args.insert(args.begin() + 2, argv + 1, argv + 1 + taken);
  return args;
}

}  // namespace

int main(int argc, char** argv) {
  // A file-size limit (ulimit -f) then fails the write that passes it, with a message naming the
  // file (EFBIG), instead of ending the process; workers inherit this.
  std::signal(SIGXFSZ, SIG_IGN);
  CLI::App app{"sweep: hyperparameter sweeps with an embedded data-parallel trainer"};
  app.footer(kExamples);
  // What was built and from which commit: the first thing a bug report needs.
  app.set_version_flag("--version", sweep::VersionText(),
                       "the version, its commit, and what was compiled in");
  app.require_subcommand(1);
  app.set_help_all_flag("--help-all", "help for every command");

  std::string config_path, db_flag, name, status_filter, sort = "number";
  std::vector<std::string> sets;
  bool json_out = false;
  int64_t top = 10;
  int threads = 0;

  auto* run = app.add_subcommand("run", "start a sweep from a TOML config");
  run->add_option("CONFIG", config_path, "sweep config (TOML)")->required();
  sweep::AddDbOption(*run, db_flag, "SQLite file (default: [store] path, else ./sweeps.db)", false);
  std::optional<std::string> name_flag;
  run->add_option("--name", name_flag, "sweep name (default: [sweep] name)");
  bool resume_flag = false;
  run->add_flag("--resume", resume_flag, "continue the sweep if it exists (see resume)");
  bool dry_run_flag = false;
  run->add_flag("--dry-run", dry_run_flag,
                "check everything, print the first trials it would start, touch no store");
  std::string from_flag;
  run->add_option("--from", from_flag,
                  "start from that sweep's trials (in the same --db) where the spaces agree");
  RemoteArgs remote;
  auto add_remote = [&remote](CLI::App* sub) {
    sub->add_option("--listen", remote.listen,
                    "accept remote agents on HOST:PORT (port 0: any free port)");
    sub->add_option("--token-file", remote.token_file,
                    "shared secret the agents prove they hold (needed off loopback)");
    sub->add_flag("--no-local", remote.no_local, "run trials on remote agents only");
  };
  add_remote(run);

  auto* resume = app.add_subcommand("resume", "continue an interrupted sweep");
  resume->add_option("NAME", name, "sweep name")->required();
  std::string resume_db = "sweeps.db";
  sweep::AddDbOption(*resume, resume_db, "SQLite file", true);
  add_remote(resume);
  std::optional<int> max_initial_failures;
  resume
      ->add_option("--max-initial-failures", max_initial_failures,
                   "this run's [trial] max_initial_failures (0: go on whatever fails)")
      ->check(CLI::Range(0, 1000000000));
  std::string more_trials, more_time;
  resume->add_option("--max-trials", more_trials,
                     "a new max_trials: the total, or +N for N more (a completed sweep too)");
  resume->add_option("--time-budget", more_time,
                     "a new time_budget: the total running time, or +D for D more (e.g. +30m)");
  resume->footer(
      "Runs again the trials that were running when it stopped (from their checkpoints) and "
      "goes on where it left off.\nA new budget continues the sampler where it stopped, early "
      "stopping's rungs intact, and is kept for later resumes.\nExamples: sweep resume "
      "fashion-mlp; sweep resume fashion-mlp --max-trials +16");
  run->footer(
      "Examples: sweep run configs/quickstart.toml --db results.db\n"
      "          sweep run fixed.toml --name fixed --from first  (carries first's trials over)");

  auto* train = app.add_subcommand("train", "run one trial directly, no store");
  train->add_option("CONFIG", config_path, "sweep config (TOML)")->required();
  train->add_option("--set", sets, "KEY=VALUE hyperparameter (a TOML value); repeatable");
  train->add_option("--threads", threads, "CPU threads (default: [trial] gpus)")
      ->check(CLI::Range(1, 1024));
  train->add_flag("--json", json_out, "print one JSON object at the end");
  train->footer(
      "Example: sweep train configs/quickstart.toml --set lr=0.05 --set hidden=[256,128]");

  QueryArgs q;
  auto add_query = [&](CLI::App* sub, bool with_name, bool with_csv) {
    if (with_name) sub->add_option("NAME", q.name, "sweep name")->required();
    sweep::AddDbOption(*sub, q.db, "SQLite file", true);
    auto* j = sub->add_flag("--json", q.json, "JSON output");
    if (with_csv) sub->add_flag("--csv", q.csv, "CSV output")->excludes(j);
  };
  auto* best = app.add_subcommand("best", "the best trials by the sweep's metric");
  add_query(best, true, true);
  best->add_option("--top", top, "how many")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 40));
  best->footer("Example: sweep best fashion-mlp --top 3 --json");
  auto* trials = app.add_subcommand("trials", "all trials of a sweep");
  add_query(trials, true, true);
  trials->add_option("--status", status_filter, "only trials in this state");
  trials
      ->add_option("--sort", sort,
                   "number, objective, started, ended, epochs, a metric (NAME or metric.NAME), or "
                   "a hyperparameter (NAME or param.NAME); -KEY for descending")
      ->capture_default_str();
  trials->footer("Example: sweep trials fashion-mlp --sort -val_acc --csv > trials.csv");
  auto* status = app.add_subcommand("status", "counts, running trials, best so far");
  add_query(status, true, false);
  auto* list = app.add_subcommand("list", "the sweeps in the store, with their sizes");
  add_query(list, false, false);
  auto* del = app.add_subcommand("delete", "remove a sweep: its rows, checkpoints and folders");
  std::string delete_name;
  bool delete_yes = false;
  del->add_option("NAME", delete_name, "sweep name")->required();
  sweep::AddDbOption(*del, q.db, "SQLite file", true);
  del->add_flag("--yes", delete_yes, "do not ask (needed where stdin is not a terminal)");
  auto* devices = app.add_subcommand("devices", "the GPUs (or CPU slots) trials would run on here");
  devices->add_flag("--json", json_out, "print JSON");
  int devices_cpu_slots = 0;
  devices->add_option("--cpu-slots", devices_cpu_slots, "CPU slots where there is no GPU")
      ->check(CLI::Range(1, 4096));
  AgentArgs agent_args;
  auto* agent = app.add_subcommand("agent", "serve a coordinator started with --listen");
  agent->add_option("--connect", agent_args.connect, "the coordinator's HOST:PORT")->required();
  agent->add_option("--token-file", agent_args.token_file, "the shared secret");
  agent->add_option("--gpus", agent_args.gpus, "GPUs to offer, e.g. 0,1 (default: all)");
  agent->add_option("--cpu-slots", agent_args.cpu_slots, "CPU slots to offer (no GPU)")
      ->check(CLI::Range(1, 1024));
  agent->add_option("--name", agent_args.name, "name in placements (default: host name)");
  agent->add_flag("--stay", agent_args.stay,
                  "keep serving when the sweep is over: wait for the next one on that address");
  agent->add_option("--retry-for", agent_args.retry_for,
                    "give up after this long without a coordinator (default 10m; with --stay "
                    "'forever')");
  agent->footer(
      "Example: sweep agent --connect coordinator:7070 --token-file ~/.sweep-token --gpus 0,1\n"
      "Reconnects with backoff when the coordinator restarts (sweep resume --listen ...).\n"
      "Exits 0 when the coordinator's sweep is over (unless --stay), 1 after --retry-for "
      "without a coordinator.");
  auto* worker = app.add_subcommand("worker", "");  // hidden: spawned by the coordinator
  worker->group("");
  // show, export, report and status --watch: sweep/src/view_commands.h.
  std::unique_ptr<sweep::ViewCommands> views = sweep::AddViewCommands(app);

  // `sweep --db PATH list` (the global-option habit of git -C or docker -H): --db before the
  // command moves after it, where each command that reads a store takes it.
  std::vector<char*> args = DbFlagAfterCommand(argc, argv);
  if (args[1] != argv[1]) {
    const std::vector<CLI::App*> subs = app.get_subcommands(
        [&](const CLI::App* sub) { return sub->get_name() == std::string_view(args[1]); });
    if (!subs.empty() && subs.front()->get_option_no_throw("--db") == nullptr) {
      return Fail(
          Status::InvalidArgument(std::string("--db: `sweep ") + args[1] + "` reads no store"));
    }
  }
  argc = static_cast<int>(args.size());
  argv = args.data();
  // CLI11 says only "A subcommand is required" for a misspelt command: name it and suggest one.
  if (argc > 1 && argv[1][0] != '-') {
    std::vector<std::string> commands;
    for (const CLI::App* sub : app.get_subcommands({})) {
      if (!sub->get_group().empty()) commands.push_back(sub->get_name());
    }
    if (std::find(commands.begin(), commands.end(), argv[1]) == commands.end() &&
        std::string_view(argv[1]) != "worker") {
      std::string msg = std::string("unknown command '") + argv[1] + "'";
      std::string hint = sweep::DidYouMean(argv[1], commands);
      if (!hint.empty()) msg += "; did you mean '" + hint + "'?";
      return Fail(Status::InvalidArgument(msg + " (sweep --help lists them)"));
    }
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return sweep::CheckStandardOutput(app.exit(e));
  } catch (const CLI::CallForAllHelp& e) {
    return sweep::CheckStandardOutput(app.exit(e));
  } catch (const CLI::CallForVersion& e) {
    return sweep::CheckStandardOutput(app.exit(e));
  } catch (const CLI::ParseError& e) {
    app.exit(e);
    return kExitUsage;
  }
  // The processes that train (workers, `sweep train`) set NCCL's environment now, before any
  // thread starts (parsing starts none).
  if (worker->parsed() || train->parsed()) sweep::trainer::ConnectNcclAtInit();
  if (worker->parsed()) {
    return sweep::executor::RunWorker(sweep::executor::kWorkerCommandFd,
                                      sweep::executor::kWorkerMessageFd);
  }
  const int code = [&] {
    if (std::optional<int> view = views->Run()) return *view;
    if (run->parsed())
      return CmdRun(config_path, db_flag, name_flag, resume_flag, dry_run_flag, from_flag, remote,
                    argv[0]);
    if (resume->parsed()) {
      auto budget = ParseBudgetChange(more_trials, more_time);
      if (!budget.ok()) return Fail(budget.status());
      return CmdResume(name, resume_db, remote, max_initial_failures, *budget, argv[0]);
    }
    if (agent->parsed()) return CmdAgent(agent_args, argv[0]);
    if (train->parsed()) return CmdTrain(config_path, sets, json_out, threads);
    if (best->parsed()) return CmdBest(q, top);
    if (trials->parsed()) return CmdTrials(q, status_filter, sort);
    if (status->parsed()) return CmdStatus(q);
    if (list->parsed()) return CmdList(q);
    if (del->parsed()) return sweep::CmdDelete(q.db, delete_name, delete_yes);
    if (devices->parsed()) return CmdDevices(json_out, devices_cpu_slots);
    return kExitUsage;
  }();
  return sweep::CheckStandardOutput(code);
}
