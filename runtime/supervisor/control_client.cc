// runtime/supervisor/control_client.cc — Boost.Asio implementation of ControlClient.
//
// Connect() drives connect/hello on the caller's thread (io_context run with a deadline
// timer), over the Unix socket first when it is given and passes CheckPrivateSocket, else (or
// when that fails) resolve/connect/hello over TCP; then it hands the io_context to the side thread. The
// socket is a generic stream socket, so everything after the connect is one code for both. From then on the socket,
// the write queue and the heartbeat timer are touched only by the side thread; other threads
// reach it through atomics and asio::post.
#include "runtime/supervisor/control_client.h"

#include <algorithm>
#include <atomic>
#include <boost/asio.hpp>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <future>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "runtime/supervisor/private_socket.h"

namespace tessera {
namespace {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;
using local = asio::local::stream_protocol;
using Stream = asio::generic::stream_protocol;

// A supervisor that has not drained this many queued frames is treated as gone.
constexpr size_t kMaxQueuedFrames = 1024;

int64_t UnixMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

}  // namespace

struct ControlClient::Impl {
  ControlClientOptions options;
  asio::io_context io;
  Stream::socket socket{io};
  ControlTransport transport = ControlTransport::kTcp;
  Status unix_status;  // why the Unix socket is not in use (OK when it is)
  asio::steady_timer heartbeat_timer{io};
  std::thread thread;

  std::atomic<int64_t> step{0};
  std::atomic<int> phase{static_cast<int>(RankPhase::kIdle)};
  std::atomic<int64_t> collective_seq{0};
  std::atomic<int64_t> compute_ms{-1};
  std::atomic<bool> checkpoint_requested{false};
  std::atomic<bool> stop_requested{false};
  std::atomic<bool> lost{false};
  std::atomic<bool> shut_down{false};
  mutable std::mutex mu;
  std::string lost_reason;  // guarded by mu

  // Side thread only.
  bool closed = false;
  bool closing_after_drain = false;  // bye queued: close once the queue is written
  std::deque<std::string> out;
  unsigned char header[kControlFrameHeaderBytes] = {};
  std::string body;
  std::promise<bool> bye_written;
  bool bye_signalled = false;
  std::vector<std::shared_ptr<std::promise<bool>>> flush_waiters;  // woken when `out` drains

  void SignalFlushed(bool written) {
    for (auto& w : flush_waiters) w->set_value(written);
    flush_waiters.clear();
  }

  // Wakes Shutdown() once: true when bye reached the socket, false when it never will.
  void SignalBye(bool written) {
    if (bye_signalled) return;
    bye_signalled = true;
    bye_written.set_value(written);
  }

  void Lose(const std::string& reason) {
    {
      std::lock_guard<std::mutex> lock(mu);
      if (lost_reason.empty()) lost_reason = reason;
    }
    lost.store(true);
    Close();
    if (closing_after_drain) SignalBye(false);
  }
  void Close() {
    if (closed) return;
    closed = true;
    SignalFlushed(false);
    boost::system::error_code ec;
    heartbeat_timer.cancel();
    socket.shutdown(Stream::socket::shutdown_both, ec);
    socket.close(ec);
  }

  void Enqueue(std::string frame) {
    if (closed) return;
    if (out.size() >= kMaxQueuedFrames) return Lose("supervisor is not reading");
    out.push_back(std::move(frame));
    if (out.size() == 1) DoWrite();
  }

  void DoWrite() {
    asio::async_write(socket, asio::buffer(out.front()),
                      [this](const boost::system::error_code& ec, size_t) {
                        if (closed) return;
                        if (ec) return Lose("write to supervisor failed: " + ec.message());
                        out.pop_front();
                        if (!out.empty()) return DoWrite();
                        SignalFlushed(true);
                        if (closing_after_drain) {
                          SignalBye(true);
                          Close();
                        }
                      });
  }

  // `final`: the last one before bye, never coalesced (the supervisor learns the final step).
  void SendHeartbeat(bool final = false) {
    if (closed || (!out.empty() && !final)) return;  // coalesce: the newest values go next tick
    HeartbeatMsg hb;
    // Acquire pairs with SetStep's release: a trainer that calls SetComputeMs before SetStep
    // never has a step's new number sent with the previous step's compute time.
    hb.step = step.load(std::memory_order_acquire);
    hb.phase = static_cast<RankPhase>(phase.load(std::memory_order_relaxed));
    hb.collective_seq = collective_seq.load(std::memory_order_relaxed);
    hb.compute_ms = compute_ms.load(std::memory_order_relaxed);
    hb.unix_ms = UnixMs();
    if (options.before_heartbeat) options.before_heartbeat(hb);
    Result<std::string> frame = EncodeHeartbeat(hb);
    if (frame.ok()) Enqueue(std::move(frame).value());
  }

  void ArmHeartbeat() {
    heartbeat_timer.expires_after(std::chrono::milliseconds(options.heartbeat_interval_ms));
    heartbeat_timer.async_wait([this](const boost::system::error_code& ec) {
      if (ec || closed || closing_after_drain) return;
      SendHeartbeat();
      ArmHeartbeat();
    });
  }

  void ReadHeader() {
    asio::async_read(socket, asio::buffer(header),
                     [this](const boost::system::error_code& ec, size_t) {
                       if (closed) return;
                       if (ec) {
                         return Lose(ec == asio::error::eof ? "supervisor closed the connection"
                                                            : "read failed: " + ec.message());
                       }
                       Result<size_t> len = DecodeFrameLength(header);
                       if (!len.ok())
                         return Lose("bad frame from supervisor: " + len.status().message());
                       body.resize(*len);
                       ReadBody();
                     });
  }

  void ReadBody() {
    asio::async_read(socket, asio::buffer(body),
                     [this](const boost::system::error_code& ec, size_t) {
                       if (closed) return;
                       if (ec) return Lose("read failed: " + ec.message());
                       Result<SupervisorCommand> cmd = DecodeCommand(body);
                       if (!cmd.ok())
                         return Lose("bad command from supervisor: " + cmd.status().message());
                       if (*cmd == SupervisorCommand::kStop) {
                         stop_requested.store(true);
                       } else {
                         checkpoint_requested.store(true);
                       }
                       if (options.on_command) options.on_command(*cmd);
                       ReadHeader();
                     });
  }

  // Connects over `t` and writes the hello, running io until that ends or the deadline
  // passes; returns the operation's status (the socket is closed on failure).
  Status ConnectAndHello(const std::string& hello_frame, ControlTransport t);
  // The Unix socket, when it is given and usable; `unix_status` says how it went.
  bool TryUnixSocket(const std::string& hello_frame);
};

Status ControlClient::Impl::ConnectAndHello(const std::string& hello_frame, ControlTransport t) {
  tcp::resolver resolver(io);
  asio::steady_timer deadline(io);
  Status result = Status(StatusCode::kTimeout, "");
  bool finished = false;
  auto finish = [&](Status s) {
    if (finished) return;
    finished = true;
    result = std::move(s);
    deadline.cancel();
    resolver.cancel();
    if (!result.ok()) {
      boost::system::error_code ec;
      socket.close(ec);
    }
  };
  const bool over_unix = t == ControlTransport::kUnix;
  const std::string where = over_unix ? "unix socket " + options.unix_socket_path
                                      : options.address + ":" + std::to_string(options.port);
  deadline.expires_after(std::chrono::milliseconds(options.connect_timeout_ms));
  deadline.async_wait([&](const boost::system::error_code& ec) {
    if (ec) return;
    finish(Status(StatusCode::kTimeout, "control client: no connection to " + where + " within " +
                                            std::to_string(options.connect_timeout_ms) + " ms"));
  });
  auto on_connected = [&](const boost::system::error_code& ec) {
    if (finished) return;
    if (ec) {
      return finish(IoError("control client: cannot connect to " + where + ": " + ec.message()));
    }
    boost::system::error_code ignored;
    if (!over_unix) socket.set_option(tcp::no_delay(true), ignored);
    asio::async_write(socket, asio::buffer(hello_frame),
                      [&](const boost::system::error_code& ec3, size_t) {
                        if (finished) return;
                        if (ec3) {
                          return finish(IoError("control client: sending hello: " + ec3.message()));
                        }
                        finish(Status::Ok());
                      });
  };
  if (over_unix) {
    socket.async_connect(Stream::endpoint(local::endpoint(options.unix_socket_path)), on_connected);
  } else {
    resolver.async_resolve(
        options.address, std::to_string(options.port),
        [&](const boost::system::error_code& ec, const tcp::resolver::results_type& results) {
          if (finished) return;
          if (ec)
            return finish(IoError("control client: cannot resolve " + where + ": " + ec.message()));
          std::vector<Stream::endpoint> endpoints;
          for (const auto& entry : results) endpoints.emplace_back(entry.endpoint());
          asio::async_connect(socket, endpoints,
                              [&](const boost::system::error_code& ec2, const Stream::endpoint&) {
                                on_connected(ec2);
                              });
        });
  }
  io.run();
  io.restart();
  return result;
}

bool ControlClient::Impl::TryUnixSocket(const std::string& hello_frame) {
  const std::string& path = options.unix_socket_path;
  if (path.empty()) {
    unix_status = NotFound("control client: no Unix socket given");
  } else if (path.size() > kSocketPathMax) {
    unix_status = InvalidArgument("control client: Unix socket path " + path + " is longer than " +
                                  std::to_string(kSocketPathMax) + " bytes");
  } else {
    unix_status = CheckPrivateSocket(path);
    if (unix_status.ok()) unix_status = ConnectAndHello(hello_frame, ControlTransport::kUnix);
  }
  if (unix_status.ok()) transport = ControlTransport::kUnix;
  return unix_status.ok();
}

Result<std::unique_ptr<ControlClient>> ControlClient::Connect(const ControlClientOptions& options) {
  if (options.connect_timeout_ms < 1 || options.connect_timeout_ms > 600000) {
    return InvalidArgument("control client: connect_timeout_ms outside [1, 600000]");
  }
  if (options.heartbeat_interval_ms < 1 || options.heartbeat_interval_ms > 60000) {
    return InvalidArgument("control client: heartbeat_interval_ms outside [1, 60000]");
  }
  Result<std::string> hello = EncodeHello(options.hello);
  if (!hello.ok()) return hello.status().WithPrefix("control client: hello");

  if (options.unix_socket_path.empty() && options.port == 0) {
    return InvalidArgument("control client: neither a Unix socket nor a TCP port to connect to");
  }

  auto impl = std::make_unique<Impl>();
  impl->options = options;
  if (!impl->TryUnixSocket(*hello)) {
    if (options.port == 0) return impl->unix_status;
    RETURN_IF_ERROR(impl->ConnectAndHello(*hello, ControlTransport::kTcp));
  }

  Impl* raw = impl.get();
  raw->SendHeartbeat();  // the supervisor sees this rank's state at once, not one tick later
  raw->ArmHeartbeat();
  raw->ReadHeader();
  impl->thread = std::thread([raw] {
    try {
      raw->io.run();
    } catch (const std::exception& e) {
      std::fprintf(stderr, "tessera: control client thread died: %s\n", e.what());
      std::abort();
    }
  });
  return std::unique_ptr<ControlClient>(new ControlClient(std::move(impl)));
}

ControlClient::ControlClient(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

ControlClient::~ControlClient() {
  Impl* impl = impl_.get();
  if (impl->thread.joinable()) {
    asio::post(impl->io, [impl] { impl->Close(); });
    impl->thread.join();
  }
}

void ControlClient::SetStep(int64_t step) {
  impl_->step.store(step < 0 ? 0 : step, std::memory_order_release);
}
void ControlClient::SetComputeMs(int64_t compute_ms) {
  const int64_t v = std::clamp<int64_t>(compute_ms, -1, kControlMaxComputeMs);
  impl_->compute_ms.store(v, std::memory_order_relaxed);
}
void ControlClient::SetPhase(RankPhase phase) {
  impl_->phase.store(static_cast<int>(phase), std::memory_order_relaxed);
}
void ControlClient::SetCollectiveSeq(int64_t seq) {
  impl_->collective_seq.store(seq < 0 ? 0 : seq, std::memory_order_relaxed);
}

void ControlClient::ReportCommit(int64_t step, bool memory_tier) {
  if (impl_->lost.load() || impl_->shut_down.load()) return;
  Result<std::string> frame = EncodeCommit(CommitMsg{step < 0 ? 0 : step, memory_tier});
  if (!frame.ok()) return;
  Impl* impl = impl_.get();
  asio::post(impl->io, [impl, f = std::move(frame).value()]() mutable {
    if (!impl->closing_after_drain) impl->Enqueue(std::move(f));
  });
}

Status ControlClient::SendCatalogRecord(const CatalogRecordMsg& record) {
  Result<std::string> frame = EncodeCatalogRecord(record);
  if (!frame.ok()) return frame.status().WithPrefix("control client: catalog record");
  if (impl_->lost.load() || impl_->shut_down.load()) return Status::Ok();  // dropped, as documented
  Impl* impl = impl_.get();
  asio::post(impl->io, [impl, f = std::move(frame).value()]() mutable {
    if (!impl->closing_after_drain) impl->Enqueue(std::move(f));
  });
  return Status::Ok();
}

Status ControlClient::Flush(int timeout_ms) {
  Impl* impl = impl_.get();
  if (impl->lost.load() || impl->shut_down.load()) {
    return Status(StatusCode::kAborted, "control client: no supervisor to flush to");
  }
  auto waiter = std::make_shared<std::promise<bool>>();
  std::future<bool> written = waiter->get_future();
  asio::post(impl->io, [impl, waiter] {
    if (impl->closed) return waiter->set_value(false);
    if (impl->out.empty()) return waiter->set_value(true);
    impl->flush_waiters.push_back(waiter);
  });
  if (written.wait_for(std::chrono::milliseconds(timeout_ms)) != std::future_status::ready) {
    return Status(StatusCode::kAborted, "control client: queued records not written in time");
  }
  if (!written.get()) return Status(StatusCode::kAborted, "control client: supervisor lost");
  return Status::Ok();
}

ControlTransport ControlClient::transport() const { return impl_->transport; }
const Status& ControlClient::unix_socket_status() const { return impl_->unix_status; }

bool ControlClient::checkpoint_requested() const { return impl_->checkpoint_requested.load(); }
bool ControlClient::ConsumeCheckpointRequest() {
  return impl_->checkpoint_requested.exchange(false);
}
bool ControlClient::stop_requested() const { return impl_->stop_requested.load(); }
bool ControlClient::supervisor_lost() const { return impl_->lost.load(); }
std::string ControlClient::lost_reason() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->lost_reason;
}

Status ControlClient::Shutdown(int exit_code, int timeout_ms) {
  Impl* impl = impl_.get();
  if (impl->shut_down.exchange(true)) return Status::Ok();
  Result<std::string> bye = EncodeBye(ByeMsg{exit_code});
  if (!bye.ok()) bye = EncodeBye(ByeMsg{255});  // out-of-range code: still say goodbye
  std::future<bool> written = impl->bye_written.get_future();
  asio::post(impl->io, [impl, f = std::move(bye).value()]() mutable {
    if (impl->closed) return impl->SignalBye(false);
    impl->heartbeat_timer.cancel();
    impl->SendHeartbeat(/*final=*/true);
    impl->closing_after_drain = true;
    impl->Enqueue(std::move(f));
  });
  const bool ok =
      !impl->lost.load() &&
      written.wait_for(std::chrono::milliseconds(timeout_ms)) == std::future_status::ready &&
      written.get();
  asio::post(impl->io, [impl] { impl->Close(); });
  if (impl->thread.joinable()) impl->thread.join();
  if (impl->lost.load()) return Status(StatusCode::kAborted, "control client: " + lost_reason());
  if (!ok) return Status(StatusCode::kAborted, "control client: bye not written in time");
  return Status::Ok();
}

}  // namespace tessera
