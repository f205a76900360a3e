// runtime/chaos/scenario.cc — see scenario.h.
//
// Owns: the only use of yaml-cpp in runtime/chaos. A small strict reader in the spirit of
// runtime/train/config.cc (which keeps its reader private): each map is read key by key, every
// key a reader did not ask for is an error, and every error names "FILE:LINE:COL: dotted.path".
// yaml-cpp exceptions are caught in LoadScenario and never escape. The schedule is built with
// std::mt19937_64 (whose output the standard fixes) and our own conversions to [0, 1), to
// integers and to exponential gaps, so the same seed gives the same schedule everywhere.
// Thread-safety: no shared state.
#include "runtime/chaos/scenario.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <limits>
#include <random>
#include <set>
#include <sstream>
#include <utility>

#include "runtime/core/file_util.h"
#include "runtime/core/suggest.h"
#include "runtime/core/yaml_input.h"

namespace tessera {
namespace {

struct KindName {
  FaultKind kind;
  const char* name;
};
constexpr KindName kKindNames[] = {
    {FaultKind::kKillRank, "kill_rank"},
    {FaultKind::kStopRank, "stop_rank"},
    {FaultKind::kSlowRank, "slow_rank"},
    {FaultKind::kKillInCheckpoint, "kill_in_checkpoint"},
    {FaultKind::kCorruptShard, "corrupt_shard"},
    {FaultKind::kTruncateShard, "truncate_shard"},
    {FaultKind::kIoError, "io_error"},
    {FaultKind::kKillHost, "kill_host"},
    {FaultKind::kPreempt, "preempt"},
};

constexpr int kEio = 5;
constexpr int kEnospc = 28;
constexpr int kMaxRanks = 4096;
// A scenario is a few KiB; the bound keeps /dev/zero or a huge file out of memory.
constexpr uint64_t kMaxScenarioBytes = uint64_t{1} << 20;

// `tessera launch` options a scenario may set; the integer ones are cast to int there.
const std::vector<std::string> kSupervisorKeys = {
    "heartbeat_timeout", "stall_timeout",   "stall_floor", "startup_timeout",
    "max_restarts",      "restart_window",  "crash_loop",  "backoff",
    "stop_grace",        "preempt_timeout", "heartbeat_ms"};
const std::set<std::string> kSupervisorIntegerKeys = {"max_restarts", "crash_loop", "heartbeat_ms"};

std::string Join(const std::vector<std::string>& words, const char* sep) {
  std::string out;
  for (size_t i = 0; i < words.size(); ++i) out += (i ? sep : "") + words[i];
  return out;
}

std::vector<std::string> AllKindNames() {
  std::vector<std::string> names;
  for (const KindName& k : kKindNames) names.push_back(k.name);
  return names;
}

// How a node looks in a "got ..." clause.
std::string Describe(const YAML::Node& node) {
  switch (node.Type()) {
    case YAML::NodeType::Map: return "a map";
    case YAML::NodeType::Sequence: return "a sequence";
    case YAML::NodeType::Null: return "nothing (null)";
    case YAML::NodeType::Scalar: {
      std::string s = node.Scalar();
      if (s.size() > 60) s = s.substr(0, 57) + "...";
      return std::string(node.Tag() == "!" ? "the quoted string " : "") + "\"" + s + "\"";
    }
    default: return "an undefined value";
  }
}

// A plain (unquoted) scalar: numbers must be written plain; yaml-cpp tags quoted scalars "!".
bool IsPlainScalar(const YAML::Node& node) { return node.IsScalar() && node.Tag() != "!"; }

bool LooksLikeInteger(const std::string& s) {
  size_t i = (!s.empty() && (s[0] == '+' || s[0] == '-')) ? 1 : 0;
  if (i == s.size()) return false;
  for (; i < s.size(); ++i) {
    if (s[i] < '0' || s[i] > '9') return false;
  }
  return true;
}

std::string Num(double v) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%g", v);
  return buf;
}

// Errors name the file, the position and the dotted path of the value.
class Errors {
 public:
  explicit Errors(std::string file) : file_(std::move(file)) {}
  const std::string& file() const { return file_; }
  std::string Where(const YAML::Mark& mark) const {
    return mark.is_null() ? file_ : YamlWhere(file_, mark.line, mark.column);
  }
  Status At(const YAML::Mark& mark, const std::string& dotted, const std::string& problem) const {
    return InvalidArgument(Where(mark) + ": " + dotted + ": " + problem);
  }
  Status Expected(const YAML::Node& node, const std::string& dotted,
                  const std::string& what) const {
    return At(node.Mark(), dotted, "expected " + what + ", got " + Describe(node));
  }

  Result<int64_t> Int(const YAML::Node& node, const std::string& dotted, int64_t min,
                      int64_t max) const {
    if (!IsPlainScalar(node) || !LooksLikeInteger(node.Scalar())) {
      return Expected(node, dotted, "an integer");
    }
    errno = 0;
    const long long v = std::strtoll(node.Scalar().c_str(), nullptr, 10);
    if (errno == ERANGE || v < min || v > max) {
      const std::string range =
          max == std::numeric_limits<int64_t>::max()
              ? ">= " + std::to_string(min)
              : "in [" + std::to_string(min) + ", " + std::to_string(max) + "]";
      return Expected(node, dotted, "an integer " + range);
    }
    return static_cast<int64_t>(v);
  }

  // An ordinary number (no inf, nan or hex) with min < v (min <= v when min_inclusive).
  Result<double> Number(const YAML::Node& node, const std::string& dotted, double min,
                        bool min_inclusive) const {
    const std::string range = std::string(min_inclusive ? ">= " : "> ") + Num(min);
    if (!IsPlainScalar(node)) return Expected(node, dotted, "a number " + range);
    const std::string& text = node.Scalar();
    char* end = nullptr;
    errno = 0;
    const double v = std::strtod(text.c_str(), &end);
    const bool ordinary = text.find_first_of("iInNxX") == std::string::npos;
    if (text.empty() || *end != '\0' || !ordinary || errno == ERANGE) {
      return Expected(node, dotted, "a number " + range);
    }
    if (min_inclusive ? v < min : v <= min) return Expected(node, dotted, "a number " + range);
    return v;
  }

 private:
  std::string file_;
};

// One map of the scenario. Readers look keys up (which marks them known); Finish() rejects the
// rest. A missing or null map reads as empty; `where` is blamed for missing required keys.
class MapReader {
 public:
  static Result<MapReader> Make(const Errors* errors, const YAML::Node& node,
                                const YAML::Mark& where, std::string prefix) {
    MapReader r(errors, where, std::move(prefix));
    if (!node.IsDefined() || node.IsNull()) return r;
    if (!node.IsMap())
      return errors->Expected(node, r.prefix_.empty() ? "(top)" : r.prefix_, "a map");
    r.where_ = node.Mark();
    for (const auto& kv : node) {
      const YAML::Node key = kv.first;
      if (!key.IsScalar()) return errors->Expected(key, r.Dotted("(key)"), "a plain word as key");
      for (const Entry& e : r.entries_) {
        if (e.key == key.Scalar()) {
          return errors->At(key.Mark(), r.Dotted(key.Scalar()),
                            "duplicate key (each key may appear once)");
        }
      }
      r.entries_.push_back({key.Scalar(), key.Mark(), kv.second});
    }
    return r;
  }

  const std::string& prefix() const { return prefix_; }
  const YAML::Mark& where() const { return where_; }
  std::string Dotted(const std::string& key) const {
    return prefix_.empty() ? key : prefix_ + "." + key;
  }
  bool Has(const std::string& key) const { return Find(key) != nullptr; }
  YAML::Mark KeyMark(const std::string& key) const {
    const Entry* e = Find(key);
    return e == nullptr ? where_ : e->key_mark;
  }
  std::vector<std::string> PresentKeys() const {
    std::vector<std::string> keys;
    for (const Entry& e : entries_) keys.push_back(e.key);
    return keys;
  }

  // The value of `key` (marked known), or an undefined node when absent.
  YAML::Node Get(const std::string& key) {
    if (std::find(known_.begin(), known_.end(), key) == known_.end()) known_.push_back(key);
    const Entry* e = Find(key);
    return e == nullptr ? YAML::Node(YAML::NodeType::Undefined) : e->value;
  }
  // Position for an error about `key`'s value (a null value's mark is the next token's).
  YAML::Mark ValueMark(const std::string& key) const {
    const Entry* e = Find(key);
    if (e == nullptr) return where_;
    return e->value.IsNull() ? e->key_mark : e->value.Mark();
  }

  Status Require(const std::string& key) {
    Get(key);
    if (Has(key)) return Status::Ok();
    return errors_->At(where_, Dotted(key), "required key is missing");
  }
  Status Int(const std::string& key, int64_t min, int64_t max, int64_t* out) {
    const YAML::Node v = Get(key);
    if (!v.IsDefined()) return Status::Ok();
    ASSIGN_OR_RETURN(*out, errors_->Int(v, Dotted(key), min, max));
    return Status::Ok();
  }
  Status Int(const std::string& key, int64_t min, int64_t max, int* out) {
    int64_t v = *out;
    RETURN_IF_ERROR(Int(key, min, max, &v));
    *out = static_cast<int>(v);
    return Status::Ok();
  }
  Status Number(const std::string& key, double min, bool min_inclusive, double* out) {
    const YAML::Node v = Get(key);
    if (!v.IsDefined()) return Status::Ok();
    ASSIGN_OR_RETURN(*out, errors_->Number(v, Dotted(key), min, min_inclusive));
    return Status::Ok();
  }
  Status Text(const std::string& key, std::string* out) {
    const YAML::Node v = Get(key);
    if (!v.IsDefined()) return Status::Ok();
    if (!v.IsScalar() || v.Scalar().empty())
      return errors_->Expected(v, Dotted(key), "a non-empty string");
    *out = v.Scalar();
    return Status::Ok();
  }

  Status Finish() const {
    for (const Entry& e : entries_) {
      if (std::find(known_.begin(), known_.end(), e.key) != known_.end()) continue;
      std::string problem = "unknown key" + DidYouMean(e.key, known_);
      if (problem == "unknown key") {
        problem += " (valid keys" + (prefix_.empty() ? "" : " of " + prefix_) + ": " +
                   Join(known_, ", ") + ")";
      }
      return errors_->At(e.key_mark, Dotted(e.key), problem);
    }
    return Status::Ok();
  }

 private:
  struct Entry {
    std::string key;
    YAML::Mark key_mark;
    YAML::Node value;
  };
  MapReader(const Errors* errors, const YAML::Mark& where, std::string prefix)
      : errors_(errors), where_(where), prefix_(std::move(prefix)) {}
  const Entry* Find(const std::string& key) const {
    for (const Entry& e : entries_) {
      if (e.key == key) return &e;
    }
    return nullptr;
  }

  const Errors* errors_;
  YAML::Mark where_;
  std::string prefix_;
  std::vector<Entry> entries_;
  std::vector<std::string> known_;  // in the order readers asked, for listings
};

// A sequence value, or an error; undefined/null reads as empty.
Result<std::vector<YAML::Node>> Sequence(const Errors& errors, const YAML::Node& node,
                                         const std::string& dotted, const std::string& what) {
  std::vector<YAML::Node> items;
  if (!node.IsDefined() || node.IsNull()) return items;
  if (!node.IsSequence()) return errors.Expected(node, dotted, "a sequence of " + what);
  for (const YAML::Node& item : node) items.push_back(item);
  return items;
}

Result<FaultKind> Kind(const Errors& errors, const YAML::Node& node, const std::string& dotted) {
  const std::vector<std::string> names = AllKindNames();
  if (node.IsScalar()) {
    Result<FaultKind> kind = ParseFaultKind(node.Scalar());
    if (kind.ok()) return kind;
  }
  return errors.At(node.Mark(), dotted,
                   "expected one of " + Join(names, " | ") + ", got " + Describe(node) +
                       (node.IsScalar() ? DidYouMean(node.Scalar(), names) : ""));
}

// The config path as the runner will use it: as written if it names a file from the current
// directory, else relative to the scenario's folder or one of its parents (the shipped
// scenarios say "configs/tiny.yaml", which resolves from configs/chaos/ up to the repo root,
// wherever `tessera chaos` runs from).
Result<std::string> ResolveConfig(const Errors& errors, const MapReader& job,
                                  const std::string& config) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::path written(config);
  if (fs::is_regular_file(written, ec)) return config;
  const fs::path folder = fs::absolute(fs::path(errors.file()), ec).parent_path();
  if (written.is_relative()) {
    for (fs::path dir = folder; !dir.empty(); dir = dir.parent_path()) {
      const fs::path candidate = dir / written;
      if (fs::is_regular_file(candidate, ec)) return candidate.lexically_normal().string();
      if (dir == dir.parent_path()) break;
    }
  }
  const std::string looked =
      written.is_relative()
          ? " (looked in the current directory and in " + folder.lexically_normal().string() +
                " and its parents)"
          : "";
  return errors.At(job.ValueMark("config"), job.Dotted("config"),
                   "expected an existing config file, got \"" + config + "\"" + looked);
}

Status ReadJob(const Errors& errors, MapReader& job, Scenario* s) {
  RETURN_IF_ERROR(job.Require("config"));
  std::string config;
  RETURN_IF_ERROR(job.Text("config", &config));
  ASSIGN_OR_RETURN(s->config, ResolveConfig(errors, job, config));
  RETURN_IF_ERROR(job.Int("ranks", 1, kMaxRanks, &s->ranks));

  ASSIGN_OR_RETURN(std::vector<YAML::Node> sets,
                   Sequence(errors, job.Get("set"), job.Dotted("set"), "key=value overrides"));
  for (size_t i = 0; i < sets.size(); ++i) {
    const std::string dotted = job.Dotted("set") + "[" + std::to_string(i) + "]";
    if (!sets[i].IsScalar() || sets[i].Scalar().find('=') == std::string::npos ||
        sets[i].Scalar().front() == '=') {
      return errors.Expected(sets[i], dotted, "an override key=value");
    }
    s->sets.push_back(sets[i].Scalar());
  }

  const std::string hosts_dotted = job.Dotted("hosts");
  ASSIGN_OR_RETURN(std::vector<YAML::Node> groups,
                   Sequence(errors, job.Get("hosts"), hosts_dotted, "rank groups"));
  if (groups.empty()) {
    for (int r = 0; r < s->ranks; ++r) s->hosts.push_back({r});
    return job.Finish();
  }
  std::vector<int> group_of(s->ranks, -1);
  for (size_t g = 0; g < groups.size(); ++g) {
    const std::string dotted = hosts_dotted + "[" + std::to_string(g) + "]";
    ASSIGN_OR_RETURN(std::vector<YAML::Node> members, Sequence(errors, groups[g], dotted, "ranks"));
    if (members.empty()) return errors.Expected(groups[g], dotted, "a non-empty list of ranks");
    std::vector<int> group;
    for (size_t m = 0; m < members.size(); ++m) {
      const std::string member = dotted + "[" + std::to_string(m) + "]";
      ASSIGN_OR_RETURN(int64_t rank, errors.Int(members[m], member, 0, s->ranks - 1));
      if (group_of[rank] >= 0) {
        return errors.At(members[m].Mark(), member,
                         "expected each rank in one host group, got rank " + std::to_string(rank) +
                             " again (already in " + hosts_dotted + "[" +
                             std::to_string(group_of[rank]) + "])");
      }
      group_of[rank] = static_cast<int>(g);
      group.push_back(static_cast<int>(rank));
    }
    s->hosts.push_back(std::move(group));
  }
  for (int r = 0; r < s->ranks; ++r) {
    if (group_of[r] < 0) {
      return errors.At(job.ValueMark("hosts"), hosts_dotted,
                       "expected every rank in [0, " + std::to_string(s->ranks) +
                           ") in one host group, got rank " + std::to_string(r) + " in none");
    }
  }
  return job.Finish();
}

Status ReadSupervisor(const Errors& errors, MapReader& sup, Scenario* s) {
  for (const std::string& key : kSupervisorKeys) {
    const YAML::Node v = sup.Get(key);
    if (!v.IsDefined()) continue;
    if (kSupervisorIntegerKeys.count(key)) {
      RETURN_IF_ERROR(errors.Int(v, sup.Dotted(key), 0, std::numeric_limits<int>::max()).status());
    } else {
      RETURN_IF_ERROR(errors.Number(v, sup.Dotted(key), 0, true).status());
    }
    s->supervisor[key] = v.Scalar();
  }
  return sup.Finish();
}

// Which of the optional fault keys each kind uses (the others are errors, not silently unused).
struct KindKeys {
  bool rank, host, duration, error_number;
};
KindKeys KeysOf(FaultKind kind) {
  switch (kind) {
    case FaultKind::kKillRank:
    case FaultKind::kStopRank:
    case FaultKind::kKillInCheckpoint: return {true, false, false, false};
    case FaultKind::kSlowRank: return {true, false, true, false};
    case FaultKind::kIoError: return {true, false, true, true};
    case FaultKind::kKillHost: return {false, true, false, false};
    case FaultKind::kCorruptShard:
    case FaultKind::kTruncateShard:
    case FaultKind::kPreempt: return {false, false, false, false};
  }
  return {false, false, false, false};
}

Status ReadFault(const Errors& errors, MapReader& f, const Scenario& s, FaultSpec* fault) {
  RETURN_IF_ERROR(f.Require("kind"));
  ASSIGN_OR_RETURN(fault->kind, Kind(errors, f.Get("kind"), f.Dotted("kind")));
  const char* kind_name = FaultKindName(fault->kind);

  RETURN_IF_ERROR(f.Int("at_step", 1, std::numeric_limits<int64_t>::max(), &fault->at_step));
  RETURN_IF_ERROR(f.Number("at_time_s", 0, true, &fault->at_time_s));
  if (f.Has("at_step") && f.Has("at_time_s")) {
    return errors.At(f.KeyMark("at_time_s"), f.Dotted("at_time_s"),
                     "expected exactly one of at_step / at_time_s, got both");
  }
  if (!f.Has("at_step") && !f.Has("at_time_s")) {
    return errors.At(f.where(), f.Dotted("at_step"),
                     "expected exactly one of at_step / at_time_s, got neither");
  }

  const KindKeys keys = KeysOf(fault->kind);
  const struct {
    const char* key;
    bool used;
  } optional[] = {{"rank", keys.rank},
                  {"host", keys.host},
                  {"duration_s", keys.duration},
                  {"errno", keys.error_number}};
  for (const auto& o : optional) {
    if (!o.used && f.Has(o.key)) {
      return errors.At(f.KeyMark(o.key), f.Dotted(o.key),
                       std::string("not used by ") + kind_name + " (remove it)");
    }
  }
  if (keys.rank) {
    const int64_t min = fault->kind == FaultKind::kIoError ? -1 : 0;
    RETURN_IF_ERROR(f.Int("rank", min, s.ranks - 1, &fault->rank));
  }
  if (keys.host) {
    RETURN_IF_ERROR(f.Int("host", 0, static_cast<int64_t>(s.hosts.size()) - 1, &fault->host));
  }
  if (keys.duration) RETURN_IF_ERROR(f.Number("duration_s", 0, false, &fault->duration_s));
  if (keys.error_number) {
    const YAML::Node v = f.Get("errno");
    if (v.IsDefined()) {
      if (v.IsScalar() && v.Scalar() == "EIO") {
        fault->error_number = kEio;
      } else if (v.IsScalar() && v.Scalar() == "ENOSPC") {
        fault->error_number = kEnospc;
      } else {
        return errors.Expected(v, f.Dotted("errno"), "ENOSPC | EIO");
      }
    }
  }
  return f.Finish();
}

Status ReadRandom(const Errors& errors, MapReader& r, Scenario* s) {
  RETURN_IF_ERROR(r.Require("seed"));
  const YAML::Node seed = r.Get("seed");
  if (!IsPlainScalar(seed) || !LooksLikeInteger(seed.Scalar()) || seed.Scalar()[0] == '-') {
    return errors.Expected(seed, r.Dotted("seed"), "a non-negative integer");
  }
  errno = 0;
  s->seed = std::strtoull(seed.Scalar().c_str(), nullptr, 10);
  if (errno == ERANGE) return errors.Expected(seed, r.Dotted("seed"), "an integer below 2^64");
  RETURN_IF_ERROR(r.Require("mean_time_between_faults_s"));
  RETURN_IF_ERROR(r.Number("mean_time_between_faults_s", 0, false, &s->mean_time_between_faults_s));
  RETURN_IF_ERROR(r.Require("duration_s"));
  RETURN_IF_ERROR(r.Number("duration_s", 0, false, &s->duration_s));
  RETURN_IF_ERROR(r.Number("first_after_s", 0, true, &s->first_after_s));
  if (s->first_after_s >= s->duration_s) {
    return errors.At(r.ValueMark("first_after_s"), r.Dotted("first_after_s"),
                     "expected a time below duration_s (" + Num(s->duration_s) + "), got " +
                         Num(s->first_after_s));
  }
  ASSIGN_OR_RETURN(std::vector<YAML::Node> kinds,
                   Sequence(errors, r.Get("kinds"), r.Dotted("kinds"), "fault kinds"));
  if (r.Has("kinds") && kinds.empty()) {
    return errors.At(r.ValueMark("kinds"), r.Dotted("kinds"),
                     "expected at least one fault kind, got none");
  }
  for (size_t i = 0; i < kinds.size(); ++i) {
    ASSIGN_OR_RETURN(FaultKind kind,
                     Kind(errors, kinds[i], r.Dotted("kinds") + "[" + std::to_string(i) + "]"));
    s->random_kinds.push_back(kind);
  }
  if (kinds.empty()) {
    for (const KindName& k : kKindNames) {
      if (k.kind != FaultKind::kPreempt) s->random_kinds.push_back(k.kind);
    }
  }
  s->has_random = true;
  return r.Finish();
}

Result<Scenario> ParseScenario(const std::string& text, const std::string& path) {
  const Errors errors(path);
  RETURN_IF_ERROR(CheckYamlInput(text, path));  // one document, no tags (yaml_input.h)
  YAML::Node root;
  try {
    root = YAML::Load(text);
  } catch (const YAML::Exception& e) {
    return InvalidArgument(errors.Where(e.mark) + ": malformed YAML: " + e.msg);
  }
  if (!root.IsMap()) {
    return InvalidArgument(errors.Where(root.Mark()) +
                           ": expected a map with keys job, supervisor, faults, random, soak_s, "
                           "verdict at the top level, got " +
                           Describe(root));
  }
  Scenario s;
  s.path = path;
  ASSIGN_OR_RETURN(MapReader top, MapReader::Make(&errors, root, root.Mark(), ""));
  RETURN_IF_ERROR(top.Require("job"));
  ASSIGN_OR_RETURN(MapReader job,
                   MapReader::Make(&errors, top.Get("job"), top.KeyMark("job"), "job"));
  RETURN_IF_ERROR(ReadJob(errors, job, &s));

  ASSIGN_OR_RETURN(MapReader sup, MapReader::Make(&errors, top.Get("supervisor"),
                                                  top.KeyMark("supervisor"), "supervisor"));
  RETURN_IF_ERROR(ReadSupervisor(errors, sup, &s));

  ASSIGN_OR_RETURN(std::vector<YAML::Node> faults,
                   Sequence(errors, top.Get("faults"), "faults", "faults (maps)"));
  for (size_t i = 0; i < faults.size(); ++i) {
    const std::string dotted = "faults[" + std::to_string(i) + "]";
    if (!faults[i].IsMap()) return errors.Expected(faults[i], dotted, "a map (one fault)");
    ASSIGN_OR_RETURN(MapReader f, MapReader::Make(&errors, faults[i], faults[i].Mark(), dotted));
    FaultSpec fault;
    RETURN_IF_ERROR(ReadFault(errors, f, s, &fault));
    s.faults.push_back(fault);
  }

  const YAML::Node random = top.Get("random");
  if (random.IsDefined()) {
    ASSIGN_OR_RETURN(MapReader r,
                     MapReader::Make(&errors, random, top.KeyMark("random"), "random"));
    RETURN_IF_ERROR(ReadRandom(errors, r, &s));
  }
  RETURN_IF_ERROR(top.Number("soak_s", 0, true, &s.soak_s));
  ASSIGN_OR_RETURN(MapReader verdict,
                   MapReader::Make(&errors, top.Get("verdict"), top.KeyMark("verdict"), "verdict"));
  RETURN_IF_ERROR(
      verdict.Number("max_supervisor_rss_growth_mib", 0, false, &s.max_supervisor_rss_growth_mib));
  RETURN_IF_ERROR(verdict.Finish());
  RETURN_IF_ERROR(top.Finish());
  return s;
}

// The schedule's randomness: raw 64-bit words from std::mt19937_64 (fixed by the standard)
// and our own conversions, so no implementation-defined distribution is involved.
class Draws {
 public:
  explicit Draws(uint64_t seed) : gen_(seed) {}
  uint64_t Bits() { return gen_(); }
  double Unit() { return static_cast<double>(gen_() >> 11) * 0x1.0p-53; }     // [0, 1)
  int Below(int n) { return std::min(n - 1, static_cast<int>(Unit() * n)); }  // [0, n)
  double Exponential(double mean) { return -mean * std::log(1.0 - Unit()); }

 private:
  std::mt19937_64 gen_;
};

// SplitMix64's finaliser: a listed fault's damage seed from (seed, its index).
uint64_t Mix(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

}  // namespace

const char* FaultKindName(FaultKind kind) {
  for (const KindName& k : kKindNames) {
    if (k.kind == kind) return k.name;
  }
  return "unknown";
}

Result<FaultKind> ParseFaultKind(const std::string& name) {
  std::string all;
  for (const KindName& k : kKindNames) {
    if (name == k.name) return k.kind;
    all += (all.empty() ? "" : " | ") + std::string(k.name);
  }
  return InvalidArgument("unknown fault kind \"" + name + "\" (expected " + all + ")");
}

std::string PlannedFault::ToString() const {
  char buf[64];
  std::string out = "#" + std::to_string(id) + " " + FaultKindName(spec.kind);
  if (spec.kind == FaultKind::kIoError) {
    out += spec.error_number == kEnospc ? " (ENOSPC)"
           : spec.error_number == kEio  ? " (EIO)"
                                        : " (errno " + std::to_string(spec.error_number) + ")";
  }
  if (KeysOf(spec.kind).rank) {
    out += spec.rank < 0 ? " all ranks" : " rank " + std::to_string(spec.rank);
  }
  if (spec.kind == FaultKind::kKillHost) out += " host " + std::to_string(spec.host);
  if (spec.at_step >= 0) {
    out += " at step " + std::to_string(spec.at_step);
  } else {
    std::snprintf(buf, sizeof(buf), " at %.1f s", spec.at_time_s);
    out += buf;
  }
  if (KeysOf(spec.kind).duration) {
    std::snprintf(buf, sizeof(buf), " for %.1f s", spec.duration_s);
    out += buf;
  }
  return out;
}

Result<Scenario> LoadScenario(const std::string& path) {
  ASSIGN_OR_RETURN(const std::string text, ReadInputFile(path, kMaxScenarioBytes, "scenario"));
  try {  // yaml-cpp reports misuse by exception; none may escape (STYLE.md, Errors)
    return ParseScenario(text, path);
  } catch (const std::exception& e) {
    return Internal(path + ": error while reading scenario: " + e.what());
  }
}

std::vector<PlannedFault> BuildSchedule(const Scenario& scenario) {
  std::vector<PlannedFault> schedule;
  const uint64_t seed = scenario.has_random ? scenario.seed : 0;
  for (size_t i = 0; i < scenario.faults.size(); ++i) {
    PlannedFault p;
    p.id = static_cast<int>(schedule.size()) + 1;
    p.spec = scenario.faults[i];
    if (p.spec.kind == FaultKind::kCorruptShard || p.spec.kind == FaultKind::kTruncateShard) {
      p.spec.damage_seed = Mix(seed ^ Mix(i));
    }
    schedule.push_back(p);
  }
  if (!scenario.has_random || scenario.random_kinds.empty() ||
      !(scenario.mean_time_between_faults_s > 0)) {
    return schedule;
  }
  // Every fault takes the same draws in the same order, whatever its kind, so that a fault's
  // time depends only on the seed and its position in the campaign.
  Draws draws(scenario.seed);
  const double mean_s = scenario.mean_time_between_faults_s;
  const int num_kinds = static_cast<int>(scenario.random_kinds.size());
  const int num_hosts = std::max<int>(1, static_cast<int>(scenario.hosts.size()));
  double t_s = scenario.first_after_s;
  while (true) {
    t_s += draws.Exponential(mean_s);
    const FaultKind kind = scenario.random_kinds[draws.Below(num_kinds)];
    const int rank = draws.Below(std::max(1, scenario.ranks));
    const int host = draws.Below(num_hosts);
    const int error_number = draws.Unit() < 0.5 ? kEio : kEnospc;
    const uint64_t damage_seed = draws.Bits();
    if (!(t_s < scenario.duration_s)) break;
    PlannedFault p;
    p.id = static_cast<int>(schedule.size()) + 1;
    p.spec.kind = kind;
    p.spec.at_time_s = t_s;
    const KindKeys keys = KeysOf(kind);
    p.spec.rank = keys.rank ? rank : 0;
    p.spec.host = keys.host ? host : 0;
    // A straggler needs a few seconds of heartbeats to stand out (the detector judges a rank
    // on its last ~20); an I/O error window only needs to cover one checkpoint write.
    if (keys.duration) p.spec.duration_s = kind == FaultKind::kSlowRank ? 4.0 : std::min(5.0, mean_s / 2);
    if (keys.error_number) p.spec.error_number = error_number;
    if (kind == FaultKind::kCorruptShard || kind == FaultKind::kTruncateShard) {
      p.spec.damage_seed = damage_seed;
    }
    schedule.push_back(p);
  }
  return schedule;
}

}  // namespace tessera
