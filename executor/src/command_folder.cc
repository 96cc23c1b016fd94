// A command trial's folder (command_folder.h): the record of its program's runs, and its logs
// read back, line by line for a rerun's replay and by their last lines for a failure's message.
#include "command_folder.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>
#include <vector>

#include "executor/command.h"
#include "line_io.h"

namespace sweep::executor {

using nlohmann::json;

// ---- the record of a trial's runs ----

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

bool EndsLine(int fd) {
  char last = '\n';
  const off_t end = ::lseek(fd, 0, SEEK_END);
  return end <= 0 || ::pread(fd, &last, 1, end - 1) != 1 || last == '\n';
}

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

void ClearFolder(const std::string& dir, std::error_code& ec) {
  for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
    if (entry.path().filename() == kRunsFile) continue;
    std::filesystem::remove_all(entry.path(), ec);
    if (ec) return;
  }
  if (ec) return;
  std::filesystem::remove_all(dir, ec);
}

// ---- reading the logs back ----

void DropDrawnOver(std::string* partial) {
  if (partial->size() < 2) return;
  const size_t cr = partial->rfind('\r', partial->size() - 2);
  if (cr != std::string::npos) partial->erase(0, cr + 1);
}

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
    // A program's colours and bells would reach the terminal of whoever reads the error.
    for (char ch : lines[i]) {
      const bool control = (static_cast<unsigned char>(ch) < 0x20 && ch != '\t') || ch == 0x7f;
      out += control ? ' ' : ch;
    }
    if (i + 1 < lines.size()) out += '\n';
  }
  return out;
}

}  // namespace sweep::executor
