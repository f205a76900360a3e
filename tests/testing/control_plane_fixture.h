// tests/testing/control_plane_fixture.h — a ControlServer on loopback with an event log that
// tests wait on, client options for its ranks, and raw sockets for clients that do not follow
// the protocol. Shared by the control-plane tests (tests/unit/control_plane_test.cc, the
// protocol and its hostile clients; tests/unit/control_transport_test.cc, the Unix socket, TCP
// and floods). Test-only; header-only.
#pragma once

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "runtime/supervisor/control_client.h"
#include "runtime/supervisor/control_protocol.h"
#include "runtime/supervisor/control_server.h"

namespace tessera::testing {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

inline constexpr char kRunId[] = "run-test";
inline constexpr char kSecret[] = "s3cret-0123456789";
inline constexpr int64_t kIncarnation = 3;

// Collects events from the io thread; tests wait on predicates over them.
class EventLog {
 public:
  void Add(const ControlEvent& e) {
    std::lock_guard<std::mutex> lock(mu_);
    events_.push_back(e);
    cv_.notify_all();
  }
  // Waits until an event satisfying `pred` exists; returns it (kind kRejected, rank -2 if not).
  template <typename Pred>
  ControlEvent WaitFor(Pred pred, milliseconds timeout = milliseconds(1500)) {
    std::unique_lock<std::mutex> lock(mu_);
    ControlEvent found;
    found.rank = -2;
    cv_.wait_for(lock, timeout, [&] {
      for (const ControlEvent& e : events_) {
        if (pred(e)) {
          found = e;
          return true;
        }
      }
      return false;
    });
    return found;
  }
  int Count(ControlEventKind kind) {
    std::lock_guard<std::mutex> lock(mu_);
    int n = 0;
    for (const ControlEvent& e : events_) n += e.kind == kind ? 1 : 0;
    return n;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<ControlEvent> events_;
};

// The options of the fixture's server: this run's identity, TCP on loopback, no Unix socket.
inline ControlServerOptions TestServerOptions(int world_size = 2, int hello_timeout_ms = 1000) {
  ControlServerOptions o;
  o.run_id = kRunId;
  o.secret = kSecret;
  o.incarnation = kIncarnation;
  o.world_size = world_size;
  o.hello_timeout_ms = hello_timeout_ms;
  return o;
}

struct Fixture {
  EventLog log;
  std::unique_ptr<ControlServer> server;

  explicit Fixture(int world_size = 2, int hello_timeout_ms = 1000)
      : Fixture(TestServerOptions(world_size, hello_timeout_ms)) {}
  explicit Fixture(const ControlServerOptions& o) {
    Result<std::unique_ptr<ControlServer>> s =
        ControlServer::Start(o, [this](const ControlEvent& e) { log.Add(e); });
    EXPECT_TRUE(s.ok()) << s.status().ToString();
    if (s.ok()) server = std::move(s).value();
  }

  // TCP only: the server's port on loopback (what a rank on another host has).
  ControlClientOptions ClientOptions(int rank) const {
    ControlClientOptions o;
    o.port = server->port();
    o.hello = Hello(rank);
    o.heartbeat_interval_ms = 20;
    o.connect_timeout_ms = 1000;
    return o;
  }
  // What the launcher hands a rank on the server's host: the Unix socket, and TCP besides.
  ControlClientOptions LocalClientOptions(int rank) const {
    ControlClientOptions o = ClientOptions(rank);
    o.unix_socket_path = server->unix_socket_path();
    return o;
  }
  HelloMsg Hello(int rank) const {
    HelloMsg h;
    h.run_id = kRunId;
    h.incarnation = kIncarnation;
    h.rank = rank;
    h.world_size = static_cast<int>(server->Snapshot().size());
    h.pid = 1000 + rank;
    h.host = "node" + std::to_string(rank);
    h.secret = kSecret;
    return h;
  }
  std::unique_ptr<ControlClient> Connect(int rank) { return Connect(ClientOptions(rank)); }
  std::unique_ptr<ControlClient> Connect(const ControlClientOptions& o) {
    Result<std::unique_ptr<ControlClient>> c = ControlClient::Connect(o);
    EXPECT_TRUE(c.ok()) << c.status().ToString();
    return c.ok() ? std::move(c).value() : nullptr;
  }
  ControlEvent WaitRegistered(int rank, milliseconds timeout = milliseconds(1500)) {
    return log.WaitFor(
        [rank](const ControlEvent& e) {
          return e.kind == ControlEventKind::kRegistered && e.rank == rank;
        },
        timeout);
  }
  ControlEvent WaitRejected() {
    return log.WaitFor([](const ControlEvent& e) { return e.kind == ControlEventKind::kRejected; });
  }
};

// A raw loopback socket for clients that do not follow the protocol.
inline int RawConnect(uint16_t port) {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  EXPECT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  return fd;
}
inline void RawSend(int fd, const std::string& bytes) {
  ASSERT_EQ(::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL),
            static_cast<ssize_t>(bytes.size()));
}
// True when the server closed `fd` (read returns EOF or reset) within the timeout.
inline bool ClosedByServer(int fd, int timeout_ms = 1500) {
  timeval tv{timeout_ms / 1000, (timeout_ms % 1000) * 1000};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  char buf[64];
  const ssize_t n = ::recv(fd, buf, sizeof(buf), 0);
  return n == 0 || (n < 0 && errno == ECONNRESET);
}

}  // namespace tessera::testing
