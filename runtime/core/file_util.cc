// runtime/core/file_util.cc — the POSIX FileSystem and the commit protocol of AtomicFileWriter.
// Contracts in file_util.h.
#include "runtime/core/file_util.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>

namespace tessera {
namespace {

std::string ErrnoText(int err) { return std::strerror(err); }

// One syscall moves at most 1 GiB: Linux caps a read/write at ~2 GiB anyway, and bounded
// chunks keep the EINTR retry cheap.
constexpr size_t kMaxIoBytes = size_t{1} << 30;

class PosixFileSystem final : public FileSystem {
 public:
  Result<int> OpenForWrite(const std::string& path) override {
    const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) return IoError(path + ": cannot create: " + ErrnoText(errno));
    return fd;
  }

  Status Write(int fd, const void* data, size_t n, const std::string& path) override {
    return WriteAll(fd, data, n, path);
  }

  Status WriteAt(int fd, const void* data, size_t n, uint64_t offset,
                 const std::string& path) override {
    const char* p = static_cast<const char*>(data);
    while (n > 0) {
      const ssize_t w = ::pwrite(fd, p, std::min(n, kMaxIoBytes), static_cast<off_t>(offset));
      if (w < 0) {
        if (errno == EINTR) continue;
        return IoError(path + ": write at byte " + std::to_string(offset) +
                       " failed: " + ErrnoText(errno));
      }
      p += w;
      n -= static_cast<size_t>(w);
      offset += static_cast<uint64_t>(w);
    }
    return Status::Ok();
  }

  Status Sync(int fd, const std::string& path) override {
    if (::fsync(fd) != 0) return IoError(path + ": fsync failed: " + ErrnoText(errno));
    return Status::Ok();
  }

  Status Close(int fd, const std::string& path) override {
    // No retry on EINTR: Linux releases the descriptor before reporting it.
    if (::close(fd) != 0) return IoError(path + ": close failed: " + ErrnoText(errno));
    return Status::Ok();
  }

  Status Rename(const std::string& from, const std::string& to) override {
    if (::rename(from.c_str(), to.c_str()) != 0) {
      return IoError(from + ": rename to " + to + " failed: " + ErrnoText(errno));
    }
    return Status::Ok();
  }

  Status Remove(const std::string& path) override {
    if (::unlink(path.c_str()) != 0 && errno != ENOENT) {
      return IoError(path + ": cannot remove: " + ErrnoText(errno));
    }
    return Status::Ok();
  }

  Status SyncDir(const std::string& dir) override {
    const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return IoError(dir + ": cannot open directory to fsync: " + ErrnoText(errno));
    const int rc = ::fsync(fd);
    const int err = errno;
    ::close(fd);
    if (rc != 0) return IoError(dir + ": fsync failed: " + ErrnoText(err));
    return Status::Ok();
  }

  Result<std::string> ReadFile(const std::string& path, uint64_t max_bytes) override {
    ASSIGN_OR_RETURN(const int fd, OpenRegularFileForRead(path));
    // The size first: a file larger than the bound is refused before a byte is read. It is
    // only a lower bound while reading (files in /proc report 0; a file may grow): read until
    // EOF, within the bound.
    std::string out;
    struct stat st {};
    if (::fstat(fd, &st) == 0 && st.st_size > 0) {
      if (static_cast<uint64_t>(st.st_size) > max_bytes) {
        ::close(fd);
        return DataLoss(path + ": " + std::to_string(st.st_size) + " bytes, larger than the " +
                        std::to_string(max_bytes) + " bytes allowed");
      }
      out.reserve(static_cast<size_t>(st.st_size));
    }
    char buf[65536];
    while (true) {
      const ssize_t r = ::read(fd, buf, sizeof(buf));
      if (r < 0 && errno == EINTR) continue;
      if (r < 0) {
        const int err = errno;
        ::close(fd);
        return IoError(path + ": read failed: " + ErrnoText(err));
      }
      if (r == 0) break;
      if (static_cast<uint64_t>(r) > max_bytes - out.size()) {
        ::close(fd);
        return DataLoss(path + ": larger than " + std::to_string(max_bytes) + " bytes");
      }
      out.append(buf, static_cast<size_t>(r));
    }
    ::close(fd);
    return out;
  }

  Status MakeDir(const std::string& path) override {
    if (::mkdir(path.c_str(), 0755) == 0) return Status::Ok();
    const int err = errno;
    struct stat st {};
    if (err == EEXIST && ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) return Status::Ok();
    // A path that can never be a directory — a file in the way, a component that is a file,
    // no permission, a read-only file system, a name too long — is the caller's input, not a
    // failure a retry could cure (a full disk or an I/O error might be).
    const bool permanent = err == EEXIST || err == ENOTDIR || err == EACCES || err == EPERM ||
                           err == EROFS || err == ENAMETOOLONG || err == ELOOP;
    const std::string what = path + ": cannot create directory: " + ErrnoText(err) +
                             (err == EEXIST ? " (a file is in the way)" : "");
    return permanent ? InvalidArgument(what) : IoError(what);
  }

  Status RemoveTree(const std::string& path) override {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);  // does not follow symlinks
    if (ec) return IoError(path + ": cannot remove: " + ec.message());
    return Status::Ok();
  }

  Result<std::vector<std::string>> ListDir(const std::string& path) override {
    std::error_code ec;
    std::filesystem::directory_iterator it(path, ec);
    if (ec) {
      if (ec == std::errc::no_such_file_or_directory) return NotFound(path + ": no such directory");
      return IoError(path + ": cannot list: " + ec.message());
    }
    std::vector<std::string> names;
    for (const auto& entry : it) names.push_back(entry.path().filename().string());
    std::sort(names.begin(), names.end());
    return names;
  }

  Result<int> OpenForRead(const std::string& path) override { return OpenRegularFileForRead(path); }

  Status ReadAt(int fd, void* data, size_t n, uint64_t offset, const std::string& path) override {
    char* p = static_cast<char*>(data);
    while (n > 0) {
      const ssize_t r = ::pread(fd, p, std::min(n, kMaxIoBytes), static_cast<off_t>(offset));
      if (r < 0) {
        if (errno == EINTR) continue;
        return IoError(path + ": read at byte " + std::to_string(offset) + " failed: " +
                       ErrnoText(errno));
      }
      if (r == 0) {
        return DataLoss(path + ": file ends before byte " + std::to_string(offset + n) +
                        " (truncated?)");
      }
      p += r;
      n -= static_cast<size_t>(r);
      offset += static_cast<uint64_t>(r);
    }
    return Status::Ok();
  }

  Result<uint64_t> FileSize(int fd, const std::string& path) override {
    struct stat st {};
    if (::fstat(fd, &st) != 0) return IoError(path + ": cannot stat: " + ErrnoText(errno));
    return static_cast<uint64_t>(st.st_size);
  }
};

// What a non-regular file is, for messages.
const char* NonRegularName(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  return "not a regular file";
}

}  // namespace

const char* FileKindName(FileKind kind) {
  switch (kind) {
    case FileKind::kMissing: return "missing";
    case FileKind::kRegular: return "a regular file";
    case FileKind::kDirectory: return "a directory";
    case FileKind::kSymlink: return "a symbolic link";
    case FileKind::kOther: return "a special file (FIFO, device or socket)";
  }
  return "?";
}

Result<FileKind> FileSystem::Kind(const std::string& path) {
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0) {
    if (errno == ENOENT || errno == ENOTDIR) return FileKind::kMissing;
    return IoError(path + ": cannot stat: " + ErrnoText(errno));
  }
  if (S_ISREG(st.st_mode)) return FileKind::kRegular;
  if (S_ISDIR(st.st_mode)) return FileKind::kDirectory;
  if (S_ISLNK(st.st_mode)) return FileKind::kSymlink;
  return FileKind::kOther;
}

Result<int> OpenRegularFileForRead(const std::string& path) {
  // O_NONBLOCK: opening a FIFO planted where a file should be must not wait for a writer.
  // It changes nothing for the regular files that pass the check below.
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) {
    const int err = errno;
    if (err == ENOENT) return NotFound(path + ": file not found");
    if (err == EISDIR) return DataLoss(path + ": is a directory, not a regular file");
    return IoError(path + ": cannot open: " + ErrnoText(err));
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    return IoError(path + ": cannot stat: " + ErrnoText(err));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    return DataLoss(path + ": is " + NonRegularName(st.st_mode) + ", not a regular file");
  }
  return fd;
}

FileSystem& DefaultFileSystem() {
  static PosixFileSystem* const fs = new PosixFileSystem();  // never destroyed: usable at exit
  return *fs;
}

Status MakeDirs(const std::string& path, FileSystem& fs) {
  for (size_t pos = path.find('/', 1); pos != std::string::npos; pos = path.find('/', pos + 1)) {
    RETURN_IF_ERROR(fs.MakeDir(path.substr(0, pos)));
  }
  return fs.MakeDir(path);
}

Result<std::string> ReadFileToString(const std::string& path, uint64_t max_bytes) {
  return DefaultFileSystem().ReadFile(path, max_bytes);
}

Result<std::string> ReadInputFile(const std::string& path, uint64_t max_bytes,
                                  std::string_view what) {
  Result<std::string> text = ReadFileToString(path, max_bytes);
  if (text.ok()) return text;
  // The file system's messages start with the path; keep the reason after it.
  std::string reason = text.status().message();
  if (reason.rfind(path + ": ", 0) == 0) reason = reason.substr(path.size() + 2);
  return NotFound(path + ": cannot read " + std::string(what) + ": " + reason);
}

std::string ParentDir(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

Status SyncDir(const std::string& dir) { return DefaultFileSystem().SyncDir(dir); }

// ---------------------------------------------------------------------------------------------
// AtomicFileWriter

Result<std::unique_ptr<AtomicFileWriter>> AtomicFileWriter::Create(const std::string& path,
                                                                   FileSystem& fs) {
  std::unique_ptr<AtomicFileWriter> w(new AtomicFileWriter(fs, path));
  ASSIGN_OR_RETURN(w->fd_, fs.OpenForWrite(w->tmp_path_));
  return w;
}

AtomicFileWriter::~AtomicFileWriter() {
  if (committed_ || failed_) return;  // nothing left behind in either case
  (void)Fail(Status::Ok());
}

Status AtomicFileWriter::Usable() const {
  if (committed_) return FailedPrecondition(path_ + ": writer already committed");
  if (failed_) return FailedPrecondition(tmp_path_ + ": writer failed earlier; start again");
  return Status::Ok();
}

Status AtomicFileWriter::Fail(Status st) {
  failed_ = true;
  if (fd_ >= 0) (void)fs_.Close(fd_, tmp_path_);
  fd_ = -1;
  // Best effort: the first error is the one worth reporting.
  (void)fs_.Remove(tmp_path_);
  return st;
}

Status AtomicFileWriter::Append(const void* data, size_t n) {
  RETURN_IF_ERROR(Usable());
  Status st = fs_.Write(fd_, data, n, tmp_path_);
  if (!st.ok()) return Fail(std::move(st));
  bytes_appended_ += n;
  return Status::Ok();
}

Status AtomicFileWriter::WriteAt(uint64_t offset, const void* data, size_t n) {
  RETURN_IF_ERROR(Usable());
  if (offset > bytes_appended_ || n > bytes_appended_ - offset) {
    return Fail(InvalidArgument(tmp_path_ + ": WriteAt [" + std::to_string(offset) + ", +" +
                                std::to_string(n) + ") is beyond the " +
                                std::to_string(bytes_appended_) + " bytes appended"));
  }
  Status st = fs_.WriteAt(fd_, data, n, offset, tmp_path_);
  if (!st.ok()) return Fail(std::move(st));
  return Status::Ok();
}

Status AtomicFileWriter::Commit() {
  RETURN_IF_ERROR(Usable());
  Status st = fs_.Sync(fd_, tmp_path_);
  if (!st.ok()) return Fail(std::move(st));
  const int fd = fd_;
  fd_ = -1;
  st = fs_.Close(fd, tmp_path_);
  if (!st.ok()) return Fail(std::move(st));
  st = fs_.Rename(tmp_path_, path_);
  if (!st.ok()) return Fail(std::move(st));
  committed_ = true;  // <path> now holds the new bytes; only durability remains
  return fs_.SyncDir(ParentDir(path_));
}

Status WriteFileAtomic(const std::string& path, std::string_view bytes, FileSystem& fs) {
  ASSIGN_OR_RETURN(std::unique_ptr<AtomicFileWriter> w, AtomicFileWriter::Create(path, fs));
  RETURN_IF_ERROR(w->Append(bytes.data(), bytes.size()));
  return w->Commit();
}

// ---------------------------------------------------------------------------------------------
// POSIX primitives

Status WriteAll(int fd, const void* data, size_t n, const std::string& path_for_errors) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    const ssize_t w = ::write(fd, p, std::min(n, kMaxIoBytes));
    if (w < 0) {
      if (errno == EINTR) continue;
      return IoError(path_for_errors + ": write failed: " + ErrnoText(errno));
    }
    p += w;
    n -= static_cast<size_t>(w);
  }
  return Status::Ok();
}

Status PreadAll(int fd, void* out, size_t n, uint64_t offset, const std::string& path) {
  char* p = static_cast<char*>(out);
  while (n > 0) {
    const ssize_t r = ::pread(fd, p, std::min(n, kMaxIoBytes), static_cast<off_t>(offset));
    if (r < 0) {
      if (errno == EINTR) continue;
      return IoError(path + ": read failed: " + ErrnoText(errno));
    }
    if (r == 0) {
      return DataLoss(path + ": unexpected end of file at byte " + std::to_string(offset) +
                      ": truncated (changed after open?)");
    }
    p += r;
    n -= static_cast<size_t>(r);
    offset += static_cast<uint64_t>(r);
  }
  return Status::Ok();
}

}  // namespace tessera
