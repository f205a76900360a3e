// runtime/supervisor/private_socket.h — a Unix domain socket that only its owner can reach.
//
// Owns: the directory that protects the supervisor's Unix socket, and the check a rank makes
// before it trusts a socket path it was handed. The protection is the directory, not the
// socket file: mkdtemp creates it with mode 0700, so another user (root aside) cannot resolve a
// path inside it and connect() fails with EACCES before the socket is looked at. Nothing
// another user does to the parent (/tmp is world-writable) can take the directory over:
// mkdtemp creates it atomically under a random name, and Create checks what it made.
//
// CheckPrivateSocket is the rank's side: it uses the socket only when the path's directory is
// a real directory (not a symlink) owned by the rank's own effective user with no group or
// other permission bits, and the path itself is a socket. On a host other than the
// supervisor's the path is normally absent (kNotFound); where somebody else made it, it fails
// the check (kFailedPrecondition), so a rank never sends its secret to a socket another user
// controls. Either way the rank falls back to TCP (control_client.h).
//
// Thread-safety: values and file-system calls; no shared state.
#pragma once

#include <cstddef>
#include <string>

#include "runtime/core/status.h"

namespace tessera {

// Longest path a Unix domain socket can be bound at: sockaddr_un's sun_path (108 bytes on
// Linux) less the terminating NUL.
inline constexpr size_t kSocketPathMax = 107;
// What PrivateSocketDir appends to its parent: "/tessera-XXXXXX/control.sock".
inline constexpr size_t kSocketSuffixBytes = 28;

// The parent for the supervisor's socket directory: `tmpdir` (the value of $TMPDIR; may be
// null) when it is an absolute path short enough for the socket path to fit, else "/tmp".
// A temporary directory is local to the host (a run directory may sit on a shared file system
// that other hosts see, or one that cannot hold sockets) and its path is short.
std::string ControlSocketParent(const char* tmpdir);

// <parent>/tessera-XXXXXX, mode 0700, and the socket path inside it. The caller binds the
// socket; Remove() (also run by the destructor) unlinks it and removes the directory.
// Move-only.
class PrivateSocketDir {
 public:
  // kInvalidArgument when the socket path would not fit kSocketPathMax (naming the parent),
  // kIoError when the directory cannot be made or is not what mkdtemp promises.
  static Result<PrivateSocketDir> Create(const std::string& parent);

  PrivateSocketDir() = default;
  ~PrivateSocketDir() { Remove(); }
  PrivateSocketDir(PrivateSocketDir&& other) noexcept;
  PrivateSocketDir& operator=(PrivateSocketDir&& other) noexcept;
  PrivateSocketDir(const PrivateSocketDir&) = delete;
  PrivateSocketDir& operator=(const PrivateSocketDir&) = delete;

  const std::string& dir() const { return dir_; }
  const std::string& socket_path() const { return socket_path_; }  // empty once removed
  // Unlinks the socket (if bound) and removes the directory. Idempotent.
  void Remove();

 private:
  std::string dir_, socket_path_;
};

// OK when `path` is a socket inside a private directory of this process's effective user (see
// above). kNotFound when the path or its directory does not exist, kFailedPrecondition (naming
// what is wrong: owner, mode, type) otherwise.
Status CheckPrivateSocket(const std::string& path);

}  // namespace tessera
