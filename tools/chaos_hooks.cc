// tools/chaos_hooks.cc — the chaos hook plan and ChaosFileSystem (contract in chaos_hooks.h).
#include "tools/chaos_hooks.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <set>

#include "checkpoint/file_names.h"
#include "runtime/core/json.h"
#include "runtime/supervisor/rank_env.h"

namespace tessera {
namespace {

constexpr uint64_t kMaxPlanBytes = uint64_t{1} << 20;
constexpr size_t kMaxIdBytes = 64;
constexpr int64_t kMaxRank = int64_t{1} << 20;

struct ErrnoName {
  const char* name;
  int value;
};
constexpr ErrnoName kErrnos[] = {{"ENOSPC", ENOSPC}, {"EIO", EIO}};

bool ValidId(const std::string& id) {
  if (id.empty() || id.size() > kMaxIdBytes || id == "." || id == "..") return false;
  for (char c : id) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '_' || c == '.' || c == '-';
    if (!ok) return false;
  }
  return true;
}

// Path components, empty ones dropped ("a//b/" -> a, b).
std::vector<std::string_view> Components(std::string_view path) {
  std::vector<std::string_view> parts;
  size_t begin = 0;
  while (begin <= path.size()) {
    size_t slash = path.find('/', begin);
    if (slash == std::string_view::npos) slash = path.size();
    if (slash > begin) parts.push_back(path.substr(begin, slash - begin));
    begin = slash + 1;
  }
  return parts;
}

// "step_<N>.tmp": a staging directory's name (checkpoint/file_names.h StagingDirName).
bool IsStagingName(std::string_view name) { return ParseSuffixedStepDirName(name, kStagingSuffix) >= 0; }

// Where `path` sits relative to a checkpoint staging directory.
enum class Where { kOutside, kStagingDir, kInStaging };
Where Locate(const std::string& path, std::string_view* file_name) {
  const std::vector<std::string_view> parts = Components(path);
  for (size_t i = 0; i < parts.size(); ++i) {
    if (!IsStagingName(parts[i])) continue;
    if (i + 1 == parts.size()) return Where::kStagingDir;
    if (file_name != nullptr) *file_name = parts.back();
    return Where::kInStaging;
  }
  return Where::kOutside;
}

Status PlanError(const std::string& path, const std::string& field, const std::string& what) {
  return InvalidArgument(path + ": " + field + ": " + what);
}

const char* TypeName(const JsonValue& v) {
  switch (v.type()) {
    case JsonValue::Type::kNull: return "null";
    case JsonValue::Type::kBool: return "a boolean";
    case JsonValue::Type::kNumber: return "a number";
    case JsonValue::Type::kString: return "a string";
    case JsonValue::Type::kArray: return "an array";
    case JsonValue::Type::kObject: return "an object";
  }
  return "?";
}

Result<ChaosHook> ParseHook(const JsonValue& v, const std::string& path, const std::string& at) {
  if (!v.is_object()) return PlanError(path, at, std::string("expected an object, got ") + TypeName(v));
  for (const auto& [key, value] : v.members()) {
    if (key != "id" && key != "kind" && key != "rank" && key != "errno" && key != "at") {
      return PlanError(path, at + "." + key, "unknown key (expected id, kind, rank, errno, at)");
    }
  }
  ChaosHook h;
  const JsonValue* id = v.Find("id");
  if (id == nullptr) return PlanError(path, at + ".id", "missing");
  if (!id->is_string() || !ValidId(id->as_string())) {
    return PlanError(path, at + ".id",
                     "expected a string of 1.." + std::to_string(kMaxIdBytes) +
                         " characters [A-Za-z0-9_.-] (not \".\" or \"..\"), got " +
                         (id->is_string() ? "\"" + id->as_string() + "\"" : TypeName(*id)));
  }
  h.id = id->as_string();
  const JsonValue* kind = v.Find("kind");
  if (kind == nullptr) return PlanError(path, at + ".kind", "missing");
  bool known = false;
  for (ChaosHookKind k : {ChaosHookKind::kKillInCheckpoint, ChaosHookKind::kIoError,
                          ChaosHookKind::kKillInOffload, ChaosHookKind::kOffloadIoError}) {
    if (kind->is_string() && kind->as_string() == ChaosHookKindName(k)) h.kind = k, known = true;
  }
  if (!known) {
    return PlanError(path, at + ".kind",
                     std::string("expected \"kill_in_checkpoint\", \"io_error\", \"kill_in_offload\" "
                                 "or \"offload_io_error\", got ") +
                         (kind->is_string() ? "\"" + kind->as_string() + "\"" : TypeName(*kind)));
  }
  const bool io = h.kind == ChaosHookKind::kIoError || h.kind == ChaosHookKind::kOffloadIoError;
  const JsonValue* rank = v.Find("rank");
  if (rank == nullptr) return PlanError(path, at + ".rank", "missing");
  const int64_t min_rank = io ? -1 : 0;
  if (!rank->is_integer() || rank->as_int() < min_rank || rank->as_int() > kMaxRank) {
    return PlanError(path, at + ".rank",
                     std::string("expected an integer in ") + std::to_string(min_rank) + ".." +
                         std::to_string(kMaxRank) +
                         (min_rank == 0 ? " (-1, every rank, is for the io_error kinds only)" : " (-1 = every rank)"));
  }
  h.rank = static_cast<int>(rank->as_int());
  const bool offload = h.kind == ChaosHookKind::kKillInOffload || h.kind == ChaosHookKind::kOffloadIoError;
  if (const JsonValue* where = v.Find("at"); where != nullptr) {
    if (!offload) return PlanError(path, at + ".at", "only kill_in_offload and offload_io_error take at");
    const bool known_at = where->is_string() &&
                          (where->as_string() == "update_write" || where->as_string() == "update_read" ||
                           where->as_string() == "checkpoint_read");
    if (!known_at) {
      return PlanError(path, at + ".at",
                       std::string("expected \"update_write\", \"update_read\" or \"checkpoint_read\", got ") +
                           (where->is_string() ? "\"" + where->as_string() + "\"" : TypeName(*where)));
    }
    h.at = where->as_string();
  }
  const JsonValue* err = v.Find("errno");
  if (!io) {
    if (err != nullptr) return PlanError(path, at + ".errno", "only the io_error kinds take an errno");
    return h;
  }
  if (err == nullptr) return PlanError(path, at + ".errno", "missing (" + std::string(ChaosHookKindName(h.kind)) + " needs ENOSPC or EIO)");
  if (err->is_string()) {
    for (const ErrnoName& e : kErrnos) {
      if (err->as_string() == e.name) h.error_number = e.value;
    }
  }
  if (h.error_number == 0) {
    return PlanError(path, at + ".errno",
                     std::string("expected \"ENOSPC\" or \"EIO\", got ") +
                         (err->is_string() ? "\"" + err->as_string() + "\"" : TypeName(*err)));
  }
  return h;
}

}  // namespace

const char* ChaosHookKindName(ChaosHookKind kind) {
  switch (kind) {
    case ChaosHookKind::kKillInCheckpoint: return "kill_in_checkpoint";
    case ChaosHookKind::kIoError: return "io_error";
    case ChaosHookKind::kKillInOffload: return "kill_in_offload";
    case ChaosHookKind::kOffloadIoError: return "offload_io_error";
  }
  return "?";
}

Result<ChaosPlan> ParseChaosPlan(const std::string& text, const std::string& path) {
  Result<JsonValue> root = ParseJson(text, /*max_values=*/4096);
  if (!root.ok()) return InvalidArgument(path + ": not a chaos hook plan: " + root.status().message());
  if (!root->is_object()) {
    return PlanError(path, "(top level)", std::string("expected an object, got ") + TypeName(*root));
  }
  for (const auto& [key, value] : root->members()) {
    if (key != "hooks") return PlanError(path, key, "unknown key (expected hooks)");
  }
  const JsonValue* hooks = root->Find("hooks");
  if (hooks == nullptr) return PlanError(path, "hooks", "missing");
  if (!hooks->is_array()) {
    return PlanError(path, "hooks", std::string("expected an array, got ") + TypeName(*hooks));
  }
  ChaosPlan plan;
  plan.path = path;
  plan.dir = ParentDir(path);
  std::set<std::string> ids;
  for (size_t i = 0; i < hooks->items().size(); ++i) {
    const std::string at = "hooks[" + std::to_string(i) + "]";
    ASSIGN_OR_RETURN(ChaosHook h, ParseHook(hooks->items()[i], path, at));
    if (!ids.insert(h.id).second) {
      return PlanError(path, at + ".id", "\"" + h.id + "\" is used by an earlier hook");
    }
    plan.hooks.push_back(std::move(h));
  }
  return plan;
}

Result<ChaosPlan> LoadChaosPlan(const std::string& path) {
  Result<std::string> text = ReadFileToString(path, kMaxPlanBytes);
  if (!text.ok()) return text.status().WithPrefix("chaos hook plan");
  return ParseChaosPlan(*text, path);
}

// ---------------------------------------------------------------------------------------------
// ChaosFileSystem

ChaosFileSystem::ChaosFileSystem(ChaosPlan plan, int rank, FileSystem& base)
    : plan_(std::move(plan)), rank_(rank), base_(base), my_shard_(ShardFileName(rank)) {
  for (const ChaosHook& h : plan_.hooks) {
    if (h.rank != -1 && h.rank != rank_) continue;
    if (h.kind == ChaosHookKind::kIoError) io_hooks_.push_back(&h);
    if (h.kind == ChaosHookKind::kKillInCheckpoint) kill_hooks_.push_back(&h);
  }
  io_reported_ = std::make_unique<std::atomic<bool>[]>(io_hooks_.size());
  for (size_t i = 0; i < io_hooks_.size(); ++i) io_reported_[i].store(false);
}

namespace {

bool HookArmed(const ChaosPlan& plan, const ChaosHook& hook) {
  struct stat st;
  return ::stat((plan.dir + "/armed/" + hook.id).c_str(), &st) == 0;
}

// Creates fired/<id> with O_EXCL: true when this call created it.
bool ClaimHookFired(const ChaosPlan& plan, int rank, const ChaosHook& hook, const std::string& what) {
  const std::string fired_dir = plan.dir + "/fired";
  if (::mkdir(fired_dir.c_str(), 0755) != 0 && errno != EEXIST) {
    std::fprintf(stderr, "tessera: rank %d: chaos hook %s: cannot create %s: %s\n", rank,
                 hook.id.c_str(), fired_dir.c_str(), std::strerror(errno));
    return false;
  }
  const std::string marker = fired_dir + "/" + hook.id;
  const int fd = ::open(marker.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) {
    if (errno != EEXIST) {
      std::fprintf(stderr, "tessera: rank %d: chaos hook %s: cannot create %s: %s\n", rank,
                   hook.id.c_str(), marker.c_str(), std::strerror(errno));
    }
    return false;
  }
  // For the runner's report: who fired, where. Best effort: the file's existence is the signal.
  const std::string line = "rank " + std::to_string(rank) + " pid " + std::to_string(::getpid()) +
                           " " + ChaosHookKindName(hook.kind) + " " + what + "\n";
  (void)WriteAll(fd, line.data(), line.size(), marker);
  ::close(fd);
  return true;
}

}  // namespace

bool ChaosFileSystem::Armed(const ChaosHook& hook) const { return HookArmed(plan_, hook); }

bool ChaosFileSystem::ClaimFired(const ChaosHook& hook, const std::string& what) const {
  return ClaimHookFired(plan_, rank_, hook, what);
}

ChaosOffloadFaults::ChaosOffloadFaults(const ChaosPlan& plan, int rank) : plan_(plan), rank_(rank) {
  for (const ChaosHook& h : plan_.hooks) {
    const bool offload = h.kind == ChaosHookKind::kKillInOffload || h.kind == ChaosHookKind::kOffloadIoError;
    if (offload && (h.rank == -1 || h.rank == rank_)) hooks_.push_back(&h);
  }
}

Status ChaosOffloadFaults::Before(const char* op, const char* pass, const std::string& path,
                                  int64_t chunk, int64_t done) {
  // Past the file's first chunk, with at least one chunk of the pass done: the step (or the
  // save) is half done (a read-ahead of chunk 1 is issued before chunk 0 is computed).
  if (hooks_.empty() || chunk < 1 || done < 1) return Status::Ok();
  const std::string at = std::string(std::strcmp(pass, "checkpoint") == 0 ? "checkpoint" : pass) +
                         "_" + op;
  for (const ChaosHook* h : hooks_) {
    if (h->at != at || !HookArmed(plan_, *h)) continue;
    const std::string what = std::string(op) + " of chunk " + std::to_string(chunk) + " of " + path +
                             (std::strcmp(pass, "checkpoint") == 0 ? " (a checkpoint save)" : "");
    if (!ClaimHookFired(plan_, rank_, *h, what)) continue;  // fired before
    if (h->kind == ChaosHookKind::kKillInOffload) {
      std::fprintf(stderr, "tessera: rank %d: chaos hook %s: SIGKILL in the middle of an "
                           "offloaded %s (%s)\n", rank_, h->id.c_str(),
                   h->at == "checkpoint_read" ? "checkpoint save" : "optimizer step", what.c_str());
      std::fflush(stderr);
      std::raise(SIGKILL);
    }
    std::fprintf(stderr, "tessera: rank %d: chaos hook %s: the offload file's %s fails with %s\n",
                 rank_, h->id.c_str(), what.c_str(), std::strerror(h->error_number));
    return IoError(path + ": " + op + " of chunk " + std::to_string(chunk) + " failed: " +
                   std::strerror(h->error_number) + " (chaos hook " + h->id + ")");
  }
  return Status::Ok();
}

Status ChaosFileSystem::IoFault(const std::string& path, const char* op) {
  for (size_t i = 0; i < io_hooks_.size(); ++i) {
    const ChaosHook& h = *io_hooks_[i];
    if (!Armed(h)) continue;
    if (!io_reported_[i].exchange(true)) {
      std::fprintf(stderr, "tessera: rank %d: chaos hook %s: checkpoint writes fail with %s\n",
                   rank_, h.id.c_str(), std::strerror(h.error_number));
      (void)ClaimFired(h, std::string(op) + " " + path);  // EEXIST: an earlier process did
    }
    return IoError(path + ": " + op + " failed: " + std::strerror(h.error_number) +
                   " (chaos hook " + h.id + ")");
  }
  return Status::Ok();
}

template <typename WriteHalf>
void ChaosFileSystem::MaybeKill(int fd, size_t n, const std::string& path, WriteHalf write_half) {
  if (kill_hooks_.empty()) return;
  std::string_view name;
  if (Locate(path, &name) != Where::kInStaging || name != my_shard_) return;
  for (const ChaosHook* h : kill_hooks_) {
    if (!Armed(*h)) continue;
    Result<uint64_t> size = base_.FileSize(fd, path);
    const bool partial_already = size.ok() && *size > 0;
    // An empty shard and a 1-byte write: nothing to cut in half; fire on the next write.
    if (!partial_already && n < 2) return;
    if (!ClaimFired(*h, path)) continue;  // fired before (this or an earlier incarnation)
    if (!partial_already) (void)write_half(n / 2);
    std::fprintf(stderr, "tessera: rank %d: chaos hook %s: SIGKILL in the middle of writing %s\n",
                 rank_, h->id.c_str(), path.c_str());
    std::fflush(stderr);
    std::raise(SIGKILL);
  }
}

Result<int> ChaosFileSystem::OpenForWrite(const std::string& path) {
  if (!io_hooks_.empty() && Locate(path, nullptr) == Where::kInStaging) {
    RETURN_IF_ERROR(IoFault(path, "open"));
  }
  return base_.OpenForWrite(path);
}

Status ChaosFileSystem::Write(int fd, const void* data, size_t n, const std::string& path) {
  if (!io_hooks_.empty() && Locate(path, nullptr) == Where::kInStaging) {
    RETURN_IF_ERROR(IoFault(path, "write"));
  }
  MaybeKill(fd, n, path, [&](size_t half) { return base_.Write(fd, data, half, path); });
  return base_.Write(fd, data, n, path);
}

Status ChaosFileSystem::WriteAt(int fd, const void* data, size_t n, uint64_t offset,
                                const std::string& path) {
  if (!io_hooks_.empty() && Locate(path, nullptr) == Where::kInStaging) {
    RETURN_IF_ERROR(IoFault(path, "write"));
  }
  MaybeKill(fd, n, path, [&](size_t half) { return base_.WriteAt(fd, data, half, offset, path); });
  return base_.WriteAt(fd, data, n, offset, path);
}

Status ChaosFileSystem::Sync(int fd, const std::string& path) {
  if (!io_hooks_.empty() && Locate(path, nullptr) == Where::kInStaging) {
    RETURN_IF_ERROR(IoFault(path, "fsync"));
  }
  return base_.Sync(fd, path);
}

Status ChaosFileSystem::Rename(const std::string& from, const std::string& to) {
  // From below a staging directory (manifest.json.tmp -> manifest.json) or the staging
  // directory itself (the commit). Not renames of committed directories (a re-run's move aside).
  if (!io_hooks_.empty() && Locate(from, nullptr) != Where::kOutside) {
    RETURN_IF_ERROR(IoFault(from, "rename"));
  }
  return base_.Rename(from, to);
}

Status ChaosFileSystem::SyncDir(const std::string& dir) {
  if (!io_hooks_.empty() && Locate(dir, nullptr) == Where::kStagingDir) {
    RETURN_IF_ERROR(IoFault(dir, "fsync"));
  }
  return base_.SyncDir(dir);
}

// ---------------------------------------------------------------------------------------------
// ChaosHooks

Result<std::unique_ptr<ChaosHooks>> ChaosHooks::FromPlanFile(const std::string& path, int rank,
                                                             FileSystem& base) {
  ASSIGN_OR_RETURN(ChaosPlan plan, LoadChaosPlan(path));
  return std::unique_ptr<ChaosHooks>(new ChaosHooks(std::move(plan), rank, base));
}

Result<std::unique_ptr<ChaosHooks>> ChaosHooks::FromEnvironment(int rank) {
  const char* path = std::getenv(kEnvChaosHooks);
  if (path == nullptr) return std::unique_ptr<ChaosHooks>();
  if (*path == '\0') {
    return InvalidArgument(std::string("environment variable ") + kEnvChaosHooks +
                           " is set but empty (it names a chaos hook plan file)");
  }
  Result<std::unique_ptr<ChaosHooks>> hooks = FromPlanFile(path, rank);
  if (!hooks.ok()) {
    return hooks.status().WithPrefix(std::string("environment variable ") + kEnvChaosHooks);
  }
  return hooks;
}

}  // namespace tessera
