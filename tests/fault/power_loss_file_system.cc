// tests/fault/power_loss_file_system.cc — the durability model and the power loss. Contract in
// power_loss_file_system.h.
//
// The model mirrors the live tree (what the disk holds now) as nodes with ids, and beside each
// node what a power loss would leave of it: a file's last synced bytes, a directory's last
// synced entries. Every operation first runs on the real file system; only when that succeeds
// is the model updated, so model and disk agree on everything that went through the seam.
#include "tests/fault/power_loss_file_system.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <system_error>

namespace tessera::testing {
namespace {

namespace stdfs = std::filesystem;

std::vector<std::string> Split(const std::string& relative) {
  std::vector<std::string> parts;
  for (const stdfs::path& part : stdfs::path(relative).lexically_normal()) {
    const std::string s = part.string();
    if (!s.empty() && s != ".") parts.push_back(s);
  }
  return parts;
}

std::string Normalize(const std::string& path) {
  std::string s = stdfs::path(path).lexically_normal().string();
  while (s.size() > 1 && s.back() == '/') s.pop_back();
  return s;
}

bool IsPrefix(const std::vector<std::string>& prefix, const std::vector<std::string>& parts) {
  return prefix.size() <= parts.size() && std::equal(prefix.begin(), prefix.end(), parts.begin());
}

void Overwrite(std::string& bytes, uint64_t offset, const void* data, size_t n) {
  if (bytes.size() < offset + n) bytes.resize(offset + n);
  std::memcpy(bytes.data() + offset, data, n);
}

}  // namespace

Result<std::unique_ptr<PowerLossFileSystem>> PowerLossFileSystem::Create(
    const std::string& root, std::vector<std::string> passthrough) {
  std::error_code ec;
  if (!stdfs::is_directory(root, ec)) return InvalidArgument(root + ": not a directory");
  std::vector<std::vector<std::string>> pt;
  for (const std::string& p : passthrough) pt.push_back(Split(p));
  std::unique_ptr<PowerLossFileSystem> fs(new PowerLossFileSystem(Normalize(root), std::move(pt)));
  fs->nodes_.emplace_back().is_dir = true;
  RETURN_IF_ERROR(fs->Scan(fs->root_, 0, {}));
  return fs;
}

PowerLossFileSystem::PowerLossFileSystem(std::string root,
                                         std::vector<std::vector<std::string>> passthrough)
    : root_(std::move(root)), passthrough_(std::move(passthrough)) {}

// Takes the real tree under `real` (the directory node `dir`) as live and durable.
Status PowerLossFileSystem::Scan(const std::string& real, Id dir, const std::vector<std::string>& rel) {
  std::error_code ec;
  for (const stdfs::directory_entry& e : stdfs::directory_iterator(real, ec)) {
    std::vector<std::string> child = rel;
    child.push_back(e.path().filename().string());
    if (IsPassthrough(child)) continue;
    const stdfs::file_status st = e.symlink_status(ec);
    Id id = kNone;
    if (stdfs::is_directory(st)) {
      id = NewNode(true);
      RETURN_IF_ERROR(Scan(e.path().string(), id, child));
    } else if (stdfs::is_regular_file(st)) {
      id = NewNode(false);
      ASSIGN_OR_RETURN(std::string bytes, base_.ReadFile(e.path().string(), kNoSizeLimit));
      nodes_[id].live = nodes_[id].durable = std::move(bytes);
    } else {
      return InvalidArgument(e.path().string() + ": neither a regular file nor a directory");
    }
    nodes_[dir].live_entries[child.back()] = id;
    nodes_[dir].durable_entries[child.back()] = id;
  }
  if (ec) return IoError(real + ": cannot list: " + ec.message());
  return Status::Ok();
}

PowerLossFileSystem::Place PowerLossFileSystem::Locate(const std::string& path) const {
  const std::string s = Normalize(path);
  Place p;
  if (s == root_) {
    p.tracked = true;
  } else if (s.size() > root_.size() && s.compare(0, root_.size(), root_) == 0 &&
             s[root_.size()] == '/') {
    p.parts = Split(s.substr(root_.size() + 1));
    p.tracked = !IsPassthrough(p.parts);
  }
  return p;
}

bool PowerLossFileSystem::IsPassthrough(const std::vector<std::string>& parts) const {
  return std::any_of(passthrough_.begin(), passthrough_.end(),
                     [&](const auto& pt) { return IsPrefix(pt, parts); });
}

bool PowerLossFileSystem::HoldsPassthrough(const std::vector<std::string>& parts) const {
  return std::any_of(passthrough_.begin(), passthrough_.end(),
                     [&](const auto& pt) { return pt.size() > parts.size() && IsPrefix(parts, pt); });
}

PowerLossFileSystem::Id PowerLossFileSystem::LiveLookup(const std::vector<std::string>& parts) const {
  Id id = 0;
  for (const std::string& name : parts) {
    const Node& n = nodes_[id];
    if (!n.is_dir) return kNone;
    auto it = n.live_entries.find(name);
    if (it == n.live_entries.end()) return kNone;
    id = it->second;
  }
  return id;
}

PowerLossFileSystem::Id PowerLossFileSystem::NewNode(bool is_dir) {
  nodes_.emplace_back().is_dir = is_dir;
  return static_cast<Id>(nodes_.size()) - 1;
}

Status PowerLossFileSystem::Dead(const std::string& what) const {
  return IoError(what + ": simulated crash: the process died after mutating operation " +
                 std::to_string(ops_));
}

Status PowerLossFileSystem::BeginMutation(const char* kind, const std::string& path) {
  if (crashed_) return Dead(path);
  if (crash_after_ > 0 && ops_ >= crash_after_) {
    crashed_ = true;
    return Dead(path);
  }
  ++ops_;
  log_.push_back(std::string(kind) + " " + path);
  return Status::Ok();
}

Status PowerLossFileSystem::ExternalOperation(const std::string& what) {
  std::lock_guard<std::mutex> lock(mu_);
  return BeginMutation("External", what);
}

std::vector<std::string> PowerLossFileSystem::operations() const {
  std::lock_guard<std::mutex> lock(mu_);
  return log_;
}

void PowerLossFileSystem::CrashAfter(int64_t ops) {
  std::lock_guard<std::mutex> lock(mu_);
  crash_after_ = ops;
}

void PowerLossFileSystem::Crash() {
  std::lock_guard<std::mutex> lock(mu_);
  crashed_ = true;
}

bool PowerLossFileSystem::crashed() const {
  std::lock_guard<std::mutex> lock(mu_);
  return crashed_;
}

int64_t PowerLossFileSystem::mutating_ops() const {
  std::lock_guard<std::mutex> lock(mu_);
  return ops_;
}

// ---- mutating operations -------------------------------------------------------------------

Result<int> PowerLossFileSystem::OpenForWrite(const std::string& path) {
  std::lock_guard<std::mutex> lock(mu_);
  RETURN_IF_ERROR(BeginMutation("OpenForWrite", path));
  ASSIGN_OR_RETURN(const int fd, base_.OpenForWrite(path));
  OpenFile of;
  const Place p = Locate(path);
  if (p.tracked && !p.parts.empty()) {
    const Id parent = LiveLookup({p.parts.begin(), p.parts.end() - 1});
    if (parent != kNone && nodes_[parent].is_dir) {
      auto& entries = nodes_[parent].live_entries;
      auto it = entries.find(p.parts.back());
      if (it == entries.end()) {
        of.node = NewNode(false);
        nodes_[parent].live_entries[p.parts.back()] = of.node;
      } else if (!nodes_[it->second].is_dir) {
        of.node = it->second;
        nodes_[of.node].live.clear();  // O_TRUNC, durable only at the next Sync
      }
    }
  }
  open_[fd] = of;
  return fd;
}

Status PowerLossFileSystem::Write(int fd, const void* data, size_t n, const std::string& path) {
  std::lock_guard<std::mutex> lock(mu_);
  RETURN_IF_ERROR(BeginMutation("Write", path));
  RETURN_IF_ERROR(base_.Write(fd, data, n, path));
  auto it = open_.find(fd);
  if (it != open_.end()) {
    if (it->second.node != kNone) Overwrite(nodes_[it->second.node].live, it->second.pos, data, n);
    it->second.pos += n;
  }
  return Status::Ok();
}

Status PowerLossFileSystem::WriteAt(int fd, const void* data, size_t n, uint64_t offset,
                                    const std::string& path) {
  std::lock_guard<std::mutex> lock(mu_);
  RETURN_IF_ERROR(BeginMutation("WriteAt", path));
  RETURN_IF_ERROR(base_.WriteAt(fd, data, n, offset, path));
  auto it = open_.find(fd);
  if (it != open_.end() && it->second.node != kNone) {
    Overwrite(nodes_[it->second.node].live, offset, data, n);
  }
  return Status::Ok();
}

Status PowerLossFileSystem::Sync(int fd, const std::string& path) {
  std::lock_guard<std::mutex> lock(mu_);
  RETURN_IF_ERROR(BeginMutation("Sync", path));
  RETURN_IF_ERROR(base_.Sync(fd, path));
  auto it = open_.find(fd);
  if (it != open_.end() && it->second.node != kNone) {
    Node& n = nodes_[it->second.node];
    n.durable = n.live;
  }
  return Status::Ok();
}

Status PowerLossFileSystem::Rename(const std::string& from, const std::string& to) {
  std::lock_guard<std::mutex> lock(mu_);
  RETURN_IF_ERROR(BeginMutation("Rename", from + " -> " + to));
  const Place a = Locate(from), b = Locate(to);
  if (a.tracked != b.tracked || (a.tracked && (a.parts.empty() || b.parts.empty()))) {
    return InvalidArgument(from + ": rename to " + to +
                           ": moves between modelled and unmodelled trees (or the root itself), "
                           "which PowerLossFileSystem does not model");
  }
  // Before the rename: b's parent cannot lie inside what moves (POSIX refuses that).
  const Id from_parent = a.tracked ? LiveLookup({a.parts.begin(), a.parts.end() - 1}) : kNone;
  const Id to_parent = b.tracked ? LiveLookup({b.parts.begin(), b.parts.end() - 1}) : kNone;
  RETURN_IF_ERROR(base_.Rename(from, to));
  if (from_parent == kNone || to_parent == kNone) return Status::Ok();
  auto& src = nodes_[from_parent].live_entries;
  auto it = src.find(a.parts.back());
  if (it == src.end()) return Status::Ok();  // not created through the seam: not modelled
  const Id moved = it->second;
  src.erase(it);
  nodes_[to_parent].live_entries[b.parts.back()] = moved;  // replaces what was there
  return Status::Ok();
}

Status PowerLossFileSystem::Remove(const std::string& path) {
  std::lock_guard<std::mutex> lock(mu_);
  RETURN_IF_ERROR(BeginMutation("Remove", path));
  RETURN_IF_ERROR(base_.Remove(path));
  const Place p = Locate(path);
  if (!p.tracked || p.parts.empty()) return Status::Ok();
  const Id parent = LiveLookup({p.parts.begin(), p.parts.end() - 1});
  if (parent != kNone) nodes_[parent].live_entries.erase(p.parts.back());
  return Status::Ok();
}

Status PowerLossFileSystem::SyncDir(const std::string& dir) {
  std::lock_guard<std::mutex> lock(mu_);
  RETURN_IF_ERROR(BeginMutation("SyncDir", dir));
  RETURN_IF_ERROR(base_.SyncDir(dir));
  const Place p = Locate(dir);
  if (!p.tracked) return Status::Ok();
  const Id id = LiveLookup(p.parts);
  if (id != kNone && nodes_[id].is_dir) nodes_[id].durable_entries = nodes_[id].live_entries;
  return Status::Ok();
}

Status PowerLossFileSystem::MakeDir(const std::string& path) {
  std::lock_guard<std::mutex> lock(mu_);
  RETURN_IF_ERROR(BeginMutation("MakeDir", path));
  RETURN_IF_ERROR(base_.MakeDir(path));
  const Place p = Locate(path);
  if (!p.tracked || p.parts.empty()) return Status::Ok();
  const Id parent = LiveLookup({p.parts.begin(), p.parts.end() - 1});
  if (parent == kNone || nodes_[parent].live_entries.count(p.parts.back())) return Status::Ok();
  const Id id = NewNode(true);
  nodes_[parent].live_entries[p.parts.back()] = id;
  return Status::Ok();
}

Status PowerLossFileSystem::RemoveTree(const std::string& path) {
  std::lock_guard<std::mutex> lock(mu_);
  RETURN_IF_ERROR(BeginMutation("RemoveTree", path));
  const Place p = Locate(path);
  if (p.tracked && p.parts.empty()) {
    return InvalidArgument(path + ": PowerLossFileSystem does not model removing its root");
  }
  RETURN_IF_ERROR(base_.RemoveTree(path));
  if (!p.tracked) return Status::Ok();
  // Only the entry in the parent goes: the directories below keep their durable entries, which
  // come back whole if this removal is not made durable.
  const Id parent = LiveLookup({p.parts.begin(), p.parts.end() - 1});
  if (parent != kNone) nodes_[parent].live_entries.erase(p.parts.back());
  return Status::Ok();
}

// ---- the rest: forwarded while the process lives ---------------------------------------------

Status PowerLossFileSystem::Close(int fd, const std::string& path) {
  std::lock_guard<std::mutex> lock(mu_);
  open_.erase(fd);
  Status st = base_.Close(fd, path);  // releases the descriptor even for a dead process
  if (crashed_) return Dead(path);
  return st;
}

Result<std::string> PowerLossFileSystem::ReadFile(const std::string& path, uint64_t max_bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  if (crashed_) return Dead(path);
  return base_.ReadFile(path, max_bytes);
}

Result<std::vector<std::string>> PowerLossFileSystem::ListDir(const std::string& path) {
  std::lock_guard<std::mutex> lock(mu_);
  if (crashed_) return Dead(path);
  return base_.ListDir(path);
}

Result<int> PowerLossFileSystem::OpenForRead(const std::string& path) {
  std::lock_guard<std::mutex> lock(mu_);
  if (crashed_) return Dead(path);
  return base_.OpenForRead(path);
}

Status PowerLossFileSystem::ReadAt(int fd, void* data, size_t n, uint64_t offset,
                                   const std::string& path) {
  std::lock_guard<std::mutex> lock(mu_);
  if (crashed_) return Dead(path);
  return base_.ReadAt(fd, data, n, offset, path);
}

Result<uint64_t> PowerLossFileSystem::FileSize(int fd, const std::string& path) {
  std::lock_guard<std::mutex> lock(mu_);
  if (crashed_) return Dead(path);
  return base_.FileSize(fd, path);
}

// ---- the power loss --------------------------------------------------------------------------

std::optional<std::string> PowerLossFileSystem::DurableFile(const std::string& relative) const {
  std::lock_guard<std::mutex> lock(mu_);
  Id id = 0;
  for (const std::string& name : Split(relative)) {
    const Node& n = nodes_[id];
    if (!n.is_dir) return std::nullopt;
    auto it = n.durable_entries.find(name);
    if (it == n.durable_entries.end()) return std::nullopt;
    id = it->second;
  }
  if (nodes_[id].is_dir) return std::nullopt;
  return nodes_[id].durable;
}

Status PowerLossFileSystem::SimulatePowerLoss() {
  std::lock_guard<std::mutex> lock(mu_);
  if (!open_.empty()) {
    return FailedPrecondition("power loss with " + std::to_string(open_.size()) +
                              " descriptor(s) of " + root_ + " still open: close them first");
  }
  crashed_ = true;
  std::vector<Id> on_path = {0};
  RETURN_IF_ERROR(Rebuild(root_, 0, {}, on_path));
  // Reboot: what is on disk now is all durable.
  nodes_.clear();
  nodes_.emplace_back().is_dir = true;
  ops_ = crash_after_ = 0;
  log_.clear();
  crashed_ = false;
  return Scan(root_, 0, {});
}

// Makes the real directory `real` hold exactly the durable entries of node `dir`, recursively.
// Passthrough subtrees stay; so do real directories on the way to one when the durable tree
// keeps a directory of that name (their other contents are rewritten like any directory's).
Status PowerLossFileSystem::Rebuild(const std::string& real, Id dir,
                                    const std::vector<std::string>& rel, std::vector<Id>& on_path) {
  const Node& d = nodes_[dir];
  std::error_code ec;
  std::vector<stdfs::directory_entry> present;
  for (const stdfs::directory_entry& e : stdfs::directory_iterator(real, ec)) present.push_back(e);
  if (ec) return IoError(real + ": cannot list: " + ec.message());
  for (const stdfs::directory_entry& e : present) {
    std::vector<std::string> child = rel;
    child.push_back(e.path().filename().string());
    if (IsPassthrough(child)) continue;
    auto it = d.durable_entries.find(child.back());
    const bool keep = HoldsPassthrough(child) && it != d.durable_entries.end() &&
                      nodes_[it->second].is_dir && e.is_directory(ec) && !e.is_symlink(ec);
    if (keep) continue;
    stdfs::remove_all(e.path(), ec);
    if (ec) return IoError(e.path().string() + ": cannot remove: " + ec.message());
  }
  for (const auto& [name, id] : d.durable_entries) {
    // A directory durably inside itself (unsynced renames in a cycle) cannot be rebuilt: the
    // inner copy is dropped.
    if (std::find(on_path.begin(), on_path.end(), id) != on_path.end()) continue;
    const std::string path = real + "/" + name;
    std::vector<std::string> child = rel;
    child.push_back(name);
    if (nodes_[id].is_dir) {
      stdfs::create_directory(path, ec);
      if (ec) return IoError(path + ": cannot create: " + ec.message());
      on_path.push_back(id);
      Status st = Rebuild(path, id, child, on_path);
      on_path.pop_back();
      RETURN_IF_ERROR(st);
    } else {
      std::ofstream out(path, std::ios::binary | std::ios::trunc);
      out.write(nodes_[id].durable.data(), static_cast<std::streamsize>(nodes_[id].durable.size()));
      out.close();
      if (!out) return IoError(path + ": cannot write the durable bytes");
    }
  }
  return Status::Ok();
}

}  // namespace tessera::testing
