// An in-memory network for tests of the hub and agent logic: listeners and connections live in
// one MemoryNetwork, each side on its own io_context, with faults injected on the way: dropped
// or duplicated sends, added delay (order kept), garbage bytes, and disconnects. One Send is
// the unit a fault applies to (the hub and the agent send one frame per Send).
// MemoryNetwork's methods are thread-safe; it must outlive every transport made from it.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <vector>

#include "executor/transport.h"

namespace sweep::executor::net {

// Which way bytes travel: from the side that connected (the agent) to the listener (the hub),
// or back.
enum class Direction { kToListener, kToConnector };

struct Faults {
  double drop = 0;       // probability that a send is lost
  double duplicate = 0;  // probability that a send arrives twice
  int delay_ms = 0;      // added to every send; order is kept
};

class MemoryNetwork {
 public:
  explicit MemoryNetwork(uint64_t seed = 1) : rng_(seed) {}
  MemoryNetwork(const MemoryNetwork&) = delete;
  MemoryNetwork& operator=(const MemoryNetwork&) = delete;

  // A transport whose handlers run on `io`. Listening addresses are "host:port" strings that
  // only this network knows; port 0 picks the next free number from 40000.
  std::unique_ptr<Transport> MakeTransport(boost::asio::io_context& io);
  // A factory for HubOptions / AgentOptions.
  TransportFactory Factory();

  // Applies to sends from now on, on every connection.
  void SetFaults(Direction direction, Faults faults);
  // Delivers `bytes` on every open connection, as if sent in `direction`. Returns how many
  // connections got them.
  int InjectGarbage(Direction direction, const std::string& bytes);
  // Closes every open connection, as a network failure would (both sides see the close).
  // Returns how many were open.
  int DisconnectAll();
  // Connections opened so far (accepted by a listener), and those still open.
  int connections_opened() const;
  int connections_open() const;

  // ---- used by the transport ----
  struct Link;
  struct Listener;
  // Opens a connection to the listener at `address`: the connector's end (its handlers on
  // `io`), or nullptr with `error` set.
  std::shared_ptr<Connection> Open(const std::string& address, boost::asio::io_context& io,
                                   std::string* error);
  Result<int> AddListener(const std::string& host, int port, std::shared_ptr<Listener> listener);
  void RemoveListener(const std::shared_ptr<Listener>& listener);
  // Decides the fate of one send: copies to deliver (0, 1 or 2) and the delay.
  void Decide(Direction direction, int* copies, int* delay_ms);

 private:
  // The links still alive, taken under mu_ and used after it: each has a lock of its own.
  std::vector<std::shared_ptr<Link>> LiveLinks() const;

  mutable std::mutex mu_;
  std::mt19937_64 rng_;
  Faults faults_[2];
  std::vector<std::pair<std::string, std::weak_ptr<Listener>>> listeners_;
  std::vector<std::weak_ptr<Link>> links_;
  int next_port_ = 40000;
  int opened_ = 0;
};

}  // namespace sweep::executor::net
