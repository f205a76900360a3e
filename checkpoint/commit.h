// checkpoint/commit.h — the directory protocol of a checkpoint root, and the commit.
//
// Layout of a root:
//   <root>/step_<N, 8+ digits>/        a COMMITTED checkpoint (has manifest.json)
//   <root>/step_<N>.tmp/                being written (shard files, no manifest yet)
//   <root>/catalog/                     RocksDB (catalog.h)
// Commit (the coordinator, after every rank's shard is durable): ValidateCoverage, write
// manifest.json into the .tmp directory (temp + fsync + rename + fsync dir), rename
// step_<N>.tmp -> step_<N>, fsync the root. A crash or an error anywhere before the final
// rename leaves at most a .tmp directory, which no loader looks at: the previous committed
// checkpoint is untouched, and the next save (of any step) starts by removing the stale .tmp.
// A step directory that already exists (a re-run) is replaced only after the new one is
// complete: it is renamed aside to step_<N>.old first and removed after the commit.
// Durability: the root is created durably (MakeDirsDurably), the commit's last fsync is the
// root's, after the rename; tests/fault/power_loss_checkpoint_test.cc cuts the power at every
// operation of a save + commit and checks what survives.
// Thread-safety: functions over a FileSystem; one coordinator per root.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "checkpoint/file_names.h"
#include "checkpoint/manifest.h"
#include "runtime/core/file_util.h"
#include "runtime/core/status.h"

namespace tessera {

// Steps of the committed checkpoint directories under `root` (directories named step_<N>
// holding an entry manifest.json — of any kind: a manifest that is a FIFO or a directory is a
// damaged checkpoint, for the loader to refuse; nothing is verified here), newest first. An absent root has none. Only the
// canonical StepDirName spelling counts ("step_1" is ignored), so no step is listed twice.
Result<std::vector<int64_t>> CommittedSteps(const std::string& root,
                                            FileSystem& fs = DefaultFileSystem());

// Names under `root` that look like checkpoints but are not committed ones (`committed`:
// CommittedSteps): a step_<N> without manifest (the protocol never leaves one: damage),
// step_<N>.corrupt (set aside by an earlier resume), and files, links or FIFOs named like a
// checkpoint, each with why ("step_00000100 (regular file)"). Empty when `root` is unreadable.
std::vector<std::string> UnusableCheckpointNames(const std::string& root,
                                                 const std::vector<int64_t>& committed,
                                                 FileSystem& fs = DefaultFileSystem());

// Creates `dir` and its missing parents durably: after each mkdir, the new directory's parent
// is fsynced, since a directory entry survives a power loss only once its directory is synced
// (without it, a root created by this run could vanish with every checkpoint committed in it).
// A directory that exists already is left as it is. Errors name the directory.
Status MakeDirsDurably(const std::string& dir, FileSystem& fs = DefaultFileSystem());

// Repairs what a crash left in `root` (OK if there is no root): every step_<M>.deleting and
// step_<M>.tmp is removed; a step_<M>.old is removed if step_<M> exists, else renamed back to
// step_<M> (a crash between the two renames of a re-run's commit; an .old is always a complete
// committed directory). Only while no save is in flight: the coordinator calls it when it
// starts (saying what it removed: the step_<M>.tmp names returned), when it prepares a save
// and before a resume lists the committed steps (until then, after such a crash, step_<M> is
// missing and its catalog record says committed).
Result<std::vector<std::string>> SweepRoot(const std::string& root,
                                           FileSystem& fs = DefaultFileSystem());

// Creates <root> (if needed, durably), runs SweepRoot, and creates a fresh, empty
// <root>/step_<N>.tmp for the shard writers.
Status PrepareStaging(const std::string& root, int64_t step, FileSystem& fs = DefaultFileSystem());

// The commit sequence above for manifest `m` (m.step names the directories). On error nothing
// committed is damaged; the .tmp may remain (removed by the next PrepareStaging or AbandonStaging).
// `here` (null: every shard): which of m.shards this root holds — a root on one host's own
// storage holds its host's shards (and replicas), not all (runtime/train/host_tier.h); only
// those are checked.
Status CommitCheckpoint(const std::string& root, const Manifest& m,
                        FileSystem& fs = DefaultFileSystem(),
                        const std::vector<bool>* here = nullptr);

// Removes <root>/step_<N>.tmp (a failed save).
Status AbandonStaging(const std::string& root, int64_t step, FileSystem& fs = DefaultFileSystem());

// Deletes committed checkpoint step_<N> (retention): renamed to step_<N>.deleting first, so
// a crash midway never leaves a directory that looks committed but is incomplete. A leftover
// step_<N>.old goes too (the sweep would otherwise restore it). kNotFound if there is no step_<N>.
Status DeleteCheckpoint(const std::string& root, int64_t step, FileSystem& fs = DefaultFileSystem());

}  // namespace tessera
