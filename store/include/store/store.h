// Store: the one SQLite file that holds every sweep, trial, report and state transition.
// Start here for anything that reads or writes results. A Store is one connection; it is not
// safe to use from several threads at once (give each thread its own Store). Many processes
// may read while one writes (WAL mode); writes are buffered in one open transaction until
// Commit(), so a coordinator commits once per loop turn rather than once per row.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace sweep::store {

// Current schema version, kept in PRAGMA user_version.
inline constexpr int kSchemaVersion = 10;

enum class TrialStatus { kPending, kRunning, kCompleted, kPruned, kFailed, kInterrupted };
// "pending", "running", "completed", "pruned", "failed", "interrupted".
std::string_view ToString(TrialStatus status);
std::optional<TrialStatus> ParseTrialStatus(std::string_view text);
bool IsTerminal(TrialStatus status);  // completed, pruned, failed

enum class SweepStatus { kRunning, kCompleted, kFailed, kInterrupted };
std::string_view ToString(SweepStatus status);
std::optional<SweepStatus> ParseSweepStatus(std::string_view text);

struct NewSweep {
  std::string name;
  std::string config_text;  // the TOML exactly as read
  std::string config_path;  // where it was read from, for messages
  std::string metric;       // what the sweep optimises
  bool maximize = true;
  int64_t seed = 0;
  double created_s = 0;  // Unix time, seconds
  std::string owner;     // "PID@HOST" of the process that runs it, stored with the row
  // The flags that bring its agents back ("--listen HOST:PORT --token-file F --no-local"), for
  // a resume hint; empty: it runs on this machine's slots alone.
  std::string run_options;
};

struct SweepRecord {
  int64_t id = 0;
  std::string name;
  std::string config_text;
  std::string config_hash;  // hex SHA-256 of config_text
  std::string config_path;
  std::string metric;
  bool maximize = true;
  int64_t seed = 0;
  SweepStatus status = SweepStatus::kRunning;
  double created_s = 0;
  std::optional<double> ended_s;
  std::string owner;             // "pid@host" of the process that runs or last ran it
  double active_s = 0;           // seconds it has been run for, over every run and resume
  std::optional<double> seen_s;  // when its coordinator last committed (with active_s)
  std::string run_options;       // that process's agent flags, as in NewSweep
  // A budget given to `sweep resume` in place of the config's (none: the config's).
  std::optional<int64_t> max_trials;
  std::optional<double> time_budget_s;
  // `sweep run --from`: trials 0 .. carried - 1 were copied from another sweep (max_trials
  // counts those after them), and trial n is its sampler's point n + sample_shift (a grid
  // skips the points carried instead).
  int64_t carried = 0;
  int64_t sample_shift = 0;
  std::string carried_from;  // the sweep `run --from` named; empty when none
};

struct RowCounts {
  int64_t trials = 0, reports = 0, events = 0;
};

struct TrialRecord {
  int64_t number = 0;  // 0-based, unique within the sweep
  TrialStatus status = TrialStatus::kPending;
  std::string params_json;  // canonical JSON object: keys sorted, shortest round-trip numbers
  std::string placement;    // e.g. "local:cpu0,cpu1"; empty before placement
  std::optional<double> started_s;
  std::optional<double> ended_s;
  std::string error;         // why it failed or was pruned; empty otherwise
  std::string checkpoint;    // path of its last checkpoint; empty when none
  std::string metrics_json;  // last reported value of each metric (plus test_acc): JSON object
  std::optional<double> objective;  // final value of the sweep's metric, when reported
  double epochs = 0;                // resource consumed (epochs, or steps for function trials)
  int retries = 0;                  // reruns after its worker died
  int agent_losses = 0;             // agents lost while it ran (it runs again, up to a limit)
  // Which way a TPE sweep's trial was proposed: "tpe", or "startup random" (the first ones);
  // empty for grid and random search.
  std::string proposed_by;
  // Command trials: the program's stdout and stderr, on the machine named in `placement`.
  std::string stdout_log;
  std::string stderr_log;
  // What its run found out that is not a metric, a JSON object: a trainer trial on an image
  // folder stores {"classes": [names by label], "skipped_files": n, "skipped": ["path: why"]}.
  std::string info_json = "{}";
  // Hyperband: the bracket a trial carried over from another sweep ran in there (its number
  // here would give another); none: the one its number gives.
  std::optional<int64_t> bracket;
};

struct ReportRecord {
  int64_t trial = 0;  // trial number
  int64_t step = 0;
  double epoch = 0;
  std::string metrics_json;  // JSON object of metric name -> number
  double time_s = 0;         // Unix time, seconds
};

// One state change of a trial, as AddEvent recorded it.
struct EventRecord {
  std::string from, to;  // states ("" before the first)
  std::string detail;    // why: a lost agent, a placement, a prune
  double time_s = 0;     // Unix time, seconds
};

struct SweepSummary {
  std::string name;
  SweepStatus status = SweepStatus::kRunning;
  std::string metric;
  bool maximize = true;
  int64_t trials = 0;
  std::optional<double> best;  // best objective among completed trials
  double created_s = 0;
  std::optional<double> ended_s;
};

struct StatusCounts {
  int64_t pending = 0, running = 0, completed = 0, pruned = 0, failed = 0, interrupted = 0;
  int64_t total() const { return pending + running + completed + pruned + failed + interrupted; }
};

struct TrialQuery {
  std::optional<TrialStatus> status;  // only trials in this state
  // "number" (default), "status", "objective", "started", "ended", "epochs", or a metric name
  // (ordered by its value in metrics_json). A leading '-' sorts descending.
  std::string sort = "number";
  int64_t limit = -1;  // -1: all
};

enum class OpenMode {
  kReadWrite,  // creates the file and the schema when missing; migrates an older schema
  kReadOnly,   // for queries; refuses a missing file
};

// How a writer waits for another process's write lock (Store::Open, Store::WaitForLocks).
struct LockWait {
  std::chrono::milliseconds limit{0};
  std::function<bool(double waited_s)> on_wait;
};

class Store {
 public:
  // Opens (or creates) the database at `path`. Refuses a file whose schema is newer than this
  // binary knows, naming both versions. Errors name the path.
  // `wait`: how a writer waits for another process's write lock, from its opening on (a new
  // file's schema needs the lock too); see WaitForLocks.
  static Result<std::unique_ptr<Store>> Open(const std::string& path, OpenMode mode,
                                             LockWait wait = {});
  ~Store();  // rolls back writes not yet committed, as a crash would
  Store(const Store&) = delete;
  Store& operator=(const Store&) = delete;

  const std::string& path() const { return path_; }
  // Whether a commit found the file removed or replaced by another (see the IoError it gave):
  // nothing more can be written, and resuming from `path` would not find this sweep there.
  bool file_lost() const;
  // Commits, then reads every page (PRAGMA quick_check, about 2 ms a MB): Corruption, naming
  // the damage, when another program wrote over the file in place while this Store wrote it.
  Status CheckFile();

  // ---- sweeps ----
  // AlreadyExists when the name is taken. Returns the new sweep's id. Committed at once, in a
  // transaction of its own; `before_commit`, when given, runs in it with the new id (to take
  // the sweep's lock, so that no reader ever sees the sweep before its owner holds the lock),
  // and its error rolls the sweep back.
  Result<int64_t> CreateSweep(const NewSweep& sweep,
                              const std::function<Status(int64_t id)>& before_commit = {});
  Result<SweepRecord> FindSweep(std::string_view name);  // NotFound names the sweep
  Result<std::vector<SweepSummary>> ListSweeps();
  Status SetSweepStatus(int64_t sweep_id, SweepStatus status, std::optional<double> ended_s);

  // ---- writes, buffered in an open transaction until Commit() ----
  // AlreadyExists for a taken number; NotFound for an unknown sweep or trial.
  Status InsertTrial(int64_t sweep_id, const TrialRecord& trial);
  // An empty placement or checkpoint, or no started_s, keeps the stored value.
  Status UpdateTrialStatus(int64_t sweep_id, int64_t number, TrialStatus status,
                           std::string_view placement, std::optional<double> started_s,
                           std::string_view checkpoint = {});
  // Writes status, ended, error, metrics, objective, epochs, and checkpoint when not empty.
  Status FinishTrial(int64_t sweep_id, const TrialRecord& trial);
  // A trial's step is stored once: reporting it again (a rerun, or a program reporting it
  // twice) keeps the first report; `stored` (when given) says whether this one was stored.
  Status AddReport(int64_t sweep_id, const ReportRecord& report, bool* stored = nullptr);
  // The stored report of a trial's step, if any; on the writing connection, so what this Store
  // wrote is seen before it commits.
  Result<std::optional<ReportRecord>> ReportAt(int64_t sweep_id, int64_t trial, int64_t step);
  // A stored report's metrics and time replaced (a later line of the same step added metrics
  // to it). With `last`, it also moves to the end of the arrival order (AllReports), as if it had
  // arrived now: resume replays reports in that order, and early stopping decided on it now.
  Status RewriteReport(int64_t sweep_id, const ReportRecord& report, bool last);
  // A running trial's latest metrics, objective and epochs, so that readers see its progress
  // before it ends; a trial no longer running is left alone.
  Status SetTrialProgress(int64_t sweep_id, const TrialRecord& trial);
  Status SetTrialRetries(int64_t sweep_id, int64_t number, int retries);
  // TrialRecord::info_json (a JSON object; anything else is stored as {}).
  Status SetTrialInfo(int64_t sweep_id, int64_t number, const std::string& info_json);
  Status SetTrialAgentLosses(int64_t sweep_id, int64_t number, int losses);
  // The trial's checkpoint is no longer kept (its file is deleted once this commits).
  Status DropTrialCheckpoint(int64_t sweep_id, int64_t number);
  Status SetSweepOwner(int64_t sweep_id, std::string_view owner, std::string_view run_options);
  Status SetSweepActive(int64_t sweep_id, double active_s, double now_s);
  // The budget a resume extends the sweep to, kept for its later resumes (none: the config's).
  Status SetSweepBudget(int64_t sweep_id, std::optional<int64_t> max_trials,
                        std::optional<double> time_budget_s);
  // How many trials the sweep took from another (`run --from`, naming `from`), and its
  // sampler's shift.
  Status SetSweepCarried(int64_t sweep_id, int64_t carried, int64_t sample_shift,
                         const std::string& from);
  Status AddEvent(int64_t sweep_id, std::optional<int64_t> trial, std::string_view from,
                  std::string_view to, std::string_view detail, double time_s);
  // Commits the open transaction, if any. Cheap when nothing was written.
  Status Commit();
  // Commits, then moves the write-ahead log into the file and empties it, waiting up to 2 s for
  // readers' snapshots. False when a reader (a sqlite3 shell in a transaction) still held some of
  // it back: until a later writer moves it, the file alone is not the whole store.
  Result<bool> FoldLog();
  // A write that finds the file locked by another process (past SQLite's 5 s busy timeout)
  // waits, up to `limit`, instead of failing (then kIoError); `on_wait` hears how long it has
  // waited after each 5 s, and returns false to stop waiting (kIoError). The default, 0: fail
  // at once with kBusy.
  void WaitForLocks(LockWait wait);
  // Runs `reads` (queries on this Store) in one read transaction, so that they see one state of
  // the file, not the commits a running sweep makes between them (trials, then their reports).
  // Within an open write batch they already do.
  Status ReadTogether(const std::function<Status()>& reads);

  // ---- queries ----
  Result<std::vector<TrialRecord>> BestTrials(int64_t sweep_id, bool maximize, int64_t top);
  Result<std::vector<TrialRecord>> Trials(int64_t sweep_id, const TrialQuery& query);
  Result<std::optional<TrialRecord>> Trial(int64_t sweep_id, int64_t number);
  Result<StatusCounts> CountByStatus(int64_t sweep_id);
  Result<std::vector<ReportRecord>> Reports(int64_t sweep_id, int64_t trial_number);
  Result<int64_t> MaxTrialNumber(int64_t sweep_id);  // -1 when the sweep has no trial
  // A trial's state changes in the order they were recorded.
  Result<std::vector<EventRecord>> TrialEvents(int64_t sweep_id, int64_t trial_number);
  // How many rows the sweep has in each table.
  Result<RowCounts> CountRows(int64_t sweep_id);
  // Removes the sweep and its trials, reports and events, and commits. NotFound when absent.
  Status DeleteSweep(int64_t sweep_id);
  // Every report of the sweep in the order it first arrived (what a scheduler replays).
  Result<std::vector<ReportRecord>> AllReports(int64_t sweep_id);

 private:
  struct Impl;
  explicit Store(std::string path, std::unique_ptr<Impl> impl);
  std::string path_;
  std::unique_ptr<Impl> impl_;
};

}  // namespace sweep::store
