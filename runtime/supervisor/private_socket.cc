// runtime/supervisor/private_socket.cc — the socket directory and its check (contract in
// private_socket.h).
#include "runtime/supervisor/private_socket.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <utility>
#include <vector>

#include "runtime/core/file_util.h"
#include "runtime/supervisor/text.h"

namespace tessera {
namespace {

constexpr char kSocketName[] = "control.sock";

std::string ErrnoText(int err) { return std::strerror(err); }

std::string Octal(mode_t mode) { return StrFormat("%04o", static_cast<unsigned>(mode & 07777)); }

}  // namespace

std::string ControlSocketParent(const char* tmpdir) {
  if (tmpdir != nullptr && tmpdir[0] == '/') {
    std::string parent(tmpdir);
    while (parent.size() > 1 && parent.back() == '/') parent.pop_back();
    if (parent.size() + kSocketSuffixBytes <= kSocketPathMax) return parent;
  }
  return "/tmp";
}

Result<PrivateSocketDir> PrivateSocketDir::Create(const std::string& parent) {
  if (parent.empty() || parent.size() + kSocketSuffixBytes > kSocketPathMax) {
    return InvalidArgument(StrFormat(
        "control socket: \"%s\" is too long a parent directory (%zu bytes; a socket path holds "
        "at most %zu, and \"/tessera-XXXXXX/%s\" needs %zu of them)",
        parent.c_str(), parent.size(), kSocketPathMax, kSocketName, kSocketSuffixBytes));
  }
  std::string pattern = (parent == "/" ? "" : parent) + "/tessera-XXXXXX";
  std::vector<char> buf(pattern.begin(), pattern.end());
  buf.push_back('\0');
  if (mkdtemp(buf.data()) == nullptr) {
    return IoError("control socket: cannot create a directory in " + parent + ": " +
                   ErrnoText(errno));
  }
  PrivateSocketDir d;
  d.dir_ = buf.data();
  // mkdtemp promises 0700 and this user; a file system that ignores modes would void the
  // protection, so the promise is checked rather than trusted.
  struct stat st {};
  if (lstat(d.dir_.c_str(), &st) != 0) {
    return IoError("control socket: " + d.dir_ + ": " + ErrnoText(errno));
  }
  if (!S_ISDIR(st.st_mode) || st.st_uid != geteuid() || (st.st_mode & 077) != 0) {
    return IoError("control socket: " + d.dir_ + " is mode " + Octal(st.st_mode) + ", owner " +
                   std::to_string(st.st_uid) + " after mkdtemp (expected 0700, owner " +
                   std::to_string(geteuid()) + "): this file system cannot keep it private");
  }
  d.socket_path_ = d.dir_ + "/" + kSocketName;
  return d;
}

PrivateSocketDir::PrivateSocketDir(PrivateSocketDir&& other) noexcept
    : dir_(std::exchange(other.dir_, {})), socket_path_(std::exchange(other.socket_path_, {})) {}

PrivateSocketDir& PrivateSocketDir::operator=(PrivateSocketDir&& other) noexcept {
  if (this != &other) {
    Remove();
    dir_ = std::exchange(other.dir_, {});
    socket_path_ = std::exchange(other.socket_path_, {});
  }
  return *this;
}

void PrivateSocketDir::Remove() {
  if (!socket_path_.empty()) (void)unlink(socket_path_.c_str());  // absent until bound
  if (!dir_.empty()) (void)rmdir(dir_.c_str());
  socket_path_.clear();
  dir_.clear();
}

Status CheckPrivateSocket(const std::string& path) {
  const std::string dir = ParentDir(path);
  struct stat st {};
  if (lstat(dir.c_str(), &st) != 0) {
    const int err = errno;
    const std::string why = "control socket: directory " + dir + ": " + ErrnoText(err);
    return err == ENOENT || err == ENOTDIR ? NotFound(why) : FailedPrecondition(why);
  }
  if (!S_ISDIR(st.st_mode)) {
    return FailedPrecondition("control socket: " + dir + " is not a directory (a symlink?)");
  }
  if (st.st_uid != geteuid()) {
    return FailedPrecondition("control socket: " + dir + " is owned by uid " +
                              std::to_string(st.st_uid) + ", not by this process's user (uid " +
                              std::to_string(geteuid()) + ")");
  }
  if ((st.st_mode & 077) != 0) {
    return FailedPrecondition("control socket: " + dir + " is mode " + Octal(st.st_mode) +
                              ": other users could reach the socket (expected 0700)");
  }
  if (lstat(path.c_str(), &st) != 0) {
    const int err = errno;
    const std::string why = "control socket: " + path + ": " + ErrnoText(err);
    return err == ENOENT ? NotFound(why) : FailedPrecondition(why);
  }
  if (!S_ISSOCK(st.st_mode)) {
    return FailedPrecondition("control socket: " + path + " is not a socket");
  }
  return Status::Ok();
}

}  // namespace tessera
