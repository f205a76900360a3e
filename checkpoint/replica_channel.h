// checkpoint/replica_channel.h — moving checkpoint files between hosts over TCP: the wire of
// the in-memory checkpoint tier (runtime/train/host_tier.h).
//
// Every rank of a job with the memory tier runs a ReplicaServer over its host's tier directory.
// A rank Puts its snapshot's shard file to its buddy on another host (so a lost host never holds
// both copies) and, on resume, Gets the files its host lacks from whichever survivor holds them.
// The channel moves bytes; it does not judge them: a shard file carries its segments' CRC-32C and
// the manifest its own, and the reader verifies both (shard_file.h).
//
// Wire (little-endian, one request per connection):
//   request   u32 magic "TSRP", u8 version 1, u8 op ('P' put | 'G' get), u16 path length,
//             u64 secret, path bytes; for a put then u64 size and the bytes
//   response  u8 code (0 ok, 1 not found, 2 refused, 3 I/O error), u16 message length, message;
//             for a get that succeeded then u64 size and the bytes
// A path is relative to the server's root: components of [A-Za-z0-9._-], none "." or "..", at
// most kMaxReplicaPath bytes — nothing outside the root can be named. A request without the
// job's secret is refused (another job's, or anybody's, on the same network). A file arrives
// under a temporary name and is renamed into place only once every byte is there (put on the
// server, get on the client): a transfer cut midway leaves no file that looks whole.
// Every wait is bounded by the timeout (an idle link is a named kTimeout error, not a
// hang).
//
// Thread-safety: PutFile / GetFile are reentrant. ReplicaServer serves each connection on its
// own thread; the destructor stops them all.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "runtime/core/status.h"

namespace tessera {

inline constexpr size_t kMaxReplicaPath = 512;

// An IPv4 endpoint (host byte order).
struct PeerAddress {
  uint32_t ipv4 = 0;
  uint16_t port = 0;
  std::string ToString() const;  // "10.231.0.2:40123"
};

// "a.b.c.d" -> host-order address; kInvalidArgument otherwise.
Result<uint32_t> ParseIpv4(const std::string& text);
std::string Ipv4Text(uint32_t ipv4);
inline bool IsLoopback(uint32_t ipv4) { return (ipv4 >> 24) == 127; }

// Whether `path` may be named on the wire (the rule in the file comment).
bool ValidReplicaPath(const std::string& path);

class ReplicaServer {
 public:
  // Listens on bind_ipv4 (port 0: the kernel picks) and serves files under `root` (created if
  // missing) to requests carrying `secret`.
  static Result<std::unique_ptr<ReplicaServer>> Start(const std::string& root, uint32_t bind_ipv4,
                                                      uint64_t secret, double timeout_s);
  ~ReplicaServer();  // stops accepting, cuts connections in flight, joins every thread

  PeerAddress address() const { return address_; }
  uint64_t bytes_received() const { return received_.load(); }
  uint64_t bytes_sent() const { return sent_.load(); }

 private:
  ReplicaServer() = default;
  void AcceptLoop();
  void Serve(int fd);

  std::string root_;
  uint64_t secret_ = 0;
  double timeout_s_ = 0;
  PeerAddress address_;
  int listen_fd_ = -1;
  int wake_[2] = {-1, -1};  // a byte on wake_[1] stops the accept loop
  std::thread acceptor_;
  std::mutex mu_;
  std::vector<int> open_fds_;  // connections in flight (guarded by mu_): shut down at stop
  struct Worker {
    std::thread thread;
    std::shared_ptr<std::atomic<bool>> done;
  };
  std::vector<Worker> workers_;  // guarded by mu_; finished ones joined at the next accept
  std::atomic<bool> stopping_{false};
  std::atomic<uint64_t> received_{0}, sent_{0};
};

// Sends the file at local_path to `peer`, stored there as <root>/<rel_path>. OK once the peer
// has the whole file in place.
Status PutFile(const PeerAddress& peer, uint64_t secret, const std::string& rel_path,
               const std::string& local_path, double timeout_s);
// Fetches <root>/<rel_path> from `peer` into local_path (through a temporary name). kNotFound
// when the peer does not have it; kTimeout / kIoError when the link fails.
Status GetFile(const PeerAddress& peer, uint64_t secret, const std::string& rel_path,
               const std::string& local_path, double timeout_s);

}  // namespace tessera
