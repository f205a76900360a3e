// runtime/supervisor/control_server.cc — Boost.Asio implementation of ControlServer.
//
// Everything in ControlServerCore, Listener and ControlConnection runs on the io thread: the
// connection set, the rank -> connection table, each listener's queue of unregistered
// connections and each connection's buffers are touched by that thread only.
// One connection code for both transports: the listeners are generic stream acceptors (TCP or
// Unix endpoint) and every connection a generic stream socket; only the peer's name and
// TCP_NODELAY depend on the transport.
// `mu` guards the state table and counters that other threads read (Snapshot and friends).
// Events are built under no lock and delivered after the state they describe is updated, so
// a callback that calls Snapshot() sees it.
#include "runtime/supervisor/control_server.h"

#include <algorithm>
#include <atomic>
#include <boost/asio.hpp>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <list>
#include <mutex>
#include <set>
#include <sys/socket.h>
#include <thread>

#include "runtime/core/check.h"
#include "runtime/supervisor/private_socket.h"

namespace tessera {
namespace {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;
using local = asio::local::stream_protocol;
using Stream = asio::generic::stream_protocol;
using Clock = std::chrono::steady_clock;

// A registered rank that stops reading its commands has this many frames queued at most
// before the server gives up on it (commands are rare; a backlog means it is wedged).
constexpr size_t kMaxQueuedFrames = 1024;

// A generic endpoint that holds an IPv4 or IPv6 address, as the TCP endpoint it is.
tcp::endpoint ToTcp(const Stream::endpoint& generic) {
  tcp::endpoint ep;
  const size_t n = std::min<size_t>(generic.size(), ep.capacity());
  std::memcpy(ep.data(), generic.data(), n);
  ep.resize(n);
  return ep;
}

// "address:port" of a TCP peer; "unix:pid=P,uid=U" of a Unix one (the kernel's credentials of
// the process that connected, SO_PEERCRED); "unknown" when the socket cannot say.
std::string PeerName(Stream::socket& socket, ControlTransport transport) {
  if (transport == ControlTransport::kUnix) {
    ucred cred{};
    socklen_t len = sizeof cred;
    if (getsockopt(socket.native_handle(), SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0) {
      return "unix:unknown";
    }
    return "unix:pid=" + std::to_string(cred.pid) + ",uid=" + std::to_string(cred.uid);
  }
  boost::system::error_code ec;
  const Stream::endpoint generic = socket.remote_endpoint(ec);
  if (ec) return "unknown";
  const tcp::endpoint ep = ToTcp(generic);
  return ep.address().to_string() + ":" + std::to_string(ep.port());
}

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

// One listening socket and the connections it accepted that have not registered yet, oldest
// first (the pending cap is per listener).
struct Listener {
  Listener(asio::io_context& io, ControlTransport t)
      : transport(t), acceptor(io), accept_retry(io) {}
  ControlTransport transport;
  asio::basic_socket_acceptor<Stream> acceptor;
  asio::steady_timer accept_retry;
  std::list<ControlConnection*> unregistered;
};

// The server's state and logic; ControlServer::Impl (private) is this under the public name.
struct ControlServerCore {
  ControlServerOptions options;
  ControlServer::EventCallback on_event;

  asio::io_context io;
  Listener tcp_listener{io, ControlTransport::kTcp};
  std::unique_ptr<Listener> unix_listener;  // null without options.unix_socket_parent
  PrivateSocketDir socket_dir;              // removed by Stop (and by its own destructor)
  std::thread thread;
  uint16_t port = 0;
  std::string unix_path;  // the socket's path; set before the io thread starts, then constant
  std::atomic<bool> stopping{false};
  std::once_flag stop_once;

  mutable std::mutex mu;
  std::vector<RankState> ranks;  // guarded by mu
  int64_t rejected = 0;          // guarded by mu

  // io thread only.
  std::set<std::shared_ptr<ControlConnection>> connections;
  std::vector<ControlConnection*> owner;  // rank -> its registered connection, or nullptr

  Status Listen(Listener& l, const Stream::endpoint& ep, const std::string& where);
  void DoAccept(Listener& l);
  void Admit(Listener& l, const std::shared_ptr<ControlConnection>& c);
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
  ControlConnection(ControlServerCore& impl, Listener& listener, Stream::socket socket)
      : impl_(impl), listener_(listener), socket_(std::move(socket)), hello_timer_(impl.io) {
    peer_ = PeerName(socket_, listener.transport);
    boost::system::error_code ec;
    if (listener.transport == ControlTransport::kTcp) socket_.set_option(tcp::no_delay(true), ec);
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
    socket_.shutdown(Stream::socket::shutdown_both, ec);
    socket_.close(ec);
  }

  // Joins / leaves its listener's queue of unregistered connections (the pending cap).
  void EnterPending() {
    pending_it_ = listener_.unregistered.insert(listener_.unregistered.end(), this);
    pending_ = true;
  }
  void LeavePending() {
    if (!pending_) return;
    listener_.unregistered.erase(pending_it_);
    pending_ = false;
  }

  const std::string& peer() const { return peer_; }
  ControlTransport transport() const { return listener_.transport; }
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
  Listener& listener_;
  Stream::socket socket_;
  asio::steady_timer hello_timer_;
  bool pending_ = false;
  std::list<ControlConnection*>::iterator pending_it_;
  std::string peer_;
  unsigned char header_[kControlFrameHeaderBytes] = {};
  std::string body_;
  bool closed_ = false;
  std::deque<std::shared_ptr<const std::string>> out_;
};

void ControlServerCore::DoAccept(Listener& l) {
  l.acceptor.async_accept([this, &l](const boost::system::error_code& ec, Stream::socket socket) {
    if (stopping.load() || ec == asio::error::operation_aborted) return;
    if (ec) {
      // Out of descriptors and the like: retry shortly instead of spinning on the error.
      l.accept_retry.expires_after(std::chrono::milliseconds(50));
      l.accept_retry.async_wait([this, &l](const boost::system::error_code& e) {
        if (!e && !stopping.load()) DoAccept(l);
      });
      return;
    }
    Admit(l, std::make_shared<ControlConnection>(*this, l, std::move(socket)));
    DoAccept(l);
  });
}

void ControlServerCore::Admit(Listener& l, const std::shared_ptr<ControlConnection>& c) {
  // At the cap the oldest unregistered connection goes, not the new one: a real rank sends its
  // hello right after connecting, so sockets held open and silent cannot keep it out.
  if (static_cast<int>(l.unregistered.size()) >= options.max_pending_connections) {
    const std::shared_ptr<ControlConnection> oldest = l.unregistered.front()->shared_from_this();
    Reject(oldest, -1,
           std::string("closed to make room: ") + std::to_string(options.max_pending_connections) +
               " unregistered " + ControlTransportName(l.transport) +
               " connections pending, this the oldest");
  }
  connections.insert(c);
  c->EnterPending();
  c->Begin();
}

Status ControlServerCore::Listen(Listener& l, const Stream::endpoint& ep,
                                 const std::string& where) {
  boost::system::error_code ec;
  l.acceptor.open(ep.protocol(), ec);
  if (!ec && l.transport == ControlTransport::kTcp) {
    l.acceptor.set_option(asio::socket_base::reuse_address(true), ec);
  }
  if (!ec) l.acceptor.bind(ep, ec);
  if (!ec) l.acceptor.listen(asio::socket_base::max_listen_connections, ec);
  if (ec) return IoError("control server: cannot listen on " + where + ": " + ec.message());
  return Status::Ok();
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
  e.transport = c->transport();
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
        if (!m.commit.memory) s.last_commit_step = std::max(s.last_commit_step, m.commit.step);
        e.kind = ControlEventKind::kCommit;
        e.step = m.commit.step;
        e.memory_tier = m.commit.memory;
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
  c->LeavePending();
  ControlEvent e;
  e.kind = ControlEventKind::kRegistered;
  e.rank = h.rank;
  e.transport = c->transport();
  e.peer = c->peer();
  e.time = Clock::now();
  {
    std::lock_guard<std::mutex> lock(mu);
    RankState& s = ranks[h.rank];
    s.connected = true;
    s.ever_registered = true;
    s.pid = h.pid;
    s.host = h.host;
    s.transport = c->transport();
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
  c->LeavePending();
  connections.erase(c);
  ControlEvent e;
  e.kind = ControlEventKind::kRejected;
  e.rank = rank;
  e.transport = c->transport();
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
  e.transport = c->transport();
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

namespace {

Status ValidateOptions(const ControlServerOptions& options) {
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
  return Status::Ok();
}

}  // namespace

Result<std::unique_ptr<ControlServer>> ControlServer::Start(const ControlServerOptions& options,
                                                            EventCallback on_event) {
  RETURN_IF_ERROR(ValidateOptions(options));
  boost::system::error_code ec;
  const asio::ip::address addr = asio::ip::make_address(options.bind_address, ec);
  if (ec) {
    return InvalidArgument("control server: bind address \"" + options.bind_address +
                           "\" is not an IP address");
  }
  auto impl = std::make_unique<Impl>();
  impl->options = options;
  impl->on_event = std::move(on_event);
  impl->ranks.resize(options.world_size);
  for (int r = 0; r < options.world_size; ++r) impl->ranks[r].rank = r;
  impl->owner.assign(options.world_size, nullptr);

  // On any error below `impl` goes out of scope: its listeners close and its socket
  // directory is removed, so a failed start leaves nothing behind.
  if (!options.unix_socket_parent.empty()) {
    ASSIGN_OR_RETURN(impl->socket_dir, PrivateSocketDir::Create(options.unix_socket_parent));
    impl->unix_listener = std::make_unique<Listener>(impl->io, ControlTransport::kUnix);
    impl->unix_path = impl->socket_dir.socket_path();
    const Stream::endpoint unix_ep{local::endpoint(impl->unix_path)};
    RETURN_IF_ERROR(impl->Listen(*impl->unix_listener, unix_ep, impl->unix_path));
  }
  const Stream::endpoint tcp_ep{tcp::endpoint(addr, options.port)};
  RETURN_IF_ERROR(impl->Listen(impl->tcp_listener, tcp_ep,
                               options.bind_address + ":" + std::to_string(options.port)));
  const Stream::endpoint bound = impl->tcp_listener.acceptor.local_endpoint(ec);
  if (ec) return IoError("control server: " + ec.message());
  impl->port = ToTcp(bound).port();

  impl->DoAccept(impl->tcp_listener);
  if (impl->unix_listener) impl->DoAccept(*impl->unix_listener);
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

const std::string& ControlServer::unix_socket_path() const { return impl_->unix_path; }

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
      for (Listener* l : {&impl->tcp_listener, impl->unix_listener.get()}) {
        if (l == nullptr) continue;
        l->acceptor.close(ec);
        l->accept_retry.cancel();
      }
      for (const auto& c : impl->connections) {
        c->LeavePending();
        c->CloseSocket();
      }
      impl->connections.clear();
      impl->owner.assign(impl->owner.size(), nullptr);
    });
    if (impl->thread.joinable()) impl->thread.join();
    impl->socket_dir.Remove();
  });
}

}  // namespace tessera
