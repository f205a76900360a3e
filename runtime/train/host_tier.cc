// runtime/train/host_tier.cc — placement, inventory, choice and fetching of the in-memory
// checkpoint tier (contract in host_tier.h).
#include "runtime/train/host_tier.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <random>

#include "checkpoint/commit.h"
#include "checkpoint/file_names.h"
#include "checkpoint/manifest.h"
#include "runtime/core/crc32c.h"
#include "runtime/train/grad_sync.h"

namespace tessera {
namespace {

std::string BaseName(const std::string& path) {
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

std::string DirName(const std::string& path) {
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? "." : path.substr(0, slash);
}

uint64_t RandomU64() {
  std::random_device rd;
  return (static_cast<uint64_t>(rd()) << 32) ^ rd();
}

// 64 bits travel through AllGatherDoubles as two exact 32-bit halves.
std::vector<double> Halves(uint64_t v) {
  return {static_cast<double>(v >> 32), static_cast<double>(v & 0xffffffffu)};
}
uint64_t Whole(const double* halves) {
  return (static_cast<uint64_t>(halves[0]) << 32) | static_cast<uint64_t>(halves[1]);
}

// The run line's id in a disk root; 0 when there is none (or it is damaged: a new line of
// snapshots, the old ones unreachable, never misread).
uint64_t ReadRunLine(const std::string& disk_root) {
  Result<std::string> text = ReadFileToString(disk_root + "/" + kRunLineFile, 64);
  if (!text.ok()) return 0;
  char* end = nullptr;
  const uint64_t id = std::strtoull(text->c_str(), &end, 16);
  return end != text->c_str() ? id : 0;
}

Status WriteRunLine(const std::string& disk_root, uint64_t id) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%016llx\n", static_cast<unsigned long long>(id));
  RETURN_IF_ERROR(MakeDirsDurably(disk_root));
  return WriteFileAtomic(disk_root + "/" + kRunLineFile, buf);
}

}  // namespace

HostRing PlaceBuddies(const std::vector<uint64_t>& host_key) {
  HostRing ring;
  const int n = static_cast<int>(host_key.size());
  std::vector<uint64_t> keys;  // in order of each host's lowest rank
  std::vector<std::vector<int>> ranks_of;
  ring.host_of.assign(n, 0);
  ring.leader.assign(n, false);
  for (int r = 0; r < n; ++r) {
    auto it = std::find(keys.begin(), keys.end(), host_key[r]);
    int h = static_cast<int>(it - keys.begin());
    if (it == keys.end()) {
      keys.push_back(host_key[r]);
      ranks_of.emplace_back();
      ring.leader[r] = true;
    }
    ring.host_of[r] = h;
    ranks_of[h].push_back(r);
  }
  ring.hosts = static_cast<int>(keys.size());
  ring.buddy.assign(n, -1);
  if (ring.hosts < 2) return ring;
  for (int h = 0; h < ring.hosts; ++h) {
    const std::vector<int>& next = ranks_of[(h + 1) % ring.hosts];
    for (size_t i = 0; i < ranks_of[h].size(); ++i) ring.buddy[ranks_of[h][i]] = next[i % next.size()];
  }
  return ring;
}

std::vector<HeldStep> ListHeldSteps(const std::string& root, FileSystem& fs) {
  std::vector<HeldStep> held;
  Result<std::vector<int64_t>> steps = CommittedSteps(root, fs);
  if (!steps.ok()) return held;
  for (int64_t step : *steps) {
    const std::string dir = root + "/" + StepDirName(step);
    Result<std::string> text = fs.ReadFile(ManifestPath(dir), kMaxManifestBytes);
    if (!text.ok()) continue;
    Result<Manifest> m = ParseManifest(*text, ManifestPath(dir));
    if (!m.ok()) continue;
    Result<std::vector<std::string>> names = fs.ListDir(dir);
    if (!names.ok()) continue;
    HeldStep h{step, static_cast<int64_t>(m->shards.size()), {}};
    for (size_t k = 0; k < m->shards.size(); ++k) {
      if (std::binary_search(names->begin(), names->end(), m->shards[k].file)) h.files.push_back(static_cast<int64_t>(k));
    }
    held.push_back(std::move(h));
  }
  return held;
}

// [count, (step, shards, nfiles, file...) x count]
std::vector<double> EncodeHeld(const std::vector<HeldStep>& held) {
  std::vector<double> out = {static_cast<double>(held.size())};
  for (const HeldStep& h : held) {
    out.insert(out.end(), {static_cast<double>(h.step), static_cast<double>(h.shards),
                           static_cast<double>(h.files.size())});
    for (int64_t f : h.files) out.push_back(static_cast<double>(f));
  }
  return out;
}

Result<std::vector<std::vector<HeldStep>>> DecodeHeld(const std::vector<double>& all, size_t width,
                                                     int ranks) {
  std::vector<std::vector<HeldStep>> by_rank(ranks);
  for (int r = 0; r < ranks; ++r) {
    const double* v = all.data() + r * width;
    size_t at = 1;
    const size_t count = static_cast<size_t>(v[0]);
    for (size_t i = 0; i < count; ++i) {
      if (at + 3 > width) return Internal("memory tier inventory of rank " + std::to_string(r) + " is cut short");
      HeldStep h{static_cast<int64_t>(v[at]), static_cast<int64_t>(v[at + 1]), {}};
      const size_t nfiles = static_cast<size_t>(v[at + 2]);
      at += 3;
      if (at + nfiles > width) return Internal("memory tier inventory of rank " + std::to_string(r) + " is cut short");
      for (size_t k = 0; k < nfiles; ++k) h.files.push_back(static_cast<int64_t>(v[at + k]));
      at += nfiles;
      by_rank[r].push_back(std::move(h));
    }
  }
  return by_rank;
}

std::vector<HeldChoice> CompleteSteps(const std::vector<std::vector<HeldStep>>& by_rank,
                                      int64_t at_least, std::vector<std::string>* skipped) {
  std::vector<HeldChoice> complete;
  std::vector<int64_t> steps;
  for (const auto& held : by_rank) {
    for (const HeldStep& h : held) steps.push_back(h.step);
  }
  std::sort(steps.rbegin(), steps.rend());
  steps.erase(std::unique(steps.begin(), steps.end()), steps.end());
  for (int64_t step : steps) {
    if (step < at_least) break;
    HeldChoice c;
    c.step = step;
    int64_t shards = -1;
    bool agree = true;
    for (int r = 0; r < static_cast<int>(by_rank.size()); ++r) {
      for (const HeldStep& h : by_rank[r]) {
        if (h.step != step) continue;
        if (shards >= 0 && h.shards != shards) agree = false;
        shards = h.shards;
        c.manifest_holders.push_back(r);
        c.shard_holders.resize(static_cast<size_t>(std::max<int64_t>(shards, 0)));
        for (int64_t f : h.files) {
          if (f >= 0 && f < shards) c.shard_holders[f].push_back(r);
        }
      }
    }
    std::string why;
    if (!agree) why = "the hosts' manifests disagree on its shard count";
    for (int64_t k = 0; why.empty() && k < shards; ++k) {
      if (c.shard_holders[k].empty()) why = "shard " + std::to_string(k) + " is on no surviving host";
    }
    if (why.empty()) {
      complete.push_back(std::move(c));
    } else if (skipped != nullptr) {
      skipped->push_back("step " + std::to_string(step) + ": " + why);
    }
  }
  return complete;
}

// ---------------------------------------------------------------------------------------------
// FetchingFileSystem

FetchingFileSystem::FetchingFileSystem(FileSystem& base, std::string dir,
                                       std::map<std::string, std::vector<PeerAddress>> sources,
                                       uint64_t secret, double timeout_s)
    : base_(base), dir_(std::move(dir)), sources_(std::move(sources)), secret_(secret), timeout_s_(timeout_s) {}

Status FetchingFileSystem::EnsureLocal(const std::string& path) {
  if (DirName(path) != dir_) return Status::Ok();
  const auto it = sources_.find(BaseName(path));
  if (it == sources_.end()) return Status::Ok();
  ASSIGN_OR_RETURN(const FileKind kind, base_.Kind(path));
  if (kind != FileKind::kMissing) return Status::Ok();
  RETURN_IF_ERROR(MakeDirs(dir_, base_));
  // The last step's rel path: "<step dir name>/<file>" under every holder's tier root.
  const std::string rel = BaseName(dir_) + "/" + it->first;
  std::string tried;
  for (const PeerAddress& peer : it->second) {
    Status st = GetFile(peer, secret_, rel, path, timeout_s_);
    if (st.ok()) {
      ++fetched_;
      if (auto fd = base_.OpenForRead(path); fd.ok()) {
        if (auto size = base_.FileSize(*fd, path); size.ok()) fetched_bytes_ += *size;
        (void)base_.Close(*fd, path);
      }
      return Status::Ok();
    }
    tried += (tried.empty() ? "" : "; ") + st.ToString();
  }
  // Not fetched: the caller's open reports the file missing (damage: fall back).
  std::fprintf(stderr, "tessera: memory tier: could not fetch %s: %s\n", rel.c_str(), tried.c_str());
  return Status::Ok();
}

Result<std::string> FetchingFileSystem::ReadFile(const std::string& p, uint64_t max) {
  RETURN_IF_ERROR(EnsureLocal(p));
  return base_.ReadFile(p, max);
}

Result<int> FetchingFileSystem::OpenForRead(const std::string& p) {
  RETURN_IF_ERROR(EnsureLocal(p));
  return base_.OpenForRead(p);
}

Result<FileKind> FetchingFileSystem::Kind(const std::string& p) {
  RETURN_IF_ERROR(EnsureLocal(p));
  return base_.Kind(p);
}

// ---------------------------------------------------------------------------------------------
// HostTier

uint32_t ReachableIpv4(const std::string& toward) {
  if (!toward.empty()) {
    Result<uint32_t> ip = ParseIpv4(toward);
    if (ip.ok() && !IsLoopback(*ip)) {
      // A UDP "connection" sends nothing; it only asks the kernel which local address routes there.
      const int fd = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
      sockaddr_in a{};
      a.sin_family = AF_INET;
      a.sin_port = htons(9);
      a.sin_addr.s_addr = htonl(*ip);
      sockaddr_in local{};
      socklen_t len = sizeof local;
      const bool found = fd >= 0 && ::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0 &&
                         ::getsockname(fd, reinterpret_cast<sockaddr*>(&local), &len) == 0;
      if (fd >= 0) ::close(fd);
      if (found) return ntohl(local.sin_addr.s_addr);
    }
  }
  char host[256] = {};
  if (::gethostname(host, sizeof host - 1) == 0) {
    addrinfo hints{};
    hints.ai_family = AF_INET;
    addrinfo* found = nullptr;
    if (::getaddrinfo(host, nullptr, &hints, &found) == 0 && found != nullptr) {
      const uint32_t ip = ntohl(reinterpret_cast<sockaddr_in*>(found->ai_addr)->sin_addr.s_addr);
      ::freeaddrinfo(found);
      return ip;
    }
  }
  return 0x7f000001;
}

Result<std::unique_ptr<HostTier>> HostTier::Start(const Config& config, Communicator* comm,
                                                  FILE* log, HostTierKind kind) {
  std::unique_ptr<HostTier> t(new HostTier());
  t->comm_ = comm;
  t->rank_ = comm != nullptr ? comm->rank() : 0;
  t->ranks_ = comm != nullptr ? comm->size() : 1;
  t->timeout_s_ = std::max(30.0, static_cast<double>(config.comm.timeout_s));
  auto gather = [&](const std::vector<double>& mine) -> Result<std::vector<double>> {
    if (comm == nullptr) return mine;
    return AllGatherDoubles(comm, mine);
  };
  // The run line: what the disk roots say (with checkpoint.local each host keeps its own copy:
  // the most common id wins, so losing rank 0's host loses nothing), else rank 0's new one.
  // The secret: rank 0's.
  const bool memory = kind == HostTierKind::kMemory;
  const uint64_t here_id = memory ? ReadRunLine(config.checkpoint.dir) : 0;
  std::vector<double> mine = Halves(here_id);
  for (uint64_t v : {RandomU64() | 1, RandomU64()}) {
    const std::vector<double> h = Halves(v);
    mine.insert(mine.end(), h.begin(), h.end());
  }
  ASSIGN_OR_RETURN(std::vector<double> head, gather(mine));
  std::map<uint64_t, int> votes;
  for (int r = 0; r < t->ranks_; ++r) {
    if (const uint64_t id = Whole(head.data() + 6 * r); id != 0) ++votes[id];
  }
  uint64_t line = Whole(head.data() + 2);
  int best = 0;
  for (const auto& [id, n] : votes) {
    if (n > best) line = id, best = n;
  }
  t->secret_ = Whole(head.data() + 4);
  char name[40];
  std::snprintf(name, sizeof name, "run-%016llx", static_cast<unsigned long long>(line));
  t->root_ = memory ? config.checkpoint.memory_dir + "/" + name : config.checkpoint.dir;

  // This host's address and a host key: the address, unless it is loopback — then the host
  // name, so that hosts whose names resolve to loopback are still told apart.
  const uint32_t ip = ReachableIpv4(config.checkpoint.route_toward);
  uint64_t key = ip;
  if (IsLoopback(ip)) {
    char host[256] = {};
    (void)::gethostname(host, sizeof host - 1);
    key = (uint64_t{1} << 40) | Crc32c(host, std::strlen(host));
  }
  Result<std::unique_ptr<ReplicaServer>> server = ReplicaServer::Start(t->root_, ip, t->secret_, t->timeout_s_);
  const bool up = server.ok();
  if (up) t->server_ = std::move(*server);
  std::vector<double> me = {static_cast<double>(ip), up ? static_cast<double>(t->server_->address().port) : 0.0,
                            static_cast<double>(key >> 32), static_cast<double>(key & 0xffffffffu)};
  ASSIGN_OR_RETURN(std::vector<double> all, gather(me));
  std::vector<uint64_t> keys;
  std::string down;
  for (int r = 0; r < t->ranks_; ++r) {
    const double* v = all.data() + 4 * r;
    t->peers_.push_back({static_cast<uint32_t>(v[0]), static_cast<uint16_t>(v[1])});
    keys.push_back(Whole(v + 2));
    if (v[1] == 0.0) down += (down.empty() ? "" : ", ") + std::to_string(r);
  }
  if (!down.empty()) {
    return up ? FailedPrecondition("memory tier: the replica server of rank(s) " + down + " did not start (see their messages)")
              : server.status().WithPrefix("memory tier");
  }
  t->ring_ = PlaceBuddies(keys);
  if (memory) {
    // A root that lacks the id (or holds another) gets it: rank 0's shared one, or each host's.
    const bool writer = config.checkpoint.local ? t->ring_.leader[t->rank_] : t->rank_ == 0;
    Status wrote = writer && here_id != line ? WriteRunLine(config.checkpoint.dir, line) : Status::Ok();
    ASSIGN_OR_RETURN(std::vector<double> ok, gather({wrote.ok() ? 1.0 : 0.0}));
    if (!wrote.ok()) return wrote.WithPrefix("memory tier: the run line id");
    if (std::find(ok.begin(), ok.end(), 0.0) != ok.end()) {
      return FailedPrecondition("memory tier: another rank could not write the run line id (see its messages)");
    }
  }
  bool unreachable = false;
  for (int r = 0; r < t->ranks_ && t->ring_.hosts > 1; ++r) unreachable |= IsLoopback(t->peers_[r].ipv4);
  if (unreachable) {
    return FailedPrecondition(
        std::string(memory ? "memory tier" : "checkpoint.local") + ": the ranks run on " + std::to_string(t->ring_.hosts) +
        " hosts, but some host knows itself only by a loopback address, so the others cannot "
        "reach it for replicas: run under tessera launch (which names a reachable address) or "
        "make the host names resolve to reachable addresses");
  }
  if (t->rank_ == 0 && log != nullptr && !memory) {
    std::fprintf(log, "checkpoint: host-local: each of the %d host(s) keeps its own ranks' shards "
                 "under %s (no replica: a lost host's shards are gone with it)\n",
                 t->ring_.hosts, t->root_.c_str());
    std::fflush(log);
  } else if (t->rank_ == 0 && log != nullptr) {
    const std::string every = config.checkpoint.memory_interval == CheckpointInterval::kAuto
                                  ? std::string("on its own Young/Daly schedule")
                                  : "every " + std::to_string(config.checkpoint.memory_interval_steps) + " steps";
    std::fprintf(log, "checkpoint: memory tier %s in %s on %d host(s)%s\n", every.c_str(), t->root_.c_str(),
                 t->ring_.hosts,
                 t->ring_.hosts > 1 ? ", each rank's shard also on the next host's ranks (a ring)"
                                    : "; one host, so no replicas: a lost host loses the tier");
    std::fflush(log);
  }
  return t;
}

std::vector<bool> HostTier::ShardsHere(bool with_replicas) const {
  std::vector<bool> here(ranks_, false);
  const int mine = ring_.host_of[rank_];
  for (int r = 0; r < ranks_; ++r) {
    here[r] = ring_.host_of[r] == mine ||
              (with_replicas && ring_.buddy[r] >= 0 && ring_.host_of[ring_.buddy[r]] == mine);
  }
  return here;
}

Status HostTier::Replicate(int64_t step) const {
  const int buddy = ring_.buddy[rank_];
  if (buddy < 0) return Status::Ok();
  const std::string file = ShardFileName(rank_);
  const std::string rel = StagingDirName(step) + "/" + file;
  return PutFile(peers_[buddy], secret_, rel, root_ + "/" + rel, timeout_s_)
      .WithPrefix("replica of rank " + std::to_string(rank_) + " to rank " + std::to_string(buddy));
}

Result<std::vector<HeldChoice>> HostTier::Choose(int64_t at_least, std::vector<std::string>* skipped,
                                                 int64_t* newest_any) {
  std::vector<double> mine = EncodeHeld(ListHeldSteps(root_, DefaultFileSystem()));
  auto gather = [&](const std::vector<double>& v) -> Result<std::vector<double>> {
    if (comm_ == nullptr) return v;
    return AllGatherDoubles(comm_, v);
  };
  ASSIGN_OR_RETURN(std::vector<double> lens, gather({static_cast<double>(mine.size())}));
  const size_t width = static_cast<size_t>(*std::max_element(lens.begin(), lens.end()));
  mine.resize(width, 0.0);
  ASSIGN_OR_RETURN(std::vector<double> all, gather(mine));
  ASSIGN_OR_RETURN(auto by_rank, DecodeHeld(all, width, ranks_));
  if (newest_any != nullptr) {
    *newest_any = -1;
    for (const auto& held : by_rank) {
      for (const HeldStep& h : held) *newest_any = std::max(*newest_any, h.step);
    }
  }
  return CompleteSteps(by_rank, at_least, skipped);
}

std::unique_ptr<FetchingFileSystem> HostTier::FetchingFor(const HeldChoice& c, FileSystem& base) const {
  // Holders on this rank's own host are not asked (the file would be here already); the
  // others in rank order.
  std::map<std::string, std::vector<PeerAddress>> sources;
  auto add = [&](const std::string& file, const std::vector<int>& holders) {
    for (int r : holders) {
      if (ring_.host_of[r] != ring_.host_of[rank_]) sources[file].push_back(peers_[r]);
    }
  };
  add(std::string(kManifestFileName), c.manifest_holders);
  for (size_t k = 0; k < c.shard_holders.size(); ++k) add(ShardFileName(static_cast<int>(k)), c.shard_holders[k]);
  return std::make_unique<FetchingFileSystem>(base, root_ + "/" + StepDirName(c.step), std::move(sources),
                                              secret_, timeout_s_);
}

}  // namespace tessera
