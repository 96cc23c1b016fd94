#include "slurm.h"

#include <cctype>
#include <cstdint>
#include <optional>
#include <string_view>
#include <vector>

#include "executor/net_auth.h"
#include "sweep/config.h"

namespace sweep::cluster {

std::string ShellQuote(const std::string& text) {
  std::string out = "'";
  for (char c : text) {
    if (c == '\'') {
      out += "'\\''";
    } else {
      out += c;
    }
  }
  return out + "'";
}

namespace {

// A value that lands on an #SBATCH line: sbatch reads the line to its end, so a line break
// would start a new directive (or a shell command) of the value's making.
Status OneLine(const std::string& flag, const std::string& value) {
  for (char c : value) {
    if (c == '\n' || c == '\r' || c == '\0') {
      return Status::InvalidArgument(flag + ": must be one line");
    }
  }
  return Status::Ok();
}

// A value on an #SBATCH line is one word: sbatch splits the line at whitespace, so the rest of
// "--output=/shared/my logs/a.log" would be dropped, and the log written elsewhere.
Status OneWord(const std::string& flag, const std::string& value) {
  SWEEP_RETURN_IF_ERROR(OneLine(flag, value));
  for (char c : value) {
    if (std::isspace(static_cast<unsigned char>(c)) || c == '"' || c == '\'') {
      return Status::InvalidArgument(flag + " '" + value +
                                     "': sbatch reads its #SBATCH lines a word at a time; give "
                                     "it without spaces or quotes");
    }
  }
  return Status::Ok();
}

std::optional<int64_t> Digits(std::string_view d) {
  if (d.empty() || d.size() > 9) return std::nullopt;
  int64_t v = 0;
  for (char c : d) {
    if (c < '0' || c > '9') return std::nullopt;
    v = v * 10 + (c - '0');
  }
  return v;
}

// Slurm's time formats, in seconds: M, M:S, H:M:S, D-H, D-H:M, D-H:M:S; -1 for INFINITE.
std::optional<int64_t> SlurmSeconds(std::string time) {
  std::string lower;
  for (char c : time) lower += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (lower == "infinite" || lower == "unlimited") return -1;
  int64_t days = -1;
  if (const size_t dash = time.find('-'); dash != std::string::npos) {
    auto d = Digits(std::string_view(time).substr(0, dash));
    if (!d) return std::nullopt;
    days = *d;
    time = time.substr(dash + 1);
  }
  std::vector<int64_t> parts;
  size_t start = 0;
  while (true) {
    const size_t colon = time.find(':', start);
    auto v = Digits(std::string_view(time).substr(start, colon - start));
    if (!v) return std::nullopt;
    parts.push_back(*v);
    if (colon == std::string::npos) break;
    start = colon + 1;
  }
  if (parts.size() > 3) return std::nullopt;
  if (days >= 0) {  // D-H, D-H:M, D-H:M:S
    parts.resize(3, 0);
    return ((days * 24 + parts[0]) * 60 + parts[1]) * 60 + parts[2];
  }
  if (parts.size() == 1) return parts[0] * 60;
  if (parts.size() == 2) return parts[0] * 60 + parts[1];
  return (parts[0] * 60 + parts[1]) * 60 + parts[2];
}

// The warning must reach the agent, as a signal it stops its trials on: "B:" (the agent is the
// batch shell; without it Slurm signals job steps only, and there are none), USR1, TERM, INT
// or HUP, and a lead time within the time limit.
Status CheckSignal(const std::string& signal, const std::string& time) {
  const std::string usage = "--signal " + signal + ": ";
  const size_t colon = signal.find(':');
  const std::string flags = colon == std::string::npos ? "" : signal.substr(0, colon);
  if (flags.find('B') == std::string::npos || flags.size() > 2 ||
      flags.find_first_not_of("RB") != std::string::npos) {
    return Status::InvalidArgument(
        usage +
        "give it as B:SIGNAL@SECONDS (e.g. B:USR1@120): without \"B:\" Slurm signals a job's "
        "steps only, and the agent is the batch shell");
  }
  std::string rest = signal.substr(colon + 1);
  const size_t at = rest.find('@');
  std::string name = rest.substr(0, at);
  int64_t lead = 60;  // Slurm's default
  if (at != std::string::npos) {
    auto v = Digits(std::string_view(rest).substr(at + 1));
    if (!v || *v > 65535) {
      return Status::InvalidArgument(usage +
                                     "the seconds after @ must be a whole number in 0..65535");
    }
    lead = *v;
  }
  for (char& c : name) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  if (name.starts_with("SIG")) name = name.substr(3);
  if (name != "USR1" && name != "TERM" && name != "INT" && name != "HUP" && name != "10" &&
      name != "15" && name != "2" && name != "1") {
    return Status::InvalidArgument(
        usage +
        "the agent stops its trials on USR1, TERM, INT or HUP; any other signal would "
        "end it without their checkpoints");
  }
  if (!time.empty()) {
    auto limit = SlurmSeconds(time);
    if (!limit) {
      return Status::InvalidArgument(
          "--time " + time +
          ": expected Slurm's time format: MINUTES, MM:SS, HH:MM:SS, D-HH, D-HH:MM or "
          "D-HH:MM:SS");
    }
    if (*limit > 0 && lead >= *limit) {  // 0, as -1: no limit
      return Status::InvalidArgument(
          usage + "the warning comes " + std::to_string(lead) + " s before the end, and --time " +
          time + " gives each task " + std::to_string(*limit) +
          " s: it would stop every agent as it starts; give a longer --time or a shorter lead");
    }
  }
  return Status::Ok();
}

}  // namespace

Status CheckSlurmJob(const SlurmJob& job) {
  if (job.agents < 1) return Status::InvalidArgument("--agents: give 1 or more");
  if (job.gpus_per_agent < 0) return Status::InvalidArgument("--gpus-per-agent: must be >= 0");
  if (job.cpu_slots < 0) return Status::InvalidArgument("--cpu-slots: must be >= 0");
  if (job.gpus_per_agent == 0 && job.cpu_slots == 0) {
    return Status::InvalidArgument(
        "give --gpus-per-agent K (GPU trials) or --cpu-slots N (CPU trials): each agent must "
        "offer something");
  }
  if (job.gpu_request != "gres" && job.gpu_request != "gpus") {
    return Status::InvalidArgument("--gpu-request: expected \"gres\" or \"gpus\", got \"" +
                                   job.gpu_request + "\"");
  }
  if (job.connect.empty() || job.connect.find(':') == std::string::npos) {
    return Status::InvalidArgument(
        "--connect: give the coordinator's HOST:PORT, as `sweep run ... --listen` prints it");
  }
  // What `sweep agent` would refuse, refused here: every task of the array would end at once.
  if (auto host_port = executor::net::ParseConnectAddress(job.connect); !host_port.ok()) {
    return host_port.status().WithMessage("--connect " + host_port.status().message());
  }
  if (!job.retry_for.empty()) SWEEP_RETURN_IF_ERROR(ParseRetryFor(job.retry_for).status());
  if (job.token_file.empty()) {
    return Status::InvalidArgument(
        "--token-file: give the token file the coordinator uses, on storage the nodes reach");
  }
  if (job.sweep_binary.empty() || job.sweep_binary.front() != '/') {
    return Status::InvalidArgument("the sweep binary's path must be absolute");
  }
  for (const auto& [flag, value] : {std::pair<std::string, const std::string*>{"--time", &job.time},
                                    {"--partition", &job.partition},
                                    {"--account", &job.account},
                                    {"--signal", &job.signal},
                                    {"--job-name", &job.job_name},
                                    {"--output", &job.output}}) {
    SWEEP_RETURN_IF_ERROR(OneWord(flag, *value));
  }
  if (job.job_name.empty()) return Status::InvalidArgument("--job-name: must not be empty");
  if (job.output.empty()) return Status::InvalidArgument("--output: must not be empty");
  SWEEP_RETURN_IF_ERROR(CheckSignal(job.signal, job.time));
  for (const std::string& arg : job.sbatch_args) {
    SWEEP_RETURN_IF_ERROR(OneWord("--sbatch-arg", arg));
    if (!arg.starts_with("-")) {
      return Status::InvalidArgument("--sbatch-arg " + arg +
                                     ": expected an sbatch option, e.g. --sbatch-arg=--qos=high");
    }
  }
  return Status::Ok();
}

std::string SlurmScript(const SlurmJob& job) {
  std::string s = "#!/bin/bash\n";
  auto directive = [&](const std::string& option) { s += "#SBATCH " + option + "\n"; };
  directive("--job-name=" + job.job_name);
  directive("--array=0-" + std::to_string(job.agents - 1));
  directive("--ntasks=1");
  if (job.gpus_per_agent > 0) {
    directive(job.gpu_request == "gpus" ? "--gpus=" + std::to_string(job.gpus_per_agent)
                                        : "--gres=gpu:" + std::to_string(job.gpus_per_agent));
  }
  if (job.cpu_slots > 0) directive("--cpus-per-task=" + std::to_string(job.cpu_slots));
  if (!job.time.empty()) directive("--time=" + job.time);
  if (!job.partition.empty()) directive("--partition=" + job.partition);
  if (!job.account.empty()) directive("--account=" + job.account);
  directive("--signal=" + job.signal);
  directive("--requeue");
  // A requeued task writes on at the end of its log instead of over it.
  directive("--open-mode=append");
  directive("--output=" + job.output);
  for (const std::string& arg : job.sbatch_args) directive(arg);
  s += "\n";
  s += "# One sweep agent per array task, with what Slurm gave the task: its GPUs come as\n";
  s += "# CUDA_VISIBLE_DEVICES. Slurm's warning signal (USR1) stops the agent's trials at their\n";
  s += "# next checkpoint, and the coordinator runs them again elsewhere. The agent is the batch\n";
  s += "# shell itself (exec), so the signal reaches it. It exits 0 when the sweep is over, and\n";
  s += "# the task ends then, before its time limit, cancelling the array's pending tasks.\n";
  s += "exec " + ShellQuote(job.sweep_binary) + " agent --connect " + ShellQuote(job.connect) +
       " --token-file " + ShellQuote(job.token_file) +
       " --name \"slurm-${SLURM_ARRAY_JOB_ID:-$SLURM_JOB_ID}-${SLURM_ARRAY_TASK_ID:-0}\"";
  // What Slurm gave the task, where it says (it may round up what was asked).
  if (job.gpus_per_agent == 0) {
    s += " --cpu-slots \"${SLURM_CPUS_PER_TASK:-" + std::to_string(job.cpu_slots) + "}\"";
  }
  if (!job.retry_for.empty()) s += " --retry-for " + ShellQuote(job.retry_for);
  // Tasks still pending when the sweep ends would start for nothing: the agent cancels them.
  s += " --cancel-pending-array";
  s += "\n";
  return s;
}

}  // namespace sweep::cluster
