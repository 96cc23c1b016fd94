#include "slurm.h"

#include <cctype>

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
  if (auto host_port = executor::net::ParseHostPort(job.connect); !host_port.ok()) {
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
    SWEEP_RETURN_IF_ERROR(OneLine(flag, *value));
  }
  for (const std::string& arg : job.sbatch_args) {
    SWEEP_RETURN_IF_ERROR(OneLine("--sbatch-arg", arg));
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
