// checkpoint/catalog.cc — Catalog over RocksDB (see catalog.h). The only file that includes
// RocksDB.
//
// Values are compact JSON objects (JsonWriter / ParseJson); every field is checked on the way
// back in, so a value written by something else (an older version, a hand edit, bit rot that
// slipped past RocksDB's own checksums) becomes a kDataLoss naming the key, never a crash or a
// silently defaulted entry.
// A read-only Catalog sees the database as it was when opened (RocksDB replays the writer's
// log at OpenForReadOnly); `tessera ckpt ls` opens a fresh one per listing.
// The entry's JSON form (CheckpointEntryToJson / FromJson) is public: the control plane sends
// it too; OpenCatalogForWriting is the one place a damaged catalog is set aside.
#include "checkpoint/catalog.h"

#include <rocksdb/db.h>
#include <rocksdb/env.h>
#include <rocksdb/iterator.h>
#include <rocksdb/options.h>

#include <chrono>
#include <cinttypes>
#include <cstdarg>
#include <cstdlib>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <system_error>

#include "checkpoint/commit.h"
#include "runtime/core/json.h"

namespace tessera {
namespace {

constexpr const char* kCkptPrefix = "ckpt/";
constexpr const char* kEventPrefix = "event/";

// RocksDB opens its info LOG in the database directory and renames an existing one aside; a
// reader must not rotate the writer's log under it, so read-only opens log nowhere.
class SilentLogger : public rocksdb::Logger {
 public:
  using rocksdb::Logger::Logv;
  void Logv(const char* /*format*/, va_list /*ap*/) override {}
};

std::string CkptKey(int64_t step) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%s%020" PRId64, kCkptPrefix, step);
  return buf;
}

std::string EventKey(int64_t unix_ms, uint64_t seq) {
  char buf[64];
  // The sequence keeps two events of one millisecond apart, in the order they were added.
  std::snprintf(buf, sizeof(buf), "%s%020" PRId64 "/%010" PRIu64, kEventPrefix, unix_ms, seq);
  return buf;
}

// Typed field readers over a parsed object; each error names the field (callers add where the
// object came from).
class Fields {
 public:
  explicit Fields(const JsonValue& obj) : obj_(obj) {}

  Status Int(const char* name, int64_t* out) const {
    const JsonValue* v = obj_.Find(name);
    if (!v || !v->is_integer()) return Bad(name, "an integer");
    *out = v->as_int();
    return Status::Ok();
  }
  Status Number(const char* name, double* out) const {
    const JsonValue* v = obj_.Find(name);
    if (!v || !v->is_number()) return Bad(name, "a number");
    *out = v->as_double();
    return Status::Ok();
  }
  Status String(const char* name, std::string* out) const {
    const JsonValue* v = obj_.Find(name);
    if (!v || !v->is_string()) return Bad(name, "a string");
    *out = v->as_string();
    return Status::Ok();
  }

 private:
  static Status Bad(const char* name, const char* expected) {
    return DataLoss(std::string("field \"") + name + "\" missing or not " + expected);
  }
  const JsonValue& obj_;
};

Status NonNegative(const char* name, double v) {
  if (v < 0) return DataLoss(std::string("field \"") + name + "\" is negative");
  return Status::Ok();
}

Result<JsonValue> ParseObject(const std::string& text, const std::string& where) {
  // Values are a few hundred bytes; a small bound keeps a garbage value from costing memory.
  auto parsed = ParseJson(text, /*max_values=*/1024);
  if (!parsed.ok()) return DataLoss(where + ": unreadable value: " + parsed.status().message());
  if (!parsed->is_object()) return DataLoss(where + ": value is not a JSON object");
  return std::move(parsed).value();
}

Result<CheckpointEntry> DecodeEntry(const std::string& key, const std::string& text,
                                    const std::string& db_path) {
  const std::string where = "catalog " + db_path + " key " + key;
  ASSIGN_OR_RETURN(JsonValue obj, ParseObject(text, where));
  Result<CheckpointEntry> e = CheckpointEntryFromJson(obj);
  if (!e.ok()) return e.status().WithPrefix(where);
  if (CkptKey(e->step) != key) {
    return DataLoss(where + ": value is for step " + std::to_string(e->step) + ", not its key");
  }
  return e;
}

Result<CatalogEvent> DecodeEvent(const std::string& key, const std::string& text,
                                 const std::string& db_path) {
  const std::string where = "catalog " + db_path + " key " + key;
  ASSIGN_OR_RETURN(JsonValue obj, ParseObject(text, where));
  Fields f(obj);
  CatalogEvent ev;
  Status s = f.Number("unix_s", &ev.unix_s);
  if (s.ok()) s = f.String("kind", &ev.kind);
  if (s.ok()) s = f.String("message", &ev.message);
  if (!s.ok()) return s.WithPrefix(where);
  return ev;
}

bool StartsWith(const rocksdb::Slice& s, const std::string& prefix) {
  return s.size() >= prefix.size() && std::memcmp(s.data(), prefix.data(), prefix.size()) == 0;
}

}  // namespace

const char* CheckpointStatusName(CheckpointStatus s) {
  switch (s) {
    case CheckpointStatus::kWriting: return "writing";
    case CheckpointStatus::kCommitted: return "committed";
    case CheckpointStatus::kFailed: return "failed";
    case CheckpointStatus::kCorrupt: return "corrupt";
    case CheckpointStatus::kDeleted: return "deleted";
  }
  return "unknown";
}

Result<CheckpointStatus> ParseCheckpointStatus(const std::string& name) {
  for (CheckpointStatus s : {CheckpointStatus::kWriting, CheckpointStatus::kCommitted,
                             CheckpointStatus::kFailed, CheckpointStatus::kCorrupt,
                             CheckpointStatus::kDeleted}) {
    if (name == CheckpointStatusName(s)) return s;
  }
  return DataLoss("unknown checkpoint status \"" + name + "\"");
}

JsonValue CheckpointEntryToJson(const CheckpointEntry& e) {
  return JsonValue::Object({
      {"step", JsonValue::Integer(e.step)},
      {"status", JsonValue::String(CheckpointStatusName(e.status))},
      {"dir", JsonValue::String(e.dir)},
      {"bytes", JsonValue::Integer(static_cast<int64_t>(e.bytes))},
      {"layout", JsonValue::String(e.layout)},
      {"stall_seconds", JsonValue::Number(e.stall_seconds)},
      {"write_seconds", JsonValue::Number(e.write_seconds)},
      {"commit_unix_s", JsonValue::Number(e.commit_unix_s)},
      {"note", JsonValue::String(e.note)},
  });
}

Result<CheckpointEntry> CheckpointEntryFromJson(const JsonValue& v) {
  if (!v.is_object()) return DataLoss("checkpoint entry is not a JSON object");
  Fields f(v);
  CheckpointEntry e;
  int64_t bytes = 0;
  std::string status;
  RETURN_IF_ERROR(f.Int("step", &e.step));
  RETURN_IF_ERROR(f.String("status", &status));
  RETURN_IF_ERROR(f.String("dir", &e.dir));
  RETURN_IF_ERROR(f.Int("bytes", &bytes));
  RETURN_IF_ERROR(f.String("layout", &e.layout));
  RETURN_IF_ERROR(f.Number("stall_seconds", &e.stall_seconds));
  RETURN_IF_ERROR(f.Number("write_seconds", &e.write_seconds));
  RETURN_IF_ERROR(f.Number("commit_unix_s", &e.commit_unix_s));
  RETURN_IF_ERROR(f.String("note", &e.note));
  Result<CheckpointStatus> parsed = ParseCheckpointStatus(status);
  if (!parsed.ok()) return DataLoss("field \"status\": " + parsed.status().message());
  e.status = *parsed;
  RETURN_IF_ERROR(NonNegative("step", static_cast<double>(e.step)));
  RETURN_IF_ERROR(NonNegative("bytes", static_cast<double>(bytes)));
  RETURN_IF_ERROR(NonNegative("stall_seconds", e.stall_seconds));
  RETURN_IF_ERROR(NonNegative("write_seconds", e.write_seconds));
  RETURN_IF_ERROR(NonNegative("commit_unix_s", e.commit_unix_s));
  e.bytes = static_cast<uint64_t>(bytes);
  return e;
}

struct Catalog::Impl {
  std::unique_ptr<rocksdb::DB> db;
  std::string path;  // <root>/catalog
  bool read_only = false;
  uint64_t next_event_seq = 0;

  Status Error(const char* what, const rocksdb::Status& s) const {
    return IoError("catalog " + path + ": " + what + ": " + s.ToString());
  }
  Status Writable() const {
    if (read_only) return FailedPrecondition("catalog " + path + " is open read-only");
    return Status::Ok();
  }
  Status SyncedPut(const std::string& key, const std::string& value) {
    RETURN_IF_ERROR(Writable());
    rocksdb::WriteOptions wo;
    wo.sync = true;  // a recorded commit must survive a crash (~120 us, PLATFORM.md)
    rocksdb::Status s = db->Put(wo, key, value);
    if (!s.ok()) return Error("write failed", s);
    return Status::Ok();
  }
  // Calls fn(key, value) for every key with `prefix`, in key order.
  template <typename Fn>
  Status Scan(const std::string& prefix, Fn&& fn) const {
    std::unique_ptr<rocksdb::Iterator> it(db->NewIterator(rocksdb::ReadOptions()));
    for (it->Seek(prefix); it->Valid() && StartsWith(it->key(), prefix); it->Next()) {
      RETURN_IF_ERROR(fn(it->key().ToString(), it->value().ToString()));
    }
    if (!it->status().ok()) return Error("read failed", it->status());
    return Status::Ok();
  }
};

Catalog::Catalog(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

Catalog::~Catalog() {
  if (impl_ && impl_->db) {
    // Close reports an error only for unreleased snapshots; the WAL is synced at every write.
    rocksdb::Status s = impl_->db->Close();
    (void)s;
  }
}

Result<std::unique_ptr<Catalog>> Catalog::Open(const std::string& root, bool read_only) {
  auto impl = std::make_unique<Impl>();
  impl->path = root + "/catalog";
  impl->read_only = read_only;
  rocksdb::Options options;
  options.keep_log_file_num = 2;
  options.max_open_files = 64;  // a catalog has a handful of files; leave descriptors to shards
  // A catalog holds a few KiB of records, but while open RocksDB's defaults reserve disk for
  // a 64 MiB memtable's log (fallocate of 1.1x that) and a 4 MiB MANIFEST: 76 MiB of the
  // checkpoint volume (measured on tmpfs) that a nearly full disk then cannot give to the
  // shards, so saves failed with ENOSPC while the space was there. 1 MiB of memtable still
  // holds hundreds of commits between flushes.
  options.write_buffer_size = 1 << 20;
  options.manifest_preallocation_size = 64 << 10;
  rocksdb::DB* db = nullptr;
  rocksdb::Status s;
  std::error_code ec;
  if (read_only) {
    // RocksDB's message for a missing database is long and odd; the caller (ckpt ls) wants to
    // tell "no catalog" from "catalog broken".
    if (!std::filesystem::exists(impl->path + "/CURRENT", ec)) {
      return NotFound("catalog " + impl->path + ": no catalog there");
    }
    options.info_log = std::make_shared<SilentLogger>();
    s = rocksdb::DB::OpenForReadOnly(options, impl->path, &db);
  } else {
    std::filesystem::create_directories(root, ec);
    if (ec) return IoError("catalog " + impl->path + ": cannot create " + root + ": " + ec.message());
    options.create_if_missing = true;
    s = rocksdb::DB::Open(options, impl->path, &db);
  }
  if (!s.ok()) {
    std::string msg = "catalog " + impl->path + ": cannot open" +
                      (read_only ? " read-only: " : " for writing: ") + s.ToString();
    if (!read_only && s.ToString().find("lock") != std::string::npos) {
      msg += " (another process, e.g. a running `tessera train`, holds it open for writing; "
             "only one writer at a time — readers open it read-only)";
    }
    // A damaged database (as opposed to a held lock or an OS error) is kDataLoss, so a
    // writer can set it aside and start a new one: the directories are the ground truth.
    if (s.IsCorruption() || s.IsInvalidArgument()) return DataLoss(msg);
    return IoError(msg);
  }
  impl->db.reset(db);
  if (!read_only) {
    // Continue the event sequence of earlier writers, so two events of one millisecond from
    // two runs never share a key (the second would overwrite the first).
    std::unique_ptr<rocksdb::Iterator> it(impl->db->NewIterator(rocksdb::ReadOptions()));
    it->SeekForPrev(std::string(kEventPrefix) + "\xff");
    if (it->Valid() && StartsWith(it->key(), kEventPrefix)) {
      const std::string key = it->key().ToString();
      impl->next_event_seq = std::strtoull(key.c_str() + key.rfind('/') + 1, nullptr, 10) + 1;
    }
  }
  return std::unique_ptr<Catalog>(new Catalog(std::move(impl)));
}

Result<OpenedCatalog> OpenCatalogForWriting(const std::string& root, FileSystem& fs) {
  // Durably: the first to create the root may be the catalog's writer (a supervisor), and a
  // root whose own entry was never synced loses every checkpoint later committed in it.
  RETURN_IF_ERROR(MakeDirsDurably(root, fs));
  OpenedCatalog out;
  auto catalog = Catalog::Open(root, /*read_only=*/false);
  if (!catalog.ok() && catalog.status().code() == StatusCode::kDataLoss) {
    // Set aside for inspection, never deleted: it may hold the only record of old failures.
    const auto now = std::chrono::system_clock::now().time_since_epoch();
    const std::string aside = root + "/catalog.damaged-" +
        std::to_string(std::chrono::duration_cast<std::chrono::seconds>(now).count());
    RETURN_IF_ERROR(fs.Rename(root + "/catalog", aside));
    out.recreated = "the catalog was damaged (" + catalog.status().ToString() + "): moved to " +
                    aside + ", started a new one";
    catalog = Catalog::Open(root, /*read_only=*/false);
  }
  RETURN_IF_ERROR(catalog.status());
  out.catalog = std::move(catalog).value();
  return out;
}

Status Catalog::Put(const CheckpointEntry& e) {
  if (e.step < 0) return InvalidArgument("catalog: negative step " + std::to_string(e.step));
  JsonWriter w;
  w.Value(CheckpointEntryToJson(e));
  return impl_->SyncedPut(CkptKey(e.step), w.str());
}

Result<CheckpointEntry> Catalog::Get(int64_t step) const {
  if (step < 0) return NotFound("catalog " + impl_->path + ": no entry for step " + std::to_string(step));
  const std::string key = CkptKey(step);
  std::string value;
  rocksdb::Status s = impl_->db->Get(rocksdb::ReadOptions(), key, &value);
  if (s.IsNotFound()) {
    return NotFound("catalog " + impl_->path + ": no entry for step " + std::to_string(step));
  }
  if (!s.ok()) return impl_->Error("read failed", s);
  return DecodeEntry(key, value, impl_->path);
}

Result<std::vector<CheckpointEntry>> Catalog::List() const {
  std::vector<CheckpointEntry> out;
  // Zero-padded keys sort by step.
  RETURN_IF_ERROR(impl_->Scan(kCkptPrefix, [&](const std::string& k, const std::string& v) {
    ASSIGN_OR_RETURN(CheckpointEntry e, DecodeEntry(k, v, impl_->path));
    out.push_back(std::move(e));
    return Status::Ok();
  }));
  return out;
}

Status Catalog::SetStatus(int64_t step, CheckpointStatus status, const std::string& note) {
  RETURN_IF_ERROR(impl_->Writable());
  ASSIGN_OR_RETURN(CheckpointEntry e, Get(step));
  e.status = status;
  e.note = note;
  return Put(e);
}

Status Catalog::AddEvent(const std::string& kind, const std::string& message) {
  RETURN_IF_ERROR(impl_->Writable());
  const auto now = std::chrono::system_clock::now().time_since_epoch();
  const int64_t unix_ms = std::chrono::duration_cast<std::chrono::milliseconds>(now).count();
  JsonWriter w;
  w.BeginObject();
  w.Key("unix_s").Double(std::chrono::duration<double>(now).count());
  w.Key("kind").String(kind);
  w.Key("message").String(message);
  w.EndObject();
  return impl_->SyncedPut(EventKey(unix_ms, impl_->next_event_seq++), w.str());
}

Result<std::vector<CatalogEvent>> Catalog::Events() const {
  std::vector<CatalogEvent> out;
  RETURN_IF_ERROR(impl_->Scan(kEventPrefix, [&](const std::string& k, const std::string& v) {
    ASSIGN_OR_RETURN(CatalogEvent ev, DecodeEvent(k, v, impl_->path));
    out.push_back(std::move(ev));
    return Status::Ok();
  }));
  return out;
}

}  // namespace tessera
