// The in-memory network. Each connection is a Link with two ends; an end's inbox holds what
// its peer sent with the time it is due, so added delay keeps order. Ends run their handlers
// on their own io_context; the Link's mutex guards inboxes and the open flag, which both
// io threads and the test thread touch.
#include "executor/memory_transport.h"

#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>

#include <chrono>
#include <deque>

namespace sweep::executor::net {

namespace asio = boost::asio;
using Clock = std::chrono::steady_clock;

class MemoryEnd;

struct MemoryNetwork::Listener {
  asio::io_context* io = nullptr;
  Transport::AcceptHandler on_accept;
};

struct MemoryNetwork::Link {
  std::mutex mu;
  bool open = true;
  std::weak_ptr<MemoryEnd> ends[2];  // [0] the connector's, [1] the listener's
  Clock::time_point last_due[2];     // latest due time queued towards end [i]
  std::string addresses[2];          // how each end names its peer
};

namespace {

// Which end receives a send in `direction`.
int Receiver(Direction direction) { return direction == Direction::kToListener ? 1 : 0; }

}  // namespace

class MemoryEnd : public Connection, public std::enable_shared_from_this<MemoryEnd> {
 public:
  MemoryEnd(asio::io_context& io, MemoryNetwork* network, std::shared_ptr<MemoryNetwork::Link> link,
            int side)
      : io_(io), timer_(io), network_(network), link_(std::move(link)), side_(side) {}

  void Start(DataHandler on_data, CloseHandler on_close) override {
    on_data_ = std::move(on_data);
    on_close_ = std::move(on_close);
    started_ = true;
    Pump();
  }

  void Send(std::string bytes) override {
    if (closed_) return;
    const Direction d = side_ == 0 ? Direction::kToListener : Direction::kToConnector;
    int copies = 1;
    int delay_ms = 0;
    network_->Decide(d, &copies, &delay_ms);
    for (int i = 0; i < copies; ++i)
      Transmit(d, i + 1 < copies ? bytes : std::move(bytes), delay_ms);
  }

  void Close() override {
    if (closed_) return;
    // Graceful: what was sent arrives first, then the close.
    std::shared_ptr<MemoryEnd> peer;
    {
      std::lock_guard lock(link_->mu);
      if (link_->open) {
        link_->open = false;
        peer = link_->ends[1 - side_].lock();
        if (peer) peer->inbox_.push_back({link_->last_due[1 - side_], "", /*close=*/true});
      }
    }
    if (peer) peer->Wake();
    Finish(Status::Aborted("closed"));
  }

  const std::string& peer() const override { return link_->addresses[side_]; }

  // Queues bytes towards the other end (called on the sender's thread, or the test thread).
  void Transmit(Direction d, std::string bytes, int delay_ms) {
    const int to = Receiver(d);
    std::shared_ptr<MemoryEnd> receiver;
    {
      std::lock_guard lock(link_->mu);
      if (!link_->open) return;
      receiver = link_->ends[to].lock();
      if (!receiver) return;
      Clock::time_point due = Clock::now() + std::chrono::milliseconds(delay_ms);
      if (due < link_->last_due[to]) due = link_->last_due[to];
      link_->last_due[to] = due;
      receiver->inbox_.push_back({due, std::move(bytes), false});
    }
    receiver->Wake();
  }

  // An abrupt failure: both ends see the close now; what was in flight is lost.
  void Break() {
    {
      std::lock_guard lock(link_->mu);
      inbox_.clear();
    }
    asio::post(io_, [self = shared_from_this()] {
      self->Finish(Status::IoError(self->peer() + ": connection lost"));
    });
  }

  void Wake() {
    asio::post(io_, [self = shared_from_this()] { self->Pump(); });
  }

 private:
  struct Item {
    Clock::time_point due;
    std::string bytes;
    bool close = false;
  };

  // Delivers what is due, in order; arms the timer for the rest.
  void Pump() {
    while (started_ && !closed_) {
      Item item;
      {
        std::lock_guard lock(link_->mu);
        if (inbox_.empty()) return;
        if (inbox_.front().due > Clock::now()) {
          timer_.expires_at(inbox_.front().due);
          timer_.async_wait([self = shared_from_this()](const boost::system::error_code& ec) {
            if (!ec) self->Pump();
          });
          return;
        }
        item = std::move(inbox_.front());
        inbox_.pop_front();
      }
      if (item.close) {
        Finish(Status::IoError(peer() + " closed the connection"));
        return;
      }
      on_data_(item.bytes.data(), item.bytes.size());
    }
  }

  void Finish(const Status& why) {
    if (closed_) return;
    closed_ = true;
    {
      std::lock_guard lock(link_->mu);
      link_->open = false;
    }
    timer_.cancel();
    auto handler = std::move(on_close_);
    on_data_ = nullptr;
    if (handler) handler(why);
  }

  asio::io_context& io_;
  asio::steady_timer timer_;
  MemoryNetwork* network_;
  std::shared_ptr<MemoryNetwork::Link> link_;
  int side_;
  DataHandler on_data_;
  CloseHandler on_close_;
  bool started_ = false;
  bool closed_ = false;     // this end's own thread only
  std::deque<Item> inbox_;  // guarded by link_->mu
};

class MemoryTransport : public Transport {
 public:
  MemoryTransport(asio::io_context& io, MemoryNetwork* network) : io_(io), network_(network) {}
  ~MemoryTransport() override { StopListening(); }

  Result<int> Listen(const std::string& host, int port, AcceptHandler on_accept) override {
    listener_ = std::make_shared<MemoryNetwork::Listener>();
    listener_->io = &io_;
    listener_->on_accept = std::move(on_accept);
    return network_->AddListener(host, port, listener_);
  }

  void StopListening() override {
    if (listener_) network_->RemoveListener(listener_);
    listener_.reset();
  }

  void Connect(const std::string& host, int port, ConnectHandler done) override {
    const std::string address = host + ":" + std::to_string(port);
    std::string error;
    auto end = network_->Open(address, io_, &error);
    if (!end) {
      asio::post(io_, [done = std::move(done), error] { done(Status::IoError(error)); });
      return;
    }
    asio::post(io_, [done = std::move(done), end] { done(end); });
  }

 private:
  asio::io_context& io_;
  MemoryNetwork* network_;
  std::shared_ptr<MemoryNetwork::Listener> listener_;
};

std::unique_ptr<Transport> MemoryNetwork::MakeTransport(asio::io_context& io) {
  return std::make_unique<MemoryTransport>(io, this);
}

TransportFactory MemoryNetwork::Factory() {
  return [this](asio::io_context& io) { return MakeTransport(io); };
}

Result<int> MemoryNetwork::AddListener(const std::string& host, int port,
                                       std::shared_ptr<Listener> listener) {
  std::lock_guard lock(mu_);
  if (port == 0) port = next_port_++;
  const std::string address = host + ":" + std::to_string(port);
  for (const auto& [a, l] : listeners_) {
    if (a == address && !l.expired()) {
      return Status::IoError("cannot listen on " + address + ": Address already in use");
    }
  }
  listeners_.emplace_back(address, listener);
  return port;
}

void MemoryNetwork::RemoveListener(const std::shared_ptr<Listener>& listener) {
  std::lock_guard lock(mu_);
  std::erase_if(listeners_, [&](const auto& e) { return e.second.lock() == listener; });
}

std::shared_ptr<Connection> MemoryNetwork::Open(const std::string& address, asio::io_context& io,
                                                std::string* error) {
  std::shared_ptr<Listener> listener;
  std::shared_ptr<Link> link;
  {
    std::lock_guard lock(mu_);
    for (const auto& [a, l] : listeners_) {
      if (a == address) listener = l.lock();
    }
    if (!listener) {
      *error = "cannot connect to " + address + ": Connection refused";
      return nullptr;
    }
    link = std::make_shared<Link>();
    ++opened_;
    link->addresses[0] = address;
    link->addresses[1] = "memory-peer-" + std::to_string(opened_);
    std::erase_if(links_, [](const auto& w) { return w.expired(); });
    links_.push_back(link);
  }
  auto mine = std::make_shared<MemoryEnd>(io, this, link, 0);
  auto theirs = std::make_shared<MemoryEnd>(*listener->io, this, link, 1);
  {
    std::lock_guard lock(link->mu);
    link->ends[0] = mine;
    link->ends[1] = theirs;
  }
  asio::post(*listener->io, [listener, theirs] { listener->on_accept(theirs); });
  return mine;
}

void MemoryNetwork::Decide(Direction direction, int* copies, int* delay_ms) {
  std::lock_guard lock(mu_);
  const Faults& f = faults_[static_cast<int>(direction)];
  std::uniform_real_distribution<double> u(0, 1);
  *copies = 1;
  if (f.drop > 0 && u(rng_) < f.drop) *copies = 0;
  if (*copies == 1 && f.duplicate > 0 && u(rng_) < f.duplicate) *copies = 2;
  *delay_ms = f.delay_ms;
}

void MemoryNetwork::SetFaults(Direction direction, Faults faults) {
  std::lock_guard lock(mu_);
  faults_[static_cast<int>(direction)] = faults;
}

std::vector<std::shared_ptr<MemoryNetwork::Link>> MemoryNetwork::LiveLinks() const {
  std::vector<std::shared_ptr<Link>> links;
  std::lock_guard lock(mu_);
  for (const auto& w : links_) {
    if (auto l = w.lock()) links.push_back(std::move(l));
  }
  return links;
}

int MemoryNetwork::InjectGarbage(Direction direction, const std::string& bytes) {
  const std::vector<std::shared_ptr<Link>> links = LiveLinks();
  int n = 0;
  for (const auto& link : links) {
    std::shared_ptr<MemoryEnd> sender;
    {
      std::lock_guard lock(link->mu);
      if (!link->open) continue;
      sender = link->ends[1 - Receiver(direction)].lock();
    }
    if (!sender) continue;
    sender->Transmit(direction, bytes, 0);
    ++n;
  }
  return n;
}

int MemoryNetwork::DisconnectAll() {
  const std::vector<std::shared_ptr<Link>> links = LiveLinks();
  int n = 0;
  for (const auto& link : links) {
    std::shared_ptr<MemoryEnd> ends[2];
    {
      std::lock_guard lock(link->mu);
      if (!link->open) continue;
      link->open = false;
      ends[0] = link->ends[0].lock();
      ends[1] = link->ends[1].lock();
    }
    ++n;
    for (auto& e : ends) {
      if (e) e->Break();
    }
  }
  return n;
}

int MemoryNetwork::connections_opened() const {
  std::lock_guard lock(mu_);
  return opened_;
}

int MemoryNetwork::connections_open() const {
  const std::vector<std::shared_ptr<Link>> links = LiveLinks();
  int n = 0;
  for (const auto& link : links) {
    std::lock_guard lock(link->mu);
    n += link->open ? 1 : 0;
  }
  return n;
}

}  // namespace sweep::executor::net
