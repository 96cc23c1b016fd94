// What the CLI's command groups share: the interrupt flags and their signal handlers, this
// binary's path, and the UTF-8 check of paths.
#include "command_common.h"

#include <CLI/CLI.hpp>
#include <cerrno>
#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <system_error>

#include "base/utf8.h"

namespace sweep {

namespace {

std::atomic<bool> g_interrupt{false};
std::atomic<bool> g_interrupt_again{false};  // a second Ctrl-C / SIGTERM: stop at once

extern "C" void OnInterrupt(int sig) {
  // A hangup comes twice when a terminal closes (from the kernel and from the shell to its
  // jobs): it never means "at once".
  if (g_interrupt.load() && sig != SIGHUP) g_interrupt_again = true;
  g_interrupt = true;
}

// `sweep train`: the first Ctrl-C / SIGTERM / SIGHUP stops the trial (see StopTrainOnSignals); a
// second Ctrl-C or SIGTERM ends the process at once, by that signal (only async-signal-safe
// calls). A second SIGHUP is the closing terminal's other one.
extern "C" void OnTrainInterrupt(int sig) {
  if (g_interrupt.load() && sig != SIGHUP) {
    std::signal(sig, SIG_DFL);
    std::raise(sig);
    return;
  }
  g_interrupt = true;
}

}  // namespace

std::atomic<bool>& InterruptRequested() { return g_interrupt; }

std::atomic<bool>& InterruptAgain() { return g_interrupt_again; }

void StopOnSignals() {
  for (int sig : {SIGINT, SIGTERM, SIGHUP}) std::signal(sig, OnInterrupt);
}

void StopAgentOnSignals() {
  StopOnSignals();
  std::signal(SIGUSR1, OnInterrupt);
}

void StopTrainOnSignals() {
  for (int sig : {SIGINT, SIGTERM, SIGHUP}) std::signal(sig, OnTrainInterrupt);
  // A reader gone with the terminal (`sweep train ... | tee log`) must not end the run before
  // its checkpoint is written; `sweep run` ignores it for the same reason (LocalExecutor).
  std::signal(SIGPIPE, SIG_IGN);
}

std::string SelfExe(const char* argv0) {
  std::error_code ec;
  auto p = std::filesystem::read_symlink("/proc/self/exe", ec);
  return ec ? std::string(argv0) : p.string();
}

Status CheckTextPath(const std::string& what, const std::string& path) {
  std::error_code ec;
  const std::string full = std::filesystem::absolute(path, ec).string();
  if (IsValidUtf8(path) && (ec || IsValidUtf8(full))) return Status::Ok();
  return Status::InvalidArgument(
      what + " " + Utf8Text(path) +
      (IsValidUtf8(path) ? ": its full path " + Utf8Text(full) : std::string()) +
      " is not valid UTF-8; sweep keeps paths as text (in its store, its tasks and --json): "
      "rename the folder, or reach it through a link whose name is UTF-8");
}

CLI::Validator WholeNumber(int64_t min, std::optional<int64_t> max) {
  const std::string range =
      max ? std::to_string(min) + " to " + std::to_string(*max) : std::to_string(min) + " or more";
  return CLI::Validator(
      [min, max](const std::string& text) -> std::string {
        errno = 0;
        char* end = nullptr;
        const long long value = std::strtoll(text.c_str(), &end, 10);
        if (text.empty() || end != text.c_str() + text.size() || text.front() == ' ') {
          return "'" + text + "' is not a whole number";
        }
        const bool low = errno == ERANGE ? text.front() == '-' : value < min;
        const bool high = errno == ERANGE ? !low : max && value > *max;
        if (low) return text + " is below " + std::to_string(min);
        if (high) return text + (max ? " is over " + std::to_string(*max) : " is too large");
        return "";
      },
      range);
}

}  // namespace sweep
