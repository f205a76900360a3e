// tests/fault/power_loss_file_system.h — a FileSystem that simulates power loss, in the style
// of LevelDB's FaultInjectionTestEnv: it forwards every operation to the POSIX file system over
// a real directory tree and keeps, beside it, a model of what is DURABLE:
//   - a file's bytes become durable at Sync(fd) of it (a copy of the bytes is kept, so later
//     unsynced appends, overwrites and truncations are lost); a file never synced comes back
//     empty if its name survives;
//   - a directory's entries (name -> file or directory, renames into / out of it and removals
//     included) become durable at SyncDir of that directory; a new directory therefore exists
//     durably only once its parent's entries are synced, and its own contents only as far as
//     its own entries were synced.
// Files and directories are identified by ids this class assigns when it sees them created,
// never by path (a rename moves a whole subtree) nor by inode number (reused after deletion).
// Everything under the root at construction is durable.
//
// Crash: after the K-th mutating operation (CrashAfter(K)) or at Crash(), every later
// operation fails with kIoError, reads included, as a dead process would issue none of them
// (Close still releases the descriptor). SimulatePowerLoss() then rewrites the real tree under
// the root to exactly the durable state and "reboots": the new tree is all durable, the
// counter starts again from zero. Mutating operations: OpenForWrite, Write, WriteAt, Sync,
// SyncDir, Rename, Remove, MakeDir, RemoveTree (each call counts, even one that fails or does
// nothing, e.g. MakeDir of an existing directory), and ExternalOperation (a write done around
// the seam that a test wants crash points on both sides of).
//
// Outside the model: paths outside the root (forwarded as they are: MakeDirs walks every
// ancestor), and the `passthrough` subtrees named at creation (relative to the root), which
// something writes outside this seam — RocksDB's catalog does its own I/O with synced writes.
// A passthrough subtree is left as it is on disk by the power loss when its parent directory
// survives, and goes with its parent otherwise. Anything else found under the root that this
// class did not see created is wiped by the power loss, like every non-durable object.
// Thread-safety: every call takes one mutex (the checkpoint writer thread calls in too).
// Test-only.
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "runtime/core/file_util.h"
#include "runtime/core/status.h"

namespace tessera::testing {

class PowerLossFileSystem final : public FileSystem {
 public:
  // `root`: an existing directory holding only regular files and directories (a symlink or
  // special file there is kInvalidArgument). `passthrough`: root-relative paths ("ckpt/catalog").
  static Result<std::unique_ptr<PowerLossFileSystem>> Create(
      const std::string& root, std::vector<std::string> passthrough = {});

  // Operations 1..ops run; the (ops+1)-th and everything after fail. 0 = never crash.
  void CrashAfter(int64_t ops);
  void Crash();  // from now on
  bool crashed() const;
  // Mutating operations run since creation (or since the last power loss), and what each was
  // ("Rename <from>"), for messages that name a crash point.
  int64_t mutating_ops() const;
  std::vector<std::string> operations() const;
  // Counts a mutating operation done outside this seam (a catalog write), so that crash points
  // fall before and after it too; fails, doing nothing else, once the process is dead. The
  // caller performs the operation only on OK.
  Status ExternalOperation(const std::string& what);

  // Rewrites the tree under the root to the durable state (see the file comment). Requires no
  // descriptor of the file system still open (kFailedPrecondition naming how many).
  Status SimulatePowerLoss();

  // The bytes `relative` (to the root) would hold after a power loss now; nullopt when it
  // would not exist as a file.
  std::optional<std::string> DurableFile(const std::string& relative) const;

  Result<int> OpenForWrite(const std::string& path) override;
  Status Write(int fd, const void* data, size_t n, const std::string& path) override;
  Status WriteAt(int fd, const void* data, size_t n, uint64_t offset,
                 const std::string& path) override;
  Status Sync(int fd, const std::string& path) override;
  Status Close(int fd, const std::string& path) override;
  Status Rename(const std::string& from, const std::string& to) override;
  Status Remove(const std::string& path) override;
  Status SyncDir(const std::string& dir) override;
  Result<std::string> ReadFile(const std::string& path, uint64_t max_bytes) override;
  Status MakeDir(const std::string& path) override;
  Status RemoveTree(const std::string& path) override;
  Result<std::vector<std::string>> ListDir(const std::string& path) override;
  Result<int> OpenForRead(const std::string& path) override;
  Status ReadAt(int fd, void* data, size_t n, uint64_t offset, const std::string& path) override;
  Result<uint64_t> FileSize(int fd, const std::string& path) override;

 private:
  using Id = int64_t;
  static constexpr Id kNone = -1;
  struct Node {
    bool is_dir = false;
    std::string live, durable;                     // a file's bytes now / after a power loss
    std::map<std::string, Id> live_entries, durable_entries;  // a directory's names
  };
  struct OpenFile {
    Id node = kNone;     // kNone: untracked (outside the root or passthrough)
    uint64_t pos = 0;    // Write appends here (the descriptor's file position)
  };
  // Where a path falls: tracked (under the root, outside every passthrough subtree) with its
  // root-relative components (none for the root itself), or not.
  struct Place {
    bool tracked = false;
    std::vector<std::string> parts;  // root-relative components
  };

  PowerLossFileSystem(std::string root, std::vector<std::vector<std::string>> passthrough);
  Status Scan(const std::string& real, Id dir, const std::vector<std::string>& rel);
  Place Locate(const std::string& path) const;
  bool IsPassthrough(const std::vector<std::string>& parts) const;
  bool HoldsPassthrough(const std::vector<std::string>& parts) const;
  Id LiveLookup(const std::vector<std::string>& parts) const;  // kNone if missing
  Id NewNode(bool is_dir);
  // Under mu_: the crash check, then counts and logs "<kind> <path>".
  Status BeginMutation(const char* kind, const std::string& path);
  Status Dead(const std::string& what) const;
  Status Rebuild(const std::string& real, Id dir, const std::vector<std::string>& rel,
                 std::vector<Id>& on_path);

  const std::string root_;
  const std::vector<std::vector<std::string>> passthrough_;
  FileSystem& base_ = DefaultFileSystem();
  mutable std::mutex mu_;
  std::deque<Node> nodes_;  // by id (a deque: references stay valid as it grows); [0] = root
  std::map<int, OpenFile> open_;  // descriptors opened for writing through this seam
  int64_t ops_ = 0, crash_after_ = 0;
  std::vector<std::string> log_;  // log_[k - 1]: mutating operation k
  bool crashed_ = false;
};

}  // namespace tessera::testing
