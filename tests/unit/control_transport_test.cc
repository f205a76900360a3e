// links: tessera_supervisor
// tests/unit/control_transport_test.cc — the control plane's two transports: the supervisor's
// Unix socket in a private directory (mode 0700, out of reach of other users, removed on Stop
// and after a failed start), how a client chooses between it and TCP, TCP for a client given
// only address and port, the per-listener pending cap that admits a fresh connection by
// closing the oldest idle one, and registration of local ranks within a second while another
// local user floods the TCP port with idle connections.
//
// "Another user": when the tests run as root, forked children drop to `nobody` with raw
// setresuid (one thread in the child, so per-thread credentials are the process's). Tests that
// need it skip themselves otherwise; the flood then comes from this user.
#include <fcntl.h>
#include <poll.h>
#include <pwd.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "runtime/supervisor/control_client.h"
#include "runtime/supervisor/control_server.h"
#include "runtime/supervisor/private_socket.h"
#include "tests/testing/control_plane_fixture.h"
#include "tests/testing/temp_dir.h"

namespace tessera {
namespace {

using testing::ClosedByServer;
using testing::Clock;
using testing::Fixture;
using testing::RawConnect;
using testing::ScopedTempDir;
using testing::TestServerOptions;
using std::chrono::milliseconds;

// ---- another local user -------------------------------------------------------------------

struct OtherUser {
  uid_t uid;
  gid_t gid;
};

// `nobody`, when this process may become it (root); nullopt otherwise.
std::optional<OtherUser> Nobody() {
  if (geteuid() != 0) return std::nullopt;
  const passwd* pw = getpwnam("nobody");
  if (pw == nullptr || pw->pw_uid == 0) return std::nullopt;
  return OtherUser{pw->pw_uid, pw->pw_gid};
}

// In a forked child: become `u` for good. Raw system calls only (after fork in a threaded
// process only async-signal-safe calls are allowed; glibc's setuid would signal other threads).
bool BecomeUser(const OtherUser& u) {
  return syscall(SYS_setgroups, 0, nullptr) == 0 &&
         syscall(SYS_setresgid, u.gid, u.gid, u.gid) == 0 &&
         syscall(SYS_setresuid, u.uid, u.uid, u.uid) == 0;
}

// The child's exit code for connect() to the Unix socket at `path` as `user`: 0 when it
// connected, else the errno (or 255 when it could not become the user).
int ConnectAsUser(const OtherUser& user, const std::string& path) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
  const pid_t pid = fork();
  if (pid == 0) {
    if (!BecomeUser(user)) _exit(255);
    const int fd = socket(AF_UNIX, SOCK_STREAM, 0);
    if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0) _exit(0);
    _exit(errno & 0xff);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 254;
}

// A listening Unix socket at `path` that is not the server's (a decoy, or an open control).
int ListenUnix(const std::string& path) {
  const int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
  EXPECT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0) << std::strerror(errno);
  EXPECT_EQ(listen(fd, 16), 0);
  return fd;
}

std::string DirOf(const std::string& path) { return path.substr(0, path.find_last_of('/')); }

bool Exists(const std::string& path) {
  struct stat st {};
  return lstat(path.c_str(), &st) == 0;
}

bool IsEmptyDir(const std::string& dir) { return std::filesystem::is_empty(dir); }

// ---- the flood ----------------------------------------------------------------------------

// A child process (as `user` when given) that opens `count` TCP connections to
// 127.0.0.1:port, sends nothing on them, and reconnects every one the server closes, until it
// is killed: a local user holding the control port's pending slots for as long as it can.
class IdleTcpFlood {
 public:
  static constexpr int kMaxCount = 2048;

  IdleTcpFlood(uint16_t port, int count, std::optional<OtherUser> user) {
    TESSERA_CHECK(count <= kMaxCount);
    int ready[2];
    TESSERA_CHECK(pipe(ready) == 0);
    pid_ = fork();
    if (pid_ == 0) {
      close(ready[0]);
      RunChild(port, count, user, ready[1]);  // never returns
    }
    close(ready[1]);
    ready_fd_ = ready[0];
  }
  ~IdleTcpFlood() {
    if (pid_ > 0) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
    if (ready_fd_ >= 0) close(ready_fd_);
  }
  IdleTcpFlood(const IdleTcpFlood&) = delete;
  IdleTcpFlood& operator=(const IdleTcpFlood&) = delete;

  // True once the child had every connection established (within 10 s).
  bool WaitConnected() {
    pollfd p{ready_fd_, POLLIN, 0};
    char c = 0;
    return poll(&p, 1, 10000) == 1 && read(ready_fd_, &c, 1) == 1 && c == 'y';
  }

 private:
  static int ConnectOnce(const sockaddr_in& addr) {
    const int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0) return -1;
    if (connect(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof addr) != 0) {
      close(fd);
      return -1;
    }
    return fd;
  }

  [[noreturn]] static void RunChild(uint16_t port, int count, std::optional<OtherUser> user,
                                    int ready_fd) {
    // Only system calls from here on (see BecomeUser); the arrays are static, not malloc'd.
    static pollfd fds[kMaxCount];
    for (int fd = 3; fd < 4096; ++fd) {
      if (fd != ready_fd) close(fd);  // the parent's sockets are not the flood's to hold
    }
    if (user && !BecomeUser(*user)) _exit(2);
    prctl(PR_SET_PDEATHSIG, SIGKILL);  // after the uid change, which clears it
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(port);
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    for (int i = 0; i < count; ++i) {
      fds[i] = {ConnectOnce(addr), POLLIN, 0};
      if (fds[i].fd < 0) {
        (void)!write(ready_fd, "n", 1);
        _exit(3);
      }
    }
    (void)!write(ready_fd, "y", 1);
    for (;;) {
      // The server never writes to an unregistered connection: readable means closed.
      if (poll(fds, count, 5) <= 0) continue;
      for (int i = 0; i < count; ++i) {
        if (fds[i].revents == 0) continue;
        close(fds[i].fd);
        fds[i].fd = ConnectOnce(addr);
        fds[i].revents = 0;
        if (fds[i].fd < 0) fds[i].fd = -1;  // poll skips it; the count only shrinks
      }
    }
  }

  pid_t pid_ = -1;
  int ready_fd_ = -1;
};

// ---- tests --------------------------------------------------------------------------------

// The bound the issue sets: a rank registered within about a second of connecting.
constexpr milliseconds kRegistrationBound(1000);

TEST(ControlTransport, LocalRanksRegisterWithinASecondWhileAnotherUserFloodsTheTcpPort) {
  constexpr int kRanks = 8;
  constexpr int kFlood = 640;  // 2.5x the pending cap
  // The supervisor's settings: default hello timeout and pending cap, socket under $TMPDIR.
  ControlServerOptions o = TestServerOptions(kRanks, /*hello_timeout_ms=*/5000);
  o.unix_socket_parent = ControlSocketParent(std::getenv("TMPDIR"));
  ASSERT_EQ(o.max_pending_connections, 256);
  Fixture f(o);
  ASSERT_NE(f.server, nullptr);

  IdleTcpFlood flood(f.server->port(), kFlood, Nobody());
  ASSERT_TRUE(flood.WaitConnected());
  // Every connection past the cap was closed: the server has taken the flood in, and its TCP
  // pending slots are full of idle sockets (kept full: the flood reconnects what is closed).
  const auto t_flood = Clock::now();
  while (f.server->rejected_connections() < kFlood - o.max_pending_connections &&
         Clock::now() - t_flood < std::chrono::seconds(10)) {
    std::this_thread::sleep_for(milliseconds(5));
  }
  ASSERT_GE(f.server->rejected_connections(), kFlood - o.max_pending_connections);

  std::vector<std::unique_ptr<ControlClient>> clients;
  for (int r = 0; r < kRanks; ++r) {
    const auto t0 = Clock::now();
    clients.push_back(f.Connect(f.LocalClientOptions(r)));  // as a launched rank connects
    ASSERT_NE(clients.back(), nullptr);
    const ControlEvent e = f.WaitRegistered(r, milliseconds(5000));
    ASSERT_EQ(e.rank, r) << "rank " << r << " not registered within 5 s under the flood";
    EXPECT_LE(e.time - t0, kRegistrationBound)
        << "rank " << r << " took "
        << std::chrono::duration_cast<milliseconds>(e.time - t0).count() << " ms";
    EXPECT_EQ(e.transport, ControlTransport::kUnix);
    EXPECT_EQ(clients.back()->transport(), ControlTransport::kUnix);
  }
  for (const RankState& s : f.server->Snapshot()) {
    EXPECT_TRUE(s.connected) << "rank " << s.rank;
    EXPECT_EQ(s.transport, ControlTransport::kUnix) << "rank " << s.rank;
  }
}

TEST(ControlTransport, SocketDirectoryIsPrivateAndAnotherUserCannotConnect) {
  ScopedTempDir parent("ctl_private");
  // The parent open to all, so that only the server's own directory stands in the way.
  ASSERT_EQ(chmod(parent.str().c_str(), 0755), 0);
  ControlServerOptions o = TestServerOptions();
  o.unix_socket_parent = parent.str();
  Fixture f(o);
  ASSERT_NE(f.server, nullptr);
  const std::string path = f.server->unix_socket_path();
  const std::string dir = DirOf(path);
  EXPECT_EQ(DirOf(dir), parent.str());
  EXPECT_LE(path.size(), kSocketPathMax);
  struct stat st {};
  ASSERT_EQ(lstat(dir.c_str(), &st), 0);
  EXPECT_TRUE(S_ISDIR(st.st_mode));
  EXPECT_EQ(st.st_mode & 07777, 0700u);
  EXPECT_EQ(st.st_uid, geteuid());
  ASSERT_EQ(lstat(path.c_str(), &st), 0);
  EXPECT_TRUE(S_ISSOCK(st.st_mode));
  EXPECT_TRUE(CheckPrivateSocket(path).ok()) << CheckPrivateSocket(path).ToString();

  const std::optional<OtherUser> other = Nobody();
  if (!other) GTEST_SKIP() << "acting as another user needs root";
  // The control: the same user reaches a socket that is not in a private directory...
  const std::string open_path = parent / "open.sock";
  const int open_fd = ListenUnix(open_path);
  ASSERT_EQ(chmod(open_path.c_str(), 0777), 0);
  EXPECT_EQ(ConnectAsUser(*other, open_path), 0);
  // ...but not the server's: the directory's mode refuses it before the socket is reached.
  EXPECT_EQ(ConnectAsUser(*other, path), EACCES);
  close(open_fd);
  EXPECT_EQ(f.log.Count(ControlEventKind::kRejected), 0);  // the server never saw it
}

TEST(ControlTransport, SocketAndItsDirectoryAreRemovedOnStop) {
  ScopedTempDir parent("ctl_stop");
  ControlServerOptions o = TestServerOptions(1);
  o.unix_socket_parent = parent.str();
  Fixture f(o);
  ASSERT_NE(f.server, nullptr);
  const std::string path = f.server->unix_socket_path();
  auto client = f.Connect(f.LocalClientOptions(0));
  ASSERT_EQ(f.WaitRegistered(0).rank, 0);
  ASSERT_TRUE(Exists(path));
  f.server->Stop();
  EXPECT_FALSE(Exists(path));
  EXPECT_FALSE(Exists(DirOf(path)));
  EXPECT_TRUE(IsEmptyDir(parent.str()));
  EXPECT_EQ(f.server->unix_socket_path(), path);  // still says where it was
}

TEST(ControlTransport, FailedStartLeavesNoSocketDirectoryBehind) {
  ScopedTempDir parent("ctl_fail");
  // The TCP port is taken: the start fails after the socket directory was made.
  const int taken = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(bind(taken, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  ASSERT_EQ(listen(taken, 1), 0);
  socklen_t len = sizeof addr;
  ASSERT_EQ(getsockname(taken, reinterpret_cast<sockaddr*>(&addr), &len), 0);
  ControlServerOptions o = TestServerOptions();
  o.unix_socket_parent = parent.str();
  o.port = ntohs(addr.sin_port);
  Result<std::unique_ptr<ControlServer>> s = ControlServer::Start(o, nullptr);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), StatusCode::kIoError) << s.status().ToString();
  EXPECT_TRUE(IsEmptyDir(parent.str()));
  close(taken);

  // A parent too long for a socket path, and one that does not exist: refused, nothing made.
  o.port = 0;
  o.unix_socket_parent = parent.str() + "/" + std::string(kSocketPathMax, 'x');
  s = ControlServer::Start(o, nullptr);
  EXPECT_EQ(s.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.status().message().find("too long"), std::string::npos) << s.status().ToString();
  o.unix_socket_parent = parent / "missing";
  s = ControlServer::Start(o, nullptr);
  EXPECT_EQ(s.status().code(), StatusCode::kIoError);
  EXPECT_NE(s.status().message().find(parent / "missing"), std::string::npos);
  EXPECT_TRUE(IsEmptyDir(parent.str()));
}

TEST(ControlTransport, TcpServesAClientGivenOnlyAddressAndPort) {
  ScopedTempDir parent("ctl_tcp");
  ControlServerOptions o = TestServerOptions(2);
  o.unix_socket_parent = parent.str();
  Fixture f(o);
  ASSERT_NE(f.server, nullptr);
  // A rank on another host: address and port, no socket.
  auto remote = f.Connect(f.ClientOptions(0));
  ASSERT_NE(remote, nullptr);
  ControlEvent e = f.WaitRegistered(0);
  ASSERT_EQ(e.rank, 0);
  EXPECT_EQ(e.transport, ControlTransport::kTcp);
  EXPECT_EQ(e.peer.rfind("127.0.0.1:", 0), 0u) << e.peer;
  EXPECT_EQ(remote->transport(), ControlTransport::kTcp);
  EXPECT_EQ(remote->unix_socket_status().code(), StatusCode::kNotFound);
  // A local rank beside it takes the socket; the kernel names its process.
  auto local = f.Connect(f.LocalClientOptions(1));
  ASSERT_NE(local, nullptr);
  e = f.WaitRegistered(1);
  ASSERT_EQ(e.rank, 1);
  EXPECT_EQ(e.transport, ControlTransport::kUnix);
  EXPECT_EQ(e.peer, "unix:pid=" + std::to_string(getpid()) + ",uid=" + std::to_string(geteuid()));
  EXPECT_TRUE(local->unix_socket_status().ok());
  // The same protocol on both: heartbeats and commands flow over each.
  EXPECT_EQ(f.server->Broadcast(SupervisorCommand::kCheckpointNow), 2);
  const auto deadline = Clock::now() + milliseconds(1500);
  while ((!remote->checkpoint_requested() || !local->checkpoint_requested()) && Clock::now() < deadline) {
    std::this_thread::sleep_for(milliseconds(5));
  }
  EXPECT_TRUE(remote->checkpoint_requested());
  EXPECT_TRUE(local->checkpoint_requested());
  for (const RankState& s : f.server->Snapshot()) EXPECT_GT(s.heartbeats, 0) << "rank " << s.rank;
}

TEST(ControlTransport, WrongSecretIsRejectedOverTheSocketToo) {
  ScopedTempDir parent("ctl_secret");
  ControlServerOptions o = TestServerOptions(1);
  o.unix_socket_parent = parent.str();
  Fixture f(o);
  ASSERT_NE(f.server, nullptr);
  ControlClientOptions c = f.LocalClientOptions(0);
  c.hello.secret = "not-the-secret";
  auto client = f.Connect(c);
  ASSERT_NE(client, nullptr);
  EXPECT_EQ(client->transport(), ControlTransport::kUnix);
  const ControlEvent e = f.WaitRejected();
  EXPECT_EQ(e.reason, "wrong secret");
  EXPECT_EQ(e.transport, ControlTransport::kUnix);
  EXPECT_FALSE(f.server->Snapshot()[0].ever_registered);
}

TEST(ControlTransport, ClientTakesTheSocketOnlyFromAPrivateDirectoryOfItsOwnUser) {
  ScopedTempDir parent("ctl_choice");
  Fixture f(TestServerOptions(1));  // TCP only: where the client must end up
  ASSERT_NE(f.server, nullptr);
  // A decoy listening in a directory other users can enter: never connected to.
  const std::string open_dir = parent / "open";
  ASSERT_EQ(mkdir(open_dir.c_str(), 0755), 0);
  ASSERT_EQ(chmod(open_dir.c_str(), 0755), 0);
  const std::string decoy = open_dir + "/control.sock";
  const int decoy_fd = ListenUnix(decoy);
  ControlClientOptions c = f.ClientOptions(0);
  c.unix_socket_path = decoy;
  auto client = f.Connect(c);
  ASSERT_NE(client, nullptr);
  EXPECT_EQ(client->transport(), ControlTransport::kTcp);
  EXPECT_EQ(client->unix_socket_status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(client->unix_socket_status().message().find("mode 0755"), std::string::npos)
      << client->unix_socket_status().ToString();
  EXPECT_EQ(f.WaitRegistered(0).transport, ControlTransport::kTcp);
  EXPECT_LT(accept(decoy_fd, nullptr, nullptr), 0);  // nothing came to the decoy
  EXPECT_EQ(errno, EAGAIN);
  close(decoy_fd);

  // A path absent on this host (a rank on another host): kNotFound.
  EXPECT_EQ(CheckPrivateSocket(parent / "tessera-none/control.sock").code(), StatusCode::kNotFound);
  // Not a socket.
  const std::string private_dir = parent / "private";
  ASSERT_EQ(mkdir(private_dir.c_str(), 0700), 0);
  close(open((private_dir + "/control.sock").c_str(), O_CREAT | O_WRONLY, 0600));
  EXPECT_EQ(CheckPrivateSocket(private_dir + "/control.sock").code(), StatusCode::kFailedPrecondition);
  // A symlink standing in for the directory.
  const std::string link = parent / "link";
  ASSERT_EQ(symlink(private_dir.c_str(), link.c_str()), 0);
  EXPECT_EQ(CheckPrivateSocket(link + "/control.sock").code(), StatusCode::kFailedPrecondition);
  // A private directory of another user.
  if (const std::optional<OtherUser> other = Nobody()) {
    ASSERT_EQ(chown(private_dir.c_str(), other->uid, other->gid), 0);
    const Status s = CheckPrivateSocket(private_dir + "/control.sock");
    EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition);
    EXPECT_NE(s.message().find("owned by uid " + std::to_string(other->uid)), std::string::npos)
        << s.ToString();
  }
}

TEST(ControlTransport, WithoutATcpPortTheSocketMustWork) {
  ControlClientOptions c;
  c.hello = HelloMsg{testing::kRunId, testing::kIncarnation, 0, 1, 1, "h", testing::kSecret};
  EXPECT_EQ(ControlClient::Connect(c).status().code(), StatusCode::kInvalidArgument);
  c.unix_socket_path = "/nonexistent-tessera-dir/control.sock";
  EXPECT_EQ(ControlClient::Connect(c).status().code(), StatusCode::kNotFound);
}

TEST(ControlTransport, AtThePendingCapTheOldestIdleConnectionMakesRoom) {
  ControlServerOptions o = TestServerOptions(1, /*hello_timeout_ms=*/60000);
  o.max_pending_connections = 4;
  Fixture f(o);
  ASSERT_NE(f.server, nullptr);
  int idle[5];
  for (int& fd : idle) fd = RawConnect(f.server->port());
  // The fifth took the first one's place.
  EXPECT_TRUE(ClosedByServer(idle[0]));
  ControlEvent e = f.WaitRejected();
  EXPECT_NE(e.reason.find("closed to make room: 4 unregistered tcp connections"), std::string::npos)
      << e.reason;
  // A rank arriving now gets in, displacing the next oldest; the newer idle ones stay.
  auto client = f.Connect(0);
  ASSERT_EQ(f.WaitRegistered(0).rank, 0);
  EXPECT_TRUE(ClosedByServer(idle[1]));
  for (int i = 2; i < 5; ++i) EXPECT_FALSE(ClosedByServer(idle[i], 50)) << "idle connection " << i;
  EXPECT_EQ(f.server->rejected_connections(), 2);
  for (int fd : idle) close(fd);
}

TEST(ControlTransport, ControlSocketParentIsAShortAbsoluteTmpdirOrTmp) {
  EXPECT_EQ(ControlSocketParent(nullptr), "/tmp");
  EXPECT_EQ(ControlSocketParent(""), "/tmp");
  EXPECT_EQ(ControlSocketParent("relative/tmp"), "/tmp");
  EXPECT_EQ(ControlSocketParent("/var/tmp/"), "/var/tmp");
  const std::string fits = "/" + std::string(kSocketPathMax - kSocketSuffixBytes - 1, 'a');
  EXPECT_EQ(ControlSocketParent(fits.c_str()), fits);
  const std::string too_long = fits + "b";
  EXPECT_EQ(ControlSocketParent(too_long.c_str()), "/tmp");
  // What fits is exactly what PrivateSocketDir can make: the socket path's longest form.
  EXPECT_EQ(fits.size() + std::string("/tessera-XXXXXX/control.sock").size(), kSocketPathMax);
}

}  // namespace
}  // namespace tessera
