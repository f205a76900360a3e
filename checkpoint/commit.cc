// checkpoint/commit.cc — the directory protocol of a checkpoint root. Contract in commit.h.
//
// Names under a root and what they mean:
//   step_<N>            committed (complete, with manifest.json)
//   step_<N>.tmp        staging: shard files being written; never read by a loader
//   step_<N>.old        a committed step_<N> moved aside while a re-run of step N commits;
//                       always complete (it only ever comes from renaming a committed dir)
//   step_<N>.deleting   being removed; may be partial, so nothing ever reads it
// A directory is removed only after it has been renamed to .deleting (and the rename made
// durable), so a crash in the middle of a removal never leaves a partial directory under a
// name that looks committed or restorable. SweepRoot (PrepareStaging starts with it) cleans up
// what a crash left behind: .deleting and .tmp are removed, and a .old is removed if its
// step_<N> exists or renamed back to step_<N> if it does not (the crash fell between
// "step_<N> -> .old" and ".tmp -> step_<N>"). The sweep assumes no save or commit is in flight
// on the root (one coordinator per root, which prepares a save only once the previous one is
// committed or abandoned).
#include "checkpoint/commit.h"

#include <algorithm>
#include <cstdio>
#include <functional>

#include "runtime/core/check.h"

namespace tessera {
namespace {

std::string Join(const std::string& dir, const std::string& name) {
  if (dir.empty()) return name;
  if (dir.back() == '/') return dir + name;
  return dir + "/" + name;
}


bool Contains(const std::vector<std::string>& sorted_names, const std::string& name) {
  return std::binary_search(sorted_names.begin(), sorted_names.end(), name);
}

// Removes <root>/<name> the safe way: rename to step_<step>.deleting (durably), then remove.
Status Discard(const std::string& root, const std::string& name, int64_t step, FileSystem& fs) {
  const std::string deleting = Join(root, StepDirName(step) + std::string(kDeletingSuffix));
  RETURN_IF_ERROR(fs.RemoveTree(deleting));  // stale leftover of an earlier crash
  RETURN_IF_ERROR(fs.Rename(Join(root, name), deleting));
  RETURN_IF_ERROR(fs.SyncDir(root));
  return fs.RemoveTree(deleting);
}

}  // namespace

Result<std::vector<std::string>> SweepRoot(const std::string& root, FileSystem& fs) {
  Result<std::vector<std::string>> listed = fs.ListDir(root);
  if (!listed.ok() && listed.status().code() == StatusCode::kNotFound) {
    return std::vector<std::string>{};
  }
  ASSIGN_OR_RETURN(const std::vector<std::string> names, std::move(listed));
  std::vector<std::string> removed_staging;
  for (const std::string& name : names) {
    // A .tmp of any step is a save that died before its commit (none is in flight): without
    // this, one of a step never saved again would hold a checkpoint's worth of disk forever.
    if (ParseSuffixedStepDirName(name, kDeletingSuffix) >= 0 || ParseSuffixedStepDirName(name, kStagingSuffix) >= 0) {
      RETURN_IF_ERROR(fs.RemoveTree(Join(root, name)));
      if (ParseSuffixedStepDirName(name, kStagingSuffix) >= 0) removed_staging.push_back(name);
      continue;
    }
    const int64_t step = ParseSuffixedStepDirName(name, kOldSuffix);
    if (step < 0) continue;
    if (Contains(names, StepDirName(step))) {
      RETURN_IF_ERROR(Discard(root, name, step, fs));
    } else {
      RETURN_IF_ERROR(fs.Rename(Join(root, name), Join(root, StepDirName(step))));
      RETURN_IF_ERROR(fs.SyncDir(root));
    }
  }
  return removed_staging;
}

Result<std::vector<int64_t>> CommittedSteps(const std::string& root, FileSystem& fs) {
  Result<std::vector<std::string>> names = fs.ListDir(root);
  if (!names.ok()) {
    if (names.status().code() == StatusCode::kNotFound) return std::vector<int64_t>{};
    return names.status();
  }
  std::vector<int64_t> steps;
  for (const std::string& name : *names) {
    const int64_t step = ParseStepDirName(name);
    if (step < 0) continue;
    // A file, link or FIFO named like a checkpoint is not one (the loader reports it).
    ASSIGN_OR_RETURN(const FileKind dir_kind, fs.Kind(Join(root, name)));
    if (dir_kind != FileKind::kDirectory) continue;
    // Committed = the manifest entry exists, whatever it is: a manifest that is a directory,
    // a FIFO or a link is a damaged checkpoint for the loader to refuse and set aside, not a
    // checkpoint that was never committed.
    ASSIGN_OR_RETURN(const FileKind manifest_kind, fs.Kind(Join(Join(root, name), std::string(kManifestFileName))));
    if (manifest_kind == FileKind::kMissing) continue;
    steps.push_back(step);
  }
  std::sort(steps.begin(), steps.end(), std::greater<>());
  return steps;
}

std::vector<std::string> UnusableCheckpointNames(const std::string& root,
                                                 const std::vector<int64_t>& committed,
                                                 FileSystem& fs) {
  std::vector<std::string> out;
  auto names = fs.ListDir(root);
  if (!names.ok()) return out;
  for (const std::string& name : *names) {
    const int64_t aside_step = ParseSuffixedStepDirName(name, kCorruptSuffix);
    const bool aside = aside_step >= 0;
    const int64_t step = aside ? aside_step : ParseStepDirName(name);
    if (step < 0) continue;
    auto kind = fs.Kind(Join(root, name));
    const bool dir = kind.ok() && *kind == FileKind::kDirectory;
    if (aside || !dir) {
      out.push_back(name + (dir ? "" : " (" + std::string(kind.ok() ? FileKindName(*kind) : "?") + ")"));
    } else if (std::find(committed.begin(), committed.end(), step) == committed.end()) {
      // Looked at again: a save may have committed since `committed` was listed (ckpt ls
      // beside a running job).
      auto manifest = fs.Kind(Join(Join(root, name), std::string(kManifestFileName)));
      if (manifest.ok() && *manifest != FileKind::kMissing) continue;
      out.push_back(name + " (no " + std::string(kManifestFileName) + ")");
    }
  }
  return out;
}

Status MakeDirsDurably(const std::string& dir, FileSystem& fs) {
  // Exists: nothing to do (the common case, one listing). Else the parents first, top down.
  Result<std::vector<std::string>> listed = fs.ListDir(dir);
  if (listed.ok()) return Status::Ok();
  if (listed.status().code() != StatusCode::kNotFound) return listed.status();
  const std::string parent = ParentDir(dir);
  if (parent != dir) RETURN_IF_ERROR(MakeDirsDurably(parent, fs));
  RETURN_IF_ERROR(fs.MakeDir(dir));
  return fs.SyncDir(parent);
}

Status PrepareStaging(const std::string& root, int64_t step, FileSystem& fs) {
  if (step < 0) return InvalidArgument("checkpoint step " + std::to_string(step) + " < 0");
  RETURN_IF_ERROR(MakeDirsDurably(root, fs));
  RETURN_IF_ERROR(SweepRoot(root, fs).status());
  // SweepRoot removed any stale staging directory of a failed or crashed save.
  return fs.MakeDir(Join(root, StagingDirName(step)));
}

Status CommitCheckpoint(const std::string& root, const Manifest& m, FileSystem& fs,
                        const std::vector<bool>* here) {
  if (m.step < 0) return InvalidArgument("checkpoint step " + std::to_string(m.step) + " < 0");
  const std::string step_name = StepDirName(m.step);
  const std::string staging = Join(root, StagingDirName(m.step));
  const std::string final_dir = Join(root, step_name);
  const std::string old_name = step_name + std::string(kOldSuffix);
  const std::string manifest_path = Join(staging, std::string(kManifestFileName));

  // Never commit what a loader would reject: the manifest must read back (this includes
  // ValidateCoverage) and every shard must be there with the size the manifest states.
  const std::string text = SerializeManifest(m);
  RETURN_IF_ERROR(ParseManifest(text, manifest_path).status().WithPrefix("refusing to commit"));
  for (size_t k = 0; k < m.shards.size(); ++k) {
    if (here != nullptr && (k >= here->size() || !(*here)[k])) continue;
    const ShardRecord& sh = m.shards[k];
    const std::string path = Join(staging, sh.file);
    Result<int> fd = fs.OpenForRead(path);
    if (!fd.ok()) return fd.status().WithPrefix("refusing to commit");
    Result<uint64_t> size = fs.FileSize(*fd, path);
    (void)fs.Close(*fd, path);
    if (!size.ok()) return size.status();
    if (*size != sh.bytes) {
      return FailedPrecondition("refusing to commit: " + path + " has " + std::to_string(*size) +
                                " bytes, the manifest says " + std::to_string(sh.bytes));
    }
  }

  // manifest.json: temp + fsync + rename + fsync of the staging directory, which also makes
  // the shard files' directory entries durable.
  RETURN_IF_ERROR(WriteFileAtomic(manifest_path, text, fs));

  ASSIGN_OR_RETURN(const std::vector<std::string> names, fs.ListDir(root));
  const bool old_exists = Contains(names, old_name);
  bool moved_aside = false;
  if (Contains(names, step_name)) {
    // A re-run of this step: keep the committed one until the new one is in place.
    if (old_exists) RETURN_IF_ERROR(Discard(root, old_name, m.step, fs));
    RETURN_IF_ERROR(fs.Rename(final_dir, Join(root, old_name)));
    moved_aside = true;
  }
  Status st = fs.Rename(staging, final_dir);
  if (!st.ok()) {
    // Put the previous checkpoint back; if even that fails, PrepareStaging's sweep restores it.
    if (moved_aside) (void)fs.Rename(Join(root, old_name), final_dir);
    return st;
  }
  RETURN_IF_ERROR(fs.SyncDir(root));
  // Committed. Removing the replaced directory is housekeeping: a failure leaves a .old or
  // .deleting that no loader reads and the next PrepareStaging sweeps.
  if (moved_aside || old_exists) (void)Discard(root, old_name, m.step, fs);
  return Status::Ok();
}

Status AbandonStaging(const std::string& root, int64_t step, FileSystem& fs) {
  if (step < 0) return InvalidArgument("checkpoint step " + std::to_string(step) + " < 0");
  return fs.RemoveTree(Join(root, StagingDirName(step)));
}

Status DeleteCheckpoint(const std::string& root, int64_t step, FileSystem& fs) {
  if (step < 0) return InvalidArgument("checkpoint step " + std::to_string(step) + " < 0");
  const std::string name = StepDirName(step);
  ASSIGN_OR_RETURN(const std::vector<std::string> names, fs.ListDir(root));
  if (!Contains(names, name)) return NotFound(Join(root, name) + ": no such checkpoint");
  // A leftover .old of this step first: the sweep would otherwise restore it as step_<N>.
  const std::string old_name = name + std::string(kOldSuffix);
  if (Contains(names, old_name)) RETURN_IF_ERROR(Discard(root, old_name, step, fs));
  return Discard(root, name, step, fs);
}

}  // namespace tessera
