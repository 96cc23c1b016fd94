// agent and the hidden worker: serving a coordinator's trials from this machine's slots, and the
// process that runs one trial at a time for a coordinator or an agent.
#include "agent_commands.h"

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <CLI/CLI.hpp>

#include "base/utf8.h"
#include "cluster/run_tool.h"
#include "executor/agent.h"
#include "executor/net_auth.h"
#include "executor/slots.h"
#include "executor/worker.h"
#include "output.h"
#include "sweep/config.h"
#include "trainer/trainer.h"

namespace sweep {

namespace {

struct AgentArgs {
  std::string connect;
  std::string token_file;
  std::string gpus;  // "0,1"; empty: every GPU
  int cpu_slots = 0;
  std::string name;
  bool stay = false;
  std::string retry_for;  // a duration or "forever"; empty: 10m, forever with --stay
  bool cancel_pending_array = false;
};

// How long scancel may take: the agent's task holds its node until it is done.
constexpr int kScancelTimeoutMs = 30'000;

// The tasks of this Slurm job array that have not started yet would start after the sweep is
// over and wait out --retry-for for a coordinator that is gone: cancel them. Runs while this
// task still holds its CPUs, so the scheduler cannot start one in the meantime. A failure is
// a warning: the sweep itself is done.
void CancelPendingArrayTasks(const std::string& array_job) {
  const std::vector<std::string> argv = {"scancel", "--state=PENDING", array_job};
  auto r = cluster::RunTool(argv, "", kScancelTimeoutMs);
  std::string said;
  if (r.ok()) said = r->err.empty() ? r->out : r->err;
  while (!said.empty() && (said.back() == '\n' || said.back() == ' ')) said.pop_back();
  if (r.ok() && r->exit_code == 0) {
    std::cerr << "cancelled the pending tasks of Slurm job array " << array_job
              << " (scancel --state=PENDING): the sweep is over\n";
    return;
  }
  std::cerr << "warning: could not cancel the pending tasks of Slurm job array " << array_job
            << ": "
            << (r.ok() ? "scancel failed (exit " + std::to_string(r->exit_code) + ")" +
                             (said.empty() ? "" : ": " + said)
                       : r.status().message())
            << "; they will start, find no coordinator, and end after --retry-for\n";
}

// `--gpus 0,1`: GPU ordinals separated by commas.
Result<std::vector<int>> ParseGpuList(const std::string& list) {
  std::vector<int> gpus;
  size_t start = 0;
  while (start <= list.size()) {
    size_t end = list.find(',', start);
    if (end == std::string::npos) end = list.size();
    std::string item = list.substr(start, end - start);
    char* rest = nullptr;
    long v = std::strtol(item.c_str(), &rest, 10);
    if (item.empty() || *rest != '\0' || v < 0 || v > 1023) {
      return Status::InvalidArgument("--gpus " + list +
                                     ": expected GPU ordinals separated by commas, e.g. 0,1");
    }
    gpus.push_back(static_cast<int>(v));
    start = end + 1;
  }
  return gpus;
}

// How many GPUs Slurm gave this task (the entries of its CUDA_VISIBLE_DEVICES); 0 outside a
// Slurm task given GPUs. Slurm sets SLURM_JOB_GPUS (batch) or SLURM_STEP_GPUS (srun) with
// them; "NoDevFiles" means GPUs without device files.
int SlurmGivenGpus() {
  if (std::getenv("SLURM_JOB_GPUS") == nullptr && std::getenv("SLURM_STEP_GPUS") == nullptr) {
    return 0;
  }
  const char* visible = std::getenv("CUDA_VISIBLE_DEVICES");
  if (visible == nullptr || *visible == '\0' || std::string(visible) == "NoDevFiles") return 0;
  int n = 0;
  for (std::string_view rest(visible); !rest.empty();) {
    const size_t comma = rest.find(',');
    if (rest.substr(0, comma).find_first_not_of(' ') != std::string_view::npos) ++n;
    if (comma == std::string_view::npos) break;
    rest.remove_prefix(comma + 1);
  }
  return n;
}

// k GPU slots for GPUs this process cannot see itself: ordinals 0..k-1, one link group (Slurm
// gave them to the task as one set).
std::vector<executor::Slot> UnseenGpuSlots(int k) {
  std::vector<executor::Slot> slots;
  for (int d = 0; d < k; ++d) {
    executor::Slot s;
    s.index = d;
    s.gpu = true;
    s.device = d;
    s.name = "gpu" + std::to_string(d);
    slots.push_back(s);
  }
  return slots;
}

int CmdAgent(const AgentArgs& a, const char* argv0) {
  namespace ex = executor;
  auto host_port = ex::net::ParseConnectAddress(a.connect);
  if (!host_port.ok()) {
    return Fail(host_port.status().WithMessage("--connect " + host_port.status().message()));
  }
  ex::AgentOptions options;
  options.host = host_port->first;
  options.port = host_port->second;
  // Its trials' folders and checkpoints go under the folder it runs in.
  std::error_code cwd_error;
  const std::string cwd = std::filesystem::current_path(cwd_error).string();
  if (Status s = CheckTextPath("the agent's folder", cwd); !cwd_error && !s.ok()) return Fail(s);
  if (!a.token_file.empty()) {
    auto token = ex::net::ReadTokenFile(a.token_file);
    if (!token.ok()) return Fail(token.status());
    options.token = *token;
  } else if (!ex::net::IsLoopback(options.host)) {
    // As a coordinator will not listen there without one: with no token, whoever answers at
    // that address (or sits on the path) could prove it "holds" the empty token, and send
    // command trials for this agent to run.
    return Fail(Status::InvalidArgument(
        "--connect " + a.connect +
        ": a coordinator off this machine needs --token-file (the same token as its own); "
        "without one, anyone who answers at that address could run commands here"));
  }
  std::optional<std::vector<int>> gpus;
  if (!a.gpus.empty()) {
    auto listed = ParseGpuList(a.gpus);
    if (!listed.ok()) return Fail(listed.status());
    gpus = std::move(*listed);
  } else if (a.cpu_slots > 0 && executor::CudaDeviceCount() > 0) {
    gpus.emplace();  // --cpu-slots on a machine with GPUs: offer CPU shares only
  }
  auto slots = ex::AgentSlots(gpus, a.cpu_slots);
  if (!slots.ok()) return Fail(slots.status());
  options.slots = std::move(*slots);
  // A Slurm task given GPUs serves them even when CUDA sees none here (a sweep built without
  // CUDA, or no driver): command trials bring their own CUDA, and CPU slots in their place
  // would run GPU trials nowhere and CPU trials on CPUs the task was not given.
  if (const int given = SlurmGivenGpus();
      !gpus && a.cpu_slots == 0 && given > 0 && !options.slots.front().gpu) {
    std::cerr << "Slurm gave this task " << given << " GPU" << (given == 1 ? "" : "s")
              << " (CUDA_VISIBLE_DEVICES=" << std::getenv("CUDA_VISIBLE_DEVICES")
              << ") that CUDA does not see from here (a build without CUDA, or no driver): "
                 "offering them as GPU slots for trials that bring their own CUDA\n";
    options.slots = UnseenGpuSlots(given);
  }
  for (const ex::Slot& s : options.slots) {
    if (s.gpu) options.link_group.push_back(s.link_group);
  }
  // Shown in the coordinator's log and in placements, where it must read as one name.
  if (a.name.size() > 256 || !IsValidUtf8(a.name) ||
      std::any_of(a.name.begin(), a.name.end(),
                  [](unsigned char c) { return c < 0x20 || c == 0x7f; })) {
    return Fail(Status::InvalidArgument(
        "--name: at most 256 bytes of UTF-8, without control characters (line breaks, "
        "escapes)"));
  }
  options.name = a.name;
  options.stay = a.stay;
  const char* array_job = std::getenv("SLURM_ARRAY_JOB_ID");
  if (a.cancel_pending_array && array_job != nullptr && *array_job != '\0' &&
      std::all_of(array_job, array_job + std::strlen(array_job),
                  [](unsigned char c) { return std::isdigit(c) != 0; })) {
    options.on_sweep_over = [job = std::string(array_job)] { CancelPendingArrayTasks(job); };
  }
  if (a.retry_for.empty() && a.stay) {
    options.retry_for_ms = -1;
  } else if (!a.retry_for.empty()) {
    Result<int64_t> ms = ParseRetryFor(a.retry_for);
    if (!ms.ok()) return Fail(ms.status());
    options.retry_for_ms = *ms;
  }
  // Test hook: how long token refusals must go on before the agent ends (default a minute).
  if (const char* w = std::getenv("SWEEP_TEST_AUTH_REFUSAL_WINDOW_MS")) {
    options.auth_refusal_window_ms = std::atoi(w);
  }
  options.worker_command = {SelfExe(argv0), "worker"};
  options.log = &std::cerr;
  options.stop_now = &InterruptAgain();
  StopAgentOnSignals();
  Status s = ex::RunAgent(options, InterruptRequested());
  // A refusal by the coordinator (the only InvalidArgument once the options above are checked)
  // and giving up without one (Unavailable) were logged as they came: their exit codes, not a
  // second copy of the line.
  if (!s.ok() && s.code() == Status::Code::kInvalidArgument) return kExitUsage;
  if (!s.ok() && s.code() == Status::Code::kUnavailable) return kExitRuntime;
  if (!s.ok()) return Fail(s);
  return kExitOk;
}

class AgentCommandsImpl final : public AgentCommands {
 public:
  AgentCommandsImpl(CLI::App& app, const char* argv0) : argv0_(argv0) {
    agent_cmd_ = app.add_subcommand("agent", "serve a coordinator started with --listen");
    agent_cmd_->add_option("--connect", args_.connect, "the coordinator's HOST:PORT")->required();
    agent_cmd_->add_option("--token-file", args_.token_file, "the shared secret");
    agent_cmd_->add_option("--gpus", args_.gpus, "GPUs to offer, e.g. 0,1 (default: all)");
    agent_cmd_->add_option("--cpu-slots", args_.cpu_slots, "CPU slots to offer (no GPU)")
        ->check(WholeNumber(1, 1024));
    agent_cmd_->add_option("--name", args_.name, "name in placements (default: host name)");
    agent_cmd_->add_flag(
        "--stay", args_.stay,
        "keep serving when the sweep is over: wait for the next one on that address");
    agent_cmd_->add_option("--retry-for", args_.retry_for,
                           "give up after this long without a coordinator (default 10m; with "
                           "--stay 'forever')");
    agent_cmd_->add_flag("--cancel-pending-array", args_.cancel_pending_array,
                         "in a Slurm job array: when the sweep is over, cancel the array's tasks "
                         "that have not started (sweep slurm submit's script sets it)");
    agent_cmd_->footer(
        "Example: sweep agent --connect coordinator:7070 --token-file ~/.sweep-token --gpus 0,1\n"
        "Reconnects with backoff when the coordinator restarts (sweep resume --listen ...).\n"
        "Exits 0 when the coordinator's sweep is over (unless --stay), 1 after --retry-for "
        "without a coordinator.");
    worker_cmd_ = app.add_subcommand("worker", "");  // hidden: spawned by the coordinator
    worker_cmd_->group("");
  }

  std::optional<int> RunWorker() override {
    if (!worker_cmd_->parsed()) return std::nullopt;
    // A process that trains sets NCCL's environment now, before any thread starts.
    trainer::ConnectNcclAtInit();
    return executor::RunWorker(executor::kWorkerCommandFd, executor::kWorkerMessageFd);
  }

  std::optional<int> Run() override {
    if (agent_cmd_->parsed()) return CmdAgent(args_, argv0_);
    return std::nullopt;
  }

 private:
  const char* argv0_;
  CLI::App* agent_cmd_ = nullptr;
  CLI::App* worker_cmd_ = nullptr;
  AgentArgs args_;
};

}  // namespace

std::unique_ptr<AgentCommands> AddAgentCommands(CLI::App& app, const char* argv0) {
  return std::make_unique<AgentCommandsImpl>(app, argv0);
}

}  // namespace sweep
