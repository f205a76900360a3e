// runtime/chaos/campaign.cc — the chaos run (contract in campaign.h).
#include "runtime/chaos/campaign.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <random>
#include <set>
#include <thread>

#include "checkpoint/commit.h"
#include "checkpoint/file_names.h"
#include "runtime/chaos/attribution.h"
#include "runtime/chaos/audit.h"
#include "runtime/chaos/job_processes.h"
#include "runtime/core/exit_codes.h"
#include "runtime/core/file_util.h"
#include "runtime/core/json.h"
#include "runtime/supervisor/process_session.h"
#include "runtime/supervisor/rank_env.h"
#include "runtime/supervisor/text.h"

namespace tessera {
namespace {

using Clock = std::chrono::steady_clock;
namespace fs = std::filesystem;

double UnixNow() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// New complete lines appended to a file since the last call (events.jsonl only grows).
class LineTail {
 public:
  explicit LineTail(std::string path) : path_(std::move(path)) {}
  std::vector<std::string> Read() {
    std::vector<std::string> lines;
    std::ifstream in(path_, std::ios::binary);
    if (!in) return lines;
    in.seekg(0, std::ios::end);
    const auto size = static_cast<uint64_t>(in.tellg());
    if (size < offset_) offset_ = 0;
    in.seekg(static_cast<std::streamoff>(offset_));
    std::string chunk(size - offset_, '\0');
    in.read(chunk.data(), static_cast<std::streamsize>(chunk.size()));
    size_t begin = 0;
    for (size_t nl; (nl = chunk.find('\n', begin)) != std::string::npos; begin = nl + 1) {
      lines.push_back(chunk.substr(begin, nl - begin));
    }
    offset_ += begin;  // a partial last line waits for its newline
    return lines;
  }

 private:
  std::string path_;
  uint64_t offset_ = 0;
};

// The lines of a file that a resume may rewrite (metrics.jsonl is cut back to the resumed
// step, then appended to): returns the complete lines that are new since the last call —
// those after the longest prefix the file still shares with what was read before.
class RewrittenTail {
 public:
  explicit RewrittenTail(std::string path) : path_(std::move(path)) {}
  std::vector<std::string> Read() {
    auto text = ReadFileToString(path_);
    std::vector<std::string> lines;
    if (!text.ok()) return lines;
    const std::string& now = *text;
    size_t same = 0;
    const size_t limit = std::min(now.size(), seen_.size());
    while (same < limit && now[same] == seen_[same]) ++same;
    // Back to the start of the line the difference is in.
    size_t begin = same == 0 ? 0 : now.rfind('\n', same - 1);
    begin = begin == std::string::npos || same == 0 ? 0 : begin + 1;
    if (same == seen_.size() && same > 0 && seen_.back() == '\n') begin = same;
    size_t end = begin;
    for (size_t nl; (nl = now.find('\n', end)) != std::string::npos; end = nl + 1) {
      lines.push_back(now.substr(end, nl - end));
    }
    seen_ = now.substr(0, end);
    return lines;
  }

 private:
  std::string path_;
  std::string seen_;  // complete lines read so far, as they were
};

struct FaultState {
  PlannedFault plan;
  bool injected = false, given_up = false;
  double injected_unix = 0;
  int64_t injected_step = -1;
  std::string target, note;
  bool armed = false;                 // hooks: armed, waiting for it to take effect
  double armed_unix = 0;
  double active_until_unix = 0;       // io_error, slow_rank
  std::optional<RankSlower> slower;
  int64_t damaged_step = -1;          // corrupt/truncate
  bool relaunch = false;              // preempt: launch again after the stop
  std::vector<std::string> undo;      // partition, slow_link: the host program's args at the end
  bool host_program_failed = false;   // the host program could not inject it
};

// Runs the scenario's host program (`P VERB HOST ARGS...`) to its end (at most 60 s), its
// output appended to `log`. The only way a chaos run touches a real host.
Status RunHostControl(const std::string& program, const std::vector<std::string>& args,
                      const std::string& log) {
  std::vector<std::string> argv = {program};
  argv.insert(argv.end(), args.begin(), args.end());
  ProcessSession p;
  RETURN_IF_ERROR(p.Start(argv, {}, log));
  for (int i = 0; i < 600; ++i) {
    if (auto done = p.WaitFor(std::chrono::milliseconds(100))) {
      if (done->exited && done->exit_code == 0) return Status::Ok();
      return Internal(program + " " + args.front() + " " + args.at(1) + ": " + done->ToString() +
                      " (see " + log + ")");
    }
  }
  return Internal(program + " " + args.front() + ": no end within 60 s (see " + log + ")");
}

std::string Quote(const std::string& s) { return "\"" + s + "\""; }

class Campaign {
 public:
  Campaign(const Scenario& s, const std::vector<PlannedFault>& schedule, const CampaignOptions& o)
      : s_(s), o_(o) {
    for (const PlannedFault& p : schedule) {
      faults_.emplace_back();
      faults_.back().plan = p;
    }
  }
  Result<ChaosReport> Run();

 private:
  std::vector<std::string> LaunchArgs(const std::string& out, int64_t steps_override) const;
  Status Prepare();
  Status StartLaunch(int64_t steps_override);
  void Say(const std::string& line);
  double T(double unix_s) const { return unix_s - start_unix_; }
  void PollFiles(bool force = false);
  int64_t StepNow() const { return step_now_; }
  bool Due(const FaultState& f, double now_unix) const;
  void InjectDue(double now_unix);
  void Inject(FaultState& f, const std::map<int, pid_t>& ranks, double now_unix);
  void Damage(FaultState& f, const std::map<int, pid_t>& ranks, double now_unix);
  void InjectHost(FaultState& f, double now_unix);
  void TickActive(double now_unix);
  void ReadLaunchReport();
  void MatchDetections(ChaosReport& report);
  // How the job ended for good.
  struct RunEnd {
    bool completed = false;       // tessera launch exited 0
    std::string detail;           // "finished" / "tessera launch exited with ..."
    bool soak_finishing = false;  // stopped at the soak's end, then finished from its save
    int64_t soak_steps = 0;       // the step it saved then
  };
  Result<RunEnd> Drive();
  void CompareWithReference(const RunEnd& end, ChaosReport& report);
  void AuditCheckpointsInto(Verdict& v);
  void CheckSoakMemory(Verdict& v);
  Result<std::string> Reference(int64_t steps);
  std::string HooksPath(const char* sub, int id) const {
    return hooks_dir_ + "/" + sub + "/" + std::to_string(id);
  }

  const Scenario& s_;
  const CampaignOptions& o_;
  std::string out_, run_dir_, ckpt_dir_, hooks_dir_;
  double start_unix_ = 0;
  std::vector<FaultState> faults_;
  std::unique_ptr<ProcessSession> launch_;
  int launches_ = 0;
  std::unique_ptr<RewrittenTail> metrics_;
  std::unique_ptr<LineTail> events_, launch_log_;
  int64_t step_now_ = 0;
  std::vector<LossPoint> loss_;
  std::vector<SupervisorEvent> events_seen_;
  std::vector<ReportedFailure> failures_;
  std::vector<double> step_medians_;
  std::vector<MemorySample> memory_;
  double next_memory_unix_ = 0;
  double next_metrics_unix_ = 0;
  std::set<int64_t> damaged_steps_;
  // One fault at a time: after a disruptive one, the next waits for the job's first step
  // after it (the supervisor's "progress" event); after a timed one, for its window to end.
  double wait_progress_after_unix_ = -1;
  int wait_launches_ = 0;  // after a preemption: the relaunch must have happened too
  double busy_until_unix_ = 0;
};

void Campaign::Say(const std::string& line) {
  if (o_.out == nullptr) return;
  std::fprintf(o_.out, "chaos: [%7.2f s] %s\n", UnixNow() - start_unix_, line.c_str());
  std::fflush(o_.out);
}

std::vector<std::string> Campaign::LaunchArgs(const std::string& out, int64_t steps_override) const {
  std::vector<std::string> a = {o_.tessera, "launch", "-n", std::to_string(s_.ranks), s_.config};
  if (!s_.hostfile.empty()) a.insert(a.end(), {"--hostfile", s_.hostfile});
  if (!s_.bind.empty()) a.insert(a.end(), {"--bind", s_.bind});
  std::vector<std::string> sets = s_.sets;
  sets.push_back("train.out_dir=" + out);
  sets.push_back("checkpoint.dir=" + out + "/ckpt");
  if (steps_override > 0) sets.push_back("train.steps=" + std::to_string(steps_override));
  for (const std::string& set : sets) {
    a.push_back("--set");
    a.push_back(set);
  }
  for (const auto& [flag, value] : s_.supervisor) {
    std::string name = flag;
    std::replace(name.begin(), name.end(), '_', '-');
    a.push_back("--" + name);
    a.push_back(value);
  }
  return a;
}

Status Campaign::Prepare() {
  std::error_code ec;
  fs::create_directories(o_.out_dir, ec);
  if (ec) return IoError(o_.out_dir + ": cannot create: " + ec.message());
  out_ = fs::absolute(o_.out_dir).lexically_normal().string();
  run_dir_ = out_ + "/run";
  ckpt_dir_ = run_dir_ + "/ckpt";
  hooks_dir_ = out_ + "/hooks";
  for (const std::string& d : {run_dir_, hooks_dir_}) {
    fs::remove_all(d, ec);
    if (ec) return IoError(d + ": cannot clear: " + ec.message());
  }
  for (const std::string& d : {run_dir_, hooks_dir_ + "/armed", hooks_dir_ + "/fired"}) {
    fs::create_directories(d, ec);
    if (ec) return IoError(d + ": cannot create: " + ec.message());
  }
  // The ranks' hook plan: one entry per fault that must happen inside a rank.
  JsonWriter w;
  w.BeginObject().Key("hooks").BeginArray();
  for (const FaultState& f : faults_) {
    const FaultKind k = f.plan.spec.kind;
    if (k != FaultKind::kKillInCheckpoint && k != FaultKind::kIoError) continue;
    w.BeginObject().Key("id").String(std::to_string(f.plan.id)).Key("kind").String(FaultKindName(k));
    w.Key("rank").Int(f.plan.spec.rank);
    if (k == FaultKind::kIoError) w.Key("errno").String(f.plan.spec.error_number == 28 ? "ENOSPC" : "EIO");
    w.EndObject();
  }
  w.EndArray().EndObject();
  RETURN_IF_ERROR(WriteFileAtomic(hooks_dir_ + "/hooks.json", w.str() + "\n"));
  metrics_ = std::make_unique<RewrittenTail>(run_dir_ + "/metrics.jsonl");
  events_ = std::make_unique<LineTail>(run_dir_ + "/launch/events.jsonl");
  return Status::Ok();
}

Status Campaign::StartLaunch(int64_t steps_override) {
  launch_ = std::make_unique<ProcessSession>();
  const std::string log = out_ + "/launch-" + std::to_string(++launches_) + ".log";
  EnvList env = {{kEnvChaosHooks, hooks_dir_ + "/hooks.json"}};
  RETURN_IF_ERROR(launch_->Start(LaunchArgs(run_dir_, steps_override), env, log));
  launch_log_ = std::make_unique<LineTail>(log);
  Say(StrFormat("launch %d: tessera launch -n %d %s (pid %d), output in %s", launches_, s_.ranks,
                s_.config.c_str(), static_cast<int>(launch_->pid()), log.c_str()));
  return Status::Ok();
}

void Campaign::PollFiles(bool force) {
  const double now = UnixNow();
  if (o_.echo_job && o_.out != nullptr && launch_log_) {
    for (const std::string& line : launch_log_->Read()) std::fprintf(o_.out, "  | %s\n", line.c_str());
  }
  // The metrics file is read whole (a resume rewrites it): ten times a second is plenty.
  const bool read_metrics = force || now >= next_metrics_unix_;
  if (read_metrics) next_metrics_unix_ = now + 0.1;
  for (const std::string& line : read_metrics ? metrics_->Read() : std::vector<std::string>()) {
    auto v = ParseJson(line);
    if (!v.ok()) continue;
    const JsonValue* step = v->Find("step");
    const JsonValue* loss = v->Find("loss");
    if (step == nullptr || loss == nullptr || !step->is_number() || !loss->is_number()) continue;
    step_now_ = static_cast<int64_t>(step->as_double());
    loss_.push_back({T(now), step_now_, loss->as_double()});
  }
  for (const std::string& line : events_->Read()) {
    if (auto e = ParseSupervisorEvent(line); e.ok()) events_seen_.push_back(std::move(*e));
  }
  if (launch_ && now >= next_memory_unix_) {
    next_memory_unix_ = now + 5;
    MemorySample m;
    m.t_s = T(now);
    m.supervisor_rss_mib = ResidentMiB(launch_->pid());
    for (const auto& [rank, pid] : FindRankPids(run_dir_)) m.ranks_rss_mib += ResidentMiB(pid);
    if (m.supervisor_rss_mib > 0) memory_.push_back(m);
  }
}

bool Campaign::Due(const FaultState& f, double now_unix) const {
  const FaultSpec& s = f.plan.spec;
  if (s.at_step >= 0) return StepNow() >= s.at_step;
  return T(now_unix) >= s.at_time_s;
}

void Campaign::InjectDue(double now_unix) {
  if (now_unix < busy_until_unix_) return;
  for (const FaultState& f : faults_) {
    if (f.armed) return;  // a hook is waiting for its moment
  }
  if (launches_ < wait_launches_) return;
  if (wait_progress_after_unix_ >= 0) {
    bool progressed = false;
    for (const SupervisorEvent& e : events_seen_) {
      progressed |= e.kind == "progress" && e.unix_s > wait_progress_after_unix_;
    }
    if (!progressed) return;
    wait_progress_after_unix_ = -1;
  }
  std::map<int, pid_t> ranks;
  bool looked = false;
  for (FaultState& f : faults_) {
    if (f.injected || f.given_up || f.armed || !Due(f, now_unix)) continue;
    // One disruptive fault at a time: the next waits until the job runs again with every rank.
    if (!looked) {
      ranks = FindRankPids(run_dir_);
      looked = true;
    }
    // Rank faults hit a job that runs: every rank alive and the current incarnation past its
    // first step (a rank stopped inside MPI_Init would only be caught by the startup timeout).
    double last_launch = -1, last_progress = -1;
    for (const SupervisorEvent& e : events_seen_) {
      if (e.kind == "launch") last_launch = e.unix_s;
      if (e.kind == "progress") last_progress = e.unix_s;
    }
    const bool job_up = static_cast<int>(ranks.size()) == s_.ranks && last_progress > last_launch;
    if (!job_up && f.plan.spec.kind != FaultKind::kPreempt) return;
    Inject(f, ranks, now_unix);
    if (f.injected || f.armed) {
      const FaultKind k = f.plan.spec.kind;
      if (k == FaultKind::kSlowRank || k == FaultKind::kIoError || k == FaultKind::kSlowLink) {
        busy_until_unix_ = f.active_until_unix;
      } else if (k != FaultKind::kKillInCheckpoint) {
        wait_progress_after_unix_ = f.injected_unix;
        if (k == FaultKind::kPreempt) wait_launches_ = launches_ + 1;
      }
    }
    return;  // at most one per poll: the next sees the job's reaction
  }
}

void Campaign::Inject(FaultState& f, const std::map<int, pid_t>& ranks, double now_unix) {
  const FaultSpec& s = f.plan.spec;
  auto mark = [&](std::string target) {
    f.injected = true;
    f.injected_unix = now_unix;
    f.injected_step = StepNow();
    f.target = std::move(target);
    Say(StrFormat("inject #%d %s: %s at step %lld", f.plan.id, FaultKindName(s.kind), f.target.c_str(),
                  static_cast<long long>(f.injected_step)));
  };
  switch (s.kind) {
    case FaultKind::kKillRank:
      kill(ranks.at(s.rank), SIGKILL);
      mark("rank " + std::to_string(s.rank));
      break;
    case FaultKind::kStopRank:
      kill(ranks.at(s.rank), SIGSTOP);
      mark("rank " + std::to_string(s.rank));
      break;
    case FaultKind::kKillHost: {
      const std::vector<int>& group = s_.hosts.at(s.host);
      for (int r : group) kill(ranks.at(r), SIGKILL);
      mark(StrFormat("host %d (%s)", s.host, RankWord(group).c_str()));
      break;
    }
    case FaultKind::kSlowRank:
      f.slower.emplace(ranks.at(s.rank), Clock::now() + std::chrono::milliseconds(static_cast<int64_t>(s.duration_s * 1000)));
      f.active_until_unix = now_unix + s.duration_s;
      mark(StrFormat("rank %d for %.1f s", s.rank, s.duration_s));
      break;
    case FaultKind::kPreempt:
      if (!launch_ || !launch_->Signal(SIGTERM).ok()) return;  // between launches: later
      f.relaunch = true;
      mark("supervisor (SIGTERM)");
      break;
    case FaultKind::kKillInCheckpoint:
    case FaultKind::kIoError: {
      const std::string armed = HooksPath("armed", f.plan.id);
      if (Status st = WriteFileAtomic(armed, "armed\n"); !st.ok()) {
        f.given_up = true;
        f.note = "could not arm: " + st.ToString();
        return;
      }
      f.armed = true;
      f.armed_unix = now_unix;
      if (s.kind == FaultKind::kIoError) {
        // Injected from the arming on: every checkpoint write in the window fails.
        mark(StrFormat("%s for %.1f s (%s)", s.rank < 0 ? "every rank" : ("rank " + std::to_string(s.rank)).c_str(),
                       s.duration_s, s.error_number == 28 ? "ENOSPC" : "EIO"));
        f.active_until_unix = now_unix + s.duration_s;
      } else {
        Say(StrFormat("armed #%d kill_in_checkpoint: rank %d dies in its next shard write", f.plan.id, s.rank));
      }
      break;
    }
    case FaultKind::kCorruptShard:
    case FaultKind::kTruncateShard:
      Damage(f, ranks, now_unix);
      break;
    case FaultKind::kLoseHost:
    case FaultKind::kPartition:
    case FaultKind::kSlowLink:
      InjectHost(f, now_unix);
      break;
  }
}

// A fault on a real host, through the scenario's host program; partition and slow_link are
// undone when their window ends (TickActive).
void Campaign::InjectHost(FaultState& f, double now_unix) {
  const FaultSpec& s = f.plan.spec;
  const std::string host = s_.hostfile_hosts.at(s.host);
  std::vector<std::string> args;
  std::string what = "host " + host;
  if (s.kind == FaultKind::kLoseHost) {
    args = {"lose", host};
    what += ": every process killed, link cut";
  } else if (s.kind == FaultKind::kPartition) {
    args = {"link", host, "down"};
    f.undo = {"link", host, "up"};
    what += StrFormat(": link down for %.1f s", s.duration_s);
  } else {
    args = {"qdisc", host, s.qdisc};
    f.undo = {"qdisc", host, "clear"};
    what += StrFormat(": %s for %.1f s", s.qdisc.c_str(), s.duration_s);
  }
  if (Status st = RunHostControl(s_.host_control, args, out_ + "/host_control.log"); !st.ok()) {
    f.given_up = true;
    f.host_program_failed = true;
    f.undo.clear();
    f.note = "host program failed: " + st.ToString();
    Say(StrFormat("#%d %s not injected: %s", f.plan.id, FaultKindName(s.kind), st.ToString().c_str()));
    return;
  }
  if (!f.undo.empty()) f.active_until_unix = now_unix + s.duration_s;
  f.injected = true;
  f.injected_unix = now_unix;
  f.injected_step = StepNow();
  f.target = what;
  Say(StrFormat("inject #%d %s: %s at step %lld", f.plan.id, FaultKindName(s.kind), what.c_str(),
                static_cast<long long>(f.injected_step)));
}

// Freezes the job, damages the newest committed checkpoint, and kills rank 0 so the restart
// must read it: the ranks have to find the damage and fall back.
void Campaign::Damage(FaultState& f, const std::map<int, pid_t>& ranks, double now_unix) {
  auto committed = CommittedSteps(ckpt_dir_);
  // A checkpoint fault hits one checkpoint: the newest, and only once the job has committed a
  // newer one than the last it damaged. Damaging the fallback too, again and again, would
  // destroy every retained checkpoint — a disaster the runtime rightly ends with exit 5, not
  // the fault being tested. Until then the fault waits.
  // And only with an older one to fall back to: damaging the only checkpoint is the same
  // disaster.
  const int64_t last_damaged = damaged_steps_.empty() ? -1 : *damaged_steps_.rbegin();
  if (!committed.ok() || committed->size() < 2 || committed->front() <= last_damaged) return;
  for (const auto& [rank, pid] : ranks) kill(pid, SIGSTOP);
  std::this_thread::sleep_for(std::chrono::milliseconds(100));  // no rename is half done now
  committed = CommittedSteps(ckpt_dir_);
  const int64_t step = committed.ok() && committed->size() >= 2 ? committed->front() : -1;
  std::string what = "no committed checkpoint";
  if (step >= 0) {
    std::mt19937_64 rng(f.plan.spec.damage_seed);
    const int shard_rank = static_cast<int>(rng() % static_cast<uint64_t>(s_.ranks));
    const std::string path = ckpt_dir_ + "/" + StepDirName(step) + "/" + ShardFileName(shard_rank);
    std::error_code ec;
    const auto size = fs::file_size(path, ec);
    if (!ec && size > 0) {
      if (f.plan.spec.kind == FaultKind::kTruncateShard) {
        fs::resize_file(path, size / 2, ec);
        what = StrFormat("%s/shard_%d.bin truncated from %llu to %llu bytes", StepDirName(step).c_str(),
                         shard_rank, static_cast<unsigned long long>(size),
                         static_cast<unsigned long long>(size / 2));
      } else {
        const uint64_t offset = rng() % size;
        std::fstream io(path, std::ios::in | std::ios::out | std::ios::binary);
        io.seekg(static_cast<std::streamoff>(offset));
        char byte = 0;
        io.read(&byte, 1);
        byte = static_cast<char>(byte ^ 0xff);
        io.seekp(static_cast<std::streamoff>(offset));
        io.write(&byte, 1);
        io.flush();
        what = StrFormat("%s/shard_%d.bin byte %llu inverted", StepDirName(step).c_str(), shard_rank,
                         static_cast<unsigned long long>(offset));
        if (!io) ec = std::make_error_code(std::errc::io_error);
      }
    }
    if (ec) what += " (failed: " + ec.message() + ")";
    else damaged_steps_.insert(step);
    f.damaged_step = step;
  }
  // Make the damage matter: a restart has to read that checkpoint.
  if (ranks.count(0)) kill(ranks.at(0), SIGKILL);
  for (const auto& [rank, pid] : ranks) {
    if (rank != 0) kill(pid, SIGCONT);
  }
  f.injected = true;
  f.injected_unix = now_unix;
  f.injected_step = StepNow();
  f.target = what + ", then rank 0 killed";
  Say(StrFormat("inject #%d %s: %s", f.plan.id, FaultKindName(f.plan.spec.kind), f.target.c_str()));
}

void Campaign::TickActive(double now_unix) {
  for (FaultState& f : faults_) {
    if (f.slower) {
      if (!f.slower->Tick(Clock::now())) f.slower.reset();
    }
    if (!f.undo.empty() && now_unix >= f.active_until_unix) {
      Status st = RunHostControl(s_.host_control, f.undo, out_ + "/host_control.log");
      Say(StrFormat("#%d %s over: %s %s%s", f.plan.id, FaultKindName(f.plan.spec.kind),
                    f.undo[0].c_str(), f.undo[2].c_str(), st.ok() ? "" : (": " + st.ToString()).c_str()));
      if (!st.ok()) f.note = "could not undo: " + st.ToString();
      f.undo.clear();
    }
    if (!f.armed) continue;
    const FaultKind k = f.plan.spec.kind;
    const std::string fired = HooksPath("fired", f.plan.id);
    struct stat st {};
    const bool has_fired = ::stat(fired.c_str(), &st) == 0;
    if (k == FaultKind::kKillInCheckpoint && has_fired) {
      ::unlink(HooksPath("armed", f.plan.id).c_str());
      f.armed = false;
      f.injected = true;
      f.injected_unix = st.st_mtim.tv_sec + st.st_mtim.tv_nsec * 1e-9;
      f.injected_step = StepNow();
      f.target = "rank " + std::to_string(f.plan.spec.rank) + " in its shard write";
      wait_progress_after_unix_ = f.injected_unix;
      Say(StrFormat("inject #%d kill_in_checkpoint: rank %d killed itself in the middle of its shard write",
                    f.plan.id, f.plan.spec.rank));
    } else if (k == FaultKind::kKillInCheckpoint && now_unix - f.armed_unix > 120) {
      ::unlink(HooksPath("armed", f.plan.id).c_str());
      f.armed = false;
      f.given_up = true;
      f.note = "armed for 120 s but the rank wrote no checkpoint";
    } else if (k == FaultKind::kIoError && now_unix >= f.active_until_unix) {
      ::unlink(HooksPath("armed", f.plan.id).c_str());
      f.armed = false;
      if (!has_fired) f.note = "no checkpoint write happened while the I/O errors were armed";
      Say(StrFormat("#%d io_error window over%s", f.plan.id, has_fired ? "" : " (no write was affected)"));
    }
  }
}

void Campaign::ReadLaunchReport() {
  auto text = ReadFileToString(run_dir_ + "/launch/report.json");
  if (!text.ok()) return;
  auto report = ParseLaunchReport(*text);
  if (!report.ok()) return;
  if (report->step_s > 0) step_medians_.push_back(report->step_s);
  for (ReportedFailure& f : report->failures) failures_.push_back(std::move(f));
}

Result<std::string> Campaign::Reference(int64_t steps) {
  if (!o_.reference_dir.empty()) return o_.reference_dir + "/model.safetensors";
  const std::string ref = out_ + "/reference";
  // What the reference ran, so a later chaos run of the same job reuses it.
  std::string job;
  for (const std::string& a : LaunchArgs(ref, steps)) job += Quote(a) + " ";
  auto config_text = ReadFileToString(s_.config);
  job += "\n" + (config_text.ok() ? *config_text : std::string()) + "\n";
  auto recorded = ReadFileToString(ref + "/job.txt");
  if (recorded.ok() && *recorded == job && fs::exists(ref + "/model.safetensors")) {
    Say("reference: reusing " + ref + " (same job)");
    return ref + "/model.safetensors";
  }
  std::error_code ec;
  fs::remove_all(ref, ec);
  fs::create_directories(ref, ec);
  Say("reference: the same job without faults, in " + ref);
  ProcessSession p;
  RETURN_IF_ERROR(p.Start(LaunchArgs(ref, steps), {}, out_ + "/reference.log"));
  std::optional<ProcessOutcome> done;
  while (!(done = p.WaitFor(std::chrono::seconds(1)))) {
  }
  if (!done->exited || done->exit_code != 0) {
    return Internal("the reference run failed (" + done->ToString() + "), see " + out_ + "/reference.log");
  }
  RETURN_IF_ERROR(WriteFileAtomic(ref + "/job.txt", job));
  return ref + "/model.safetensors";
}

// Pairs every injected fault with the evidence that the runtime saw it (attribution.h).
void Campaign::MatchDetections(ChaosReport& report) {
  std::vector<InjectedFault> injected;
  for (const FaultState& f : faults_) {
    InjectedFault x;
    x.id = f.plan.id;
    x.kind = f.plan.spec.kind;
    const bool rank_fault = x.kind == FaultKind::kKillRank || x.kind == FaultKind::kStopRank ||
                            x.kind == FaultKind::kSlowRank || x.kind == FaultKind::kKillInCheckpoint ||
                            x.kind == FaultKind::kIoError;
    if (x.kind == FaultKind::kKillHost) {
      x.ranks = s_.hosts.at(f.plan.spec.host);
    } else if (IsHostKind(x.kind)) {
      // A lost or cut-off host takes the whole job down; whichever rank's failure is seen
      // first speaks for it.
      for (int r = 0; r < s_.ranks; ++r) x.ranks.push_back(r);
    } else if (rank_fault && f.plan.spec.rank >= 0) {
      x.ranks = {f.plan.spec.rank};
    }
    x.injected = f.injected;
    x.injected_unix = f.injected_unix;
    x.injected_step = f.injected_step;
    x.active_until_unix = f.active_until_unix;
    x.target = f.target;
    x.planned = f.plan.ToString();
    x.note = f.note;
    injected.push_back(std::move(x));
  }
  AttributionOptions o;
  o.start_unix = start_unix_;
  if (auto it = s_.supervisor.find("heartbeat_timeout"); it != s_.supervisor.end()) {
    o.heartbeat_timeout_s = std::atof(it->second.c_str());
  }
  Attribution a = AttributeFaults(injected, events_seen_, failures_, o);
  report.faults = std::move(a.faults);
  // Failures no fault explains: worth a look (a false detection, or a fault's side effect).
  std::string unexplained;
  for (const ReportedFailure& r : a.unexplained) {
    unexplained += (unexplained.empty() ? "" : ", ") + r.kind + " (" + RankWord(r.ranks) + ")";
  }
  if (!unexplained.empty()) report.verdict.run_detail += "; failures no fault explains: " + unexplained;
}

Result<ChaosReport> Campaign::Run() {
  RETURN_IF_ERROR(Prepare());
  start_unix_ = UnixNow();
  ChaosReport report;
  report.scenario = s_.path;
  for (const FaultState& f : faults_) report.schedule += f.plan.ToString() + "\n";
  Say(StrFormat("%s: %zu fault(s) scheduled%s", s_.path.c_str(), faults_.size(),
                s_.soak_s > 0 ? StrFormat(", soak for %.0f s", s_.soak_s).c_str() : ""));
  RETURN_IF_ERROR(StartLaunch(0));
  ASSIGN_OR_RETURN(const RunEnd end, Drive());
  for (FaultState& f : faults_) {
    if (f.slower) f.slower->Finish();
    if (f.armed) ::unlink(HooksPath("armed", f.plan.id).c_str());
    if (!f.undo.empty()) {  // the run ended inside the window: the host is put back anyway
      if (Status st = RunHostControl(s_.host_control, f.undo, out_ + "/host_control.log"); !st.ok()) {
        f.note = "could not undo: " + st.ToString();
      }
      f.undo.clear();
    }
  }
  report.wall_s = UnixNow() - start_unix_;
  report.final_step = step_now_;
  report.loss = loss_;
  report.memory = memory_;
  report.median_step_s = step_medians_.empty() ? 0 : Median(step_medians_);
  report.goodput = report.wall_s > 0 ? std::min(1.0, report.final_step * report.median_step_s / report.wall_s) : 0;
  Verdict& v = report.verdict;
  v.run_completed = end.completed;
  v.run_detail = end.detail + (end.soak_finishing ? StrFormat(" (soak: stopped at step %lld)", static_cast<long long>(end.soak_steps)) : "");
  MatchDetections(report);
  for (const FaultOutcome& f : report.faults) {
    v.faults_injected += f.injected_s >= 0;
    v.faults_detected += f.injected_s >= 0 && f.detected;
  }
  // A host fault the host program could not inject proves nothing: it counts as injected and
  // not detected, so the verdict fails and the table's note says why.
  for (const FaultState& f : faults_) v.faults_injected += f.host_program_failed;
  CompareWithReference(end, report);
  AuditCheckpointsInto(v);
  if (s_.soak_s > 0 && memory_.size() >= 2) CheckSoakMemory(v);
  return report;
}

// Polls, injects and relaunches until the job ends for good (finished, failed, or stopped at
// the soak's end and finished from its checkpoint).
Result<Campaign::RunEnd> Campaign::Drive() {
  RunEnd end;
  bool soak_stop_sent = false;
  while (true) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    PollFiles();
    const double now = UnixNow();
    TickActive(now);
    if (s_.soak_s > 0 && !soak_stop_sent && T(now) >= s_.soak_s) {
      soak_stop_sent = true;
      (void)launch_->Signal(SIGTERM);  // a launch that already ended is handled just below
      Say("soak: time is up, stopping the job (it saves a checkpoint)");
    }
    if (!soak_stop_sent) InjectDue(now);
    auto exited = launch_->Poll();
    if (!exited) continue;
    launch_->Stop(std::chrono::seconds(1));  // reaps anything left in its session
    ReadLaunchReport();
    PollFiles(/*force=*/true);
    const int code = exited->ShellCode();
    Say("tessera launch ended: " + exited->ToString());
    bool relaunch = false;
    for (FaultState& f : faults_) {
      if (f.relaunch && code == kExitStopped) {
        f.relaunch = false;
        relaunch = true;
      }
    }
    if (code == kExitStopped && soak_stop_sent && !end.soak_finishing) {
      // Stopped at the soak's end: finish at the step it saved (writes model.safetensors).
      auto steps = CommittedSteps(ckpt_dir_);
      end.soak_steps = steps.ok() && !steps->empty() ? steps->front() : 0;
      end.soak_finishing = true;
      RETURN_IF_ERROR(StartLaunch(end.soak_steps));
      continue;
    }
    if (relaunch) {
      RETURN_IF_ERROR(StartLaunch(end.soak_finishing ? end.soak_steps : 0));
      continue;
    }
    end.completed = code == kExitOk;
    end.detail = end.completed ? "finished" : "tessera launch exited with " + exited->ToString();
    return end;
  }
}

// The reference and the comparison (a run that did not finish has no final weights).
void Campaign::CompareWithReference(const RunEnd& end, ChaosReport& report) {
  Verdict& v = report.verdict;
  const double ref_start = UnixNow();
  Result<std::string> reference = FailedPrecondition("not compared: the run did not finish");
  if (end.completed) reference = Reference(end.soak_finishing ? end.soak_steps : 0);
  report.reference_wall_s = o_.reference_dir.empty() && end.completed ? UnixNow() - ref_start : 0;
  if (!reference.ok()) {
    v.weights_detail = reference.status().ToString();
  } else if (auto cmp = CompareWeightFiles(*reference, run_dir_ + "/model.safetensors"); !cmp.ok()) {
    v.weights_detail = cmp.status().ToString();
  } else {
    v.weights_identical = cmp->identical;
    v.weights_detail = cmp->detail;
  }
}

void Campaign::AuditCheckpointsInto(Verdict& v) {
  if (auto audit = AuditCheckpoints(ckpt_dir_, damaged_steps_); audit.ok()) {
    v.committed_checkpoints = audit->committed;
    v.checkpoints_lost = audit->lost;
    v.checkpoints_detail = audit->detail;
  } else {
    v.checkpoints_lost = -1;
    v.checkpoints_detail = "audit failed: " + audit.status().ToString();
  }
}

// Soak: the supervisor's growth after the first minute (start-up allocations excluded).
void Campaign::CheckSoakMemory(Verdict& v) {
  const MemorySample* base = &memory_.front();
  for (const MemorySample& m : memory_) {
    if (m.t_s >= 60) {
      base = &m;
      break;
    }
  }
  double peak = base->supervisor_rss_mib;
  for (const MemorySample& m : memory_) {
    if (m.t_s >= base->t_s) peak = std::max(peak, m.supervisor_rss_mib);
  }
  const double growth = peak - base->supervisor_rss_mib;
  v.memory_ok = growth <= s_.max_supervisor_rss_growth_mib;
  v.memory_detail = StrFormat("supervisor RSS %.1f MiB at %.0f s, peak %.1f MiB after (growth %.1f MiB, "
                              "allowed %.0f)",
                              base->supervisor_rss_mib, base->t_s, peak, growth, s_.max_supervisor_rss_growth_mib);
}

}  // namespace

Result<ChaosReport> RunCampaign(const Scenario& scenario, const std::vector<PlannedFault>& schedule,
                                const CampaignOptions& options) {
  if (options.tessera.empty()) return InvalidArgument("chaos: no tessera binary");
  if (options.out_dir.empty()) return InvalidArgument("chaos: no output directory");
  Campaign c(scenario, schedule, options);
  return c.Run();
}

}  // namespace tessera
