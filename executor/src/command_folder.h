// A command trial's folder: its program's stdout.log and stderr.log, and kRunsFile, the record
// of its runs that a rerun reads to report again what the store lost. Private to
// sweep_executor; called on the worker's thread, for files that are that trial's alone.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <string>
#include <system_error>
#include <vector>

#include <nlohmann/json.hpp>

namespace sweep::executor {

// ---- the record of a trial's runs ----
// A command trial's folder keeps one JSON line per run of its program: the sweep it belongs to,
// where that run's output starts in stdout.log, and the stored reports it was started after
// (which its reports' steps follow). A rerun reads it to report again what the store lost.
inline constexpr const char* kRunsFile = ".sweep-runs";

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

std::vector<RunRecord> ReadRuns(const std::string& path);
bool AppendRecord(const std::string& path, const nlohmann::json& record);
bool AppendRun(const std::string& path, const RunRecord& run);

// Whether what `fd` (open to read too) holds is empty or ends with a line break: not after a
// program's unfinished line, or a record torn by a crash.
bool EndsLine(int fd);
// Appends `line` on a line of its own (see EndsLine) and ends it.
bool AppendLine(int fd, const std::string& line);

// Empties `dir`, the record of its runs last: a clearing cut short leaves it to be cleared again.
void ClearFolder(const std::string& dir, std::error_code& ec);

// ---- reading the logs back ----

// A line not yet ended that has grown long: what a carriage return was followed by has been
// drawn over on a terminal (a progress bar redrawn with \r before a report), so it goes, up to
// the last \r that text follows (a last \r may be the CR of a CR LF still to come).
void DropDrawnOver(std::string* partial);

// Calls `line` for each line of `path` from byte `begin` to `end` (-1: its end), without its
// line break, until it returns false. A line longer than kMaxReportBytes after its last \r (no
// report) is skipped unread, as the live reader skips it, so a progress bar redrawn with \r
// costs no memory.
void ForEachLine(const std::string& path, off_t begin, off_t end,
                 const std::function<bool(const std::string&)>& line);

// The last `max_lines` lines of `path` from `offset` on (of its last 2 KiB), without our own
// notes ("[sweep] ..."), which are not the program's output.
std::string Tail(const std::string& path, off_t offset, int max_lines);

}  // namespace sweep::executor
