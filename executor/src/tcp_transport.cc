// The TCP Transport on Boost.Asio. Asio error codes become Status here, once, naming the peer.
// Writes: bytes queued while a write is in flight wait in `pending_` and go out together in
// the next write, so many small frames cost one system call.
#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/write.hpp>

#include "executor/transport.h"

namespace sweep::executor::net {

namespace asio = boost::asio;
using asio::ip::tcp;

namespace {

constexpr size_t kReadBytes = 64 * 1024;
constexpr auto kCloseFlushTimeout = std::chrono::seconds(1);

std::string Describe(const tcp::endpoint& e) {
  const auto a = e.address();
  std::string host = a.is_v6() ? "[" + a.to_string() + "]" : a.to_string();
  return host + ":" + std::to_string(e.port());
}

class TcpConnection : public Connection, public std::enable_shared_from_this<TcpConnection> {
 public:
  explicit TcpConnection(tcp::socket socket)
      : socket_(std::move(socket)), close_timer_(socket_.get_executor()) {
    boost::system::error_code ec;
    socket_.set_option(tcp::no_delay(true), ec);
    auto remote = socket_.remote_endpoint(ec);
    peer_ = ec ? "unknown peer" : Describe(remote);
  }

  void Start(DataHandler on_data, CloseHandler on_close) override {
    on_data_ = std::move(on_data);
    on_close_ = std::move(on_close);
    Read();
  }

  void Send(std::string bytes) override {
    if (closing_ || closed_) return;
    if (pending_.empty()) {
      pending_ = std::move(bytes);
    } else {
      pending_ += bytes;
    }
    if (!writing_) Write();
  }

  void Close() override {
    if (closing_ || closed_) return;
    closing_ = true;
    if (!writing_) {
      Shut(Status::Ok());
      return;
    }
    // Let the queued bytes go out, but not forever (the peer may not read).
    close_timer_.expires_after(kCloseFlushTimeout);
    close_timer_.async_wait([self = shared_from_this()](const boost::system::error_code& ec) {
      if (!ec) self->Shut(Status::Ok());
    });
  }

  const std::string& peer() const override { return peer_; }

 private:
  void Read() {
    socket_.async_read_some(
        asio::buffer(buffer_, sizeof buffer_),
        [self = shared_from_this()](const boost::system::error_code& ec, size_t n) {
          if (ec) {
            self->Shut(ec == asio::error::eof
                           ? Status::IoError(self->peer_ + " closed the connection")
                           : Status::IoError(self->peer_ + ": " + ec.message()));
            return;
          }
          if (self->closed_) return;
          self->on_data_(self->buffer_, n);
          if (!self->closed_) self->Read();
        });
  }

  void Write() {
    writing_ = true;
    writing_buffer_.swap(pending_);
    pending_.clear();
    asio::async_write(socket_, asio::buffer(writing_buffer_),
                      [self = shared_from_this()](const boost::system::error_code& ec, size_t) {
                        self->writing_ = false;
                        self->writing_buffer_.clear();
                        if (ec) {
                          self->Shut(Status::IoError(self->peer_ + ": " + ec.message()));
                          return;
                        }
                        if (!self->pending_.empty() && !self->closed_) {
                          self->Write();
                        } else if (self->closing_) {
                          self->Shut(Status::Ok());
                        }
                      });
  }

  // Closes the socket and reports the end once. A local Close reports "closed".
  void Shut(const Status& why) {
    if (closed_) return;
    closed_ = true;
    boost::system::error_code ec;
    close_timer_.cancel();
    socket_.shutdown(tcp::socket::shutdown_both, ec);
    socket_.close(ec);
    auto handler = std::move(on_close_);
    on_data_ = nullptr;
    if (handler) handler(why.ok() ? Status::Aborted("closed") : why);
  }

  tcp::socket socket_;
  asio::steady_timer close_timer_;
  std::string peer_;
  DataHandler on_data_;
  CloseHandler on_close_;
  char buffer_[kReadBytes];
  std::string pending_;
  std::string writing_buffer_;
  bool writing_ = false;
  bool closing_ = false;
  bool closed_ = false;
};

class TcpTransport : public Transport {
 public:
  explicit TcpTransport(asio::io_context& io) : io_(io), acceptor_(io), retry_(io) {}

  Result<int> Listen(const std::string& host, int port, AcceptHandler on_accept) override {
    boost::system::error_code ec;
    const std::string where = host + ":" + std::to_string(port);
    tcp::resolver resolver(io_);
    auto results = resolver.resolve(host, std::to_string(port),
                                    tcp::resolver::passive | tcp::resolver::numeric_service, ec);
    if (ec || results.empty()) {
      return Status::InvalidArgument("cannot listen on " + where + ": " +
                                     (ec ? ec.message() : "no such address"));
    }
    tcp::endpoint endpoint = results.begin()->endpoint();
    acceptor_.open(endpoint.protocol(), ec);
    if (!ec) acceptor_.set_option(tcp::acceptor::reuse_address(true), ec);
    if (!ec) acceptor_.bind(endpoint, ec);
    if (!ec) acceptor_.listen(asio::socket_base::max_listen_connections, ec);
    if (ec) {
      boost::system::error_code ignored;
      acceptor_.close(ignored);
      return Status::IoError("cannot listen on " + where + ": " + ec.message());
    }
    on_accept_ = std::move(on_accept);
    Accept();
    return static_cast<int>(acceptor_.local_endpoint().port());
  }

  void StopListening() override {
    boost::system::error_code ec;
    acceptor_.close(ec);
    retry_.cancel();
  }

  void Connect(const std::string& host, int port, ConnectHandler done) override {
    auto resolver = std::make_shared<tcp::resolver>(io_);
    const std::string where = host + ":" + std::to_string(port);
    resolver->async_resolve(
        host, std::to_string(port),
        [this, resolver, where, done = std::move(done)](
            const boost::system::error_code& ec, tcp::resolver::results_type results) mutable {
          if (ec) {
            done(Status::IoError("cannot resolve " + where + ": " + ec.message()));
            return;
          }
          auto socket = std::make_shared<tcp::socket>(io_);
          asio::async_connect(
              *socket, results,
              [socket, where, done = std::move(done)](const boost::system::error_code& cec,
                                                      const tcp::endpoint&) {
                if (cec) {
                  done(Status::IoError("cannot connect to " + where + ": " + cec.message()));
                  return;
                }
                done(std::shared_ptr<Connection>(
                    std::make_shared<TcpConnection>(std::move(*socket))));
              });
        });
  }

 private:
  void Accept() {
    acceptor_.async_accept([this](const boost::system::error_code& ec, tcp::socket socket) {
      if (ec == asio::error::operation_aborted || !acceptor_.is_open()) return;
      if (!ec) {
        on_accept_(std::make_shared<TcpConnection>(std::move(socket)));
        Accept();
        return;
      }
      // Out of file descriptors or memory: try again shortly instead of spinning.
      retry_.expires_after(std::chrono::milliseconds(100));
      retry_.async_wait([this](const boost::system::error_code& wait_ec) {
        if (!wait_ec && acceptor_.is_open()) Accept();
      });
    });
  }

  asio::io_context& io_;
  tcp::acceptor acceptor_;
  asio::steady_timer retry_;
  AcceptHandler on_accept_;
};

}  // namespace

std::unique_ptr<Transport> MakeTcpTransport(asio::io_context& io) {
  return std::make_unique<TcpTransport>(io);
}

}  // namespace sweep::executor::net
