#include "servers.h"

#include <algorithm>
#include <utility>

namespace sweep {

Result<Servers> Servers::Create() {
  Servers s;
  SWEEP_ASSIGN_OR_RETURN(s.packer_, executor::Packer::Create({}));
  return s;
}

const ServerInfo* Servers::Find(int id) const {
  auto it = servers_.find(id);
  return it == servers_.end() ? nullptr : &it->second;
}

Status Servers::Join(size_t runner, int64_t key, ServerOffer offer, int gpus_per_trial,
                     std::ostream* log) {
  std::string name = offer.name;
  auto taken = [&](const std::string& n) {
    return std::any_of(servers_.begin(), servers_.end(),
                       [&](const auto& s) { return s.second.name == n; });
  };
  if (taken(name)) {
    int k = 2;
    while (taken(offer.name + "#" + std::to_string(k))) ++k;
    name = offer.name + "#" + std::to_string(k);
    if (log != nullptr) {
      *log << "sweep: agent '" << offer.name << "' (id " << key << ") is '" << name
           << "' in placements: another server has its name\n";
    }
  }
  const int id = next_id_++;
  Status added = Status::Ok();
  if (offer.slots.empty()) {
    added = Status::InvalidArgument(name + ": offers no slot");
  } else {
    executor::Server server;
    server.id = id;
    if (offer.slots[0].gpu) {
      for (const executor::Slot& slot : offer.slots) server.link_group.push_back(slot.link_group);
    } else {
      server.cpu_slots = static_cast<int>(offer.slots.size());
    }
    added = packer_->AddServer(server);
  }
  if (!added.ok()) {
    if (offer.this_machine) return added;
    if (log != nullptr)
      *log << "sweep: agent " << offer.name << " not used: " << added.message() << "\n";
    return Status::Ok();
  }
  said_no_server_ = false;
  const bool this_machine = offer.this_machine;
  servers_[id] = ServerInfo{
      std::move(name), std::move(offer.slots), std::move(offer.folder), this_machine, runner, key};
  if (!this_machine && log != nullptr && gpus_per_trial > packer_->largest_server()) {
    *log << "sweep: trials need " << gpus_per_trial
         << " slots on one server; waiting for an agent that has them\n";
  }
  return Status::Ok();
}

void Servers::Draining(size_t runner, int64_t key) {
  for (const auto& [id, server] : servers_) {
    if (server.runner == runner && server.key == key) (void)packer_->RemoveServer(id);
  }
}

void Servers::Lost(size_t runner, int64_t key) {
  for (auto it = servers_.begin(); it != servers_.end(); ++it) {
    if (it->second.runner == runner && it->second.key == key) {
      (void)packer_->RemoveServer(it->first);
      servers_.erase(it);
      break;
    }
  }
}

void Servers::Retire(int id, const std::string& why, std::ostream* log, bool live_status) {
  auto it = servers_.find(id);
  if (it == servers_.end() || !packer_->has_server(id)) return;
  (void)packer_->RemoveServer(id);
  if (log != nullptr) {
    *log << (live_status ? "\n" : "") << "sweep: no more trials on " << it->second.name << ": "
         << why << "\n";
  }
}

std::string Servers::Describe(const executor::Placement& where) const {
  const ServerInfo& server = servers_.at(where.server);
  std::string out = server.name + ":";
  for (size_t i = 0; i < where.gpus.size(); ++i) {
    out += (i > 0 ? "," : "") + server.slots[where.gpus[i]].name;
  }
  return out;
}

bool Servers::TakeNoServerNotice() {
  if (said_no_server_) return false;
  said_no_server_ = true;
  return true;
}

}  // namespace sweep
