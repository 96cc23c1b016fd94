// What a command trial's program is given (command_env.h), and DescribeCommand (trial.h), which
// says so for `sweep run --dry-run`: its argv, the program found, and its environment.
#include "command_env.h"

#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "executor/command.h"
#include "trainer/trainer.h"

extern char** environ;

namespace sweep::executor {

using nlohmann::json;

namespace {

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

}  // namespace

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

std::vector<std::string> ProgramEnvironment(const TrialTask& task, const std::string& trial_dir) {
  const std::vector<std::pair<std::string, std::string>> set = OurEnvironment(task, trial_dir);
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

}  // namespace sweep::executor
