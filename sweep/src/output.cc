// Tables and JSON for stored trials.
#include "output.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <map>

#include "executor/net_auth.h"
#include "sweep/config.h"
#include "sweep_lock.h"

namespace sweep {

using nlohmann::json;

namespace {

json ParseOrEmpty(const std::string& text) {
  json j = json::parse(text.empty() ? "{}" : text, nullptr, /*allow_exceptions=*/false);
  return j.is_discarded() ? json::object() : j;
}

std::string Cell(const json& v) {
  if (v.is_null()) return "nan";  // a metric reported NaN or infinity (JSON holds neither)
  if (v.is_string()) return v.get<std::string>();
  if (v.is_number_float()) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.6g", v.get<double>());
    return buf;
  }
  return v.dump();
}

}  // namespace

json TrialJson(const store::TrialRecord& t) {
  json j = {{"trial", t.number},
            {"status", store::ToString(t.status)},
            {"params", ParseOrEmpty(t.params_json)},
            {"metrics", ParseOrEmpty(t.metrics_json)},
            {"epochs", t.epochs},
            {"placement", t.placement}};
  j["started"] = t.started_s ? json(*t.started_s) : json(nullptr);
  j["ended"] = t.ended_s ? json(*t.ended_s) : json(nullptr);
  j["duration_s"] = (t.started_s && t.ended_s) ? json(*t.ended_s - *t.started_s) : json(nullptr);
  if (!t.error.empty()) j["error"] = t.error;
  if (!t.checkpoint.empty()) j["checkpoint"] = t.checkpoint;
  if (!t.stdout_log.empty()) j["stdout_log"] = t.stdout_log;
  if (!t.stderr_log.empty()) j["stderr_log"] = t.stderr_log;
  if (!t.proposed_by.empty()) j["proposed_by"] = t.proposed_by;
  if (json info = ParseOrEmpty(t.info_json); !info.empty()) j["info"] = std::move(info);
  return j;
}

void PrintTrialsJson(std::ostream& out, const std::vector<store::TrialRecord>& trials) {
  json arr = json::array();
  for (const auto& t : trials) arr.push_back(TrialJson(t));
  PrintJson(out, arr);
}

void PrintTrialsTable(std::ostream& out, const std::vector<store::TrialRecord>& trials,
                      const std::string& metric) {
  std::vector<std::vector<std::string>> rows;
  // TPE's trials say what proposed them: startup random search, or TPE.
  const bool by = std::any_of(trials.begin(), trials.end(),
                              [](const store::TrialRecord& t) { return !t.proposed_by.empty(); });
  rows.push_back({"trial", "status", metric, "epochs", "params"});
  if (by) rows.back().insert(rows.back().end() - 1, "proposed by");
  for (const auto& t : trials) {
    json m = ParseOrEmpty(t.metrics_json);
    json p = ParseOrEmpty(t.params_json);
    std::string ps;
    for (auto& [k, v] : p.items()) ps += (ps.empty() ? "" : " ") + k + "=" + Cell(v);
    if (!t.error.empty()) ps += (ps.empty() ? "" : "  ") + ("[" + t.error + "]");
    rows.push_back({std::to_string(t.number), std::string(store::ToString(t.status)),
                    m.contains(metric) ? Cell(m[metric]) : "-", Cell(json(t.epochs)), ps});
    if (by) rows.back().insert(rows.back().end() - 1, t.proposed_by.empty() ? "-" : t.proposed_by);
  }
  for (auto& r : rows) {
    // One row per line: a multi-line error (a program's last lines) or a value holding a
    // carriage return would break the table or move the cursor.
    for (std::string& cell : r) {
      std::string flat;
      for (char ch : cell) {
        if (ch == '\n') {
          flat += " | ";
        } else if (static_cast<unsigned char>(ch) < 0x20 || ch == 0x7f) {
          flat += ' ';
        } else {
          flat += ch;
        }
      }
      cell = std::move(flat);
    }
  }
  std::vector<size_t> width(rows[0].size(), 0);
  for (const auto& r : rows) {
    for (size_t c = 0; c + 1 < r.size(); ++c) width[c] = std::max(width[c], r[c].size());
  }
  for (const auto& r : rows) {
    std::string line;
    for (size_t c = 0; c < r.size(); ++c) {
      line += r[c];
      if (c + 1 < r.size()) line += std::string(width[c] - r[c].size() + 2, ' ');
    }
    out << line << "\n";
  }
}

bool CoordinatorGone(const std::string& db_path, const store::SweepRecord& sweep) {
  // An empty owner is no exception: the owner is stored with the sweep's row, and the lock
  // taken before that commits, so a running sweep without an owner lost its coordinator before
  // it recorded one (a file from an older binary, a disk that filled up in between).
  if (sweep.status != store::SweepStatus::kRunning) return false;
  Result<bool> held = SweepLock::IsHeld(db_path, sweep.id);
  return held.ok() && !*held && !SweepLock::OwnerHasLockFileOpen(db_path, sweep.owner);
}

Status RefuseOwnerWithoutLockFile(const std::string& db_path, const store::SweepRecord& sweep,
                                  const std::string& name, const std::string& then) {
  if (sweep.status != store::SweepStatus::kRunning ||
      !SweepLock::OwnerHasLockFileOpen(db_path, sweep.owner)) {
    return Status::Ok();
  }
  return Status::Busy("sweep '" + name + "' is being run by " + DescribeOwner(sweep.owner) +
                      " (its lock file " + db_path + ".lock was removed while it ran); " + then);
}

std::string ShellQuote(const std::string& word) {
  const bool plain = !word.empty() && word.find_first_not_of(
                                          "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNO"
                                          "PQRSTUVWXYZ0123456789_-./+,:@%=") == std::string::npos;
  if (plain) return word;
  std::string quoted = "'";
  for (char ch : word) quoted += ch == '\'' ? std::string("'\\''") : std::string(1, ch);
  return quoted + "'";
}

std::string DbFlag(const std::string& db) {
  if (db == "sweeps.db" || db == "./sweeps.db") return "";
  return " --db " + ShellQuote(db);
}

void PrintJson(std::ostream& out, const nlohmann::json& j) {
  out << j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
}

std::string DescribeOwner(const std::string& owner) {
  const auto at = owner.find('@');
  if (at == std::string::npos) return "another process";
  return "pid " + owner.substr(0, at) + " on host " + owner.substr(at + 1);
}

std::string SweepCommand(const std::string& command, const std::string& name, const std::string& db,
                         const std::string& options) {
  const std::string more = DbFlag(db) + (options.empty() ? "" : " " + options);
  // A name starting with '-' (a sweep stored before such names were refused) follows `--`, or
  // it would read as an option.
  if (name.starts_with('-')) return "sweep " + command + more + " -- " + name;
  return "sweep " + command + " " + name + more;
}

std::string AgentFlags(const std::string& listen_host, int port, const std::string& token_file,
                       bool no_local) {
  if (listen_host.empty()) return "";
  std::string flags = "--listen " + ShellQuote(executor::net::FormatHostPort(listen_host, port));
  if (!token_file.empty()) flags += " --token-file " + ShellQuote(token_file);
  if (no_local) flags += " --no-local";
  return flags;
}

std::string ResumeCommand(const store::SweepRecord& sweep, const std::string& db) {
  return SweepCommand("resume", sweep.name, db, sweep.run_options);
}

Result<StatusFacts> ReadStatusFacts(store::Store& st, const store::SweepRecord& sweep) {
  StatusFacts facts;
  SWEEP_ASSIGN_OR_RETURN(facts.counts, st.CountByStatus(sweep.id));
  store::TrialQuery q;
  q.status = store::TrialStatus::kRunning;
  SWEEP_ASSIGN_OR_RETURN(facts.running, st.Trials(sweep.id, q));
  SWEEP_ASSIGN_OR_RETURN(facts.best, st.BestTrials(sweep.id, sweep.maximize, 1));
  return facts;
}

double ElapsedSeconds(const store::SweepRecord& sweep, double now_s, bool gone) {
  double to = now_s;
  if (sweep.ended_s) {
    to = *sweep.ended_s;
  } else if ((sweep.status != store::SweepStatus::kRunning || gone) && sweep.seen_s) {
    to = *sweep.seen_s;
  }
  return std::max(0.0, to - sweep.created_s);
}

void PrintStatusText(std::ostream& out, const store::SweepRecord& sweep,
                     const store::StatusCounts& counts,
                     const std::vector<store::TrialRecord>& running,
                     const std::vector<store::TrialRecord>& best, double now_s, bool gone,
                     const std::string& db) {
  const double elapsed = ElapsedSeconds(sweep, now_s, gone);
  const auto& c = counts;
  out << "sweep " << sweep.name << " (" << store::ToString(sweep.status)
      << (gone ? ", but its coordinator is gone: `" + ResumeCommand(sweep, db) + "`" : "") << "), "
      << (sweep.maximize ? "max " : "min ") << sweep.metric << ", elapsed "
      << static_cast<int64_t>(elapsed)
      << " s"
      // Time spent running, over every run and resume (as of the last commit), when it differs
      // from the wall time since creation: a resumed sweep, or one whose coordinator died.
      << (elapsed - sweep.active_s >= 1
              ? " (running " + std::to_string(static_cast<int64_t>(sweep.active_s)) + " s)"
              : std::string())
      << "\n"
      << "  trials: " << c.total() << " (" << c.completed << " completed, " << c.running
      << " running, " << c.pruned << " pruned, " << c.failed << " failed, " << c.interrupted
      << " interrupted, " << c.pending << " pending)\n";
  // A TPE sweep's trials say which sampler proposed them.
  auto by = [](const store::TrialRecord& t) {
    return t.proposed_by.empty() ? std::string() : " (proposed by " + t.proposed_by + ")";
  };
  for (const auto& t : running) {
    out << "  running: trial " << t.number << " on " << t.placement << by(t) << "\n";
  }
  if (!best.empty()) {
    const auto& b = best.front();
    out << "  best: trial " << b.number << " " << sweep.metric << " = "
        << (b.objective ? FormatNumber(*b.objective) : "-") << "  " << b.params_json << by(b)
        << "\n";
  }
}

int CheckStandardOutput(int code) {
  errno = 0;
  const bool flushed = std::fflush(stdout) == 0;
  const int error = flushed ? 0 : errno;
  std::cout.flush();
  if (flushed && std::cout && !std::ferror(stdout)) return code;
  std::cerr << "sweep: cannot write to standard output"
            << (error != 0 ? std::string(": ") + std::strerror(error) : std::string())
            << "; what it printed is incomplete\n";
  return code == kExitOk ? kExitRuntime : code;
}

int Fail(const Status& s) {
  std::cerr << "sweep: " << s.message() << "\n";
  switch (s.code()) {
    case Status::Code::kInvalidArgument:
    case Status::Code::kNotFound:
    case Status::Code::kAlreadyExists:
      return kExitUsage;
    case Status::Code::kBusy:
      return kExitBusy;
    default:
      return kExitRuntime;
  }
}

Status NoSuchDatabase(const std::string& db) {
  std::string where;
  if (std::filesystem::path(db).is_relative()) {
    std::error_code ec;
    const std::filesystem::path cwd = std::filesystem::current_path(ec);
    if (!ec) where = " in " + cwd.string() + " (the working folder)";
  }
  return Status::NotFound(db + ": no such database" + where +
                          "; name the sweep's store with --db PATH (the `[store] path` of its "
                          "config, default sweeps.db beside where `sweep run` ran)");
}

Result<std::unique_ptr<store::Store>> OpenToRead(const std::string& db) {
  auto st = store::Store::Open(db, store::OpenMode::kReadOnly);
  if (!st.ok() && st.status().code() == Status::Code::kNotFound) {
    std::error_code ec;
    if (!std::filesystem::exists(db, ec) && !ec) return NoSuchDatabase(db);
  }
  return st;
}

std::string ClassLabelsText(const json& info) {
  auto classes = info.find("classes");
  if (classes == info.end() || !classes->is_array()) return "";
  // A thousand classes would be a page: the first ones, and how many more (--json has all).
  constexpr size_t kShown = 30;
  std::string labels;
  for (size_t i = 0; i < classes->size() && i < kShown; ++i) {
    const json& name = (*classes)[i];
    labels += (i == 0 ? "" : "  ") + std::to_string(i) + " " +
              (name.is_string() ? name.get<std::string>() : name.dump());
  }
  if (classes->size() > kShown) {
    labels += "  ... and " + std::to_string(classes->size() - kShown) + " more";
  }
  return labels;
}

std::string SkippedFilesText(const json& info) {
  auto n = info.find("skipped_files");
  if (n == info.end() || !n->is_number_integer() || *n == 0) return "";
  const int64_t count = n->get<int64_t>();
  std::string skipped =
      std::to_string(count) + (count == 1 ? " bad file" : " bad files") + " skipped";
  if (auto some = info.find("skipped"); some != info.end() && some->is_array()) {
    for (const json& s : *some) skipped += "\n" + (s.is_string() ? s.get<std::string>() : "");
  }
  return skipped;
}

Result<store::SweepRecord> FindSweepOrSuggest(store::Store& st, const std::string& name) {
  auto sw = st.FindSweep(name);
  if (sw.ok() || sw.status().code() != Status::Code::kNotFound) return sw;
  auto list = st.ListSweeps();
  if (!list.ok()) return sw;
  std::vector<std::string> names;
  for (const auto& s : *list) names.push_back(s.name);
  std::string hint = DidYouMean(name, names);
  if (hint.empty()) return sw;
  return sw.status().WithMessage(sw.status().message() + "; did you mean '" + hint + "'?");
}

}  // namespace sweep
