// A command trial's program on this machine: found on PATH (ResolveProgram), and why the
// kernel would refuse to run it, in a user's words (CheckProgram, ExecFailure).
#include "command_program.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>
#include <vector>

#include "executor/command.h"

namespace sweep::executor {

using nlohmann::json;

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

namespace {

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
}  // namespace

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

Status ExecFailure(const std::string& program, const std::vector<std::string>& argv,
                   const std::vector<std::string>& env, const std::string& workdir, int error) {
  const std::string why = std::strerror(error);
  // The program cannot start on this machine: not there, or this machine's copy cannot run
  // (no #! line, a missing interpreter, not executable, built for another processor).
  // Where trials run on this machine the sweep refused such a program before it started,
  // so it is this machine's trouble (an agent's copy, a file changed since): the trial
  // runs again elsewhere, and this machine takes no more. Only arguments too large for
  // Linux, which come from the trial's parameters, fail the trial.
  struct stat st {};
  const bool there = ::stat(program.c_str(), &st) == 0;
  if (there && (error == ENOEXEC || error == ENOENT)) {
    // ENOENT alone would blame the program itself, not its interpreter.
    if (std::string not_runnable = WhyNotRunnable(program, workdir); !not_runnable.empty()) {
      return Status::Unavailable("command: cannot run '" + argv[0] + "' (" + program +
                                 "): " + not_runnable);
    }
  }
  if ((error == ENOENT || error == ENOTDIR) && !there) {
    return Status::Unavailable("command: cannot run '" + argv[0] + "' (" + program +
                               "): it is not on this machine");
  }
  if (error == ENAMETOOLONG) {  // a parameter in the program's own path
    return Status::InvalidArgument("command: cannot run '" + argv[0] + "': " + why);
  }
  if (error == E2BIG) {
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
        return Status::InvalidArgument("command: cannot run '" + argv[0] + "': an argument is " +
                                       std::to_string(a.size()) +
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

}  // namespace sweep::executor
