// `sweep devices`: what this machine offers trials (GPUs with their links, or CPU slots), as a
// table or JSON.
#include "devices_command.h"

#include <cstdio>
#include <iostream>
#include <map>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "executor/slots.h"
#include "output.h"
#include "trainer/trainer.h"

namespace sweep {

namespace {

using nlohmann::json;

// Why this build's GPU trials cannot run on slot s's GPU, or empty.
std::string Gap(const executor::Slot& s) {
  return s.gpu && s.compute_capability > 0 ? trainer::GpuArchitectureGap(s.compute_capability) : "";
}

// What a sweep run here, or `sweep agent`, would place trials on: every GPU this process can use
// with its model, memory, compute capability, the GPUs it has peer access to, and link group (GPUs
// of one group reach each other over the fastest link, where a multi-GPU trial's replicas are
// placed), or the CPU slots.
int CmdDevices(bool as_json, int cpu_slots) {
  const std::vector<executor::Slot> slots = executor::DiscoverLocalSlots(cpu_slots);
  if (as_json) {
    json arr = json::array();
    for (const auto& s : slots) {
      arr.push_back({{"slot", s.name},
                     {"gpu", s.gpu},
                     {"device", s.device},
                     {"model", s.model},
                     {"memory_bytes", s.memory_bytes},
                     {"compute_capability", s.compute_capability},
                     {"runs_this_build", Gap(s).empty()},
                     {"link_group", s.link_group},
                     {"peers", s.peers}});
    }
    PrintJson(std::cout, arr);
    return kExitOk;
  }
  if (slots.empty() || !slots[0].gpu) {
    std::cout << "no CUDA device this process can use: " << slots.size()
              << " CPU slots (trials with gpus = n take n of them)\n";
    return kExitOk;
  }
  std::map<int, std::vector<int>> groups;
  for (const auto& s : slots) {
    char line[256];
    std::snprintf(line, sizeof line,
                  "%-6s %-28s %7.1f GiB  sm_%d  link group %d  peer access: ", s.name.c_str(),
                  s.model.c_str(), static_cast<double>(s.memory_bytes) / (1024.0 * 1024 * 1024),
                  s.compute_capability, s.link_group);
    std::cout << line;
    if (s.peers.empty()) std::cout << "none";
    for (size_t i = 0; i < s.peers.size(); ++i)
      std::cout << (i == 0 ? "gpu" : ",gpu") << s.peers[i];
    std::cout << "\n";
    if (const std::string gap = Gap(s); !gap.empty()) std::cout << "       " << gap << "\n";
    groups[s.link_group].push_back(s.device);
  }
  for (const auto& [group, devices] : groups) {
    if (devices.size() < 2) continue;
    std::cout << "GPUs";
    for (size_t i = 0; i < devices.size(); ++i) std::cout << (i == 0 ? " " : ",") << devices[i];
    std::cout << " share the fastest link (peer access): multi-GPU trials are placed within one "
                 "group first\n";
  }
  return kExitOk;
}

class DevicesCommandImpl final : public CommandGroup {
 public:
  explicit DevicesCommandImpl(CLI::App& app) {
    devices_cmd_ =
        app.add_subcommand("devices", "the GPUs (or CPU slots) trials would run on here");
    devices_cmd_->add_flag("--json", json_, "print JSON");
    devices_cmd_->add_option("--cpu-slots", cpu_slots_, "CPU slots where there is no GPU")
        ->check(WholeNumber(1, 4096));
  }

  std::optional<int> Run() override {
    if (devices_cmd_->parsed()) return CmdDevices(json_, cpu_slots_);
    return std::nullopt;
  }

 private:
  CLI::App* devices_cmd_ = nullptr;
  bool json_ = false;
  int cpu_slots_ = 0;
};

}  // namespace

std::unique_ptr<CommandGroup> AddDevicesCommand(CLI::App& app) {
  return std::make_unique<DevicesCommandImpl>(app);
}

}  // namespace sweep
