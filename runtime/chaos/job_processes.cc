// runtime/chaos/job_processes.cc — see job_processes.h.
#include "runtime/chaos/job_processes.h"

#include <dirent.h>
#include <signal.h>

#include <cstdlib>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "runtime/core/memory.h"

namespace tessera {
namespace {

// A /proc file's bytes split at NULs (cmdline, environ); empty if unreadable.
std::vector<std::string> NulSeparated(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return {};
  const std::string all((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<std::string> parts;
  size_t begin = 0;
  for (size_t i = 0; i <= all.size(); ++i) {
    if (i == all.size() || all[i] == '\0') {
      if (i > begin) parts.push_back(all.substr(begin, i - begin));
      begin = i + 1;
    }
  }
  return parts;
}

// The state letter of /proc/PID/stat (after the parenthesised command name).
char ProcessState(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string stat;
  std::getline(in, stat);
  const size_t close = stat.rfind(')');
  return close == std::string::npos || close + 2 >= stat.size() ? '?' : stat[close + 2];
}

}  // namespace

std::map<int, pid_t> FindRankPids(const std::string& marker) {
  std::map<int, pid_t> ranks;
  DIR* proc = opendir("/proc");
  if (proc == nullptr) return ranks;
  while (dirent* d = readdir(proc)) {
    char* end = nullptr;
    const long pid = std::strtol(d->d_name, &end, 10);
    if (pid <= 0 || *end != '\0') continue;
    const std::string base = std::string("/proc/") + d->d_name;
    const std::vector<std::string> argv = NulSeparated(base + "/cmdline");
    bool train = false, ours = false;
    for (const std::string& a : argv) {
      train |= a == "train";
      ours |= a.find(marker) != std::string::npos;
    }
    if (!train || !ours) continue;
    const char state = ProcessState(static_cast<pid_t>(pid));
    if (state == 'Z' || state == 'X' || state == '?') continue;
    for (const std::string& kv : NulSeparated(base + "/environ")) {
      static const std::string kRank = "OMPI_COMM_WORLD_RANK=";
      if (kv.compare(0, kRank.size(), kRank) == 0) {
        ranks[std::atoi(kv.c_str() + kRank.size())] = static_cast<pid_t>(pid);
      }
    }
  }
  closedir(proc);
  return ranks;
}

double ResidentMiB(pid_t pid) {
  const int64_t bytes = ProcessMemoryBytes(pid, "VmRSS");
  return bytes < 0 ? 0.0 : static_cast<double>(bytes) / (1 << 20);
}

RankSlower::RankSlower(pid_t pid, std::chrono::steady_clock::time_point until, int stop_ms, int run_ms)
    : pid_(pid), until_(until), next_(std::chrono::steady_clock::now()), stop_(stop_ms), run_(run_ms) {}

bool RankSlower::Tick(std::chrono::steady_clock::time_point now) {
  if (done_) return false;
  if (now >= until_) {
    Finish();
    return false;
  }
  if (now < next_) return true;
  stopped_ = !stopped_;
  kill(pid_, stopped_ ? SIGSTOP : SIGCONT);
  next_ = now + (stopped_ ? stop_ : run_);
  return true;
}

void RankSlower::Finish() {
  if (done_) return;
  kill(pid_, SIGCONT);
  done_ = true;
}

}  // namespace tessera
