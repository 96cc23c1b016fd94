// The command-trial runner: starts the user's program in a process group of its own, reads its
// stdout line by line (copying it to stdout.log and turning `sweep-report` lines into reports),
// sends its stderr straight to stderr.log, and ends it with SIGTERM, then SIGKILL after the
// grace period, when the trial is stopped, times out or diverges. Runs on the worker's thread.
// Its parts: command_env (what the program gets), command_process (starting it),
// command_program (why it cannot run), command_folder (the trial folder), step_numbering.
#include "command_trial.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/statvfs.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <functional>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "command_env.h"
#include "command_folder.h"
#include "command_process.h"
#include "executor/command.h"
#include "line_io.h"
#include "step_numbering.h"
#include "worker_kinds.h"

namespace sweep::executor {

using nlohmann::json;

namespace {

// What a command trial's pipe may hold read but unparsed while its report waits for a verdict.
constexpr size_t kMaxHeldBytes = size_t{4} << 20;

using Clock = std::chrono::steady_clock;

// Failed, its reports having had the sweep's metric only as something other than a number.
TrialOutcome FailedNotNumber(std::string error) {
  TrialOutcome out = Failed(std::move(error));
  out.metric_not_number = true;
  return out;
}

std::string Now() {
  std::time_t t = std::time(nullptr);
  char buf[32];
  std::tm tm{};
  ::localtime_r(&t, &tm);
  std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M:%S", &tm);
  return buf;
}

class CommandRun {
 public:
  CommandRun(const TrialTask& task, const ReportSink& sink, const std::atomic<bool>& stop,
             const TrialHooks& hooks)
      : task_(task), sink_(sink), stop_(stop), hooks_(hooks) {}

  // 1. read the settings; 2. claim the trial folder; 3. open its logs; 4. report again what
  // earlier runs printed that the store lacks; 5. record this run; 6. start and supervise it.
  TrialOutcome Run() {
    std::vector<std::string> argv_template;
    if (std::optional<TrialOutcome> bad = ReadSettings(&argv_template)) return *bad;
    Result<std::vector<std::string>> argv =
        ExpandCommand(argv_template, CommandValues(task_, trial_dir_));
    if (!argv.ok()) return Failed("command: " + argv.status().message());

    const std::string sweep_key = task_.settings.value("sweep_key", "");
    bool stale = false;
    if (std::optional<TrialOutcome> bad = ClaimFolder(sweep_key, &stale)) return *bad;
    stdout_path_ = trial_dir_ + "/stdout.log";
    stderr_path_ = trial_dir_ + "/stderr.log";
    Fd out_log(::open(stdout_path_.c_str(), O_RDWR | O_CREAT | O_APPEND | O_CLOEXEC, 0644));
    Fd err_log(::open(stderr_path_.c_str(), O_RDWR | O_CREAT | O_APPEND | O_CLOEXEC, 0644));
    if (out_log.get() < 0 || err_log.get() < 0) {
      return Failed(trial_dir_ + ": cannot open the trial's log files: " + std::strerror(errno));
    }
    // A log emptied or replaced since the recorded runs: they cannot be read back.
    if (!runs_.empty() && ::lseek(out_log.get(), 0, SEEK_END) < runs_.back().stdout_offset) {
      runs_.clear();
    }
    std::string started = "[sweep] " + Now() + " trial " + std::to_string(task_.number) + ":";
    for (const std::string& a : *argv) started += " " + a;
    Note(err_log.get(), started);
    if (stale) {
      Note(err_log.get(), "[sweep] " + Now() + " " + trial_dir_ +
                              " held another sweep's run of this trial (a sweep of the same "
                              "name); it was cleared");
    }
    if (std::optional<TrialOutcome> done = ReplayEarlierRuns(err_log.get())) return *done;
    if (std::optional<TrialOutcome> bad = RecordThisRun(out_log.get(), sweep_key)) return *bad;
    stderr_start_ = ::lseek(err_log.get(), 0, SEEK_END);
    return Start(*argv, out_log.get(), err_log.get());
  }

 private:
  // A line of ours in the trial's stderr log, on a line of its own (AppendLine).
  static void Note(int fd, const std::string& line) { (void)AppendLine(fd, line); }

  // ---- Run's steps ----

  // Reads task_.settings into the members; a failed outcome when they are unusable.
  std::optional<TrialOutcome> ReadSettings(std::vector<std::string>* argv_template) {
    const json& s = task_.settings;
    try {
      *argv_template = s.at("command").get<std::vector<std::string>>();
    } catch (const json::exception&) {
      return Failed("command trial without a `command` list of strings");
    }
    workdir_ = s.value("workdir", "");
    trial_dir_ = s.value("trial_dir", "");
    metric_ = s.value("metric", "");
    kill_grace_ = std::chrono::duration<double>(s.value("kill_grace_s", 10.0));
    double timeout_s = s.value("timeout_s", 0.0);
    if (timeout_s > 0) timeout_ = std::chrono::duration<double>(timeout_s);
    if (trial_dir_.empty()) return Failed("command trial without a trial directory");
    numbering_.stored_step = task_.stored_step;
    numbering_.stored_epoch = task_.stored_epoch;
    numbering_.stored_epoch_steps = std::min(task_.stored_epoch_steps, task_.stored_step);
    return std::nullopt;
  }

  // Makes the trial folder this sweep's: cleared on a first run, and on a run again when its
  // record says another sweep's run left it (*stale); reads its earlier runs into runs_.
  std::optional<TrialOutcome> ClaimFolder(const std::string& sweep_key, bool* stale) {
    std::error_code ec;
    if (task_.fresh) {
      // Its first run: what the folder holds is an earlier sweep's of the same name (a store
      // made anew): its logs, and its program's checkpoints, which this run would go on from.
      std::filesystem::remove_all(trial_dir_, ec);
      if (ec) {
        return Failed(trial_dir_ +
                      ": cannot clear what an earlier sweep left there: " + ec.message());
      }
    }
    // Run again: the folder's record of its runs says whose it is. Another sweep's of the same
    // name (a store made anew, on a machine this trial had not run on in this sweep) is not
    // this trial's to go on from, and goes as on a first run.
    runs_path_ = trial_dir_ + "/" + kRunsFile;
    if (!task_.fresh) {
      runs_ = ReadRuns(runs_path_);
      if (!runs_.empty() && runs_.front().sweep_key != sweep_key) {
        *stale = true;
        runs_.clear();
        ClearFolder(trial_dir_, ec);
        if (ec) {
          return Failed(trial_dir_ +
                        ": cannot clear what an earlier sweep left there: " + ec.message());
        }
      }
    }
    std::filesystem::create_directories(trial_dir_, ec);
    if (ec) return Failed(trial_dir_ + ": cannot create the trial directory: " + ec.message());
    return std::nullopt;
  }

  // Reports again what earlier runs printed past the stored reports (Replay). An outcome when
  // the program need not run: a replayed report diverged, or early stopping decided on one.
  std::optional<TrialOutcome> ReplayEarlierRuns(int err_log) {
    if (runs_.empty()) return std::nullopt;
    std::string why_stopped;
    const int64_t replayed = Replay(&why_stopped);
    if (replayed > 0) {
      Note(err_log, "[sweep] " + Now() + " reported again " + std::to_string(replayed) +
                        " report(s) of an earlier run that the store had not kept "
                        "(from stdout.log), up to step " +
                        std::to_string(numbering_.stored_step));
    }
    if (!why_stopped.empty()) return Failed(why_stopped);
    if (stop_.load(std::memory_order_relaxed)) {
      // Early stopping decided on a report given again: the program need not run.
      TrialOutcome out;
      out.kind = TrialOutcome::Kind::kStopped;
      out.end_metrics = json::object();
      return out;
    }
    return std::nullopt;
  }

  // This run's output starts on a line of its own (an earlier run killed mid-line must not
  // join its first report), and where it starts is recorded with the numbering its reports get.
  std::optional<TrialOutcome> RecordThisRun(int out_log, const std::string& sweep_key) {
    if (!EndsLine(out_log)) WriteAll(out_log, "\n");
    stdout_start_ = ::lseek(out_log, 0, SEEK_END);
    RunRecord run{sweep_key, stdout_start_, numbering_.stored_step, numbering_.stored_epoch};
    run.stored_epoch_steps = numbering_.stored_epoch_steps;
    if (!AppendRun(runs_path_, run)) {
      // The machine's trouble (a full disk): without the record a later run again would number
      // this run's reports wrongly, so it does not run here.
      return Interrupted(runs_path_ + ": cannot record the run: " + std::strerror(errno));
    }
    return std::nullopt;
  }

  // Starts the program and supervises it to its end.
  TrialOutcome Start(const std::vector<std::string>& argv, int out_log, int err_log) {
    std::string program = ResolveProgram(argv[0], workdir_);
    // A program or workdir this machine lacks (checked before a local sweep starts, not on an
    // agent) is the machine's trouble: the trial runs again on a server that has them.
    if (program.empty()) {
      return Interrupted("command: '" + argv[0] +
                         "' is not an executable program on PATH on this machine");
    }
    // PATH differs between shells, jobs and agents: the log says which program a bare name
    // found there.
    if (argv[0].find('/') == std::string::npos) {
      Note(err_log, "[sweep] " + argv[0] + " is " + program);
    }
    Status spawned = SpawnProgram(program, argv, ProgramEnvironment(task_, trial_dir_), workdir_,
                                  err_log, &pid_, &pipe_);
    if (!spawned.ok()) {
      return spawned.code() == Status::Code::kUnavailable ? Interrupted(spawned.message())
                                                          : Failed(spawned.message());
    }
    if (hooks_.started) hooks_.started(pid_);
    return Supervise(out_log, err_log);
  }

  // ---- supervising the program ----

  // What Supervise knows of the running program.
  struct Watch {
    Clock::time_point start;
    Clock::time_point term_sent{};
    bool term = false, killed = false, exited = false;
    int wait_status = 0;
    Clock::time_point exited_at{};
    std::string why_stopped;  // non-empty: we ended it (timeout, divergence)
    bool overlong = false;    // in a line already read (as too long) before its end came
  };

  // Reads the program's output until it ends; stops it when asked, on timeout or divergence.
  TrialOutcome Supervise(int out_log, int err_log) {
    ::fcntl(pipe_.get(), F_SETFL, ::fcntl(pipe_.get(), F_GETFL) | O_NONBLOCK);
    out_log_ = out_log;
    pipe_open_ = true;
    partial_.clear();
    // While the caller waits inside the sink for an early-stopping verdict, the program runs on.
    if (hooks_.while_waiting != nullptr) *hooks_.while_waiting = [this] { Drain(); };
    struct Unset {
      std::function<void()>* f;
      ~Unset() {
        if (f != nullptr) *f = nullptr;
      }
    } unset{hooks_.while_waiting};
    Watch w;
    w.start = Clock::now();
    for (;;) {
      if (pipe_open_) ReadLines(w, err_log);
      if (!w.exited) CheckExited(w);
      // Once it exited, read what is left; a descendant holding the pipe gets 1 s.
      if (w.exited && (!pipe_open_ || Clock::now() - w.exited_at > std::chrono::seconds(1))) break;
      if (w.exited) continue;
      if (hooks_.idle) hooks_.idle();  // a stop may have come while the program was silent
      StopIfDue(w, out_log, err_log);
    }
    // The last line, unended: no more is read (what a descendant still writes stays in the
    // pipe, as it would have), so nothing is drained into `partial_` unparsed while it waits.
    pipe_open_ = false;
    if (!partial_.empty() && !w.overlong) Line(partial_, err_log, &w.why_stopped);
    pid_ = -1;
    return Outcome(w);
  }

  // Waits up to 100 ms (20 once it exited) for output, and reads the lines it completes.
  void ReadLines(Watch& w, int err_log) {
    pollfd p{pipe_.get(), POLLIN, 0};
    int ready = ::poll(&p, 1, w.exited ? 20 : 100);
    if (ready <= 0 || !ReadSome()) return;
    size_t pos;
    // Line() may wait for a verdict, and Drain() append to `partial_` meanwhile: its
    // beginning, the line being read, stays where it is.
    while ((pos = partial_.find('\n')) != std::string::npos) {
      // The end of an overlong line was read as one already (below).
      if (!w.overlong) Line(partial_.substr(0, pos), err_log, &w.why_stopped);
      w.overlong = false;
      partial_.erase(0, pos + 1);
    }
    if (partial_.size() > kMaxReportBytes && !w.overlong) DropDrawnOver(&partial_);
    if (partial_.size() > kMaxReportBytes) {
      // No line break for this long (binary output, a line of its own that long): read
      // what came as a line (an overlong report is refused), and the rest of it, up to
      // its line break, not at all.
      if (!w.overlong) Line(partial_, err_log, &w.why_stopped);
      w.overlong = true;
      partial_.clear();
    }
  }

  void CheckExited(Watch& w) {
    siginfo_t info{};
    if (::waitid(P_PID, static_cast<id_t>(pid_), &info, WEXITED | WNOHANG | WNOWAIT) == 0 &&
        info.si_pid == pid_) {
      w.exited = true;
      w.exited_at = Clock::now();
      // What the program left behind in its group (helpers, data loaders) goes with it,
      // while the unreaped program still holds the group's id.
      ::kill(-pid_, SIGKILL);
      if (hooks_.ended) hooks_.ended();
      ::waitpid(pid_, &w.wait_status, 0);
    } else if (!pipe_open_) {
      // Its stdout is closed but it runs on: wait without spinning.
      ::usleep(20'000);
    }
  }

  // Ends the program's group when due: SIGTERM on a stop, a timeout or a divergence, then
  // SIGKILL once kill_grace_ has passed.
  void StopIfDue(Watch& w, int out_log, int err_log) {
    const Clock::time_point now = Clock::now();
    if (!w.term && w.why_stopped.empty() && timeout_ && now - w.start > *timeout_) {
      w.why_stopped = "timed out after " + FormatSeconds(timeout_->count());
      // What it prints from here on is not recorded: nor is it by a run again.
      (void)AppendRecord(runs_path_, {{"end_offset", ::lseek(out_log, 0, SEEK_END) -
                                                         static_cast<off_t>(partial_.size())}});
    }
    if (!w.term && (stop_.load(std::memory_order_relaxed) || !w.why_stopped.empty())) {
      ::kill(-pid_, SIGTERM);
      w.term = true;
      w.term_sent = now;
      Note(err_log, "[sweep] " + Now() + " sent SIGTERM" +
                        (w.why_stopped.empty() ? std::string(" (stopped)") : ": " + w.why_stopped));
    }
    if (w.term && !w.killed && now - w.term_sent > kill_grace_) {
      ::kill(-pid_, SIGKILL);
      w.killed = true;
      Note(err_log, "[sweep] " + Now() + " sent SIGKILL: still running " +
                        FormatSeconds(kill_grace_.count()) + " after SIGTERM");
    }
  }

  TrialOutcome Outcome(const Watch& w) const {
    TrialOutcome out;
    out.end_metrics = json::object();
    if (!w.why_stopped.empty()) return Failed(w.why_stopped + LastLines());
    if (w.term) {
      out.kind = TrialOutcome::Kind::kStopped;
      return out;
    }
    if (WIFEXITED(w.wait_status) && WEXITSTATUS(w.wait_status) == 0) return ExitedZero();
    if (WIFEXITED(w.wait_status)) {
      return Failed("exited with code " + std::to_string(WEXITSTATUS(w.wait_status)) +
                    LogTrouble() + LastLines());
    }
    return Failed("killed by " + SignalName(WTERMSIG(w.wait_status)) + LogTrouble() + LastLines());
  }

  // The program exited 0: completed, unless it never reported (or never the sweep's metric).
  TrialOutcome ExitedZero() const {
    // Run again with nothing left to do (the program found its work done in its checkpoint),
    // a trial ends with what its earlier runs reported.
    const bool stored = numbering_.stored_step > 0;
    if (numbering_.reports == 0 &&
        !first_unread_.empty()) {  // run again or not: it tried to report
      return Failed(
          "the program exited 0 without a report that could be read: " + std::to_string(unread_) +
          " sweep-report line(s) could not be read; the first: " + first_unread_);
    }
    if (numbering_.reports == 0 && !stored) {
      return Failed(
          "the program exited 0 without reporting: print lines `sweep-report {\"epoch\": 1, "
          "\"" +
          (metric_.empty() ? std::string("val_acc") : metric_) + "\": 0.9}` on its stdout" +
          (inside_line_ > 0 ? " (stdout line " + std::to_string(inside_line_) +
                                  " has one after other text; a report starts its line)"
                            : std::string()));
    }
    if (!metric_.empty() && !metric_seen_ && !task_.stored_metric) {
      if (metric_not_number_) {
        return FailedNotNumber(
            "the program exited 0 but its reports' '" + metric_ +
            "' was never a number (a string, a bool, null, a list?): report it as a JSON "
            "number, e.g. \"" +
            metric_ + "\": 0.9");
      }
      // A misspelt metric would otherwise make a sweep of successes with nothing to rank.
      std::string names;
      for (const std::string& k : reported_) names += (names.empty() ? "" : ", ") + k;
      return Failed("the program exited 0 but never reported the sweep's metric '" + metric_ +
                    "' (its reports had: " + (names.empty() ? "no numbers" : names) + ")");
    }
    TrialOutcome out;
    out.end_metrics = json::object();
    return out;
  }

  // Why a program may have failed that is not its own doing: its logs' disk is full (its
  // writes to stderr, which goes to the log, fail there), or its stdout could not be logged.
  std::string LogTrouble() const {
    struct statvfs disk {};
    if (::statvfs(trial_dir_.c_str(), &disk) == 0 && disk.f_bavail == 0) {
      return "; the disk of its logs (" + trial_dir_ +
             ") is full, so its writes to stdout and stderr fail there";
    }
    if (!log_error_.empty()) return "; its stdout could not be logged in full: " + log_error_;
    return "";
  }

  // Reads what the pipe holds into the log and `partial_`; false when nothing came (and, at its
  // end or on an error, the pipe is closed for reading).
  bool ReadSome() {
    char buf[65536];
    const ssize_t n = ::read(pipe_.get(), buf, sizeof buf);
    if (n <= 0) {
      if (n == 0 || (errno != EAGAIN && errno != EINTR)) pipe_open_ = false;
      return false;
    }
    if (!WriteAll(out_log_, std::string(buf, static_cast<size_t>(n))) && log_error_.empty()) {
      log_error_ = std::strerror(errno);
      // What follows is not in the log: a run again reads it only up to here.
      (void)AppendRecord(runs_path_, {{"end_offset", ::lseek(out_log_, 0, SEEK_END)}});
    }
    partial_.append(buf, static_cast<size_t>(n));
    return true;
  }

  // Called while the caller waits for an early-stopping verdict inside the sink: the program's
  // output goes on reaching its log, so a coordinator killed meanwhile loses none of it (a run
  // again replays the log), and is read as reports once the verdict came. Up to kMaxHeldBytes
  // are held; past that the program waits on its full pipe.
  void Drain() {
    for (int i = 0; i < 16 && pipe_open_ && partial_.size() < kMaxHeldBytes; ++i) {
      if (!ReadSome()) return;
    }
  }

  // One line of the program's stdout.
  void Line(const std::string& line, int err_log, std::string* why_stopped) {
    ++lines_;
    std::optional<Result<CommandReport>> parsed = ParseReportLine(line);
    if (!parsed) {
      if (inside_line_ == 0 && MentionsReport(line)) {
        Note(err_log, "[sweep] stdout line " + std::to_string(lines_) +
                          " has `sweep-report {` after other text, so it is not a report: a "
                          "report starts its line (print a newline before it)");
        inside_line_ = lines_;
      }
      return;
    }
    if (!parsed->ok()) {
      const std::string why = "stdout line " + std::to_string(lines_) +
                              " is not a report: " + parsed->status().message();
      Note(err_log, "[sweep] " + why);
      if (unread_++ == 0) first_unread_ = why;
      return;
    }
    if (!why_stopped->empty()) {
      // The trial has failed (diverged, timed out); what it reports while it stops must not
      // reach early stopping or the sweep's target.
      if (!warned_late_) {
        Note(err_log, "[sweep] stdout line " + std::to_string(lines_) +
                          ": reports after the trial failed are not recorded");
        warned_late_ = true;
      }
      return;
    }
    CommandReport& r = **parsed;
    if (std::find(r.ignored.begin(), r.ignored.end(), metric_) != r.ignored.end()) {
      metric_not_number_ = true;
    }
    if (!r.ignored.empty() && !warned_ignored_) {
      std::string keys;
      for (const std::string& k : r.ignored) keys += (keys.empty() ? "" : ", ") + k;
      Note(err_log, "[sweep] stdout line " + std::to_string(lines_) +
                        ": fields that are not numbers, or have no name of at most " +
                        std::to_string(kMaxMetricNameBytes) + " bytes, are not metrics (" + keys +
                        ")");
      warned_ignored_ = true;
    }
    // Run again: a program that goes on from its own checkpoint reports its later epochs,
    // which follow the stored reports; one that starts over reports the stored epochs again,
    // and those stand as they were (the first report of a point is kept).
    const std::optional<int64_t> step = numbering_.Next(r);
    if (!step) {
      if (!warned_stored_) {
        const std::string last = FormatNumber(numbering_.stored_epoch);
        Note(err_log, "[sweep] stdout line " + std::to_string(lines_) + ": epochs before " + last +
                          " were reported by an earlier run of this trial; they are kept, and "
                          "this run's reports of them are not recorded (of epoch " +
                          last + ", what the store lacks is added)");
        warned_stored_ = true;
      }
      return;
    }
    bool disagrees = false;
    const double epoch = numbering_.EpochOf(r, *step, &disagrees);
    if (disagrees && !warned_epoch_) {
      Note(err_log, "[sweep] stdout line " + std::to_string(lines_) + " gives step " +
                        std::to_string(*step) + " epoch " + FormatNumber(*r.epoch) +
                        ", but the step's first line made it epoch " + FormatNumber(epoch) +
                        ", which stands: give `epoch` on a step's first line (or on none)");
      warned_epoch_ = true;
    }
    if (!checked_gap_ && *step > numbering_.stored_step) NoteSkippedEpochs(err_log, r);
    Emit(*step, epoch, r, why_stopped);
  }

  // A run again's first new report against the last kept one: a program that
  // went on from its own checkpoint past reports lost with the earlier worker (still in its
  // pipe at a kill -9) leaves a gap in the epochs, which is said, as nothing else shows it.
  // Epochs a step apart on average, and a jump of over 1.5 of those, make a gap.
  void NoteSkippedEpochs(int err_log, const CommandReport& r) {
    checked_gap_ = true;
    const int64_t kept = numbering_.stored_step;
    const double last = numbering_.stored_epoch;
    if (kept < 2 || !r.epoch || last <= 0) return;
    const double per_step = last / static_cast<double>(kept);
    if (*r.epoch - last <= 1.5 * per_step) return;
    Note(err_log, "[sweep] " + Now() + " this run's first new report is epoch " +
                      FormatNumber(*r.epoch) + ", and the last kept one (step " +
                      std::to_string(kept) + ") epoch " + FormatNumber(last) +
                      ": the program went on from a state of its own past reports that an "
                      "earlier run printed but lost with its worker (lines still in its pipe); "
                      "the epochs between are missing");
  }

  // A report read, to the coordinator: NaN and infinity as null (in the sweep's metric, the
  // run diverged).
  void Emit(int64_t step, double epoch, CommandReport& r, std::string* why_stopped) {
    for (const auto& [k, v] : r.metrics.items()) {
      if (k == metric_) metric_seen_ = true;
      if (reported_.size() < 20) reported_.insert(k);
    }
    for (const std::string& k : r.nonfinite) {
      r.metrics[k] = nullptr;
      if (k == metric_ && why_stopped->empty()) {
        *why_stopped = "reported " + k + " = NaN or infinity at step " + std::to_string(step) +
                       ": the run diverged";
      }
    }
    sink_(step, epoch, r.metrics);
  }

  // A trial run again: the reports its earlier runs printed (its stdout log) past what the
  // store kept are reported again, in order, before the program starts. A coordinator killed
  // before it committed them (kill -9, a power cut, a store locked until then) lost them, while
  // the program may have saved its own checkpoint past them: going on from there, it would not
  // print them again. Each earlier run's output is read from where it started (runs_), and its
  // reports get the steps that run gave them (Line, with the stored reports it was started
  // after); those from the last stored step on go again, every line of a step (the store keeps
  // the values it has and adds the metrics it lacks: one step's later lines may not have
  // reached it). Returns how many steps past the stored ones were reported.
  int64_t Replay(std::string* why_stopped) {
    const int64_t stored = numbering_.stored_step;
    std::set<int64_t> fresh;  // the steps past the stored ones
    for (size_t i = 0; i < runs_.size() && why_stopped->empty(); ++i) {
      const RunRecord& run = runs_[i];
      off_t end = i + 1 < runs_.size() ? runs_[i + 1].stdout_offset : -1;
      if (run.end_offset >= 0 && (end < 0 || run.end_offset < end)) end = run.end_offset;
      // Line's numbering in that run.
      StepNumbering past;
      past.stored_step = run.stored_step;
      past.stored_epoch = run.stored_epoch;
      past.stored_epoch_steps = std::min(run.stored_epoch_steps, run.stored_step);
      past.by_line = run.numbering < 2;
      bool diverged = false;
      ForEachLine(stdout_path_, run.stdout_offset, end, [&](const std::string& line) {
        if (diverged || !why_stopped->empty() || stop_.load(std::memory_order_relaxed)) {
          return false;
        }
        std::optional<Result<CommandReport>> parsed = ParseReportLine(line);
        if (!parsed || !parsed->ok()) return true;
        CommandReport& r = **parsed;
        const std::optional<int64_t> numbered = past.Next(r);
        if (!numbered) return true;
        const int64_t step = *numbered;
        // Past a diverged report that run recorded nothing more.
        for (const std::string& k : r.nonfinite) diverged = diverged || k == metric_;
        if (step < stored) return true;
        const double epoch = past.EpochOf(r, step);
        numbering_.stored_step = std::max(numbering_.stored_step, step);
        numbering_.stored_epoch = std::max(numbering_.stored_epoch, epoch);
        Emit(step, epoch, r, why_stopped);
        if (step > stored) fresh.insert(step);
        return true;
      });
    }
    return static_cast<int64_t>(fresh.size());
  }

  std::string LastLines() const {
    std::string tail = Tail(stderr_path_, stderr_start_, 10);
    std::string from = "stderr";
    if (tail.empty()) {
      tail = Tail(stdout_path_, stdout_start_, 10);
      from = "stdout";
    }
    if (tail.empty()) return "";
    return "; last lines of " + from + ":\n" + tail;
  }

  static std::string FormatNumber(double v) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%g", v);
    return buf;
  }
  static std::string FormatSeconds(double s) { return FormatNumber(s) + " s"; }

  const TrialTask& task_;
  const ReportSink& sink_;
  const std::atomic<bool>& stop_;
  const TrialHooks& hooks_;
  // The program's stdout as Supervise and Drain read it: the log's descriptor, whether the pipe
  // is open, and what was read but not yet taken as lines.
  int out_log_ = -1;
  bool pipe_open_ = false;
  std::string partial_;
  std::string workdir_, trial_dir_, metric_;
  std::string stdout_path_, stderr_path_;
  std::string log_error_;  // why writing its stdout to its log first failed
  off_t stdout_start_ = 0, stderr_start_ = 0;
  std::chrono::duration<double> kill_grace_{10};
  std::optional<std::chrono::duration<double>> timeout_;
  Fd pipe_;
  pid_t pid_ = -1;
  int64_t lines_ = 0;
  // This run's numbering: after the stored reports (TrialTask::stored_step, stored_epoch) and
  // those Replay reported again.
  StepNumbering numbering_;
  std::string runs_path_;        // the trial folder's record of its runs (kRunsFile)
  std::vector<RunRecord> runs_;  // the earlier runs of this trial in this sweep, in order
  bool warned_stored_ = false;
  int64_t unread_ = 0;        // sweep-report lines that could not be read
  std::string first_unread_;  // and why the first could not
  bool warned_ignored_ = false;
  bool warned_late_ = false;
  bool warned_epoch_ = false;       // a later line of a step gave another epoch
  bool checked_gap_ = false;        // NoteSkippedEpochs ran
  int64_t inside_line_ = 0;         // the first stdout line with a report after other text; 0: none
  bool metric_not_number_ = false;  // a report had the sweep's metric as a string, bool, ...
  bool metric_seen_ = false;        // a report had the sweep's metric
  std::set<std::string> reported_;  // the metrics its reports had (the first 20 names)
};

}  // namespace

TrialOutcome RunCommandTrial(const TrialTask& task, const ReportSink& sink,
                             const std::atomic<bool>& stop, const TrialHooks& hooks) {
  return CommandRun(task, sink, stop, hooks).Run();
}

namespace {
// What a program reports is its own: no names are known in advance.
std::vector<std::string> CommandMetrics() { return {}; }
}  // namespace

const WorkerKind kCommandKind{TrialKind::kCommand, RunCommandTrial, CommandMetrics};

}  // namespace sweep::executor
