// runtime/supervisor/launcher.cc — see launcher.h for the contract.
#include "runtime/supervisor/launcher.h"

#include <algorithm>
#include <charconv>
#include <optional>
#include <set>
#include <sstream>
#include <thread>

#include "runtime/core/file_util.h"

namespace tessera {
namespace {

// A hostfile is a few lines; anything this large is not one.
constexpr uint64_t kMaxHostfileBytes = 1 << 20;
// More hosts than any allocation has: a host list that expands past it is refused.
constexpr size_t kMaxAllocationHosts = 100000;

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

const char* Transport(bool across_hosts) { return across_hosts ? "self,vader,tcp" : "self,vader"; }

// The host of each rank under Open MPI's default by-slot mapping, one per line.
std::string TaskHosts(const std::vector<HostfileEntry>& hosts, int num_ranks) {
  std::string text;
  int placed = 0;
  for (const HostfileEntry& h : hosts) {
    for (int s = 0; s < h.slots && placed < num_ranks; ++s, ++placed) text += h.host + "\n";
  }
  return text;
}

// srun places rank r where mpirun would (the task file, --distribution=arbitrary); Open MPI's
// transport goes by environment.
MpirunCommand SrunCommand(const MpirunSpec& spec, MpirunCommand cmd) {
  cmd.env.insert(cmd.env.begin(), {{"OMPI_MCA_pml", "ob1"},
                                   {"OMPI_MCA_btl", Transport(true)},
                                   {"SLURM_HOSTFILE", spec.log_dir + "/tasks"}});
  cmd.argv = {spec.srun, "--mpi=pmix", "--kill-on-bad-exit=1", "--distribution=arbitrary",
              "-n", std::to_string(spec.num_ranks), spec.program};
  cmd.argv.insert(cmd.argv.end(), spec.program_args.begin(), spec.program_args.end());
  return cmd;
}

// One item of a Slurm host list with its bracket groups expanded, appended to `out`.
Status ExpandHostItem(const std::string& item, std::vector<std::string>& out) {
  const size_t open = item.find('[');
  if (open == std::string::npos) {
    if (item.find(']') != std::string::npos) return InvalidArgument("stray ']' in \"" + item + "\"");
    out.push_back(item);
    return Status::Ok();
  }
  const size_t close = item.find(']', open);
  if (close == std::string::npos) return InvalidArgument("unclosed '[' in \"" + item + "\"");
  const std::string head = item.substr(0, open), tail = item.substr(close + 1);
  const std::string inside = item.substr(open + 1, close - open - 1);
  if (inside.empty() || inside.back() == ',') return InvalidArgument("empty range in \"" + item + "\"");
  std::istringstream ranges(inside);
  std::string range;
  while (std::getline(ranges, range, ',')) {
    const size_t dash = range.find('-');
    const std::string lo = range.substr(0, dash), hi = dash == std::string::npos ? lo : range.substr(dash + 1);
    int a = 0, b = 0;
    auto digits = [](const std::string& t) {
      return !t.empty() && t.size() <= 9 && std::all_of(t.begin(), t.end(), [](char c) { return c >= '0' && c <= '9'; });
    };
    if (!digits(lo) || !digits(hi)) {
      return InvalidArgument("bad range \"" + range + "\" in \"" + item + "\"");
    }
    a = std::stoi(lo);
    b = std::stoi(hi);
    if (b < a) return InvalidArgument("bad range \"" + range + "\" in \"" + item + "\"");
    for (int i = a; i <= b; ++i) {
      if (out.size() >= kMaxAllocationHosts) {
        return InvalidArgument("more than " + std::to_string(kMaxAllocationHosts) + " hosts");
      }
      std::string num = std::to_string(i);
      if (num.size() < lo.size()) num.insert(0, lo.size() - num.size(), '0');  // tess[01-03]
      RETURN_IF_ERROR(ExpandHostItem(head + num + tail, out));
    }
  }
  return Status::Ok();
}

// Splits a host list at the commas outside brackets.
std::vector<std::string> SplitHostList(std::string_view list) {
  std::vector<std::string> items;
  std::string cur;
  int depth = 0;
  for (char c : list) {
    if (c == '[') ++depth;
    if (c == ']') --depth;
    if (c == ',' && depth == 0) {
      items.push_back(cur);
      cur.clear();
    } else {
      cur += c;
    }
  }
  items.push_back(cur);
  return items;
}

}  // namespace

Result<std::vector<HostfileEntry>> SlurmAllocationHosts(std::string_view nodelist,
                                                        std::string_view tasks_per_node) {
  if (nodelist.empty()) return NotFound("not inside a Slurm allocation (no SLURM_JOB_NODELIST)");
  std::vector<std::string> names;
  for (const std::string& item : SplitHostList(nodelist)) {
    if (item.empty()) return InvalidArgument("SLURM_JOB_NODELIST \"" + std::string(nodelist) + "\": empty item");
    if (Status s = ExpandHostItem(item, names); !s.ok()) {
      return s.WithPrefix("SLURM_JOB_NODELIST \"" + std::string(nodelist) + "\"");
    }
  }
  if (tasks_per_node.empty()) {
    return InvalidArgument("SLURM_TASKS_PER_NODE is not set (an allocation made with -n or "
                           "--ntasks-per-node sets it)");
  }
  std::vector<int> slots;  // "2(x3),1" -> 2 2 2 1
  for (const std::string& item : SplitHostList(tasks_per_node)) {
    const size_t paren = item.find("(x");
    int n = 0, repeat = 1;
    const bool ok = ParsePositiveInt(std::string_view(item).substr(0, paren), n) &&
                    (paren == std::string::npos ||
                     (item.back() == ')' &&
                      ParsePositiveInt(std::string_view(item).substr(paren + 2, item.size() - paren - 3), repeat)));
    if (!ok || repeat > static_cast<int>(kMaxAllocationHosts) || slots.size() + repeat > kMaxAllocationHosts) {
      return InvalidArgument("SLURM_TASKS_PER_NODE \"" + std::string(tasks_per_node) +
                             "\": expected counts like 2(x3),1");
    }
    slots.insert(slots.end(), repeat, n);
  }
  if (slots.size() != names.size()) {
    return InvalidArgument("the allocation lists " + std::to_string(names.size()) +
                           " host(s) (SLURM_JOB_NODELIST) but " + std::to_string(slots.size()) +
                           " task count(s) (SLURM_TASKS_PER_NODE)");
  }
  std::vector<HostfileEntry> hosts;
  for (size_t i = 0; i < names.size(); ++i) hosts.push_back({names[i], slots[i], static_cast<int>(i + 1)});
  return hosts;
}

std::string HostfileText(const std::vector<HostfileEntry>& hosts) {
  std::string text;
  for (const HostfileEntry& h : hosts) text += h.host + " slots=" + std::to_string(h.slots) + "\n";
  return text;
}

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
  if (spec.engine == LaunchEngine::kSrun && spec.hostfile.empty()) {
    return InvalidArgument("launch: srun needs the allocation's hosts (a hostfile)");
  }
  std::optional<std::vector<HostfileEntry>> hosts;
  if (!spec.hostfile.empty()) {
    ASSIGN_OR_RETURN(hosts, ParseHostfile(spec.hostfile));
    int64_t total_slots = 0;
    for (const HostfileEntry& h : *hosts) total_slots += h.slots;
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

  if (hosts) cmd.task_hosts = TaskHosts(*hosts, spec.num_ranks);
  if (spec.engine == LaunchEngine::kSrun) return SrunCommand(spec, std::move(cmd));
  cmd.argv = {spec.mpirun, "-np", std::to_string(spec.num_ranks)};
  // Across hosts (a hostfile): TCP between hosts beside shared memory within one, and every
  // variable the ranks need forwarded (-x NAME: mpirun passes its own value to remote ranks;
  // local ranks inherit it anyway). Interfaces: Open MPI's own btl_tcp_if_include /
  // oob_tcp_if_include (OMPI_MCA_... in the environment reach mpirun unchanged).
  const bool across = !spec.hostfile.empty();
  if (across) {
    cmd.argv.push_back("--hostfile");
    cmd.argv.push_back(spec.hostfile);
  }
  for (const char* word : {"--mca", "pml", "ob1", "--mca", "btl", Transport(across),
                           "--mca", "odls_base_sigkill_timeout", "0"}) {
    cmd.argv.push_back(word);
  }
  if (across) {
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
