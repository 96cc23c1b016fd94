// The command-trial runner: starts the user's program in a process group of its own, reads its
// stdout line by line (copying it to stdout.log and turning `sweep-report` lines into reports),
// sends its stderr straight to stderr.log, and ends it with SIGTERM, then SIGKILL after the
// grace period, when the trial is stopped, times out or diverges. Runs on the worker's thread.
#include "command_trial.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <functional>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "executor/command.h"
#include "line_io.h"
#include "trainer/trainer.h"

extern char** environ;

namespace sweep::executor {

// The program to execve: a path with a '/' as it is (relative ones from the working
// directory), a bare name from PATH.
std::string ResolveProgram(const std::string& name, const std::string& workdir) {
  if (name.find('/') != std::string::npos) {
    if (name[0] == '/' || workdir.empty()) return name;
    return (std::filesystem::path(workdir) / name).string();
  }
  const char* path = std::getenv("PATH");
  std::string dirs = path != nullptr ? path : "/usr/local/bin:/usr/bin:/bin";
  size_t start = 0;
  while (start <= dirs.size()) {
    size_t end = dirs.find(':', start);
    if (end == std::string::npos) end = dirs.size();
    std::string dir = dirs.substr(start, end - start);
    if (dir.empty()) dir = ".";
    std::string candidate = dir + "/" + name;
    struct stat st {};
    if (::stat(candidate.c_str(), &st) == 0 && S_ISREG(st.st_mode) &&
        ::access(candidate.c_str(), X_OK) == 0) {
      return candidate;
    }
    start = end + 1;
  }
  return "";
}

using nlohmann::json;

namespace {

// What a command trial's pipe may hold read but unparsed while its report waits for a verdict.
constexpr size_t kMaxHeldBytes = size_t{4} << 20;

using Clock = std::chrono::steady_clock;

TrialOutcome Failed(std::string error) {
  TrialOutcome out;
  out.kind = TrialOutcome::Kind::kFailed;
  out.error = std::move(error);
  return out;
}

// Failed, its reports having had the sweep's metric only as something other than a number.
TrialOutcome FailedNotNumber(std::string error) {
  TrialOutcome out = Failed(std::move(error));
  out.metric_not_number = true;
  return out;
}

// The machine's trouble, not the trial's: it runs again elsewhere (see TrialOutcome).
TrialOutcome Interrupted(std::string error) {
  TrialOutcome out;
  out.kind = TrialOutcome::Kind::kInterrupted;
  out.error = std::move(error);
  return out;
}

// Whether a format registered with binfmt_misc (qemu-user for another architecture, a jar
// runner) makes the kernel run the file whose first bytes are `head`: an enabled entry whose
// magic (under its mask, at its offset) or extension matches.
bool RegisteredFormatRuns(const std::string& path, std::string_view head) {
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator("/proc/sys/fs/binfmt_misc", ec)) {
    const std::string name = entry.path().filename().string();
    if (name == "register" || name == "status") continue;
    std::ifstream in(entry.path());
    std::string line, magic, mask, extension;
    bool enabled = false;
    size_t offset = 0;
    while (std::getline(in, line)) {
      if (line == "enabled") enabled = true;
      if (line.rfind("offset ", 0) == 0) offset = std::strtoul(line.c_str() + 7, nullptr, 10);
      if (line.rfind("magic ", 0) == 0) magic = line.substr(6);
      if (line.rfind("mask ", 0) == 0) mask = line.substr(5);
      if (line.rfind("extension .", 0) == 0) extension = line.substr(11);
    }
    if (!enabled) continue;
    if (!extension.empty()) {
      if (path.size() > extension.size() && path.compare(path.size() - extension.size() - 1,
                                                         std::string::npos, "." + extension) == 0) {
        return true;
      }
      continue;
    }
    bool matches = !magic.empty() && offset + magic.size() / 2 <= head.size();
    for (size_t i = 0; matches && i < magic.size() / 2; ++i) {
      const auto byte = [](const std::string& hex, size_t at) {
        return static_cast<unsigned char>(std::strtoul(hex.substr(2 * at, 2).c_str(), nullptr, 16));
      };
      const unsigned char m = i < mask.size() / 2 ? byte(mask, i) : 0xff;
      matches = (static_cast<unsigned char>(head[offset + i]) & m) == (byte(magic, i) & m);
    }
    if (matches) return true;
  }
  return false;
}

// Why execve would refuse the regular file at `path`, started in `workdir`, for its content, in
// a user's words; empty when it is a binary (ELF) or a script whose #! line names an executable
// file (and, through env, a program on PATH). The kernel runs nothing else (a script without #!
// is a shell's convention, not execve's: it fails with "Exec format error").
std::string WhyNotRunnable(const std::string& path, const std::string& workdir) {
  std::ifstream in(path, std::ios::binary);
  if (!in.is_open()) return "";  // not readable here: execve says why, if it cannot run it
  char head[256] = {};
  in.read(head, sizeof head);
  const std::string_view text(head, static_cast<size_t>(in.gcount()));
  if (text.starts_with("\x7f"
                       "ELF"))
    return "";
  if (!text.starts_with("#!")) {
    if (RegisteredFormatRuns(path, text)) return "";
    return "it has no #! line and is not a binary, so it cannot be run by itself: start it with "
           "#!/bin/sh (or the interpreter it needs), or put that interpreter first in `command`";
  }
  std::string_view line = text.substr(2);
  line = line.substr(0, line.find('\n'));
  if (line.find('\r') != std::string_view::npos) {
    // The kernel takes the interpreter's name up to a blank or the line's end: "/bin/sh\r".
    return "its #! line ends in a carriage return (the file has Windows line ends), so the "
           "kernel looks for an interpreter whose name ends in one; convert the file (dos2unix, "
           "or sed -i 's/\\r$//')";
  }
  const auto words = [](std::string_view rest) {
    std::vector<std::string> out;
    size_t i = 0;
    while (i < rest.size()) {
      while (i < rest.size() && (rest[i] == ' ' || rest[i] == '\t')) ++i;
      const size_t from = i;
      while (i < rest.size() && rest[i] != ' ' && rest[i] != '\t') ++i;
      if (i > from) out.emplace_back(rest.substr(from, i - from));
    }
    return out;
  };
  const std::vector<std::string> argv = words(line);
  if (argv.empty()) return "its #! line names no interpreter";
  std::string interpreter = argv[0];
  if (interpreter[0] != '/') {
    // The kernel reads a relative one from the working directory, never from PATH.
    const std::string from_workdir = (std::filesystem::path(workdir) / interpreter).string();
    struct stat st {};
    if (::stat(from_workdir.c_str(), &st) != 0) {
      return "its #! line names the interpreter '" + interpreter +
             "', which is not a file in its working directory (" + workdir +
             "; the kernel does not look it up on PATH): use #!/usr/bin/env " + interpreter;
    }
    interpreter = from_workdir;
  }
  struct stat st {};
  if (::stat(interpreter.c_str(), &st) != 0) {
    return "its #! line names the interpreter '" + interpreter + "', which is not on this machine";
  }
  if (!S_ISREG(st.st_mode) || ::access(interpreter.c_str(), X_OK) != 0) {
    return "its #! line names the interpreter '" + interpreter +
           "', which is not an executable file";
  }
  // #!/usr/bin/env python3: env looks the program up on PATH when the script runs. (Linux
  // passes everything after the interpreter as one argument: "env -S ..." and options are
  // env's own to read, and not looked into.)
  if (std::filesystem::path(interpreter).filename() == "env" && argv.size() == 2 &&
      argv[1][0] != '-' && argv[1].find('=') == std::string::npos &&
      ResolveProgram(argv[1], "").empty()) {
    return "its #! line runs '" + argv[1] + "' through env, which finds no '" + argv[1] +
           "' on PATH";
  }
  return "";
}

// Owns a file descriptor.
class Fd {
 public:
  explicit Fd(int fd = -1) : fd_(fd) {}
  ~Fd() { Reset(); }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }
  void Reset(int fd = -1) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = fd;
  }

 private:
  int fd_;
};

// The trial's seed as its program gets it: folded to 32 bits, the range every library's seed
// takes (NumPy's legacy seed refuses 2^32 and above; JAX's key, 2^63).
uint32_t ProgramSeed(uint64_t seed) { return static_cast<uint32_t>(seed ^ (seed >> 32)); }

std::string GpuList(const std::vector<int>& gpus) {
  std::string s;
  for (int g : gpus) s += (s.empty() ? "" : ",") + std::to_string(g);
  return s;
}

// The trial's GPUs as its program must be shown them. Our ordinals are CUDA's among the devices
// this process was given: under a batch system's CUDA_VISIBLE_DEVICES=2,3, ordinal 1 is device
// 3, so an inherited list maps them (whatever its entries are: numbers, GPU-UUIDs, MIG-ids).
std::string VisibleDevices(const std::vector<int>& gpus) {
  const char* inherited = std::getenv("CUDA_VISIBLE_DEVICES");
  if (gpus.empty() || inherited == nullptr || *inherited == '\0') return GpuList(gpus);
  std::vector<std::string> entries;
  std::string_view rest(inherited);
  while (!rest.empty()) {
    const size_t comma = rest.find(',');
    std::string_view entry = rest.substr(0, comma);
    while (!entry.empty() && entry.front() == ' ') entry.remove_prefix(1);
    while (!entry.empty() && entry.back() == ' ') entry.remove_suffix(1);
    entries.emplace_back(entry);
    if (comma == std::string_view::npos) break;
    rest.remove_prefix(comma + 1);
  }
  std::string s;
  for (int g : gpus) {
    const bool mapped = g >= 0 && static_cast<size_t>(g) < entries.size();
    s += (s.empty() ? "" : ",") + (mapped ? entries[static_cast<size_t>(g)] : std::to_string(g));
  }
  return s;
}

// The values a command template is filled from: the parameters and the builtins.
json CommandValues(const TrialTask& task, const std::string& trial_dir) {
  json values = task.params.is_object() ? task.params : json::object();
  values["trial"] = task.number;
  values["trial_dir"] = trial_dir;
  values["seed"] = ProgramSeed(task.seed);
  values["gpus"] = VisibleDevices(task.gpus);
  return values;
}

// What a program's environment gets on top of what it inherits.
std::vector<std::pair<std::string, std::string>> OurEnvironment(const TrialTask& task,
                                                                const std::string& trial_dir) {
  std::vector<std::pair<std::string, std::string>> set = {
      {"CUDA_VISIBLE_DEVICES", VisibleDevices(task.gpus)},
      {"SWEEP_PARAMS", task.params.dump(-1, ' ', false, json::error_handler_t::replace)},
      {"SWEEP_TRIAL_DIR", trial_dir},
      {"SWEEP_TRIAL", std::to_string(task.number)},
      {"SWEEP_SEED", std::to_string(ProgramSeed(task.seed))},
      // Reports should arrive when printed, not when a block buffer fills.
      {"PYTHONUNBUFFERED", "1"},
  };
  if (task.gpus.empty()) set.emplace_back("OMP_NUM_THREADS", std::to_string(task.threads));
  return set;
}

// The last `max_lines` lines a file gained after `offset`, at most about 2 KiB.
// The last `max_lines` lines of `path` from `offset` on (of its last 2 KiB), without our own
// notes ("[sweep] ..."), which are not the program's output.
std::string Tail(const std::string& path, off_t offset, int max_lines) {
  Fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.get() < 0) return "";
  off_t end = ::lseek(fd.get(), 0, SEEK_END);
  if (end <= offset) return "";
  off_t from = std::max<off_t>(offset, end - 2048);
  std::string text(static_cast<size_t>(end - from), '\0');
  ssize_t n = ::pread(fd.get(), text.data(), text.size(), from);
  if (n <= 0) return "";
  text.resize(static_cast<size_t>(n));
  std::vector<std::string_view> lines;
  for (size_t at = 0; at < text.size();) {
    size_t eol = text.find('\n', at);
    if (eol == std::string::npos) eol = text.size();
    std::string_view line(text.data() + at, eol - at);
    while (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (!line.starts_with("[sweep] ")) lines.push_back(line);
    at = eol + 1;
  }
  while (!lines.empty() && lines.back().empty()) lines.pop_back();
  std::string out;
  for (size_t i = lines.size() > static_cast<size_t>(max_lines) ? lines.size() - max_lines : 0;
       i < lines.size(); ++i) {
    out.append(lines[i]);
    if (i + 1 < lines.size()) out += '\n';
  }
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

std::string SignalName(int sig) {
  const char* d = ::strsignal(sig);
  return "signal " + std::to_string(sig) + (d != nullptr ? std::string(" (") + d + ")" : "");
}

// ---- the record of a trial's runs ----
// A command trial's folder keeps one JSON line per run of its program: the sweep it belongs to,
// where that run's output starts in stdout.log, and the stored reports it was started after
// (which its reports' steps follow). A rerun reads it to report again what the store lost.
constexpr const char* kRunsFile = ".sweep-runs";

// A run's end is recorded too where what it printed after it was not recorded live (a
// timeout), or was not logged (its log could not be written): {"end_offset": N}.
struct RunRecord {
  std::string sweep_key;
  off_t stdout_offset = 0;
  int64_t stored_step = 0;
  double stored_epoch = 0;
  off_t end_offset = -1;           // -1: where the next run starts (or the log's end)
  int64_t stored_epoch_steps = 1;  // TrialTask::stored_epoch_steps when it started
  // How that run numbered its reports: 2, lines of one epoch as one report (StepNumbering);
  // 1 (a record without it, of an earlier version), every line a report of its own.
  int numbering = 2;
};

std::vector<RunRecord> ReadRuns(const std::string& path) {
  std::vector<RunRecord> runs;
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    json j = json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (!j.is_object()) continue;  // cut short by a crash as it was written
    if (j.contains("end_offset")) {
      if (!runs.empty() && runs.back().end_offset < 0) {
        runs.back().end_offset = j.value("end_offset", runs.back().stdout_offset);
      }
      continue;
    }
    RunRecord r;
    r.sweep_key = j.value("sweep", "");
    r.stdout_offset = j.value("stdout_offset", off_t{0});
    r.stored_step = j.value("stored_step", int64_t{0});
    r.stored_epoch = j.value("stored_epoch", 0.0);
    r.numbering = j.value("numbering", 1);
    r.stored_epoch_steps = std::max<int64_t>(1, j.value("epoch_steps", int64_t{1}));
    // Its log was emptied or replaced since those runs: their offsets no longer mean anything.
    if (!runs.empty() && r.stdout_offset < runs.back().stdout_offset) runs.clear();
    runs.push_back(std::move(r));
  }
  return runs;
}

// Whether what `fd` (open to read too) holds is empty or ends with a line break: not after a
// program's unfinished line, or a record torn by a crash.
bool EndsLine(int fd) {
  char last = '\n';
  const off_t end = ::lseek(fd, 0, SEEK_END);
  return end <= 0 || ::pread(fd, &last, 1, end - 1) != 1 || last == '\n';
}

// Appends `line` on a line of its own (see EndsLine) and ends it.
bool AppendLine(int fd, const std::string& line) {
  return WriteAll(fd, (EndsLine(fd) ? "" : "\n") + line + "\n");
}

bool AppendRecord(const std::string& path, const json& record) {
  Fd fd(::open(path.c_str(), O_RDWR | O_CREAT | O_APPEND | O_CLOEXEC, 0644));
  return fd.get() >= 0 && AppendLine(fd.get(), record.dump());
}

bool AppendRun(const std::string& path, const RunRecord& run) {
  return AppendRecord(path, {{"sweep", run.sweep_key},
                             {"stdout_offset", run.stdout_offset},
                             {"stored_step", run.stored_step},
                             {"stored_epoch", run.stored_epoch},
                             {"epoch_steps", run.stored_epoch_steps},
                             {"numbering", run.numbering}});
}

// Empties `dir`, the record of its runs last: a clearing cut short leaves it to be cleared again.
void ClearFolder(const std::string& dir, std::error_code& ec) {
  for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
    if (entry.path().filename() == kRunsFile) continue;
    std::filesystem::remove_all(entry.path(), ec);
    if (ec) return;
  }
  if (ec) return;
  std::filesystem::remove_all(dir, ec);
}

// A line not yet ended that has grown long: what a carriage return was followed by has been
// drawn over on a terminal (a progress bar redrawn with \r before a report), so it goes, up to
// the last \r that text follows (a last \r may be the CR of a CR LF still to come).
void DropDrawnOver(std::string* partial) {
  if (partial->size() < 2) return;
  const size_t cr = partial->rfind('\r', partial->size() - 2);
  if (cr != std::string::npos) partial->erase(0, cr + 1);
}

// Calls `line` for each line of `path` from byte `begin` to `end` (-1: its end), without its
// line break, until it returns false. A line longer than kMaxReportBytes after its last \r (no
// report) is skipped unread, as the live reader skips it, so a progress bar redrawn with \r
// costs no memory.
void ForEachLine(const std::string& path, off_t begin, off_t end,
                 const std::function<bool(const std::string&)>& line) {
  Fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.get() < 0) return;
  std::string partial;
  bool overlong = false;
  char buf[65536];
  off_t at = begin;
  while (end < 0 || at < end) {
    size_t want = sizeof buf;
    if (end >= 0) want = std::min(want, static_cast<size_t>(end - at));
    const ssize_t n = ::pread(fd.get(), buf, want, at);
    if (n <= 0) break;
    at += n;
    for (ssize_t i = 0; i < n; ++i) {
      if (buf[i] == '\n') {
        if (!overlong && !line(partial)) return;
        partial.clear();
        overlong = false;
      } else if (!overlong) {
        partial.push_back(buf[i]);
        if (partial.size() > kMaxReportBytes) DropDrawnOver(&partial);
        if (partial.size() > kMaxReportBytes) {
          overlong = true;
          partial.clear();
        }
      }
    }
  }
  if (!overlong && !partial.empty()) line(partial);
}

// How a run numbers its reports (see TrialTask::stored_step): a report's own step; else the
// step of the line before when both give the same epoch without a step and the line adds
// metrics that step lacks (an epoch's training line, then its validation line: one report; a
// line repeating a metric, as a program logging every few batches does, is a report of its
// own); else, run again after stored reports, an epoch past the stored ones follows them, the
// last stored one is that step again (what the store lacks of it is added), and one before it
// is not recorded (nullopt); else its count in the run. Replay numbers an earlier run's reports
// the same way, from the stored reports that run followed (and, for a run of an earlier version,
// as it did: every line a report of its own, `by_line`).
struct StepNumbering {
  int64_t stored_step = 0;
  double stored_epoch = 0;
  int64_t stored_epoch_steps = 1;  // see TrialTask
  bool by_line = false;            // numbering 1 (RunRecord)
  int64_t reports = 0;             // report lines read in the run
  int64_t numbered = 0;            // steps numbered by count
  int64_t appended = 0;            // steps numbered after the stored ones

  std::optional<int64_t> Next(const CommandReport& r) {
    ++reports;
    if (by_line) {
      if (r.step) return *r.step;
      if (stored_step > 0 && r.epoch) {
        if (*r.epoch <= stored_epoch) return std::nullopt;
        return stored_step + ++appended;
      }
      return reports;
    }
    if (r.step) {
      epoch_step_.reset();
      return *r.step;
    }
    if (r.epoch && epoch_step_ && epoch_step_->epoch == *r.epoch && !epoch_step_->Repeats(r)) {
      epoch_step_->Add(r);
      return epoch_step_->step;
    }
    std::optional<int64_t> step;
    if (stored_step > 0 && r.epoch) {
      if (*r.epoch == stored_epoch && stored_epoch_seen_ < stored_epoch_steps) {
        // The last stored epoch printed again: its steps, in order, then new ones.
        step = stored_step - stored_epoch_steps + 1 + stored_epoch_seen_++;
      } else if (*r.epoch >= stored_epoch) {
        step = stored_step + ++appended;
      }
    } else {
      step = ++numbered;
    }
    if (r.epoch) {
      epoch_step_.emplace(EpochStep{*r.epoch, step, {}});
      epoch_step_->Add(r);
    } else {
      epoch_step_.reset();
    }
    return step;
  }

  // The epoch of a report numbered `step`: its own; else, on a later line of the step the last
  // report had (one step's metrics printed on several lines), that step's; else the step.
  // Sets *disagrees when the report gives an epoch other than the one its step already has.
  double EpochOf(const CommandReport& r, int64_t step, bool* disagrees = nullptr) {
    if (last_step == step) {
      if (disagrees != nullptr) *disagrees = r.epoch && *r.epoch != last_epoch;
      return last_epoch;
    }
    last_step = step;
    last_epoch = r.epoch.value_or(static_cast<double>(step));
    return last_epoch;
  }
  std::optional<int64_t> last_step;  // the last report's step, and its epoch
  double last_epoch = 0;

 private:
  // The epoch the last report gave without a step, the step it got (nullopt: not recorded),
  // and the metrics the lines of that step have given.
  struct EpochStep {
    double epoch = 0;
    std::optional<int64_t> step;
    std::set<std::string> names;
    // The metric names a report gives: its numbers and its NaNs or infinities.
    static std::vector<std::string> NamesOf(const CommandReport& r) {
      std::vector<std::string> out = r.nonfinite;
      for (const auto& [name, value] : r.metrics.items()) out.push_back(name);
      return out;
    }
    bool Repeats(const CommandReport& r) const {
      for (const std::string& name : NamesOf(r)) {
        if (names.contains(name)) return true;
      }
      return false;
    }
    void Add(const CommandReport& r) {
      for (std::string& name : NamesOf(r)) names.insert(std::move(name));
    }
  };
  std::optional<EpochStep> epoch_step_;
  int64_t stored_epoch_seen_ = 0;  // steps of the last stored epoch printed again so far
};

class CommandRun {
 public:
  CommandRun(const TrialTask& task, const ReportSink& sink, const std::atomic<bool>& stop,
             const TrialHooks& hooks)
      : task_(task), sink_(sink), stop_(stop), hooks_(hooks) {}

  TrialOutcome Run() {
    const json& s = task_.settings;
    std::vector<std::string> argv_template;
    try {
      argv_template = s.at("command").get<std::vector<std::string>>();
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

    Result<std::vector<std::string>> argv =
        ExpandCommand(argv_template, CommandValues(task_, trial_dir_));
    if (!argv.ok()) return Failed("command: " + argv.status().message());

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
    const std::string sweep_key = s.value("sweep_key", "");
    runs_path_ = trial_dir_ + "/" + kRunsFile;
    bool stale = false;
    if (!task_.fresh) {
      runs_ = ReadRuns(runs_path_);
      if (!runs_.empty() && runs_.front().sweep_key != sweep_key) {
        stale = true;
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
    if (!runs_.empty()) {
      std::string why_stopped;
      const int64_t replayed = Replay(&why_stopped);
      if (replayed > 0) {
        Note(err_log.get(), "[sweep] " + Now() + " reported again " + std::to_string(replayed) +
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
    }
    // This run's output starts on a line of its own (an earlier run killed mid-line must not
    // join its first report), and where it starts is recorded with the numbering its reports get.
    if (!EndsLine(out_log.get())) WriteAll(out_log.get(), "\n");
    stdout_start_ = ::lseek(out_log.get(), 0, SEEK_END);
    RunRecord run{sweep_key, stdout_start_, numbering_.stored_step, numbering_.stored_epoch};
    run.stored_epoch_steps = numbering_.stored_epoch_steps;
    if (!AppendRun(runs_path_, run)) {
      // The machine's trouble (a full disk): without the record a later run again would number
      // this run's reports wrongly, so it does not run here.
      TrialOutcome out;
      out.kind = TrialOutcome::Kind::kInterrupted;
      out.error = runs_path_ + ": cannot record the run: " + std::strerror(errno);
      return out;
    }
    stderr_start_ = ::lseek(err_log.get(), 0, SEEK_END);

    std::string program = ResolveProgram((*argv)[0], workdir_);
    // A program or workdir this machine lacks (checked before a local sweep starts, not on an
    // agent) is the machine's trouble: the trial runs again on a server that has them.
    if (program.empty()) {
      return Interrupted("command: '" + (*argv)[0] +
                         "' is not an executable program on PATH on this machine");
    }
    // PATH differs between shells, jobs and agents: the log says which program a bare name
    // found there.
    if ((*argv)[0].find('/') == std::string::npos) {
      Note(err_log.get(), "[sweep] " + (*argv)[0] + " is " + program);
    }
    Status spawned = Spawn(program, *argv, err_log.get());
    if (!spawned.ok()) {
      return spawned.code() == Status::Code::kUnavailable ? Interrupted(spawned.message())
                                                          : Failed(spawned.message());
    }
    if (hooks_.started) hooks_.started(pid_);
    return Supervise(out_log.get(), err_log.get());
  }

 private:
  // A line of ours in the trial's stderr log, on a line of its own (AppendLine).
  static void Note(int fd, const std::string& line) { (void)AppendLine(fd, line); }

  std::vector<std::string> Environment() const {
    const std::vector<std::pair<std::string, std::string>> set = OurEnvironment(task_, trial_dir_);
    std::vector<std::string> env;
    for (char** e = environ; *e != nullptr; ++e) {
      std::string_view entry(*e);
      // Set for this process's own NCCL (trainer::ConnectNcclAtInit), not the program's.
      if (trainer::NcclEnvironmentIsOurs() && entry.starts_with("NCCL_RUNTIME_CONNECT=")) {
        continue;
      }
      bool replaced = false;
      for (const auto& [k, v] : set) {
        if (entry.substr(0, k.size() + 1) == k + "=") replaced = true;
      }
      if (!replaced) env.emplace_back(entry);
    }
    for (const auto& [k, v] : set) env.push_back(k + "=" + v);
    return env;
  }

  // Starts the program: its pid in pid_, its stdout pipe in pipe_. An error says why it could
  // not start (exec refused, no working directory).
  Status Spawn(const std::string& program, const std::vector<std::string>& argv, int err_log) {
    std::vector<std::string> env = Environment();
    std::vector<char*> cargv, cenv;
    for (const std::string& a : argv) cargv.push_back(const_cast<char*>(a.c_str()));
    cargv.push_back(nullptr);
    for (const std::string& e : env) cenv.push_back(const_cast<char*>(e.c_str()));
    cenv.push_back(nullptr);

    int out_pipe[2], err_pipe[2];
    if (::pipe2(out_pipe, O_CLOEXEC) != 0) {
      return Status::Unavailable(std::string("pipe: ") + std::strerror(errno));
    }
    if (::pipe2(err_pipe, O_CLOEXEC) != 0) {
      ::close(out_pipe[0]);
      ::close(out_pipe[1]);
      return Status::Unavailable(std::string("pipe: ") + std::strerror(errno));
    }
    Fd null_in(::open("/dev/null", O_RDONLY | O_CLOEXEC));
    const pid_t parent = ::getpid();
    const char* dir = workdir_.empty() ? nullptr : workdir_.c_str();
    pid_t pid = ::fork();
    if (pid == 0) {
      // The child: only async-signal-safe calls until execve.
      ::setpgid(0, 0);
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);  // dies with its worker
      if (::getppid() != parent) ::_exit(127);
      sigset_t none;
      ::sigemptyset(&none);
      ::sigprocmask(SIG_SETMASK, &none, nullptr);
      for (int sig : {SIGPIPE, SIGTERM, SIGINT, SIGHUP, SIGQUIT}) ::signal(sig, SIG_DFL);
      if (null_in.get() >= 0) ::dup2(null_in.get(), 0);
      ::dup2(out_pipe[1], 1);
      ::dup2(err_log, 2);
      int stage = 0;  // 0: chdir, 1: execve
      if (dir == nullptr || ::chdir(dir) == 0) {
        stage = 1;
        ::execve(program.c_str(), cargv.data(), cenv.data());
      }
      int report[2] = {stage, errno};
      (void)!::write(err_pipe[1], report, sizeof report);
      ::_exit(127);
    }
    ::close(out_pipe[1]);
    ::close(err_pipe[1]);
    pipe_.Reset(out_pipe[0]);
    Fd exec_status(err_pipe[0]);
    // Out of processes or descriptors: this machine's trouble, as a program it lacks is.
    if (pid < 0) return Status::Unavailable(std::string("fork: ") + std::strerror(errno));
    pid_ = pid;
    ::setpgid(pid, pid);  // also here, so the group exists before any kill below
    int report[2];
    ssize_t n;
    do {
      n = ::read(exec_status.get(), report, sizeof report);
    } while (n < 0 && errno == EINTR);
    if (n == static_cast<ssize_t>(sizeof report)) {
      int status = 0;
      ::waitpid(pid, &status, 0);
      pid_ = -1;
      std::string why = std::strerror(report[1]);
      if (report[0] == 0) {
        return Status::Unavailable(workdir_ + ": cannot enter the working directory: " + why);
      }
      // The program cannot start on this machine: not there, or this machine's copy cannot run
      // (no #! line, a missing interpreter, not executable, built for another processor).
      // Where trials run on this machine the sweep refused such a program before it started,
      // so it is this machine's trouble (an agent's copy, a file changed since): the trial
      // runs again elsewhere, and this machine takes no more. Only arguments too large for
      // Linux, which come from the trial's parameters, fail the trial.
      struct stat st {};
      const bool there = ::stat(program.c_str(), &st) == 0;
      if (there && (report[1] == ENOEXEC || report[1] == ENOENT)) {
        // ENOENT alone would blame the program itself, not its interpreter.
        if (std::string not_runnable = WhyNotRunnable(program, workdir_); !not_runnable.empty()) {
          return Status::Unavailable("command: cannot run '" + argv[0] + "' (" + program +
                                     "): " + not_runnable);
        }
      }
      if ((report[1] == ENOENT || report[1] == ENOTDIR) && !there) {
        return Status::Unavailable("command: cannot run '" + argv[0] + "' (" + program +
                                   "): it is not on this machine");
      }
      if (report[1] == ENAMETOOLONG) {  // a parameter in the program's own path
        return Status::InvalidArgument("command: cannot run '" + argv[0] + "': " + why);
      }
      if (report[1] == E2BIG) {
        // Linux passes at most 32 pages (128 KiB) in one argument or environment string: name
        // the one that is over, rather than "argument list too long".
        constexpr size_t kMaxString = 32 * 4096;
        for (const std::string& e : env) {
          if (e.size() + 1 > kMaxString) {
            return Status::InvalidArgument(
                "command: cannot run '" + argv[0] + "': its environment variable " +
                e.substr(0, e.find('=')) + " is " + std::to_string(e.size()) +
                " bytes, over the 128 KiB Linux passes in one (the parameters are too large "
                "to pass this way)");
          }
        }
        for (const std::string& a : argv) {
          if (a.size() + 1 > kMaxString) {
            return Status::InvalidArgument("command: cannot run '" + argv[0] +
                                           "': an argument is " + std::to_string(a.size()) +
                                           " bytes, over the 128 KiB Linux passes in one");
          }
        }
        return Status::InvalidArgument("command: cannot run '" + argv[0] +
                                       "': its arguments and environment together are over "
                                       "what Linux passes to a program (the parameters are too "
                                       "large to pass this way)");
      }
      return Status::Unavailable("command: cannot run '" + argv[0] + "' (" + program + "): " + why);
    }
    return Status::Ok();
  }

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
    const Clock::time_point start = Clock::now();
    Clock::time_point term_sent{};
    bool term = false, killed = false, exited = false;
    int wait_status = 0;
    Clock::time_point exited_at{};
    std::string why_stopped;  // non-empty: we ended it (timeout, divergence)
    bool overlong = false;    // in a line already read (as too long) before its end came
    std::string& partial = partial_;

    for (;;) {
      if (pipe_open_) {
        pollfd p{pipe_.get(), POLLIN, 0};
        int ready = ::poll(&p, 1, exited ? 20 : 100);
        if (ready > 0 && ReadSome()) {
          size_t pos;
          // Line() may wait for a verdict, and Drain() append to `partial` meanwhile: its
          // beginning, the line being read, stays where it is.
          while ((pos = partial.find('\n')) != std::string::npos) {
            // The end of an overlong line was read as one already (below).
            if (!overlong) Line(partial.substr(0, pos), err_log, &why_stopped);
            overlong = false;
            partial.erase(0, pos + 1);
          }
          if (partial.size() > kMaxReportBytes && !overlong) DropDrawnOver(&partial);
          if (partial.size() > kMaxReportBytes) {
            // No line break for this long (binary output, a line of its own that long): read
            // what came as a line (an overlong report is refused), and the rest of it, up to
            // its line break, not at all.
            if (!overlong) Line(partial, err_log, &why_stopped);
            overlong = true;
            partial.clear();
          }
        }
      }
      if (!exited) {
        siginfo_t info{};
        if (::waitid(P_PID, static_cast<id_t>(pid_), &info, WEXITED | WNOHANG | WNOWAIT) == 0 &&
            info.si_pid == pid_) {
          exited = true;
          exited_at = Clock::now();
          // What the program left behind in its group (helpers, data loaders) goes with it,
          // while the unreaped program still holds the group's id.
          ::kill(-pid_, SIGKILL);
          if (hooks_.ended) hooks_.ended();
          ::waitpid(pid_, &wait_status, 0);
        } else if (!pipe_open_) {
          // Its stdout is closed but it runs on: wait without spinning.
          ::usleep(20'000);
        }
      }
      // Once it exited, read what is left; a descendant holding the pipe gets 1 s.
      if (exited && (!pipe_open_ || Clock::now() - exited_at > std::chrono::seconds(1))) break;
      if (exited) continue;

      if (hooks_.idle) hooks_.idle();  // a stop may have come while the program was silent
      const Clock::time_point now = Clock::now();
      if (!term && why_stopped.empty() && timeout_ && now - start > *timeout_) {
        why_stopped = "timed out after " + FormatSeconds(timeout_->count());
        // What it prints from here on is not recorded: nor is it by a run again.
        (void)AppendRecord(runs_path_, {{"end_offset", ::lseek(out_log, 0, SEEK_END) -
                                                           static_cast<off_t>(partial.size())}});
      }
      if (!term && (stop_.load(std::memory_order_relaxed) || !why_stopped.empty())) {
        ::kill(-pid_, SIGTERM);
        term = true;
        term_sent = now;
        Note(err_log, "[sweep] " + Now() + " sent SIGTERM" +
                          (why_stopped.empty() ? std::string(" (stopped)") : ": " + why_stopped));
      }
      if (term && !killed && now - term_sent > kill_grace_) {
        ::kill(-pid_, SIGKILL);
        killed = true;
        Note(err_log, "[sweep] " + Now() + " sent SIGKILL: still running " +
                          FormatSeconds(kill_grace_.count()) + " after SIGTERM");
      }
    }
    // The last line, unended: no more is read (what a descendant still writes stays in the
    // pipe, as it would have), so nothing is drained into `partial` unparsed while it waits.
    pipe_open_ = false;
    if (!partial.empty() && !overlong) Line(partial, err_log, &why_stopped);
    pid_ = -1;

    TrialOutcome out;
    out.end_metrics = json::object();
    if (!why_stopped.empty()) return Failed(why_stopped + LastLines());
    if (term) {
      out.kind = TrialOutcome::Kind::kStopped;
      return out;
    }
    if (WIFEXITED(wait_status) && WEXITSTATUS(wait_status) == 0) {
      // Run again with nothing left to do (the program found its work done in its checkpoint),
      // a trial ends with what its earlier runs reported.
      const bool stored = numbering_.stored_step > 0;
      if (numbering_.reports == 0 &&
          !first_unread_.empty()) {  // run again or not: it tried to report
        return Failed(
            "the program exited 0 without a report that could be read: " + std::to_string(unread_) +
            " sweep-report line(s) could not be; the first, " + first_unread_);
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
              "' was never a number (a string, a bool, a list?): report it as a JSON "
              "number, e.g. \"" +
              metric_ + "\": 0.9");
        }
        // A misspelt metric would otherwise make a sweep of successes with nothing to rank.
        std::string names;
        for (const std::string& k : reported_) names += (names.empty() ? "" : ", ") + k;
        return Failed("the program exited 0 but never reported the sweep's metric '" + metric_ +
                      "' (its reports had: " + (names.empty() ? "no numbers" : names) + ")");
      }
      return out;
    }
    if (WIFEXITED(wait_status)) {
      return Failed("exited with code " + std::to_string(WEXITSTATUS(wait_status)) + LogTrouble() +
                    LastLines());
    }
    return Failed("killed by " + SignalName(WTERMSIG(wait_status)) + LogTrouble() + LastLines());
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

  // One line of the program's stdout.
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
    Emit(*step, epoch, r, why_stopped);
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

Result<CommandLaunch> DescribeCommand(const TrialTask& task) {
  CommandLaunch launch;
  const json& s = task.settings;
  std::vector<std::string> argv_template;
  try {
    argv_template = s.at("command").get<std::vector<std::string>>();
  } catch (const json::exception&) {
    return Status::InvalidArgument("command trial without a `command` list of strings");
  }
  const std::string trial_dir = s.value("trial_dir", "");
  SWEEP_ASSIGN_OR_RETURN(launch.argv, ExpandCommand(argv_template, CommandValues(task, trial_dir)));
  if (!launch.argv.empty()) launch.program = ResolveProgram(launch.argv[0], s.value("workdir", ""));
  launch.env = OurEnvironment(task, trial_dir);
  return launch;
}

Status CheckProgram(std::string program, const std::string& workdir) {
  struct stat st {};
  if (::stat(workdir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    return Status::InvalidArgument("trial.workdir: '" + workdir + "' is not a folder here");
  }
  // The program as a trial gets it: a template's `{{` and `}}` are single braces there.
  Result<std::vector<std::string>> expanded = ExpandCommand({program}, json::object());
  if (!expanded.ok()) return expanded.status();
  if (expanded->empty()) return Status::InvalidArgument("trial.command: the program is empty");
  program = expanded->front();
  // How to run a script that lacks its executable bit: the two fixes users reach for.
  auto chmod_hint = [&](const std::string& file) {
    return "make it executable (`chmod +x " + file +
           "`), or name its interpreter first: command = [\"python3\", \"" + program + "\", ...]";
  };
  const std::string path = ResolveProgram(program, workdir);
  if (path.empty()) {
    std::string msg = "trial.command: '" + program + "' is not an executable program on PATH";
    // A bare name is looked up on PATH only, as a shell does: the file beside the config is
    // "./name".
    const std::string local = workdir + "/" + program;
    if (program.find('/') == std::string::npos && ::stat(local.c_str(), &st) == 0 &&
        S_ISREG(st.st_mode)) {
      msg += "; workdir (" + workdir + ") has a file of that name: write \"./" + program +
             "\" to run it";
      if (::access(local.c_str(), X_OK) != 0)
        msg += "; it is not executable either: " + chmod_hint(local);
    }
    return Status::InvalidArgument(msg);
  }
  if (::stat(path.c_str(), &st) != 0) {
    return Status::InvalidArgument("trial.command: '" + program + "' (" + path +
                                   ") does not exist; a relative path is workdir's (" + workdir +
                                   ")");
  }
  if (!S_ISREG(st.st_mode)) {
    return Status::InvalidArgument("trial.command: '" + program + "' (" + path + ") is not a file");
  }
  if (::access(path.c_str(), X_OK) != 0) {
    return Status::InvalidArgument("trial.command: '" + program + "' (" + path +
                                   ") is not executable; " + chmod_hint(path));
  }
  if (std::string why = WhyNotRunnable(path, workdir); !why.empty()) {
    return Status::InvalidArgument("trial.command: '" + program + "' (" + path + "): " + why);
  }
  return Status::Ok();
}

}  // namespace sweep::executor
