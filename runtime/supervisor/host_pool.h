// runtime/supervisor/host_pool.h — the hosts of a run across machines: those in use and the
// spares held idle (`tessera launch --hostfile F --spares K`), and which host a rank runs on.
//
// Owns: the hostfile's entries split into active hosts (the first ones, enough slots for the
// ranks) and spares (the last K), and the hostfile each incarnation is launched with
// (<run_dir>/hostfile.<k>: the active hosts in order). Rank placement is Open MPI's default
// by-slot mapping — rank r goes to the first active host whose cumulative slots exceed r —
// so HostOfRank is exact for the hostfile it wrote.
// Losing a host: after any failure, every host that runs a rank is probed (a TCP connect to a
// closed port: a refusal or a connection means the host answers; no answer within the probe's
// timeout, or unreachable, means it is gone: every process killed and its link cut). When
// every probed host is silent at once, nobody is declared lost (the probe itself is suspect). Which
// rank failed first says nothing about where: mpirun takes the survivors down within a
// millisecond, and a cut link may swallow the lost ranks' own closing packets, so the first
// closed connection is often a healthy host's. A live host answers at once, so the probes cost
// the timeout only per lost host. Replace puts the first unused spare in a lost
// host's place, at the same position, so every rank keeps its place in the layout and the
// restart ends bit-identical. A lost host is probed again at every later restart (Rejoin):
// once it answers it is a spare again (if a spare took its place), or one of the job's hosts
// again (if an elastic restart dropped it: the layout grows back). A host behind a firewall that drops (not refuses) the probe looks lost:
// then a spare is used needlessly, never a lost host kept.
// Thread-safety: the supervisor's thread only.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "runtime/core/status.h"
#include "runtime/supervisor/launcher.h"

namespace tessera {

class HostPool {
 public:
  // `hosts` from ParseHostfile; the last `spares` are held back. kInvalidArgument when fewer
  // than spares + 1 hosts are listed or the active hosts have fewer slots than `ranks`.
  using Probe = std::function<bool(const std::string& host)>;  // true: the host answers
  static Result<HostPool> Create(std::vector<HostfileEntry> hosts, int spares, int ranks,
                                 const std::string& path, Probe probe = {});

  // Writes <dir>/hostfile.<k> with the active hosts; returns its path.
  Result<std::string> WriteHostfile(const std::string& dir, int64_t k) const;
  // The active host rank `rank` runs on ("" when past every slot).
  std::string HostOfRank(int rank) const;
  // The active hosts running a rank that do not answer the probe (in host order).
  std::vector<std::string> LostHosts() const;
  // Puts the next spare in `host`'s place; returns the spare's name, or "" when none is left.
  std::string Replace(const std::string& host);
  // Drops `host` (an elastic restart goes on without it).
  void Remove(const std::string& host);
  // The lost hosts that answer the probe again, taken back: one a spare replaced goes to the
  // spares; one an elastic restart dropped goes back to the end of the active hosts.
  struct Rejoined {
    std::string host;
    bool active = false;  // back among the job's hosts (else a spare)
  };
  std::vector<Rejoined> Rejoin();
  void set_ranks(int ranks) { ranks_ = ranks; }  // the layout placed on the active hosts
  int slots() const;  // of the active hosts

  const std::vector<HostfileEntry>& active() const { return active_; }
  int spares_left() const { return static_cast<int>(spares_.size()); }
  int ranks() const { return ranks_; }

 private:
  HostPool() = default;
  struct LostHost {
    HostfileEntry entry;
    bool removed = false;  // dropped by an elastic restart (else replaced by a spare)
  };
  std::vector<HostfileEntry> active_, spares_;
  std::vector<LostHost> lost_;
  int ranks_ = 0;
  Probe probe_;
};

// The default probe: a TCP connect to port 1 of `host` (a name or an address) within
// timeout_s; true when the host refuses or accepts it.
bool HostAnswers(const std::string& host, double timeout_s = 2.0);

}  // namespace tessera
