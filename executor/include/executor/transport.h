// The network seam of the agent protocol: the hub and the agent read and write bytes only
// through Connection, and open connections only through Transport, so their logic runs the
// same over real TCP (MakeTcpTransport) and over the in-memory, fault-injecting network of
// memory_transport.h. Both run on a Boost.Asio io_context: every method must be called, and
// every handler runs, on the thread that runs that io_context. A Transport must outlive the
// io_context's last run; connections are shared_ptrs kept alive by their pending operations.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <string>

#include "base/status.h"

namespace boost::asio {
class io_context;
}  // namespace boost::asio

namespace sweep::executor::net {

class Connection {
 public:
  using DataHandler = std::function<void(const char* data, size_t size)>;
  // Called once, when the connection ends: the peer closed it, an error, or Close().
  using CloseHandler = std::function<void(const Status& why)>;

  virtual ~Connection() = default;
  // Starts delivering received bytes. Call once, before Send.
  virtual void Start(DataHandler on_data, CloseHandler on_close) = 0;
  // Queues bytes for sending, in order; returns at once. Ignored after Close.
  virtual void Send(std::string bytes) = 0;
  // Sends what is queued (waiting at most about a second), then closes; on_close follows.
  virtual void Close() = 0;
  // The peer's address, "1.2.3.4:5678", for log lines.
  virtual const std::string& peer() const = 0;
};

class Transport {
 public:
  using AcceptHandler = std::function<void(std::shared_ptr<Connection>)>;
  using ConnectHandler = std::function<void(Result<std::shared_ptr<Connection>>)>;

  virtual ~Transport() = default;
  // Listens on host:port (0: any free port) and returns the bound port; accepted
  // connections go to on_accept. One listener per Transport.
  virtual Result<int> Listen(const std::string& host, int port, AcceptHandler on_accept) = 0;
  virtual void StopListening() = 0;
  // Opens a connection; `done` gets it or the error (naming host:port).
  virtual void Connect(const std::string& host, int port, ConnectHandler done) = 0;
};

// Builds the transport a hub or an agent uses, on its own io_context.
using TransportFactory = std::function<std::unique_ptr<Transport>(boost::asio::io_context&)>;

// TCP with Boost.Asio: TCP_NODELAY, writes queued while one is in flight go out in one write.
std::unique_ptr<Transport> MakeTcpTransport(boost::asio::io_context& io);

}  // namespace sweep::executor::net
