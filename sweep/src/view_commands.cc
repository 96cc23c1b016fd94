// show, export, report and status --watch: reading a sweep's results, never writing them.
// Every command opens the store read-only, so it works while the sweep runs.
#include "view_commands.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <cmath>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <set>
#include <sstream>
#include <thread>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "base/clock.h"
#include "output.h"
#include "report/charts.h"
#include "report/export.h"
#include "report/html.h"
#include "report/sweep_data.h"
#include "report/terminal.h"
#include "store/store.h"
#include "sweep/config.h"
#include "sweep/coordinator.h"
#include "sweep_lock.h"

namespace sweep {

namespace {

using nlohmann::json;

// What the charts need from the sweep's stored config: each parameter's distribution, the
// resource its reports count in, the rungs. A config this binary no longer accepts still gives
// a report, with the parameters' scales guessed from their values.
void ApplyConfig(report::SweepData& data) {
  auto cfg = ParseConfig(
      data.sweep.config_text,
      data.sweep.config_path.empty() ? data.sweep.name + ".toml" : data.sweep.config_path,
      ConfigUse::kView);
  if (!cfg.ok()) {
    std::cerr << "sweep: the stored config of '" << data.sweep.name << "' does not parse here ("
              << cfg.status().message() << "); parameter scales are guessed from the trials\n";
    report::CompleteParams(data);
    return;
  }
  using Kind = search::Distribution::Kind;
  for (const search::Parameter& p : cfg->search.space.parameters()) {
    const search::Distribution& d = p.distribution;
    if (d.kind == Kind::kConstant) continue;
    report::ParamSpec spec;
    spec.name = p.name;
    spec.min = d.min;
    spec.max = d.max;
    spec.integer = d.kind == Kind::kIntUniform || d.kind == Kind::kLogIntUniform;
    switch (d.kind) {
      case Kind::kLogUniform:
      case Kind::kLogIntUniform:
        spec.scale = report::Scale::kLog;
        break;
      case Kind::kCategorical:
        spec.scale = report::Scale::kCategorical;
        spec.values = d.values;
        break;
      default:
        spec.scale = report::Scale::kLinear;
    }
    data.params.push_back(std::move(spec));
  }
  report::CompleteParams(data);
  data.resource = cfg->trial.kind == TrialKind::kFunction ? "step" : "epoch";
  const search::SchedulerConfig& es = cfg->early_stopping;
  data.early_stopping = std::string(search::EarlyStoppingName(es.algorithm));
  data.rungs.enabled = es.algorithm == search::EarlyStopping::kAsha ||
                       es.algorithm == search::EarlyStopping::kHyperband;
  data.rungs.min_resource = es.min_resource;
  data.rungs.reduction_factor = es.reduction_factor;
  data.rungs.max_resource = es.max_resource;
}

// Whether the sweep's trials report progress in epochs (trainer) or steps (function, command).
bool ResourceIsEpoch(const store::SweepRecord& sweep) {
  auto cfg = ParseConfig(sweep.config_text, sweep.config_path, ConfigUse::kView);
  return !cfg.ok() || cfg->trial.kind != TrialKind::kFunction;
}

Result<report::SweepData> LoadView(const std::string& db, const std::string& name) {
  SWEEP_ASSIGN_OR_RETURN(auto st, OpenToRead(db));
  SWEEP_ASSIGN_OR_RETURN(store::SweepRecord sw, FindSweepOrSuggest(*st, name));
  SWEEP_ASSIGN_OR_RETURN(report::SweepData data, report::LoadSweepData(*st, sw));
  ApplyConfig(data);
  return data;
}

// Writes all of `text` to the open descriptor `fd`.
Status WriteAll(int fd, const std::string& text, const std::string& path) {
  size_t done = 0;
  while (done < text.size()) {
    ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return Status::IoError(path + ": cannot write: " + std::strerror(errno));
    done += static_cast<size_t>(n);
  }
  return Status::Ok();
}

// The file a chain of symbolic links starting at `path` ends at (`path` itself when it is no
// link), whether or not that file exists: -o through a link writes its target and keeps the
// link, as a shell's `>` does.
Result<std::string> FollowLinks(const std::string& path) {
  std::filesystem::path at = path;
  for (int hops = 0; hops < 40; ++hops) {  // the kernel's own limit on a chain of links
    struct stat st {};
    if (::lstat(at.c_str(), &st) != 0 || !S_ISLNK(st.st_mode)) return at.string();
    std::error_code ec;
    std::filesystem::path target = std::filesystem::read_symlink(at, ec);
    if (ec) return Status::IoError(path + ": cannot write: " + ec.message());
    at = target.is_absolute() ? target : at.parent_path() / target;
  }
  return Status::IoError(path + ": cannot write: " + std::strerror(ELOOP));
}

// Writes `text` to `path`. A regular file, or a new one, is replaced atomically, so a reader
// never sees half a file: the text goes to a temporary file of a unique name in the same
// directory (two writers of one path do not share it), which is synced and then renamed over
// the old file, with the old file's permission bits. Anything else there (/dev/null, a FIFO, a
// terminal) is written in place: renaming over it would replace the device with a file.
Status WriteFile(const std::string& path, const std::string& text) {
  SWEEP_ASSIGN_OR_RETURN(const std::string target, FollowLinks(path));
  struct stat old {};
  const bool exists = ::stat(target.c_str(), &old) == 0;
  if (exists && !S_ISREG(old.st_mode)) {
    const int fd = ::open(target.c_str(), O_WRONLY | O_NOCTTY | O_CLOEXEC);
    if (fd < 0) return Status::IoError(path + ": cannot write: " + std::strerror(errno));
    Status s = WriteAll(fd, text, path);
    if (::close(fd) != 0 && s.ok()) {
      s = Status::IoError(path + ": cannot write: " + std::strerror(errno));
    }
    return s;
  }

  // A file its owner made read-only is refused, as the shell's `>` refuses it, though the
  // folder would let the rename below replace it.
  if (exists && ::access(target.c_str(), W_OK) != 0) {
    return Status::IoError(path + ": cannot write: " + std::strerror(errno));
  }
  std::filesystem::path dir = std::filesystem::path(target).parent_path();
  if (dir.empty()) dir = ".";
  std::string tmp =
      (dir / ("." + std::filesystem::path(target).filename().string() + ".XXXXXX")).string();
  const int fd = ::mkostemp(tmp.data(), O_CLOEXEC);
  if (fd < 0) return Status::IoError(path + ": cannot write: " + std::strerror(errno));
  // mkostemp creates the file 0600; a new file gets what the shell's `>` would give it.
  mode_t mode = old.st_mode & 07777;
  if (!exists) {
    const mode_t mask = ::umask(0);
    ::umask(mask);
    mode = 0666 & ~mask;
  }
  Status s = WriteAll(fd, text, path);
  auto fail = [&](Status& status) {
    if (status.ok()) status = Status::IoError(path + ": cannot write: " + std::strerror(errno));
  };
  if (::fchmod(fd, mode) != 0) fail(s);
  if (s.ok() && ::fsync(fd) != 0) fail(s);
  if (::close(fd) != 0) fail(s);
  if (s.ok() && ::rename(tmp.c_str(), target.c_str()) != 0) fail(s);
  if (!s.ok()) ::unlink(tmp.c_str());
  return s;
}

// Refuses an -o that would replace a sweep store: the one `db` names (through any link, or its
// -wal, -shm or -journal file), or any other SQLite file there. Replacing it would lose every
// sweep it holds, and a user who typed the store's name meant another file.
Status RefuseStoreAsOutput(const std::string& output, const std::string& db) {
  // The lock file too: one replaced while its sweep runs no longer keeps a second owner (or a
  // delete) away from it.
  constexpr const char* kSuffixes[] = {"", "-wal", "-shm", "-journal", ".lock"};
  auto refuse = [&](const std::string& suffix) {
    const std::string file = suffix.empty() ? "" : "the " + suffix.substr(1) + " file of ";
    const std::string harm = suffix == ".lock"
                                 ? "replacing it would let a second process into a running sweep"
                                 : "writing there would lose every sweep in it";
    return Status::InvalidArgument(output + ": is " + file + "the sweep store given by --db (" +
                                   db + "); " + harm + ": choose another file");
  };
  // By name, for a file not there yet too: SQLite reads a -journal it finds as its own, and a
  // store with a stray one cannot be opened. The store may be reached through a link, and its
  // files named after the link or its target.
  namespace fs = std::filesystem;
  std::error_code ec;
  // Absolute first: weakly_canonical leaves a relative path relative when none of it exists.
  const fs::path out_path = fs::weakly_canonical(fs::absolute(output, ec), ec);
  const fs::path db_path = fs::absolute(db, ec);
  for (const fs::path& base : {fs::weakly_canonical(db_path, ec), db_path}) {
    for (const char* suffix : kSuffixes) {
      if (!out_path.empty() && out_path == fs::path(base.lexically_normal().string() + suffix)) {
        return refuse(suffix);
      }
    }
  }
  // And by identity: a hard link to the store is the store.
  struct stat out {};
  if (::stat(output.c_str(), &out) != 0 || !S_ISREG(out.st_mode)) return Status::Ok();
  for (const char* suffix : kSuffixes) {
    struct stat st {};
    if (::stat((db + suffix).c_str(), &st) == 0 && st.st_dev == out.st_dev &&
        st.st_ino == out.st_ino) {
      return refuse(suffix);
    }
  }
  char magic[16] = {};
  std::ifstream in(output, std::ios::binary);
  if (in.read(magic, sizeof magic) && std::memcmp(magic, "SQLite format 3", 16) == 0) {
    return Status::InvalidArgument(output +
                                   ": is a SQLite database (a sweep store?), which sweep does "
                                   "not replace with its output: choose another file");
  }
  return Status::Ok();
}

std::string LocalTime(double unix_s) {
  std::time_t t = static_cast<std::time_t>(unix_s);
  std::tm tm{};
  localtime_r(&t, &tm);
  char buf[64];
  std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M:%S", &tm);
  return buf;
}

std::string Value(const json& v) {
  if (v.is_null()) return "nan";  // a metric reported NaN or infinity (JSON holds neither)
  if (v.is_string()) return v.get<std::string>();
  if (v.is_number_float()) return report::ShortNumber(v.get<double>());
  return v.dump();
}

// ---- show ----

struct ShowArgs {
  std::string db = "sweeps.db";
  std::string name;
  int64_t trial = 0;
  bool json = false;
};

// "  key         value", the value wrapped at spaces to the terminal's width; its own line
// breaks (a program's last lines in an error) keep the indent, other control characters
// (a carriage return in a value) become spaces.
void WriteRow(std::ostream& out, int width, const std::string& key, const std::string& value) {
  const size_t indent = 14;
  // A terminal too narrow for the indent and 8 columns of text gets lines that wrap rather
  // than text that is lost.
  const size_t columns = static_cast<size_t>(std::max(width, 0));
  const size_t room = columns > indent + 8 ? columns - indent : 8;
  const size_t clip = indent + room;
  std::string rest;
  for (char ch : value) {
    const bool control = static_cast<unsigned char>(ch) < 0x20 || ch == 0x7f;
    rest += ch == '\n' ? '\n' : control ? ' ' : ch;
  }
  while (!rest.empty() && rest.back() == '\n') rest.pop_back();
  std::string head = "  " + key + std::string(key.size() < 12 ? 12 - key.size() : 1, ' ');
  do {
    if (const size_t nl = rest.find('\n'); nl != std::string::npos) {
      // A line break of the value's own, before it needs wrapping.
      if (report::DisplayWidth(rest.substr(0, nl)) <= room) {
        out << report::ClipColumns(head + rest.substr(0, nl), clip) << "\n";
        rest = rest.substr(nl + 1);
        head = std::string(indent, ' ');
        continue;
      }
    }
    size_t cut = rest.size();
    bool whole_word = false;
    if (report::DisplayWidth(rest) > room) {
      cut = report::ClipColumns(rest, room).size();
      // Break between "key value" pairs (two spaces) before breaking inside one.
      size_t space = rest.rfind("  ", cut);
      if (space == std::string::npos || space <= cut / 2) space = rest.rfind(' ', cut);
      if (space != std::string::npos && space > cut / 2) {
        cut = space;
      } else {
        // A word longer than the room (a path) stays whole, for the terminal to wrap: a path
        // broken by a line break would be copied broken.
        cut = std::min(rest.find_first_of(" \n", cut), rest.size());
        whole_word = true;
      }
    }
    const std::string line = head + rest.substr(0, cut);
    out << (whole_word ? line : report::ClipColumns(line, clip)) << "\n";
    rest = rest.substr(cut);
    if (whole_word && !rest.empty() && rest.front() == '\n') rest.erase(0, 1);
    while (!rest.empty() && rest.front() == ' ') rest.erase(0, 1);
    head = std::string(indent, ' ');
  } while (!rest.empty());
}

// `show --json`: the trial's row, its reports and its history.
void ShowJson(const store::TrialRecord& t, const std::vector<store::ReportRecord>& reports,
              const std::vector<store::EventRecord>& events, bool orphaned) {
  json j = TrialJson(t);
  j["objective"] = t.objective ? json(*t.objective) : json(nullptr);
  j["retries"] = t.retries;
  // Always there (null unless pruned): a script reads it without checking first.
  j["pruned_reason"] = t.status == store::TrialStatus::kPruned ? json(t.error) : json(nullptr);
  j["coordinator_gone"] = orphaned;
  json rs = json::array();
  for (const store::ReportRecord& r : reports) {
    rs.push_back({{"step", r.step},
                  {"epoch", r.epoch},
                  {"time", r.time_s},
                  {"metrics", report::ParseObject(r.metrics_json)}});
  }
  j["reports"] = std::move(rs);
  json history = json::array();
  for (const store::EventRecord& e : events) {
    history.push_back({{"from", e.from}, {"to", e.to}, {"detail", e.detail}, {"time", e.time_s}});
  }
  j["history"] = std::move(history);
  PrintJson(std::cout, j);
}

// The trial's fields, one row each, and its history when there is more than a start and an end.
void ShowFields(std::ostream& out, int width, const store::SweepRecord& sw,
                const store::TrialRecord& t, const std::vector<store::EventRecord>& events,
                bool orphaned) {
  auto row = [&](const std::string& key, const std::string& value) {
    WriteRow(out, width, key, value);
  };
  json params = report::ParseObject(t.params_json);
  if (params.empty()) row("params", "(none)");
  for (auto& [k, v] : params.items())
    row(k == params.begin().key() ? "params" : "", k + " = " + Value(v));
  row(sw.metric, t.objective ? report::ShortNumber(*t.objective) + "  (" +
                                   (sw.maximize ? "max" : "min") + ", last reported)"
                             : "-");
  json metrics = report::ParseObject(t.metrics_json);
  std::string ms;
  for (auto& [k, v] : metrics.items()) ms += (ms.empty() ? "" : "  ") + k + " " + Value(v);
  if (!ms.empty()) row("metrics", ms);
  row("placement", t.placement.empty() ? "-" : t.placement);
  row("started", t.started_s ? LocalTime(*t.started_s) : "-");
  row("ended", t.ended_s ? LocalTime(*t.ended_s) : "-");
  if (t.started_s && t.ended_s) {
    row("duration", report::ShortNumber(*t.ended_s - *t.started_s) + " s");
  } else if (t.started_s && t.status == store::TrialStatus::kRunning && !orphaned) {
    row("duration", "running for " + report::ShortNumber(UnixSeconds() - *t.started_s) + " s");
  }
  const bool by_epoch = ResourceIsEpoch(sw);
  row(by_epoch ? "epochs" : "steps", report::ShortNumber(t.epochs));
  if (t.retries > 0) row("retries", std::to_string(t.retries));
  if (!t.checkpoint.empty()) row("checkpoint", t.checkpoint);
  if (!t.stdout_log.empty()) row("stdout", t.stdout_log);
  if (!t.stderr_log.empty()) row("stderr", t.stderr_log);
  if (!t.error.empty()) {
    // A completed or interrupted trial's text is a note (a checkpoint it could not use, where it
    // stopped), not why it failed.
    row(t.status == store::TrialStatus::kPruned   ? "pruned"
        : t.status == store::TrialStatus::kFailed ? "error"
                                                  : "note",
        t.error);
  }
  if (!t.proposed_by.empty()) row("proposed by", t.proposed_by);  // with TPE
  // A trainer trial on an image folder: its label map, and the bad files it left out.
  const json info = report::ParseObject(t.info_json);
  if (std::string labels = ClassLabelsText(info); !labels.empty()) row("labels", labels);
  if (std::string skipped = SkippedFilesText(info); !skipped.empty()) row("skipped", skipped);
  // Its state changes, when there is more to tell than one start and one end: interrupted on a
  // lost agent or a stopped coordinator and run again, or carried over from another sweep.
  const bool eventful =
      events.size() > 2 || std::any_of(events.begin(), events.end(), [](const auto& e) {
        return e.detail.rfind("carried over", 0) == 0;
      });
  if (eventful) {
    std::string lines;
    for (const store::EventRecord& e : events) {
      lines += (lines.empty() ? "" : "\n") + LocalTime(e.time_s) + "  " +
               (e.from.empty() ? "" : e.from + " -> ") + e.to +
               (e.detail.empty() ? "" : ": " + e.detail);
    }
    row("history", lines);
  }
}

// One chart per metric the reports carry, the sweep's metric first.
void ShowCharts(std::ostream& out, int width, const store::SweepRecord& sw,
                const std::vector<store::ReportRecord>& reports) {
  const bool by_epoch = ResourceIsEpoch(sw);
  std::vector<std::string> names;
  std::set<std::string> seen;
  std::vector<std::string> never_finite;  // reported, but NaN or infinite (null) every time
  std::vector<json> parsed;
  for (const store::ReportRecord& r : reports) {
    parsed.push_back(report::ParseObject(r.metrics_json));
    for (auto& [k, v] : parsed.back().items()) {
      if (v.is_number() && seen.insert(k).second) names.push_back(k);
    }
  }
  for (const json& m : parsed) {
    for (auto& [k, v] : m.items()) {
      if (v.is_null() && !seen.count(k) &&
          std::find(never_finite.begin(), never_finite.end(), k) == never_finite.end()) {
        never_finite.push_back(k);
      }
    }
  }
  std::stable_partition(names.begin(), names.end(),
                        [&](const std::string& n) { return n == sw.metric; });
  if (reports.empty()) out << "\nno reports\n";
  for (const std::string& name : names) {
    // The reports that carry the metric (NaN where it was reported NaN or infinite).
    std::vector<std::pair<double, double>> points;
    for (size_t i = 0; i < reports.size(); ++i) {
      if (!parsed[i].contains(name)) continue;
      auto v = report::NumberIn(parsed[i], name);
      const double x = by_epoch ? reports[i].epoch : static_cast<double>(reports[i].step);
      points.emplace_back(x, v ? *v : std::nan(""));
    }
    report::LineChartOptions o;
    o.width = width;
    o.height = 4;
    o.x_label = by_epoch ? "epoch" : "step";
    const auto& last = points.back();
    o.title = name + "  (" + std::to_string(points.size()) +
              (points.size() == 1 ? " report" : " reports") + ", last " +
              report::ShortNumber(last.second) + ")";
    out << "\n" << report::LineChart(points, o);
  }
  for (const std::string& name : never_finite) {
    out << "\n" << name << "  (no chart: nan, NaN or infinite, in every report)\n";
  }
}

int CmdShow(const ShowArgs& a) {
  auto st = OpenToRead(a.db);
  if (!st.ok()) return Fail(st.status());
  auto sw = FindSweepOrSuggest(**st, a.name);
  if (!sw.ok()) return Fail(sw.status());
  auto trial = (*st)->Trial(sw->id, a.trial);
  if (!trial.ok()) return Fail(trial.status());
  if (!trial->has_value()) {
    auto last = (*st)->MaxTrialNumber(sw->id);
    std::string msg = "no trial " + std::to_string(a.trial) + " in sweep '" + a.name + "'";
    if (last.ok()) {
      msg += *last < 0 ? " (it has no trial yet)"
                       : " (its trials are numbered 0 to " + std::to_string(*last) + ")";
    }
    return Fail(Status::NotFound(msg));
  }
  const store::TrialRecord& t = **trial;
  auto reports = (*st)->Reports(sw->id, t.number);
  if (!reports.ok()) return Fail(reports.status());
  auto events = (*st)->TrialEvents(sw->id, t.number);
  if (!events.ok()) return Fail(events.status());
  // Stored as running, but nothing runs it: its coordinator died (resume runs it again).
  const bool orphaned = t.status == store::TrialStatus::kRunning && CoordinatorGone(a.db, *sw);

  if (a.json) {
    ShowJson(t, *reports, *events, orphaned);
    return kExitOk;
  }
  const int width = report::TerminalColumns(STDOUT_FILENO);
  std::ostringstream out;
  out << "trial " << t.number << " of sweep " << sw->name << ": " << store::ToString(t.status)
      << (orphaned ? " (its coordinator is gone: " + ResumeCommand(*sw, a.db) + " runs it again)"
                   : "")
      << "\n";
  ShowFields(out, width, *sw, t, *events, orphaned);
  ShowCharts(out, width, *sw, *reports);
  std::cout << out.str();
  return kExitOk;
}

// ---- export ----

struct ExportArgs {
  std::string db = "sweeps.db";
  std::string name;
  std::string format;  // csv | json; empty: -o's extension says
  bool reports = false;
  std::string output;
};

int CmdExport(const ExportArgs& a) {
  const bool to_file = !a.output.empty() && a.output != "-";
  if (to_file) {
    if (Status s = RefuseStoreAsOutput(a.output, a.db); !s.ok()) return Fail(s);
  }
  auto data = LoadView(a.db, a.name);
  if (!data.ok()) return Fail(data.status());
  report::Table table = a.reports ? report::ReportsTable(*data) : report::TrialsTable(*data);
  std::ostringstream text;
  // Without --format, -o's extension says: out.json (or OUT.JSON) is JSON, anything else CSV.
  std::string extension = std::filesystem::path(a.output).extension().string();
  for (char& ch : extension) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  const bool json_out = a.format.empty() ? to_file && extension == ".json" : a.format == "json";
  if (json_out) {
    report::WriteJson(text, table);
  } else {
    report::WriteCsv(text, table);
  }
  if (!to_file) {
    std::cout << text.str();
    return kExitOk;
  }
  Status s = WriteFile(a.output, text.str());
  if (!s.ok()) return Fail(s);
  std::cerr << "wrote " << a.output << ": " << table.rows.size()
            << (a.reports ? " reports" : " trials") << ", " << table.columns.size() << " columns\n";
  return kExitOk;
}

// ---- report ----

struct ReportArgs {
  std::string db = "sweeps.db";
  std::string name;
  std::string output;
  int top = 10;
};

int CmdReport(const ReportArgs& a) {
  const auto start = std::chrono::steady_clock::now();
  auto data = LoadView(a.db, a.name);
  if (!data.ok()) return Fail(data.status());
  report::ReportOptions options;
  options.top_curves = a.top;
  const std::string html = report::RenderHtml(*data, options);
  if (a.output == "-") {  // as export: standard output
    std::cout << html;
    return kExitOk;
  }
  const std::string path = a.output.empty() ? a.name + ".html" : a.output;
  if (Status s = RefuseStoreAsOutput(path, a.db); !s.ok()) return Fail(s);
  Status s = WriteFile(path, html);
  if (!s.ok()) return Fail(s);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::cerr << "wrote " << path << ": " << data->trials.size() << " trials, "
            << data->reports.size() << " reports, " << (html.size() + 1023) / 1024 << " KiB in "
            << report::ShortNumber(seconds) << " s\n";
  return kExitOk;
}

// ---- status --watch ----

struct WatchArgs {
  bool watch = false;
  double interval_s = 2;
};

int CmdWatch(const std::string& db, const std::string& name, double interval_s) {
  const bool terminal = ::isatty(STDOUT_FILENO) != 0;
  size_t drawn_lines = 0;
  int ownerless = 0;  // polls in a row that found a running sweep with no process holding it
  bool waiting = false;
  bool seen = false;
  while (true) {
    // Opened at every poll: a watch started before its sweep finds the file once `sweep run`
    // has made it, and a file of an older schema, which a reader sees as a migrated copy, is
    // seen again once the sweep's coordinator has migrated it.
    auto st = store::Store::Open(db, store::OpenMode::kReadOnly);
    Result<store::SweepRecord> sw =
        st.ok() ? FindSweepOrSuggest(**st, name) : Result<store::SweepRecord>(st.status());
    if (!sw.ok()) {
      // Not there yet (no file, a file still empty, no such sweep in it): wait for `sweep run`,
      // saying once what is missing, so that a mistyped name is seen at once. Anything else
      // (not a sweep database, a damaged file) ends the watch.
      if (sw.status().code() != Status::Code::kNotFound || seen) {
        return Fail(sw.status());
      }
      if (!waiting) {
        std::cerr << "sweep: " << sw.status().message() << "; waiting for sweep '" << name
                  << "' to start (Ctrl-C to stop)\n";
        waiting = true;
      }
      std::this_thread::sleep_for(std::chrono::duration<double>(interval_s));
      continue;
    }
    seen = true;
    auto facts = ReadStatusFacts(**st, *sw);
    if (!facts.ok()) return Fail(facts.status());
    const auto* counts = &facts->counts;
    const auto* running = &facts->running;
    const auto* best = &facts->best;
    // A coordinator gone is said from the first table on, as `status` says it.
    const bool ended = sw->status != store::SweepStatus::kRunning;
    const bool gone = !ended && CoordinatorGone(db, *sw);
    ownerless = gone ? ownerless + 1 : 0;
    std::ostringstream table;
    PrintStatusText(table, *sw, *counts, *running, *best, UnixSeconds(), gone, db);
    if (terminal) {
      // Redraw in place: back to the first line drawn last time, clear to the end, draw again.
      // Lines are clipped to the terminal's width so that none wraps and the count holds, and
      // to its height, since the cursor cannot go back above the screen's top.
      const size_t width = static_cast<size_t>(report::TerminalColumns(STDOUT_FILENO));
      const size_t height = static_cast<size_t>(std::max(2, report::TerminalRows(STDOUT_FILENO)));
      std::string frame;
      if (drawn_lines > 0) frame += "\033[" + std::to_string(drawn_lines) + "F";
      frame += "\033[J";
      std::vector<std::string> all;
      std::istringstream lines(table.str());
      for (std::string line; std::getline(lines, line);) all.push_back(std::move(line));
      drawn_lines = 0;
      for (size_t i = 0; i < all.size(); ++i) {
        // The final table is printed whole: nothing redraws over it.
        if (!ended && drawn_lines + 1 == height - 1 && i + 1 < all.size()) {
          frame += "... " + std::to_string(all.size() - i) + " more lines\n";
          ++drawn_lines;
          break;
        }
        frame +=
            (ended ? all[i] : report::ClipColumns(all[i], width > 1 ? width - 1 : width)) + "\n";
        ++drawn_lines;
      }
      std::cout << frame << std::flush;
    } else {
      std::cout << table.str() << "\n" << std::flush;
    }
    if (ended) return kExitOk;
    if (!std::cout) return kExitRuntime;  // its output cannot be written: main says so
    if (ownerless >= 2) {
      std::cerr << "sweep: '" << name
                << "' is marked running but no process runs it (its coordinator died); "
                   "continue it with `"
                << ResumeCommand(*sw, db) << "`\n";
      return kExitRuntime;
    }
    // A coordinator found gone is looked for again soon, not a whole interval later: the
    // second look only rules out one caught between its lock and its row.
    std::this_thread::sleep_for(
        std::chrono::duration<double>(gone ? std::min(interval_s, 0.25) : interval_s));
  }
}

// ---- registration ----

}  // namespace

void AddDbOption(CLI::App& sub, std::string& db, const std::string& help, bool show_default) {
  CLI::Option* option =
      sub.add_option("--db", db, help)
          ->check(CLI::Validator(
              [](const std::string& text) -> std::string {
                return text.empty() ? "an empty path; name the SQLite file (or leave --db out)"
                                    : "";
              },
              "PATH"));
  if (show_default) option->capture_default_str();
}

namespace {

class ViewCommandsImpl final : public ViewCommands {
 public:
  explicit ViewCommandsImpl(CLI::App& app) {
    show_cmd_ = app.add_subcommand("show", "one trial: parameters, state, timings, metric curves");
    show_cmd_->add_option("NAME", show_.name, "sweep name")->required();
    show_cmd_->add_option("TRIAL", show_.trial, "trial number")
        ->required()
        ->check(CLI::Validator(
            [](const std::string& text) -> std::string {
              int64_t n = -1;
              const char* end = text.data() + text.size();
              auto [at, ec] = std::from_chars(text.data(), end, n);
              if (ec != std::errc() || at != end || n < 0) {
                return "a trial number is a whole number from 0, got '" + text + "'";
              }
              return {};
            },
            "TRIAL"));
    AddDbOption(*show_cmd_, show_.db, "SQLite file", true);
    show_cmd_->add_flag("--json", show_.json, "JSON output, with every report");
    show_cmd_->footer("Example: sweep show fashion-mlp 7");

    export_cmd_ = app.add_subcommand("export", "every trial (or report) as CSV or JSON");
    export_cmd_->add_option("NAME", export_.name, "sweep name")->required();
    export_cmd_
        ->add_option("--format", export_.format,
                     "csv or json (default: json for an -o ending in .json, else csv)")
        ->check(CLI::IsMember({"csv", "json"}));
    export_cmd_->add_flag("--reports", export_.reports, "one row per report instead of per trial");
    export_cmd_->add_option("-o,--output", export_.output, "file to write (default: stdout)");
    AddDbOption(*export_cmd_, export_.db, "SQLite file", true);
    export_cmd_->footer(
        "Columns: trial, status, objective, ..., param.<name>, metric.<name>, error.\n"
        "Example: sweep export fashion-mlp --format csv -o trials.csv   "
        "(pandas: pd.read_csv(\"trials.csv\"))");

    report_cmd_ = app.add_subcommand("report", "one self-contained HTML page of a sweep's results");
    report_cmd_->add_option("NAME", report_.name, "sweep name")->required();
    report_cmd_->add_option("-o,--output", report_.output,
                            "HTML file (default: NAME.html; - for stdout)");
    report_cmd_->add_option("--top", report_.top, "learning curves of this many best trials")
        ->capture_default_str()
        ->check(WholeNumber(1, 1000));
    AddDbOption(*report_cmd_, report_.db, "SQLite file", true);
    report_cmd_->footer("Example: sweep report fashion-mlp -o report.html");

    status_cmd_ = app.get_subcommand("status");
    auto* watch = status_cmd_->add_flag("--watch", watch_.watch,
                                        "refresh until the sweep ends, then print the final table");
    status_cmd_
        ->add_option("--interval", watch_.interval_s, "seconds between refreshes with --watch")
        ->capture_default_str()
        ->check(CLI::Validator(
            [](const std::string& text) -> std::string {
              double v = 0;
              const char* end = text.data() + text.size();
              auto [at, ec] = std::from_chars(text.data(), end, v);
              if (ec != std::errc() || at != end || !(v >= 0.01 && v <= 86400.0)) {
                return "seconds from 0.01 to 86400, got '" + text + "'";
              }
              return {};
            },
            "SECONDS"));
    if (auto* json_flag = status_cmd_->get_option_no_throw("--json")) watch->excludes(json_flag);
  }

  std::optional<int> Run() override {
    if (show_cmd_->parsed()) return CmdShow(show_);
    if (export_cmd_->parsed()) return CmdExport(export_);
    if (report_cmd_->parsed()) return CmdReport(report_);
    if (status_cmd_->parsed() && watch_.watch) {
      return CmdWatch(status_cmd_->get_option("--db")->as<std::string>(),
                      status_cmd_->get_option("NAME")->as<std::string>(), watch_.interval_s);
    }
    return std::nullopt;
  }

 private:
  CLI::App* show_cmd_ = nullptr;
  CLI::App* export_cmd_ = nullptr;
  CLI::App* report_cmd_ = nullptr;
  CLI::App* status_cmd_ = nullptr;
  ShowArgs show_;
  ExportArgs export_;
  ReportArgs report_;
  WatchArgs watch_;
};

}  // namespace

std::unique_ptr<ViewCommands> AddViewCommands(CLI::App& app) {
  return std::make_unique<ViewCommandsImpl>(app);
}

}  // namespace sweep
