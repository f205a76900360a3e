// checkpoint/catalog.h — the checkpoint catalog: a RocksDB database under the checkpoint root
// (`<root>/catalog/`) recording every checkpoint's status, size, layout and timings, and the
// run's events.
//
// One writer at a time (RocksDB allows one process to open a database for writing): the
// coordinator of a standalone `tessera train` (rank 0), or the supervisor under `tessera launch`.
// Readers (`tessera ckpt ls` while training runs) open it read-only. Every write is synced
// (WriteOptions::sync, ~120 us here) so a commit recorded here survives a crash.
// Keys: "ckpt/<step, 20 digits>" -> CheckpointEntry as JSON; "event/<unix ms, 20 digits>/<seq>"
// -> event JSON. A missing or unreadable value is reported, not fatal: the directory on disk
// (manifest present = committed) is the ground truth a loader trusts after verification.
// RocksDB is used only inside catalog.cc. Thread-safety: one thread per Catalog.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "runtime/core/file_util.h"
#include "runtime/core/json.h"
#include "runtime/core/status.h"

namespace tessera {

enum class CheckpointStatus { kWriting, kCommitted, kFailed, kCorrupt, kDeleted };
const char* CheckpointStatusName(CheckpointStatus s);  // "writing", "committed", ...

struct CheckpointEntry {
  int64_t step = 0;
  CheckpointStatus status = CheckpointStatus::kWriting;
  std::string dir;            // absolute or root-relative directory name ("step_00000100")
  uint64_t bytes = 0;
  std::string layout;         // e.g. "dp=4 zero=3 precision=bf16"
  double stall_seconds = 0;   // training stall of the save
  double write_seconds = 0;   // background write + fsync
  double commit_unix_s = 0;   // when it committed (0 if not)
  std::string note;           // why it failed / was marked corrupt
};

struct CatalogEvent {
  double unix_s = 0;
  std::string kind;     // "save_failed", "corrupt", "resume", "commit", ...
  std::string message;
};

// Where the checkpointer records what it does. The local RocksDB Catalog below is one; under
// a supervisor the coordinator gets a sink that relays each write over the control plane to
// the supervisor, the catalog's single writer (tools/supervised_rank.h). Writes may fail and
// are then reported by the caller, never fatal: the directories are the ground truth.
class CatalogSink {
 public:
  virtual ~CatalogSink() = default;
  virtual Status Put(const CheckpointEntry& e) = 0;
  virtual Status SetStatus(int64_t step, CheckpointStatus status, const std::string& note) = 0;
  virtual Status AddEvent(const std::string& kind, const std::string& message) = 0;
  // kNotFound if the sink knows no entry for `step` (a relaying sink knows none).
  virtual Result<CheckpointEntry> Get(int64_t step) const = 0;
  // Returns once every write so far is out of this process (a relaying sink queues them):
  // what must be on record before an irreversible step, such as deleting a directory.
  // An error when that cannot be known. Local sinks write synchronously.
  virtual Status Flush() { return Status::Ok(); }
  // A step the memory tier holds on every host (runtime/train/host_tier.h). Not a catalog
  // entry (nothing is on disk); a relaying sink tells the supervisor, whose crash-loop guard
  // counts it as progress.
  virtual void NoteHeldInMemory(int64_t step) { (void)step; }
};

// The entry's JSON object (the catalog's value format, also sent over the control plane) and
// back. Parse is strict: kDataLoss naming the field for missing keys, wrong types, unknown
// status names or negative numbers. Keys it does not know are ignored here (a catalog value
// from a newer writer stays readable); the control plane's decoder refuses them.
JsonValue CheckpointEntryToJson(const CheckpointEntry& e);
Result<CheckpointEntry> CheckpointEntryFromJson(const JsonValue& v);
Result<CheckpointStatus> ParseCheckpointStatus(const std::string& name);

class Catalog : public CatalogSink {
 public:
  // Opens (creating when !read_only) `<root>/catalog`. kDataLoss when the database is damaged;
  // kIoError naming the path and RocksDB's message on other failures (e.g. another writer
  // holds the lock).
  static Result<std::unique_ptr<Catalog>> Open(const std::string& root, bool read_only);
  ~Catalog();

  Status Put(const CheckpointEntry& e) override;
  // kNotFound if there is no entry for `step`.
  Result<CheckpointEntry> Get(int64_t step) const override;
  // Every entry, by step ascending.
  Result<std::vector<CheckpointEntry>> List() const;
  // Sets status and note of an existing entry (kNotFound if none).
  Status SetStatus(int64_t step, CheckpointStatus status, const std::string& note) override;
  Status AddEvent(const std::string& kind, const std::string& message) override;
  Result<std::vector<CatalogEvent>> Events() const;

 private:
  struct Impl;
  explicit Catalog(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// The catalog writer's open (a standalone coordinator, or the supervisor): creates `root` if
// needed and opens `<root>/catalog` for writing. A damaged database (kDataLoss) must not stop a
// run (the checkpoint directories are the ground truth): it is renamed to
// `<root>/catalog.damaged-<unix s>` through `fs`, a new one is started and `recreated` says so
// (empty otherwise). Other errors (another writer holds it, I/O) are returned.
struct OpenedCatalog {
  std::unique_ptr<Catalog> catalog;
  std::string recreated;
};
Result<OpenedCatalog> OpenCatalogForWriting(const std::string& root,
                                            FileSystem& fs = DefaultFileSystem());

}  // namespace tessera
