// runtime/train/host_tier.h — the checkpoint tier in hosts' memory (checkpoint.memory_interval_steps).
//
// Every memory_interval_steps steps each rank writes its shard of the state — the same bytes, format
// and checksums as a disk checkpoint's shard — into its host's tier directory
// (checkpoint.memory_dir, tmpfs by default: /dev/shm) and sends a copy to its buddy, a rank on
// the next host of a ring of hosts, so that a lost host never held the only copy of anything.
// Once every rank's shard and replica are in place, the lowest rank of each host (its leader)
// writes the manifest and commits the step in that host's directory (checkpoint/commit.h), and
// keeps the newest checkpoint.memory_keep there. The directory is named after the run line
// (RunLineId: an id kept in the disk root), so another run's snapshots are never read.
//
// The directory survives the processes, not the host: a restart after a rank crashed finds its
// own host's snapshot; a restart after a host was lost finds that host's shards as replicas on
// the survivors. Resume (Checkpointer::Resume, memory tier first): every rank reports what its
// host holds, and every rank chooses the same step — the newest whose manifest and shards the
// survivors hold between them, at least as new as the newest disk checkpoint. A rank then opens
// it through a FetchingFileSystem: a file its host lacks is fetched from a holder when the
// reader first opens it (replica_channel.h), and only the shards its part of the state needs
// are opened (CheckpointReader lazy_shards), so a resharded resume moves what it must, not
// everything. Every byte read is verified as on disk; a damaged or incomplete memory step is
// passed over for the disk tier, and the run says so.
//
// Thread-safety: HostTier's methods are called by the trainer's thread, Replicate also by the
// checkpointer's writer thread (it only reads immutable fields). The server has its own threads.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "checkpoint/replica_channel.h"
#include "comm/communicator.h"
#include "runtime/core/file_util.h"
#include "runtime/core/status.h"
#include "runtime/train/config.h"

namespace tessera {

inline constexpr char kRunLineFile[] = "run_line";  // in the disk root: the memory tier's key

// Where the ranks are: rank r's host index (hosts numbered by their lowest rank), its buddy (the
// rank at the same position on the next host, wrapping; -1 when there is one host) and whether
// it leads its host (its lowest rank).
struct HostRing {
  int hosts = 0;
  std::vector<int> host_of, buddy;
  std::vector<bool> leader;
};
// `host_key[r]`: equal for ranks on the same host.
HostRing PlaceBuddies(const std::vector<uint64_t>& host_key);

// What one host's tier directory holds of one committed step: the manifest's shard count and
// which shard files (by rank) are there.
struct HeldStep {
  int64_t step = 0;
  int64_t shards = 0;
  std::vector<int64_t> files;
};
// This host's committed steps under `root`, newest first (a step whose manifest does not parse
// is left out: it is damaged, and another host may hold it whole).
std::vector<HeldStep> ListHeldSteps(const std::string& root, FileSystem& fs);
std::vector<double> EncodeHeld(const std::vector<HeldStep>& held);
// Inverse of EncodeHeld over every rank's encoding (`width` doubles each, zero-padded).
Result<std::vector<std::vector<HeldStep>>> DecodeHeld(const std::vector<double>& all, size_t width,
                                                     int ranks);

// A step the hosts hold whole between them, and who can serve each file of it.
struct HeldChoice {
  int64_t step = -1;
  std::vector<int> manifest_holders;             // ranks whose host committed it
  std::vector<std::vector<int>> shard_holders;   // per shard: ranks whose host has the file
};
// The steps with a manifest somewhere and every shard somewhere, not older than `at_least`
// (-1: any), newest first. `skipped` (may be null) gets "step N: shard K is on no surviving
// host" for each step passed over.
std::vector<HeldChoice> CompleteSteps(const std::vector<std::vector<HeldStep>>& by_rank,
                                      int64_t at_least, std::vector<std::string>* skipped);

// A FileSystem over `base` that, when a file directly inside `dir` is missing, first fetches
// it from one of its sources (tried in order) and then answers from the local copy.
class FetchingFileSystem : public FileSystem {
 public:
  FetchingFileSystem(FileSystem& base, std::string dir,
                     std::map<std::string, std::vector<PeerAddress>> sources, uint64_t secret,
                     double timeout_s);
  int64_t files_fetched() const { return fetched_; }
  uint64_t bytes_fetched() const { return fetched_bytes_; }

  Result<int> OpenForWrite(const std::string& p) override { return base_.OpenForWrite(p); }
  Status Write(int fd, const void* d, size_t n, const std::string& p) override { return base_.Write(fd, d, n, p); }
  Status WriteAt(int fd, const void* d, size_t n, uint64_t o, const std::string& p) override {
    return base_.WriteAt(fd, d, n, o, p);
  }
  Status Sync(int fd, const std::string& p) override { return base_.Sync(fd, p); }
  Status Close(int fd, const std::string& p) override { return base_.Close(fd, p); }
  Status Rename(const std::string& a, const std::string& b) override { return base_.Rename(a, b); }
  Status Remove(const std::string& p) override { return base_.Remove(p); }
  Status SyncDir(const std::string& d) override { return base_.SyncDir(d); }
  Result<std::string> ReadFile(const std::string& p, uint64_t max) override;
  Status MakeDir(const std::string& p) override { return base_.MakeDir(p); }
  Status RemoveTree(const std::string& p) override { return base_.RemoveTree(p); }
  Result<std::vector<std::string>> ListDir(const std::string& p) override { return base_.ListDir(p); }
  Result<int> OpenForRead(const std::string& p) override;
  Status ReadAt(int fd, void* d, size_t n, uint64_t o, const std::string& p) override {
    return base_.ReadAt(fd, d, n, o, p);
  }
  Result<uint64_t> FileSize(int fd, const std::string& p) override { return base_.FileSize(fd, p); }
  Result<FileKind> Kind(const std::string& p) override;

 private:
  // Fetches `path` if it is one of dir_'s files, missing here, and some source has it.
  Status EnsureLocal(const std::string& path);

  FileSystem& base_;
  std::string dir_;
  std::map<std::string, std::vector<PeerAddress>> sources_;  // file name -> holders
  uint64_t secret_;
  double timeout_s_;
  int64_t fetched_ = 0;
  uint64_t fetched_bytes_ = 0;
};

// What a tier kept on each host's own storage needs: the memory tier, and the disk tier when
// checkpoint.dir is on each host's local disk (checkpoint.local: true — each host keeps only
// its own ranks' shards, no replica; a resume gathers what it lacks from the hosts that hold
// it, or falls back).
enum class HostTierKind { kMemory, kLocalDisk };

// One rank's view of such a tier: its server, the ring of hosts, this host's directory.
class HostTier {
 public:
  // Collective over `comm` (null: one process). Memory: reads (rank 0: creates) the run line
  // id in the disk root. Finds an address the other hosts reach, starts this rank's server and
  // exchanges the addresses. `log`: rank 0's event lines.
  static Result<std::unique_ptr<HostTier>> Start(const Config& config, Communicator* comm,
                                                 FILE* log, HostTierKind kind);

  // <memory_dir>/<run line id> (memory), checkpoint.dir (local disk)
  const std::string& root() const { return root_; }
  bool leader() const { return ring_.leader[rank_]; }
  const HostRing& ring() const { return ring_; }
  // Which ranks' shard files this host's directory holds: its own ranks', and with replicas
  // (the memory tier) those whose buddy lives here.
  std::vector<bool> ShardsHere(bool with_replicas) const;
  // Sends this rank's finished shard file of `step` (in <root>/<staging name>) to its buddy.
  // OK without a buddy (one host).
  Status Replicate(int64_t step) const;
  // What every rank's host holds (collective), and the steps held whole (CompleteSteps).
  // `newest_any` (may be null): the newest step any host holds, whole or not (-1: none).
  Result<std::vector<HeldChoice>> Choose(int64_t at_least, std::vector<std::string>* skipped,
                                         int64_t* newest_any = nullptr);
  // A file system that fetches the chosen step's missing files from their holders.
  std::unique_ptr<FetchingFileSystem> FetchingFor(const HeldChoice& c, FileSystem& base) const;

 private:
  HostTier() = default;
  Communicator* comm_ = nullptr;
  int rank_ = 0, ranks_ = 1;
  std::string root_;
  uint64_t secret_ = 0;
  double timeout_s_ = 30;
  HostRing ring_;
  std::vector<PeerAddress> peers_;  // every rank's server
  std::unique_ptr<ReplicaServer> server_;
};

// The IPv4 address other hosts reach this one at: the local end of a route toward `toward` (the
// supervisor's control address, CheckpointConfig::route_toward) when it is a non-loopback IPv4
// address, else this host name's address, else 127.0.0.1.
uint32_t ReachableIpv4(const std::string& toward);

}  // namespace tessera
