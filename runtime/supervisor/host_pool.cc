// runtime/supervisor/host_pool.cc — active hosts, spares and rank placement (see host_pool.h).
#include "runtime/supervisor/host_pool.h"

#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

#include "runtime/core/file_util.h"

namespace tessera {

Result<HostPool> HostPool::Create(std::vector<HostfileEntry> hosts, int spares, int ranks,
                                  const std::string& path, Probe probe) {
  if (spares < 0) return InvalidArgument("launch: --spares must be >= 0");
  if (static_cast<int>(hosts.size()) <= spares) {
    return InvalidArgument("hostfile " + path + ": " + std::to_string(hosts.size()) +
                           " host(s) cannot hold " + std::to_string(spares) +
                           " spare(s) and the job's hosts");
  }
  HostPool p;
  p.ranks_ = ranks;
  p.probe_ = probe ? std::move(probe) : Probe([](const std::string& h) { return HostAnswers(h); });
  p.spares_.assign(hosts.end() - spares, hosts.end());
  p.active_.assign(hosts.begin(), hosts.end() - spares);
  int64_t slots = 0;
  for (const HostfileEntry& h : p.active_) slots += h.slots;
  if (slots < ranks) {
    return InvalidArgument("hostfile " + path + ": " + std::to_string(slots) + " slots on the " +
                           std::to_string(p.active_.size()) + " host(s) not held as spares, for " +
                           std::to_string(ranks) + " ranks");
  }
  return p;
}

Result<std::string> HostPool::WriteHostfile(const std::string& dir, int64_t k) const {
  std::string text = "# incarnation " + std::to_string(k) + ": the hosts in use (spares left: " +
                     std::to_string(spares_.size()) + ")\n";
  text += HostfileText(active_);
  const std::string path = dir + "/hostfile." + std::to_string(k);
  RETURN_IF_ERROR(WriteFileAtomic(path, text));
  return path;
}

std::string HostPool::HostOfRank(int rank) const {
  int end = 0;
  for (const HostfileEntry& h : active_) {
    end += h.slots;
    if (rank < end) return h.host;
  }
  return "";
}

std::vector<std::string> HostPool::LostHosts() const {
  std::vector<std::string> lost;
  int begin = 0, probed = 0;
  for (const HostfileEntry& h : active_) {
    if (begin < ranks_) {
      ++probed;
      if (!probe_(h.host)) lost.push_back(h.host);
    }
    begin += h.slots;
  }
  // Every host silent at once says more about the probe (a firewall dropping it, this host's
  // own network) than about the hosts: nobody is declared lost on that evidence.
  if (probed >= 2 && static_cast<int>(lost.size()) == probed) return {};
  return lost;
}

bool HostAnswers(const std::string& host, double timeout_s) {
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (::getaddrinfo(host.c_str(), "1", &hints, &found) != 0 || found == nullptr) return false;
  const int fd = ::socket(found->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  bool answers = false;
  if (fd >= 0) {
    int r = ::connect(fd, found->ai_addr, found->ai_addrlen);
    if (r == 0 || errno == ECONNREFUSED) {
      answers = true;
    } else if (errno == EINPROGRESS) {
      pollfd p{fd, POLLOUT, 0};
      if (::poll(&p, 1, static_cast<int>(timeout_s * 1000)) == 1) {
        int err = 0;
        socklen_t len = sizeof err;
        ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
        answers = err == 0 || err == ECONNREFUSED;  // EHOSTUNREACH, ETIMEDOUT: gone
      }
    }
    ::close(fd);
  }
  ::freeaddrinfo(found);
  return answers;
}

void HostPool::Remove(const std::string& host) {
  for (const HostfileEntry& h : active_) {
    if (h.host == host) lost_.push_back({h, /*removed=*/true});
  }
  active_.erase(std::remove_if(active_.begin(), active_.end(),
                               [&](const HostfileEntry& h) { return h.host == host; }),
                active_.end());
}

std::vector<HostPool::Rejoined> HostPool::Rejoin() {
  std::vector<Rejoined> back;
  std::vector<LostHost> still_lost;
  for (const LostHost& l : lost_) {
    if (!probe_(l.entry.host)) {
      still_lost.push_back(l);
      continue;
    }
    (l.removed ? active_ : spares_).push_back(l.entry);
    back.push_back({l.entry.host, l.removed});
  }
  lost_ = std::move(still_lost);
  return back;
}

int HostPool::slots() const {
  int n = 0;
  for (const HostfileEntry& h : active_) n += h.slots;
  return n;
}

std::string HostPool::Replace(const std::string& host) {
  if (spares_.empty()) return "";
  for (HostfileEntry& h : active_) {
    if (h.host != host) continue;
    const HostfileEntry spare = spares_.front();
    spares_.erase(spares_.begin());
    lost_.push_back({h, /*removed=*/false});
    h.host = spare.host;  // the lost host's slots and position: every rank keeps its place
    return spare.host;
  }
  return "";
}

}  // namespace tessera
