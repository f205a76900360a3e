// runtime/kernels/cpu/thread_count.cc — the thread-count rule (thread_count.h) and the reader
// of its inputs. Pure apart from ThreadInputsFromEnvironment, which only reads.
#include "runtime/kernels/cpu/thread_count.h"

#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <thread>

namespace tessera::cpu {
namespace {

// A positive decimal integer, the whole of `s`; else nullopt.
std::optional<int> PositiveInt(const std::string& s) {
  if (s.empty() || s.size() > 6) return std::nullopt;
  int v = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return std::nullopt;
    v = v * 10 + (c - '0');
  }
  if (v <= 0) return std::nullopt;
  return v;
}

// OMP_NUM_THREADS may be a list ("4,2": 4 threads at the outer level); the pool is the
// outer level. Surrounding blanks are allowed, as libgomp allows them.
std::optional<int> OuterOmpThreads(const std::string& value) {
  std::string first = value.substr(0, value.find(','));
  const auto b = first.find_first_not_of(" \t");
  if (b == std::string::npos) return std::nullopt;
  const auto e = first.find_last_not_of(" \t");
  return PositiveInt(first.substr(b, e - b + 1));
}

std::optional<std::string> Env(const char* name) {
  const char* v = std::getenv(name);
  if (v == nullptr) return std::nullopt;
  return std::string(v);
}

}  // namespace

std::string ThreadChoice::Describe() const {
  return std::to_string(count) + (per_rank ? " per rank" : "") + " (" + reason + ")";
}

// "1 core", "2 cores".
static std::string Cores(int n) { return std::to_string(n) + (n == 1 ? " core" : " cores"); }

ThreadChoice ChooseThreads(const ThreadInputs& in) {
  const int cores = std::max(1, in.cores);
  const int host_cores = std::max(cores, in.host_cores);
  const int ranks = std::max(1, in.local_ranks);
  ThreadChoice c;
  c.per_rank = ranks > 1;
  if (in.config_threads > 0) {
    c.count = in.config_threads;
    c.reason = "train.threads";
    return c;
  }
  if (in.omp_num_threads.has_value()) {
    if (auto n = OuterOmpThreads(*in.omp_num_threads)) {
      c.count = *n;
      c.reason = "OMP_NUM_THREADS=" + *in.omp_num_threads;
      return c;
    }
  }
  if (ranks > 1) {
    const int share = std::max(1, host_cores / ranks);
    const std::string division = Cores(host_cores) + " / " + std::to_string(ranks) +
                                 " ranks on this host" + (host_cores < ranks ? ", at least 1" : "");
    c.count = std::min(share, cores);
    c.reason = cores < share ? "bound to " + Cores(cores) + "; " + division : division;
    return c;
  }
  c.count = cores;
  c.reason = cores == host_cores ? (cores == 1 ? "the 1 core" : "all " + Cores(cores))
                                 : "bound to " + std::to_string(cores) + " of " + Cores(host_cores);
  return c;
}

ThreadInputs ThreadInputsFromEnvironment(int config_threads) {
  ThreadInputs in;
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0) {
    in.cores = std::max(1, CPU_COUNT(&set));
  } else {
    in.cores = std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
  }
  const long online = sysconf(_SC_NPROCESSORS_ONLN);
  in.host_cores = std::max(in.cores, online > 0 ? static_cast<int>(online) : 1);
  if (auto local = Env("OMPI_COMM_WORLD_LOCAL_SIZE")) in.local_ranks = PositiveInt(*local).value_or(1);
  in.omp_num_threads = Env("OMP_NUM_THREADS");
  in.config_threads = config_threads;
  return in;
}

}  // namespace tessera::cpu
