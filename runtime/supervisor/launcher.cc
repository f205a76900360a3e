// runtime/supervisor/launcher.cc — see launcher.h for the contract.
#include "runtime/supervisor/launcher.h"

#include <algorithm>
#include <charconv>
#include <set>
#include <sstream>
#include <thread>

#include "runtime/core/file_util.h"

namespace tessera {
namespace {

// A hostfile is a few lines; anything this large is not one.
constexpr uint64_t kMaxHostfileBytes = 1 << 20;

// Parses a positive decimal int from the whole of `text`.
bool ParsePositiveInt(std::string_view text, int& out) {
  if (text.empty()) return false;
  const char* end = text.data() + text.size();
  auto [ptr, ec] = std::from_chars(text.data(), end, out);
  return ec == std::errc() && ptr == end && out >= 1;
}

std::string Where(const std::string& path, int line) {
  return path + ":" + std::to_string(line) + ": ";
}

}  // namespace

Result<std::vector<HostfileEntry>> ParseHostfile(const std::string& path) {
  Result<std::string> text = ReadFileToString(path, kMaxHostfileBytes);
  if (!text.ok()) return text.status().WithPrefix("hostfile");
  return ParseHostfileText(*text, path);
}

Result<std::vector<HostfileEntry>> ParseHostfileText(std::string_view text,
                                                     const std::string& path) {
  std::vector<HostfileEntry> entries;
  std::set<std::string> seen;
  std::istringstream lines{std::string(text)};
  std::string raw;
  int line_no = 0;
  while (std::getline(lines, raw)) {
    ++line_no;
    if (size_t hash = raw.find('#'); hash != std::string::npos) raw.resize(hash);
    std::istringstream words(raw);
    std::string host;
    if (!(words >> host)) continue;  // blank or comment-only line
    HostfileEntry entry{host, 0, line_no};
    int max_slots = 0;
    std::string word;
    while (words >> word) {
      size_t eq = word.find('=');
      std::string key = word.substr(0, eq);
      std::string_view value = eq == std::string::npos ? std::string_view()
                                                        : std::string_view(word).substr(eq + 1);
      int* target = key == "slots" ? &entry.slots : key == "max_slots" ? &max_slots : nullptr;
      if (target == nullptr) {
        return InvalidArgument(Where(path, line_no) + "unknown field \"" + word +
                               "\" (expected \"HOST slots=K [max_slots=M]\")");
      }
      if (!ParsePositiveInt(value, *target)) {
        return InvalidArgument(Where(path, line_no) + key + " must be a positive integer, got \"" +
                               std::string(value) + "\"");
      }
    }
    // Open MPI would default a bare host to its core count, which the supervisor cannot know
    // for a remote host; asking for slots= keeps the slot check below honest.
    if (entry.slots == 0) {
      return InvalidArgument(Where(path, line_no) + "host \"" + host +
                             "\" has no slots=K (expected \"HOST slots=K\")");
    }
    if (max_slots != 0 && max_slots < entry.slots) {
      return InvalidArgument(Where(path, line_no) + "max_slots=" + std::to_string(max_slots) +
                             " is below slots=" + std::to_string(entry.slots));
    }
    if (!seen.insert(host).second) {
      return InvalidArgument(Where(path, line_no) + "host \"" + host + "\" listed twice");
    }
    entries.push_back(std::move(entry));
  }
  if (entries.empty()) return InvalidArgument("hostfile " + path + ": no hosts listed");
  return entries;
}

Result<MpirunCommand> BuildMpirunCommand(const MpirunSpec& spec) {
  if (spec.num_ranks < 1) {
    return InvalidArgument("launch: number of ranks must be >= 1, got " +
                           std::to_string(spec.num_ranks));
  }
  if (spec.program.empty()) return InvalidArgument("launch: no program to run");
  if (spec.log_dir.empty()) return InvalidArgument("launch: no log directory for rank output");
  if (spec.mpirun.empty()) return InvalidArgument("launch: no mpirun binary named");
  if (spec.cores < 0) {
    return InvalidArgument("launch: cores must be >= 0, got " + std::to_string(spec.cores));
  }
  for (const auto& entry : spec.extra_env) {
    if (entry.first.empty() || entry.first.find('=') != std::string::npos) {
      return InvalidArgument("launch: bad environment variable name \"" + entry.first + "\"");
    }
  }
  if (!spec.hostfile.empty()) {
    ASSIGN_OR_RETURN(std::vector<HostfileEntry> hosts, ParseHostfile(spec.hostfile));
    int64_t total_slots = 0;
    for (const HostfileEntry& h : hosts) total_slots += h.slots;
    if (total_slots < spec.num_ranks) {
      return InvalidArgument("hostfile " + spec.hostfile + ": " + std::to_string(total_slots) +
                             " slots for " + std::to_string(spec.num_ranks) + " ranks");
    }
  }

  MpirunCommand cmd;
  const int hardware_cores = static_cast<int>(std::thread::hardware_concurrency());
  const int cores = spec.cores > 0 ? spec.cores : std::max(1, hardware_cores);
  cmd.env = {
      {"OMPI_ALLOW_RUN_AS_ROOT", "1"},
      {"OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1"},
      {"OMPI_MCA_rmaps_base_oversubscribe", "1"},
      // Without it a collective costs 25-55 ms on shared cores (PLATFORM.md).
      {"OMPI_MCA_mpi_yield_when_idle", "1"},
  };
  // Several ranks share the cores: OpenBLAS's own threads would fight the other ranks'.
  if (spec.num_ranks > 1) cmd.env.emplace_back("OPENBLAS_NUM_THREADS", "1");
  // More ranks than cores: one OpenMP thread per rank as well.
  if (spec.num_ranks > cores) cmd.env.emplace_back("OMP_NUM_THREADS", "1");
  for (const auto& [name, value] : spec.extra_env) {
    bool replaced = false;
    for (auto& entry : cmd.env) {
      if (entry.first == name) {
        entry.second = value;
        replaced = true;
      }
    }
    if (!replaced) cmd.env.emplace_back(name, value);
  }

  cmd.argv = {spec.mpirun, "-np", std::to_string(spec.num_ranks)};
  // Across hosts (a hostfile): TCP between hosts beside shared memory within one, and every
  // variable the ranks need forwarded (-x NAME: mpirun passes its own value to remote ranks;
  // local ranks inherit it anyway). Interfaces: Open MPI's own btl_tcp_if_include /
  // oob_tcp_if_include (OMPI_MCA_... in the environment reach mpirun unchanged).
  const bool hosts = !spec.hostfile.empty();
  if (hosts) {
    cmd.argv.push_back("--hostfile");
    cmd.argv.push_back(spec.hostfile);
  }
  for (const char* word : {"--mca", "pml", "ob1", "--mca", "btl", hosts ? "self,vader,tcp" : "self,vader",
                           "--mca", "odls_base_sigkill_timeout", "0"}) {
    cmd.argv.push_back(word);
  }
  if (hosts) {
    for (const auto& entry : cmd.env) {
      cmd.argv.push_back("-x");
      cmd.argv.push_back(entry.first);
    }
  }
  cmd.argv.push_back("--output-filename");
  cmd.argv.push_back(spec.log_dir);
  cmd.argv.push_back(spec.program);
  cmd.argv.insert(cmd.argv.end(), spec.program_args.begin(), spec.program_args.end());
  return cmd;
}

}  // namespace tessera
