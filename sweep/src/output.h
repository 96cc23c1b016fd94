// Rendering stored trials and sweeps for the CLI: aligned tables for people, JSON and CSV for
// programs. The JSON shape is the stable contract of `best`, `trials`, `status` and `list`.
#pragma once

#include <ostream>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/status.h"
#include "store/store.h"

namespace sweep {

nlohmann::json TrialJson(const store::TrialRecord& t);
void PrintTrialsJson(std::ostream& out, const std::vector<store::TrialRecord>& trials);
// `metric` is shown as its own column, first.
void PrintTrialsTable(std::ostream& out, const std::vector<store::TrialRecord>& trials,
                      const std::string& metric);

// How a trial's first start event says which sampler proposed it, after its placement
// ("local:cpu0; proposed by tpe"); the store's schema 7 migration reads it back the same way.
inline constexpr std::string_view kProposedBy = "; proposed by ";

// Exit codes of every command: 0 success; 1 runtime failure; 2 usage or config error.
inline constexpr int kExitOk = 0;
inline constexpr int kExitRuntime = 1;
inline constexpr int kExitUsage = 2;
// Another process runs the sweep (run, resume), or holds its store locked: the same code from
// every command, so that a script can wait and try again.
inline constexpr int kExitBusy = 3;
// Prints "sweep: MESSAGE" on stderr and returns the exit code for it: a user's mistake (a bad
// flag or config, an unknown sweep or trial, a name taken) exits 2, anything else 1.
int Fail(const Status& s);
// A command's exit code once its standard output is flushed: a write that failed (a full disk,
// a closed descriptor) is said on stderr and makes it 1, so a redirected table or export cut
// short is never taken for a whole one.
int CheckStandardOutput(int code);
// " --db DB" for a command to type (quoted for a shell where it needs it), or "" for the
// default ./sweeps.db.
std::string DbFlag(const std::string& db);
// `word` as a shell reads it back: as it is when it needs no quoting, else in single quotes.
std::string ShellQuote(const std::string& word);
// `j` indented, then a line break; bytes that are not UTF-8 (in a stored string) replaced
// rather than thrown on. Every --json output goes through it.
void PrintJson(std::ostream& out, const nlohmann::json& j);

// A sweep's owner ("PID@HOST", as sweeps.owner stores it) as a message names it:
// "pid PID on host HOST"; "another process" when it is not of that form.
std::string DescribeOwner(const std::string& owner);

// `sweep COMMAND NAME[ --db DB][ OPTIONS]`, a command to type about sweep `name` of store `db`
// (with `--` before a name that starts with '-').
std::string SweepCommand(const std::string& command, const std::string& name, const std::string& db,
                         const std::string& options = "");
// The flags that bring a sweep's agents back when it is resumed: `--listen HOST:PORT`, then
// `--token-file F` and `--no-local` when given; "" when `listen_host` is empty (no agents).
std::string AgentFlags(const std::string& listen_host, int port, const std::string& token_file,
                       bool no_local);
// The command that continues `sweep` of store `db`: `sweep resume NAME[ --db DB]`, with the
// agent flags of the process that last ran it.
std::string ResumeCommand(const store::SweepRecord& sweep, const std::string& db);
// Opens `db` to read; a missing one is said with the folder a relative path was looked for in
// and how to name another (--db), since the working folder differs between shells and jobs.
Result<std::unique_ptr<store::Store>> OpenToRead(const std::string& db);
// The NotFound for a database that is not there, worded as OpenToRead's.
Status NoSuchDatabase(const std::string& db);
// Store::FindSweep, with "did you mean ..." when the name is close to one that exists.
Result<store::SweepRecord> FindSweepOrSuggest(store::Store& st, const std::string& name);

// A trainer trial's info (TrialOutcome::info) on an image folder, as text: its label map (the
// first 30 of its classes, and how many more), and the bad files it skipped; empty when it has
// neither. For `sweep show` and `sweep train`.
std::string ClassLabelsText(const nlohmann::json& info);
std::string SkippedFilesText(const nlohmann::json& info);

// Whether a sweep stored as running has lost its coordinator (killed, crashed, its machine
// rebooted): no process holds its lock in `db_path`.lock, whether or not it recorded an owner.
// False for a sweep that has ended.
bool CoordinatorGone(const std::string& db_path, const store::SweepRecord& sweep);
// Refuses `sweep` (named `name`) while its owner still runs it though its lock file was removed
// or replaced (it has the file open, which the lock cannot show); `then` ends the message.
Status RefuseOwnerWithoutLockFile(const std::string& db_path, const store::SweepRecord& sweep,
                                  const std::string& name, const std::string& then);

// What `status` reads of a sweep: its counts by state, its running trials, its best trial.
struct StatusFacts {
  store::StatusCounts counts;
  std::vector<store::TrialRecord> running;
  std::vector<store::TrialRecord> best;  // at most one
};
Result<StatusFacts> ReadStatusFacts(store::Store& st, const store::SweepRecord& sweep);

// The wall time from the sweep's creation to now while a coordinator runs it, else to when it
// ended or its coordinator last committed: a stopped sweep's clock stands still.
double ElapsedSeconds(const store::SweepRecord& sweep, double now_s, bool gone);

// The text of `sweep status`: the sweep's state and elapsed time, counts by state, the running
// trials and their slots, the best trial. `now_s` is Unix time, for the elapsed time of a
// sweep that has not ended; `gone`: its coordinator died (CoordinatorGone), said in its state.
void PrintStatusText(std::ostream& out, const store::SweepRecord& sweep,
                     const store::StatusCounts& counts,
                     const std::vector<store::TrialRecord>& running,
                     const std::vector<store::TrialRecord>& best, double now_s, bool gone = false,
                     const std::string& db = "sweeps.db");

}  // namespace sweep
