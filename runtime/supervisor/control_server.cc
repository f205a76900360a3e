// runtime/supervisor/control_server.cc — Boost.Asio implementation of ControlServer.
//
// Everything in ControlServerCore and ControlConnection runs on the io thread: the connection
// set, the rank -> connection table and each connection's buffers are touched by that thread
// only.
// `mu` guards the state table and counters that other threads read (Snapshot and friends).
// Events are built under no lock and delivered after the state they describe is updated, so
// a callback that calls Snapshot() sees it.
#include "runtime/supervisor/control_server.h"

#include <algorithm>
#include <atomic>
#include <boost/asio.hpp>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <mutex>
#include <set>
#include <thread>

#include "runtime/core/check.h"

namespace tessera {
namespace {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;
using Clock = std::chrono::steady_clock;

// A registered rank that stops reading its commands has this many frames queued at most
// before the server gives up on it (commands are rare; a backlog means it is wedged).
constexpr size_t kMaxQueuedFrames = 1024;

}  // namespace

const char* ControlEventKindName(ControlEventKind kind) {
  switch (kind) {
    case ControlEventKind::kRegistered:
      return "registered";
    case ControlEventKind::kHeartbeat:
      return "heartbeat";
    case ControlEventKind::kCommit:
      return "commit";
    case ControlEventKind::kBye:
      return "bye";
    case ControlEventKind::kDisconnected:
      return "disconnected";
    case ControlEventKind::kRejected:
      return "rejected";
    case ControlEventKind::kCatalog:
      return "catalog";
  }
  return "unknown";
}

class ControlConnection;

// The server's state and logic; ControlServer::Impl (private) is this under the public name.
struct ControlServerCore {
  ControlServerOptions options;
  ControlServer::EventCallback on_event;

  asio::io_context io;
  tcp::acceptor acceptor{io};
  asio::steady_timer accept_retry{io};
  std::thread thread;
  uint16_t port = 0;
  std::atomic<bool> stopping{false};
  std::once_flag stop_once;

  mutable std::mutex mu;
  std::vector<RankState> ranks;  // guarded by mu
  int64_t rejected = 0;          // guarded by mu

  // io thread only.
  std::set<std::shared_ptr<ControlConnection>> connections;
  std::vector<ControlConnection*> owner;  // rank -> its registered connection, or nullptr
  int pending = 0;                        // accepted, not yet registered

  void DoAccept();
  void OnFrame(const std::shared_ptr<ControlConnection>& c, const std::string& body);
  void Authenticate(const std::shared_ptr<ControlConnection>& c, const HelloMsg& hello);
  void Reject(const std::shared_ptr<ControlConnection>& c, int rank, std::string reason);
  void Disconnect(const std::shared_ptr<ControlConnection>& c, std::string reason);
  void Emit(const ControlEvent& e) {
    if (!stopping.load() && on_event) on_event(e);
  }
};

class ControlConnection : public std::enable_shared_from_this<ControlConnection> {
 public:
  ControlConnection(ControlServerCore& impl, tcp::socket socket)
      : impl_(impl), socket_(std::move(socket)), hello_timer_(impl.io) {
    boost::system::error_code ec;
    tcp::endpoint ep = socket_.remote_endpoint(ec);
    peer_ = ec ? "unknown" : ep.address().to_string() + ":" + std::to_string(ep.port());
    socket_.set_option(tcp::no_delay(true), ec);
  }

  void Begin() {
    auto self = shared_from_this();
    hello_timer_.expires_after(std::chrono::milliseconds(impl_.options.hello_timeout_ms));
    hello_timer_.async_wait([self](const boost::system::error_code& ec) {
      if (ec || self->closed_ || self->rank_ >= 0) return;
      self->impl_.Reject(
          self, -1,
          "no hello within " + std::to_string(self->impl_.options.hello_timeout_ms) + " ms");
    });
    ReadHeader();
  }

  void Send(std::shared_ptr<const std::string> frame) {
    if (closed_) return;
    if (out_.size() >= kMaxQueuedFrames) {
      impl_.Disconnect(shared_from_this(), "rank is not reading its commands");
      return;
    }
    out_.push_back(std::move(frame));
    if (out_.size() == 1) DoWrite();
  }

  // Closes the socket and cancels the timer; reports nothing (the caller does).
  void CloseSocket() {
    if (closed_) return;
    closed_ = true;
    boost::system::error_code ec;
    hello_timer_.cancel();
    socket_.shutdown(tcp::socket::shutdown_both, ec);
    socket_.close(ec);
  }

  const std::string& peer() const { return peer_; }
  bool closed() const { return closed_; }
  int rank_ = -1;  // >= 0 once registered
  bool said_bye_ = false;
  int exit_code_ = -1;

 private:
  void ReadHeader() {
    auto self = shared_from_this();
    asio::async_read(socket_, asio::buffer(header_),
                     [self](const boost::system::error_code& ec, size_t) {
                       if (ec) return self->OnReadError(ec);
                       Result<size_t> len = DecodeFrameLength(self->header_);
                       if (!len.ok()) return self->OnProtocolError(len.status().message());
                       self->body_.resize(*len);
                       self->ReadBody();
                     });
  }

  void ReadBody() {
    auto self = shared_from_this();
    asio::async_read(socket_, asio::buffer(body_),
                     [self](const boost::system::error_code& ec, size_t) {
                       if (ec) return self->OnReadError(ec);
                       self->impl_.OnFrame(self, self->body_);
                       if (!self->closed_) self->ReadHeader();
                     });
  }

  void DoWrite() {
    auto self = shared_from_this();
    asio::async_write(socket_, asio::buffer(*out_.front()),
                      [self](const boost::system::error_code& ec, size_t) {
                        if (self->closed_) return;
                        if (ec) return self->OnReadError(ec);
                        self->out_.pop_front();
                        if (!self->out_.empty()) self->DoWrite();
                      });
  }

  void OnReadError(const boost::system::error_code& ec) {
    if (closed_ || impl_.stopping.load()) return;
    const std::string how =
        ec == asio::error::eof ? "connection closed by peer" : "connection error: " + ec.message();
    if (rank_ >= 0) {
      impl_.Disconnect(shared_from_this(), how);
    } else {
      impl_.Reject(shared_from_this(), -1, how + " before hello");
    }
  }

  void OnProtocolError(const std::string& what) {
    if (closed_) return;
    if (rank_ >= 0) {
      impl_.Disconnect(shared_from_this(), "protocol error: " + what);
    } else {
      impl_.Reject(shared_from_this(), -1, "protocol error: " + what);
    }
  }

  ControlServerCore& impl_;
  tcp::socket socket_;
  asio::steady_timer hello_timer_;
  std::string peer_;
  unsigned char header_[kControlFrameHeaderBytes] = {};
  std::string body_;
  bool closed_ = false;
  std::deque<std::shared_ptr<const std::string>> out_;
};

void ControlServerCore::DoAccept() {
  acceptor.async_accept([this](const boost::system::error_code& ec, tcp::socket socket) {
    if (stopping.load() || ec == asio::error::operation_aborted) return;
    if (ec) {
      // Out of descriptors and the like: retry shortly instead of spinning on the error.
      accept_retry.expires_after(std::chrono::milliseconds(50));
      accept_retry.async_wait([this](const boost::system::error_code& e) {
        if (!e && !stopping.load()) DoAccept();
      });
      return;
    }
    auto c = std::make_shared<ControlConnection>(*this, std::move(socket));
    connections.insert(c);
    ++pending;
    if (pending > options.max_pending_connections) {
      Reject(c, -1,
             "too many unregistered connections (" +
                 std::to_string(options.max_pending_connections) + ")");
    } else {
      c->Begin();
    }
    DoAccept();
  });
}

void ControlServerCore::OnFrame(const std::shared_ptr<ControlConnection>& c,
                                const std::string& body) {
  Result<RankMessage> decoded = DecodeRankMessage(body);
  const bool registered = c->rank_ >= 0;
  if (!decoded.ok()) {
    const std::string reason = "protocol error: " + decoded.status().message();
    return registered ? Disconnect(c, reason) : Reject(c, -1, reason);
  }
  const RankMessage& m = *decoded;
  if (!registered) {
    if (m.type != RankMessageType::kHello) return Reject(c, -1, "first frame is not a hello");
    return Authenticate(c, m.hello);
  }
  ControlEvent e;
  e.rank = c->rank_;
  e.peer = c->peer();
  e.time = Clock::now();
  {
    std::lock_guard<std::mutex> lock(mu);
    RankState& s = ranks[c->rank_];
    switch (m.type) {
      case RankMessageType::kHello:
        break;  // handled below, outside the lock
      case RankMessageType::kHeartbeat:
        s.last_heartbeat = e.time;
        ++s.heartbeats;
        s.step = m.heartbeat.step;
        s.phase = m.heartbeat.phase;
        s.collective_seq = m.heartbeat.collective_seq;
        s.compute_ms = m.heartbeat.compute_ms;
        e.kind = ControlEventKind::kHeartbeat;
        e.step = s.step;
        e.phase = s.phase;
        e.collective_seq = s.collective_seq;
        e.compute_ms = s.compute_ms;
        break;
      case RankMessageType::kCommit:
        s.last_commit_step = std::max(s.last_commit_step, m.commit.step);
        e.kind = ControlEventKind::kCommit;
        e.step = m.commit.step;
        break;
      case RankMessageType::kBye:
        c->said_bye_ = true;
        c->exit_code_ = m.bye.exit_code;
        s.said_bye = true;
        s.exit_code = m.bye.exit_code;
        e.kind = ControlEventKind::kBye;
        e.exit_code = m.bye.exit_code;
        break;
      case RankMessageType::kCatalog:
        // Handed to the event callback as it is: the supervisor's catalog owner performs it.
        e.kind = ControlEventKind::kCatalog;
        e.catalog = m.catalog;
        break;
    }
  }
  if (m.type == RankMessageType::kHello) return Disconnect(c, "protocol error: second hello");
  Emit(e);
}

void ControlServerCore::Authenticate(const std::shared_ptr<ControlConnection>& c,
                                     const HelloMsg& h) {
  // The secret first: until it matches, nothing the peer claims (run, rank) is believed.
  if (!ConstantTimeEquals(h.secret, options.secret)) return Reject(c, -1, "wrong secret");
  if (h.run_id != options.run_id) {
    return Reject(c, h.rank, "run_id \"" + h.run_id + "\" is not this run's");
  }
  if (h.incarnation != options.incarnation) {
    return Reject(c, h.rank,
                  "stale incarnation " + std::to_string(h.incarnation) + " (current " +
                      std::to_string(options.incarnation) + ")");
  }
  if (h.world_size != options.world_size || h.rank >= options.world_size) {
    return Reject(c, h.rank,
                  "rank " + std::to_string(h.rank) + " of world " + std::to_string(h.world_size) +
                      " does not fit world size " + std::to_string(options.world_size));
  }
  if (owner[h.rank] != nullptr) {
    return Reject(c, h.rank,
                  "duplicate rank " + std::to_string(h.rank) + ": already connected from " +
                      owner[h.rank]->peer());
  }
  owner[h.rank] = c.get();
  c->rank_ = h.rank;
  --pending;
  ControlEvent e;
  e.kind = ControlEventKind::kRegistered;
  e.rank = h.rank;
  e.peer = c->peer();
  e.time = Clock::now();
  {
    std::lock_guard<std::mutex> lock(mu);
    RankState& s = ranks[h.rank];
    s.connected = true;
    s.ever_registered = true;
    s.pid = h.pid;
    s.host = h.host;
    s.registered_at = e.time;
    s.said_bye = false;
    s.exit_code = -1;
  }
  Emit(e);
}

void ControlServerCore::Reject(const std::shared_ptr<ControlConnection>& c, int rank,
                               std::string reason) {
  if (c->closed()) return;
  {
    std::lock_guard<std::mutex> lock(mu);
    ++rejected;  // counted before the peer can observe the close
  }
  c->CloseSocket();
  connections.erase(c);
  --pending;
  ControlEvent e;
  e.kind = ControlEventKind::kRejected;
  e.rank = rank;
  e.peer = c->peer();
  e.reason = std::move(reason);
  e.time = Clock::now();
  Emit(e);
}

void ControlServerCore::Disconnect(const std::shared_ptr<ControlConnection>& c,
                                   std::string reason) {
  if (c->closed()) return;
  c->CloseSocket();
  connections.erase(c);
  ControlEvent e;
  e.kind = ControlEventKind::kDisconnected;
  e.rank = c->rank_;
  e.peer = c->peer();
  e.reason = std::move(reason);
  e.time = Clock::now();
  e.exit_code = c->said_bye_ ? c->exit_code_ : -1;
  if (owner[c->rank_] == c.get()) {
    owner[c->rank_] = nullptr;
    std::lock_guard<std::mutex> lock(mu);
    ranks[c->rank_].connected = false;
    ranks[c->rank_].disconnected_at = e.time;
  }
  Emit(e);
}

struct ControlServer::Impl : ControlServerCore {};

Result<std::unique_ptr<ControlServer>> ControlServer::Start(const ControlServerOptions& options,
                                                            EventCallback on_event) {
  if (options.run_id.empty()) return InvalidArgument("control server: run_id is empty");
  if (options.secret.empty() || options.secret.size() > kControlMaxSecretBytes) {
    return InvalidArgument("control server: secret must be 1.." +
                           std::to_string(kControlMaxSecretBytes) + " bytes");
  }
  if (options.incarnation < 0) return InvalidArgument("control server: incarnation < 0");
  if (options.world_size < 1 || options.world_size > kControlMaxWorldSize) {
    return InvalidArgument("control server: world_size " + std::to_string(options.world_size) +
                           " outside [1, " + std::to_string(kControlMaxWorldSize) + "]");
  }
  if (options.hello_timeout_ms < 1 || options.hello_timeout_ms > 600000) {
    return InvalidArgument("control server: hello_timeout_ms outside [1, 600000]");
  }
  if (options.max_pending_connections < 1) {
    return InvalidArgument("control server: max_pending_connections < 1");
  }
  auto impl = std::make_unique<Impl>();
  impl->options = options;
  impl->on_event = std::move(on_event);
  impl->ranks.resize(options.world_size);
  for (int r = 0; r < options.world_size; ++r) impl->ranks[r].rank = r;
  impl->owner.assign(options.world_size, nullptr);

  boost::system::error_code ec;
  const asio::ip::address addr = asio::ip::make_address(options.bind_address, ec);
  if (ec) {
    return InvalidArgument("control server: bind address \"" + options.bind_address +
                           "\" is not an IP address");
  }
  const tcp::endpoint ep(addr, options.port);
  const std::string where = options.bind_address + ":" + std::to_string(options.port);
  impl->acceptor.open(ep.protocol(), ec);
  if (!ec) impl->acceptor.set_option(tcp::acceptor::reuse_address(true), ec);
  if (!ec) impl->acceptor.bind(ep, ec);
  if (!ec) impl->acceptor.listen(asio::socket_base::max_listen_connections, ec);
  if (ec) return IoError("control server: cannot listen on " + where + ": " + ec.message());
  impl->port = impl->acceptor.local_endpoint(ec).port();
  if (ec) return IoError("control server: " + ec.message());

  impl->DoAccept();
  Impl* raw = impl.get();
  impl->thread = std::thread([raw] {
    try {
      raw->io.run();
    } catch (const std::exception& e) {
      // Handlers do not throw by design; a bad_alloc here leaves the run without a control
      // plane, which the supervisor must see as loudly as a crash.
      std::fprintf(stderr, "tessera: control server io thread died: %s\n", e.what());
      std::abort();
    }
  });
  return std::unique_ptr<ControlServer>(new ControlServer(std::move(impl)));
}

ControlServer::ControlServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

ControlServer::~ControlServer() { Stop(); }

uint16_t ControlServer::port() const { return impl_->port; }

std::vector<RankState> ControlServer::Snapshot() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->ranks;
}

int64_t ControlServer::rejected_connections() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->rejected;
}

int ControlServer::Broadcast(SupervisorCommand cmd) {
  int connected = 0;
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    for (const RankState& s : impl_->ranks) connected += s.connected ? 1 : 0;
  }
  auto frame = std::make_shared<const std::string>(EncodeCommand(cmd));
  Impl* impl = impl_.get();
  asio::post(impl->io, [impl, frame] {
    for (ControlConnection* c : impl->owner) {
      if (c != nullptr) c->Send(frame);
    }
  });
  return connected;
}

void ControlServer::Stop() {
  std::call_once(impl_->stop_once, [this] {
    Impl* impl = impl_.get();
    TESSERA_CHECK_MSG(std::this_thread::get_id() != impl->thread.get_id(),
                      "ControlServer::Stop called from its own event callback");
    impl->stopping.store(true);
    // Closing everything on the io thread completes every pending operation with
    // operation_aborted; nothing re-arms once `stopping` is set, so run() returns.
    asio::post(impl->io, [impl] {
      boost::system::error_code ec;
      impl->acceptor.close(ec);
      impl->accept_retry.cancel();
      for (const auto& c : impl->connections) c->CloseSocket();
      impl->connections.clear();
      impl->owner.assign(impl->owner.size(), nullptr);
    });
    if (impl->thread.joinable()) impl->thread.join();
  });
}

}  // namespace tessera
