// tests/fault/faulty_file_system.h — the fault-injecting FileSystem seam for tests: forwards
// to the POSIX file system (runtime/core/file_util.h) but fails the N-th write or fsync, as a
// full disk (ENOSPC) or a dying device (EIO) would. Single-threaded; test-only.
#pragma once

#include <atomic>
#include <cerrno>
#include <cstring>
#include <string>

#include "runtime/core/file_util.h"

namespace tessera::testing {

// Fails the N-th Write/WriteAt, Sync (file or directory), Rename or MakeDir (1-based; 0 =
// never) with `err`. Counters are atomic: a checkpoint writer calls from its own thread.
class FaultyFileSystem : public FileSystem {
 public:
  int fail_write_at = 0;  // 0 = never
  int fail_sync_at = 0;
  int fail_rename_at = 0;
  int fail_mkdir_at = 0;
  int err = ENOSPC;
  std::atomic<int> writes{0}, syncs{0}, renames{0}, mkdirs{0};

  Result<int> OpenForWrite(const std::string& p) override { return base_.OpenForWrite(p); }
  Status Write(int fd, const void* d, size_t n, const std::string& p) override {
    if (++writes == fail_write_at) return IoError(p + ": write failed: " + std::strerror(err));
    return base_.Write(fd, d, n, p);
  }
  Status WriteAt(int fd, const void* d, size_t n, uint64_t off, const std::string& p) override {
    if (++writes == fail_write_at) return IoError(p + ": write failed: " + std::strerror(err));
    return base_.WriteAt(fd, d, n, off, p);
  }
  Status Sync(int fd, const std::string& p) override {
    if (++syncs == fail_sync_at) return IoError(p + ": fsync failed: " + std::strerror(err));
    return base_.Sync(fd, p);
  }
  Status Close(int fd, const std::string& p) override { return base_.Close(fd, p); }
  Status Rename(const std::string& a, const std::string& b) override {
    if (++renames == fail_rename_at) return IoError(a + ": rename failed: " + std::strerror(err));
    return base_.Rename(a, b);
  }
  Status Remove(const std::string& p) override { return base_.Remove(p); }
  Status SyncDir(const std::string& d) override {
    if (++syncs == fail_sync_at) return IoError(d + ": fsync failed: " + std::strerror(err));
    return base_.SyncDir(d);
  }
  Result<std::string> ReadFile(const std::string& p, uint64_t max) override {
    return base_.ReadFile(p, max);
  }
  Status MakeDir(const std::string& p) override {
    if (++mkdirs == fail_mkdir_at) return IoError(p + ": mkdir failed: " + std::strerror(err));
    return base_.MakeDir(p);
  }
  Status RemoveTree(const std::string& p) override { return base_.RemoveTree(p); }
  Result<std::vector<std::string>> ListDir(const std::string& p) override { return base_.ListDir(p); }
  Result<int> OpenForRead(const std::string& p) override { return base_.OpenForRead(p); }
  Status ReadAt(int fd, void* d, size_t n, uint64_t off, const std::string& p) override {
    return base_.ReadAt(fd, d, n, off, p);
  }
  Result<uint64_t> FileSize(int fd, const std::string& p) override { return base_.FileSize(fd, p); }

 private:
  FileSystem& base_ = DefaultFileSystem();
};

}  // namespace tessera::testing
