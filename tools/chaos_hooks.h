// tools/chaos_hooks.h — test-only fault hooks inside a rank's checkpoint writes, for faults that
// must happen at an exact point no outside signal can hit: in the middle of writing a shard,
// or while checkpoint I/O fails.
//
// THESE HOOKS EXIST ONLY FOR `tessera chaos` AND TESTS. Nothing arms them by default: they
// exist in a rank only when TESSERA_CHAOS_HOOKS (runtime/supervisor/rank_env.h) names a plan,
// which only the chaos runner sets, and even then each hook does nothing until the runner
// creates its "armed" file.
//
// Owns: the hook plan (its strict parsing), ChaosFileSystem (the FileSystem a supervised rank
// hands the checkpointer through RunLink::checkpoint_file_system()) and ChaosHooks (plan + file
// system, built from the environment by tools/supervised_rank.cc).
//
// Plan: TESSERA_CHAOS_HOOKS=<dir>/hooks.json holding
//   {"hooks": [{"id": "3", "kind": "kill_in_checkpoint", "rank": 1},
//              {"id": "5", "kind": "io_error", "rank": -1, "errno": "ENOSPC"}]}
//   id     required string, 1..64 of [A-Za-z0-9_.-], not "." or "..", unique: names the files
//   kind   required: kill_in_checkpoint | io_error | kill_in_offload | offload_io_error
//   rank   required integer: the rank it acts on; -1 = every rank (the io_error kinds only)
//   errno  io_error and offload_io_error only, required there: ENOSPC | EIO
//   at     kill_in_offload and offload_io_error only, optional: update_write (default) |
//          update_read | checkpoint_read
// Unknown keys, wrong types and duplicate ids are errors naming the file and the field
// ("<file>: hooks[1].errno: ..."): a rank refuses to start with a malformed plan.
//
// Arming (from outside, by the runner, while the job runs): hook <id> is armed while the file
// <dir>/armed/<id> exists. A rank looks (one stat()) only when a call of the kinds below
// reaches a file of a checkpoint staging directory, so hooks cost nothing outside saves.
// Markers: <dir>/fired/<id> (created by the rank, O_CREAT|O_EXCL; <dir>/fired is created if
// missing) tells the runner a hook took effect:
//   kill_in_checkpoint fires at most ONCE across all ranks and incarnations: the rank claims
//     the marker before firing; if it already exists (EEXIST) the hook does nothing. It fires
//     on a write into this rank's shard file (shard_<rank>.bin): when the file already holds
//     bytes, right before the write; when it is still empty, after writing the first half of
//     this write (at least one byte, so a shard written in one call is still cut in the
//     middle). Then raise(SIGKILL): the shard stays partially written, the staging directory
//     uncommitted.
//   io_error fails every matching call of a rank it targets while armed, with the errno (the
//     Status says kIoError with strerror text, e.g. "No space left on device", and the hook
//     id); the first failure in a process also tries to create the marker (EEXIST ignored).
//   kill_in_offload and offload_io_error act on the optimizer's offload file
//     (optimizer.offload: nvme; ChaosOffloadFaults, optimizer/offload_file.h), on the transfer
//     `at` names past the file's first chunk once a chunk of the pass is done (update_write:
//     the step is half written to disk; update_read: half read, a chunk already updated;
//     checkpoint_read: a save has streamed part of the state) and
//     fire at most ONCE across all ranks and incarnations (the marker is claimed first):
//     kill_in_offload raises SIGKILL; offload_io_error fails that transfer with the errno (a
//     step ends with kIoError, a restartable exit; a save fails and commits nothing). Never on
//     the file's creation.
// Staging directory: a path component "step_<digits>.tmp" (checkpoint/commit.h). The calls
// that io_error fails are those that put data into one: OpenForWrite, Write, WriteAt, Sync of
// a file below it, Rename from it or from below it (the manifest's rename and the commit's
// rename of the directory itself), SyncDir of it. Never reads, never anything under a
// committed step_<N>, never the root's fsync after a commit rename (that would report a
// committed checkpoint as failed): saves fail, training goes on, the previous committed
// checkpoint is untouched.
//
// Thread-safety: ChaosFileSystem is safe from any thread (a checkpoint writer thread uses it);
// its only state is an atomic flag per hook. Hooks are read-only after construction.
#pragma once

#include <atomic>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "optimizer/offload_file.h"
#include "runtime/core/file_util.h"
#include "runtime/core/status.h"

namespace tessera {

enum class ChaosHookKind { kKillInCheckpoint, kIoError, kKillInOffload, kOffloadIoError };
const char* ChaosHookKindName(ChaosHookKind kind);  // as written in the plan

struct ChaosHook {
  std::string id;
  ChaosHookKind kind = ChaosHookKind::kIoError;
  int rank = -1;          // -1 = every rank (io_error only)
  int error_number = 0;   // io_error, offload_io_error: ENOSPC or EIO
  // kill_in_offload, offload_io_error: which transfer of the offload file — "update_write"
  // (default), "update_read" (an optimizer step's) or "checkpoint_read" (a save streaming the
  // state from the file).
  std::string at = "update_write";
};

struct ChaosPlan {
  std::string path;  // the plan file
  std::string dir;   // its folder: armed/<id> and fired/<id> live there
  std::vector<ChaosHook> hooks;
};

// Parses plan text read from `path` (which names the errors and gives `dir`). kInvalidArgument
// "<path>: <field>: ..." for anything malformed.
Result<ChaosPlan> ParseChaosPlan(const std::string& text, const std::string& path);
// Reads (at most 1 MiB) and parses the plan file.
Result<ChaosPlan> LoadChaosPlan(const std::string& path);

// Forwards every call to `base`; calls into a checkpoint staging directory go through the
// hooks of `plan` that target `rank` (see the file comment).
class ChaosFileSystem final : public FileSystem {
 public:
  ChaosFileSystem(ChaosPlan plan, int rank, FileSystem& base = DefaultFileSystem());
  // Not copyable or movable: the per-rank hook lists point into plan_.
  ChaosFileSystem(const ChaosFileSystem&) = delete;
  ChaosFileSystem& operator=(const ChaosFileSystem&) = delete;

  Result<int> OpenForWrite(const std::string& path) override;
  Status Write(int fd, const void* data, size_t n, const std::string& path) override;
  Status WriteAt(int fd, const void* data, size_t n, uint64_t offset,
                 const std::string& path) override;
  Status Sync(int fd, const std::string& path) override;
  Status Close(int fd, const std::string& path) override { return base_.Close(fd, path); }
  Status Rename(const std::string& from, const std::string& to) override;
  Status Remove(const std::string& path) override { return base_.Remove(path); }
  Status SyncDir(const std::string& dir) override;
  Result<std::string> ReadFile(const std::string& path, uint64_t max_bytes) override {
    return base_.ReadFile(path, max_bytes);
  }
  Status MakeDir(const std::string& path) override { return base_.MakeDir(path); }
  Status RemoveTree(const std::string& path) override { return base_.RemoveTree(path); }
  Result<std::vector<std::string>> ListDir(const std::string& path) override {
    return base_.ListDir(path);
  }
  Result<int> OpenForRead(const std::string& path) override { return base_.OpenForRead(path); }
  Status ReadAt(int fd, void* data, size_t n, uint64_t offset, const std::string& path) override {
    return base_.ReadAt(fd, data, n, offset, path);
  }
  Result<uint64_t> FileSize(int fd, const std::string& path) override {
    return base_.FileSize(fd, path);
  }

  const ChaosPlan& plan() const { return plan_; }
  int rank() const { return rank_; }

 private:
  // An armed io_error hook's failure for `op` on `path`, or Ok.
  Status IoFault(const std::string& path, const char* op);
  // Runs the kill hooks for a write of n bytes into this rank's shard; never returns when one
  // fires. `write_half` writes the first half through the base file system.
  template <typename WriteHalf>
  void MaybeKill(int fd, size_t n, const std::string& path, WriteHalf write_half);
  bool Armed(const ChaosHook& hook) const;
  // Creates fired/<id> with O_EXCL: true when this call created it.
  bool ClaimFired(const ChaosHook& hook, const std::string& what) const;

  const ChaosPlan plan_;
  const int rank_;
  FileSystem& base_;
  std::vector<const ChaosHook*> io_hooks_, kill_hooks_;  // those targeting rank_
  std::unique_ptr<std::atomic<bool>[]> io_reported_;     // per io_hooks_ entry
  std::string my_shard_;                                 // "shard_<rank>.bin"
};

// The offload file's fault hooks of `plan` that target `rank` (see the file comment).
class ChaosOffloadFaults final : public OffloadFaults {
 public:
  ChaosOffloadFaults(const ChaosPlan& plan, int rank);
  Status Before(const char* op, const char* pass, const std::string& path, int64_t chunk,
                int64_t done) override;

 private:
  const ChaosPlan& plan_;
  const int rank_;
  std::vector<const ChaosHook*> hooks_;
};

class ChaosHooks {
 public:
  // Null (no error) when TESSERA_CHAOS_HOOKS is unset; an error naming the variable and the
  // plan's error when it is empty, unreadable (kNotFound, kIoError) or malformed
  // (kInvalidArgument).
  static Result<std::unique_ptr<ChaosHooks>> FromEnvironment(int rank);
  static Result<std::unique_ptr<ChaosHooks>> FromPlanFile(const std::string& path, int rank,
                                                          FileSystem& base = DefaultFileSystem());

  ChaosFileSystem* file_system() { return &fs_; }
  OffloadFaults* offload_faults() { return &offload_; }
  const ChaosPlan& plan() const { return fs_.plan(); }

 private:
  ChaosHooks(ChaosPlan plan, int rank, FileSystem& base)
      : fs_(std::move(plan), rank, base), offload_(fs_.plan(), rank) {}
  ChaosFileSystem fs_;
  ChaosOffloadFaults offload_;  // reads fs_'s plan
};

}  // namespace tessera
