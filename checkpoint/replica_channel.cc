// checkpoint/replica_channel.cc — the file transfer of the in-memory tier (contract in the
// header): a small framed protocol over blocking sockets, every wait bounded by poll().
#include "checkpoint/replica_channel.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <thread>

namespace tessera {
namespace {

constexpr uint32_t kMagic = 0x50525354;  // "TSRP" little-endian
constexpr uint8_t kVersion = 1;
constexpr size_t kChunk = size_t{4} << 20;
constexpr size_t kMaxConnections = 256;  // served at once; a job needs a few per rank
enum Code : uint8_t { kOkCode = 0, kNotFoundCode = 1, kRefusedCode = 2, kIoCode = 3 };

// A socket with an idle timeout per wait; every error names the peer.
class Conn {
 public:
  Conn(int fd, std::string peer, double timeout_s) : fd_(fd), peer_(std::move(peer)), timeout_ms_(static_cast<int>(timeout_s * 1000)) {}

  Status WaitFor(short events) {
    pollfd p{fd_, events, 0};
    const int r = ::poll(&p, 1, timeout_ms_);
    if (r == 0) return Status(StatusCode::kTimeout, peer_ + ": no progress for " + std::to_string(timeout_ms_ / 1000.0).substr(0, 4) + " s");
    if (r < 0 && errno != EINTR) return IoError(peer_ + ": poll: " + std::strerror(errno));
    return Status::Ok();
  }
  Status Send(const void* data, size_t n) {
    const char* p = static_cast<const char*>(data);
    while (n > 0) {
      RETURN_IF_ERROR(WaitFor(POLLOUT));
      const ssize_t w = ::send(fd_, p, n, MSG_NOSIGNAL | MSG_DONTWAIT);
      if (w < 0) {
        if (errno == EAGAIN || errno == EINTR) continue;
        return IoError(peer_ + ": send: " + std::strerror(errno));
      }
      p += w;
      n -= static_cast<size_t>(w);
    }
    return Status::Ok();
  }
  Status Recv(void* data, size_t n) {
    char* p = static_cast<char*>(data);
    while (n > 0) {
      RETURN_IF_ERROR(WaitFor(POLLIN));
      const ssize_t r = ::recv(fd_, p, n, MSG_DONTWAIT);
      if (r == 0) return IoError(peer_ + ": connection closed midway");
      if (r < 0) {
        if (errno == EAGAIN || errno == EINTR) continue;
        return IoError(peer_ + ": recv: " + std::strerror(errno));
      }
      p += r;
      n -= static_cast<size_t>(r);
    }
    return Status::Ok();
  }
  template <typename T>
  Status SendValue(T v) { return Send(&v, sizeof v); }
  template <typename T>
  Status RecvValue(T* v) { return Recv(v, sizeof *v); }

  // Streams `size` bytes of the open file `file` to the socket.
  Status SendFile(int file, uint64_t size, const std::string& path) {
    std::vector<char> buf(std::min<uint64_t>(kChunk, std::max<uint64_t>(size, 1)));
    for (uint64_t at = 0; at < size;) {
      const size_t n = static_cast<size_t>(std::min<uint64_t>(buf.size(), size - at));
      const ssize_t r = ::pread(file, buf.data(), n, static_cast<off_t>(at));
      if (r <= 0) return IoError(path + ": read: " + (r == 0 ? "file shrank" : std::strerror(errno)));
      RETURN_IF_ERROR(Send(buf.data(), static_cast<size_t>(r)));
      at += static_cast<uint64_t>(r);
    }
    return Status::Ok();
  }
  // Receives `size` bytes into `path` (a temporary name is the caller's business).
  Status RecvFile(const std::string& path, uint64_t size) {
    const int out = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (out < 0) return IoError(path + ": open: " + std::strerror(errno));
    std::vector<char> buf(std::min<uint64_t>(kChunk, std::max<uint64_t>(size, 1)));
    Status st = Status::Ok();
    for (uint64_t at = 0; at < size && st.ok();) {
      const size_t n = static_cast<size_t>(std::min<uint64_t>(buf.size(), size - at));
      st = Recv(buf.data(), n);
      if (st.ok() && ::write(out, buf.data(), n) != static_cast<ssize_t>(n)) {
        st = IoError(path + ": write: " + std::strerror(errno));
      }
      at += n;
    }
    if (::close(out) != 0 && st.ok()) st = IoError(path + ": close: " + std::strerror(errno));
    if (!st.ok()) ::unlink(path.c_str());
    return st;
  }

  Status SendResponse(Code code, const std::string& message) {
    const std::string m = message.substr(0, 1000);
    RETURN_IF_ERROR(SendValue<uint8_t>(code));
    RETURN_IF_ERROR(SendValue<uint16_t>(static_cast<uint16_t>(m.size())));
    return Send(m.data(), m.size());
  }
  // The response's code as a Status (its message from the peer).
  Status RecvResponse(const std::string& what) {
    uint8_t code = 0;
    uint16_t len = 0;
    RETURN_IF_ERROR(RecvValue(&code));
    RETURN_IF_ERROR(RecvValue(&len));
    std::string m(len, '\0');
    RETURN_IF_ERROR(Recv(m.data(), len));
    const std::string msg = peer_ + ": " + what + ": " + m;
    switch (code) {
      case kOkCode: return Status::Ok();
      case kNotFoundCode: return NotFound(msg);
      case kRefusedCode: return FailedPrecondition(msg);
      default: return IoError(msg);
    }
  }

 private:
  int fd_;
  std::string peer_;
  int timeout_ms_;
};

std::string TempName(const std::string& path, const char* tag) {
  static std::atomic<uint64_t> counter{0};
  return path + "." + tag + "." + std::to_string(::getpid()) + "." + std::to_string(counter++);
}

Result<int> Connect(const PeerAddress& peer, double timeout_s) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return IoError(std::string("socket: ") + std::strerror(errno));
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(peer.port);
  a.sin_addr.s_addr = htonl(peer.ipv4);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 && errno != EINPROGRESS) {
    const int e = errno;
    ::close(fd);
    return IoError(peer.ToString() + ": connect: " + std::strerror(e));
  }
  pollfd p{fd, POLLOUT, 0};
  int err = 0;
  socklen_t len = sizeof err;
  if (::poll(&p, 1, static_cast<int>(timeout_s * 1000)) != 1) {
    ::close(fd);
    return Status(StatusCode::kTimeout, peer.ToString() + ": connect: no answer in " +
                                            std::to_string(static_cast<int>(timeout_s)) + " s");
  }
  ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
  if (err != 0) {
    ::close(fd);
    return IoError(peer.ToString() + ": connect: " + std::strerror(err));
  }
  const int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  return fd;
}

Status SendRequest(Conn& c, char op, uint64_t secret, const std::string& rel_path) {
  RETURN_IF_ERROR(c.SendValue(kMagic));
  RETURN_IF_ERROR(c.SendValue(kVersion));
  RETURN_IF_ERROR(c.SendValue(static_cast<uint8_t>(op)));
  RETURN_IF_ERROR(c.SendValue(static_cast<uint16_t>(rel_path.size())));
  RETURN_IF_ERROR(c.SendValue(secret));
  return c.Send(rel_path.data(), rel_path.size());
}

struct Fd {
  int fd;
  ~Fd() { if (fd >= 0) ::close(fd); }
};

}  // namespace

std::string PeerAddress::ToString() const { return Ipv4Text(ipv4) + ":" + std::to_string(port); }

Result<uint32_t> ParseIpv4(const std::string& text) {
  in_addr a{};
  if (::inet_pton(AF_INET, text.c_str(), &a) != 1) return InvalidArgument("not an IPv4 address: " + text);
  return ntohl(a.s_addr);
}

std::string Ipv4Text(uint32_t ipv4) {
  in_addr a{};
  a.s_addr = htonl(ipv4);
  char buf[INET_ADDRSTRLEN] = {};
  ::inet_ntop(AF_INET, &a, buf, sizeof buf);
  return buf;
}

bool ValidReplicaPath(const std::string& path) {
  if (path.empty() || path.size() > kMaxReplicaPath || path.front() == '/' || path.back() == '/') return false;
  size_t start = 0;
  while (start <= path.size()) {
    const size_t end = std::min(path.find('/', start), path.size());
    const std::string c = path.substr(start, end - start);
    if (c.empty() || c == "." || c == "..") return false;
    for (char ch : c) {
      if (!(std::isalnum(static_cast<unsigned char>(ch)) || ch == '.' || ch == '_' || ch == '-')) return false;
    }
    start = end + 1;
  }
  return true;
}

Result<std::unique_ptr<ReplicaServer>> ReplicaServer::Start(const std::string& root, uint32_t bind_ipv4,
                                                            uint64_t secret, double timeout_s) {
  std::unique_ptr<ReplicaServer> s(new ReplicaServer());
  s->root_ = root;
  s->secret_ = secret;
  s->timeout_s_ = timeout_s;
  std::error_code ec;
  std::filesystem::create_directories(root, ec);
  if (ec) return InvalidArgument(root + ": cannot create the memory tier's directory: " + ec.message());
  s->listen_fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (s->listen_fd_ < 0) return IoError(std::string("socket: ") + std::strerror(errno));
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(bind_ipv4);
  if (::bind(s->listen_fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 || ::listen(s->listen_fd_, 64) != 0) {
    return IoError("replica server: cannot listen on " + Ipv4Text(bind_ipv4) + ": " + std::strerror(errno));
  }
  socklen_t len = sizeof a;
  ::getsockname(s->listen_fd_, reinterpret_cast<sockaddr*>(&a), &len);
  s->address_ = {bind_ipv4, ntohs(a.sin_port)};
  if (::pipe2(s->wake_, O_CLOEXEC) != 0) return IoError(std::string("pipe: ") + std::strerror(errno));
  s->acceptor_ = std::thread([raw = s.get()] { raw->AcceptLoop(); });
  return s;
}

ReplicaServer::~ReplicaServer() {
  stopping_ = true;
  if (wake_[1] >= 0) (void)!::write(wake_[1], "x", 1);
  if (acceptor_.joinable()) acceptor_.join();
  std::vector<Worker> workers;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (int fd : open_fds_) ::shutdown(fd, SHUT_RDWR);  // a transfer in flight ends now
    workers.swap(workers_);
  }
  for (Worker& w : workers) w.thread.join();
  for (int fd : {listen_fd_, wake_[0], wake_[1]}) {
    if (fd >= 0) ::close(fd);
  }
}

void ReplicaServer::AcceptLoop() {
  while (!stopping_) {
    pollfd p[2] = {{listen_fd_, POLLIN, 0}, {wake_[0], POLLIN, 0}};
    if (::poll(p, 2, -1) < 0 && errno != EINTR) return;
    if (stopping_ || (p[1].revents & POLLIN)) return;
    if (!(p[0].revents & POLLIN)) continue;
    const int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      // Out of descriptors: the listening socket stays readable, so wait rather than spin.
      if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
      }
      continue;
    }
    std::lock_guard<std::mutex> lock(mu_);
    if (open_fds_.size() >= kMaxConnections) {  // a flood, not a job's ranks: refused unread
      ::close(fd);
      continue;
    }
    // Threads that finished are joined here, so a long run does not pile them up.
    std::erase_if(workers_, [](Worker& w) {
      if (!w.done->load()) return false;
      w.thread.join();
      return true;
    });
    open_fds_.push_back(fd);
    auto done = std::make_shared<std::atomic<bool>>(false);
    workers_.push_back({std::thread([this, fd, done] {
                          Serve(fd);
                          {
                            std::lock_guard<std::mutex> l(mu_);
                            open_fds_.erase(std::find(open_fds_.begin(), open_fds_.end(), fd));
                            ::close(fd);
                          }
                          done->store(true);
                        }),
                        done});
  }
}

// One request: check it, then receive (put) or send (get) the file.
void ReplicaServer::Serve(int fd) {
  Conn c(fd, "replica client", timeout_s_);
  uint32_t magic = 0;
  uint8_t version = 0, op = 0;
  uint16_t path_len = 0;
  uint64_t secret = 0;
  if (!c.RecvValue(&magic).ok() || magic != kMagic || !c.RecvValue(&version).ok() ||
      !c.RecvValue(&op).ok() || !c.RecvValue(&path_len).ok() || !c.RecvValue(&secret).ok()) {
    return;  // not a replica client: nothing to answer
  }
  std::string rel(path_len, '\0');
  if (!c.Recv(rel.data(), path_len).ok()) return;
  if (version != kVersion || secret != secret_ || !ValidReplicaPath(rel) || (op != 'P' && op != 'G')) {
    (void)c.SendResponse(kRefusedCode, secret != secret_ ? "wrong secret (another job's request?)"
                                                         : "bad request for \"" + rel + "\"");
    // Unread request bytes would turn the close into a reset that can overtake the answer:
    // stop sending, then read (a bounded amount) until the client closes.
    ::shutdown(fd, SHUT_WR);
    char sink[4096];
    for (size_t drained = 0; drained < (size_t{64} << 20) && c.WaitFor(POLLIN).ok();) {
      const ssize_t r = ::recv(fd, sink, sizeof sink, MSG_DONTWAIT);
      if (r == 0 || (r < 0 && errno != EAGAIN && errno != EINTR)) break;
      if (r > 0) drained += static_cast<size_t>(r);
    }
    return;
  }
  const std::string path = root_ + "/" + rel;
  if (op == 'P') {
    uint64_t size = 0;
    if (!c.RecvValue(&size).ok()) return;
    std::error_code ec;
    std::filesystem::create_directories(std::filesystem::path(path).parent_path(), ec);
    const std::string tmp = TempName(path, "recv");
    Status st = c.RecvFile(tmp, size);
    if (!st.ok()) return;  // the link failed: nobody to answer
    if (::rename(tmp.c_str(), path.c_str()) != 0) {
      ::unlink(tmp.c_str());
      (void)c.SendResponse(kIoCode, path + ": rename: " + std::strerror(errno));
      return;
    }
    received_ += size;
    (void)c.SendResponse(kOkCode, "");
    return;
  }
  // O_NONBLOCK: a FIFO planted under the root must not block this worker in open().
  Fd file{::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK)};
  struct stat sb {};
  if (file.fd < 0 || ::fstat(file.fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
    (void)c.SendResponse(errno == ENOENT ? kNotFoundCode : kIoCode, rel + ": " +
                         (file.fd < 0 ? std::strerror(errno) : "not a regular file"));
    return;
  }
  const uint64_t size = static_cast<uint64_t>(sb.st_size);
  if (c.SendResponse(kOkCode, "").ok() && c.SendValue(size).ok() && c.SendFile(file.fd, size, path).ok()) {
    sent_ += size;
  }
}

Status PutFile(const PeerAddress& peer, uint64_t secret, const std::string& rel_path,
               const std::string& local_path, double timeout_s) {
  if (!ValidReplicaPath(rel_path)) return InvalidArgument("replica path not allowed: " + rel_path);
  Fd file{::open(local_path.c_str(), O_RDONLY | O_CLOEXEC)};
  struct stat sb {};
  if (file.fd < 0 || ::fstat(file.fd, &sb) != 0) return IoError(local_path + ": " + std::strerror(errno));
  ASSIGN_OR_RETURN(int fd, Connect(peer, timeout_s));
  Fd sock{fd};
  Conn c(fd, peer.ToString(), timeout_s);
  const uint64_t size = static_cast<uint64_t>(sb.st_size);
  RETURN_IF_ERROR(SendRequest(c, 'P', secret, rel_path));
  RETURN_IF_ERROR(c.SendValue(size));
  RETURN_IF_ERROR(c.SendFile(file.fd, size, local_path));
  return c.RecvResponse("put " + rel_path);
}

Status GetFile(const PeerAddress& peer, uint64_t secret, const std::string& rel_path,
               const std::string& local_path, double timeout_s) {
  if (!ValidReplicaPath(rel_path)) return InvalidArgument("replica path not allowed: " + rel_path);
  ASSIGN_OR_RETURN(int fd, Connect(peer, timeout_s));
  Fd sock{fd};
  Conn c(fd, peer.ToString(), timeout_s);
  RETURN_IF_ERROR(SendRequest(c, 'G', secret, rel_path));
  RETURN_IF_ERROR(c.RecvResponse("get " + rel_path));
  uint64_t size = 0;
  RETURN_IF_ERROR(c.RecvValue(&size));
  const std::string tmp = TempName(local_path, "fetch");
  RETURN_IF_ERROR(c.RecvFile(tmp, size));
  if (::rename(tmp.c_str(), local_path.c_str()) != 0) {
    const int e = errno;
    ::unlink(tmp.c_str());
    return IoError(local_path + ": rename: " + std::strerror(e));
  }
  return Status::Ok();
}

}  // namespace tessera
