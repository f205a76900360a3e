// tools/supervised_rank.cc — the supervised rank's link (see supervised_rank.h).
#include "tools/supervised_rank.h"

#include <arpa/inet.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <thread>

#include "comm/activity.h"
#include "runtime/supervisor/rank_env.h"

namespace tessera {
namespace {

bool ParseInt64(const std::string& s, int64_t* out) {
  if (s.empty()) return false;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), *out);
  return ec == std::errc() && end == s.data() + s.size();
}

bool Printable(const std::string& s) {
  for (char c : s) {
    if (c < 0x20 || c > 0x7e) return false;
  }
  return true;
}

Status Bad(const char* name, const std::string& value, const std::string& want) {
  return InvalidArgument(std::string("supervised rank: environment variable ") + name + "='" +
                         (Printable(value) ? value : "<non-printable>") + "' " + want);
}

Result<std::string> Required(EnvGetter get, const char* name) {
  const char* v = get(name);
  if (v == nullptr || *v == '\0') {
    return InvalidArgument(std::string("supervised rank: environment variable ") + name +
                           " is not set (" + kEnvControlPort +
                           " is, so the supervisor must set it too)");
  }
  return std::string(v);
}

// "RANK:STEP[:INCARNATION]", non-negative integers.
Result<std::optional<FaultPoint>> ParseFault(EnvGetter get, const char* name) {
  const char* v = get(name);
  if (v == nullptr) return std::optional<FaultPoint>();
  const std::string s(v);
  std::vector<std::string> parts;
  for (size_t begin = 0;;) {
    const size_t colon = s.find(':', begin);
    parts.push_back(s.substr(begin, colon == std::string::npos ? std::string::npos : colon - begin));
    if (colon == std::string::npos) break;
    begin = colon + 1;
  }
  int64_t rank = -1, step = -1, incarnation = -1;
  if (parts.size() < 2 || parts.size() > 3 || !ParseInt64(parts[0], &rank) ||
      !ParseInt64(parts[1], &step) || rank < 0 || rank > kControlMaxWorldSize || step < 0 ||
      (parts.size() == 3 && (!ParseInt64(parts[2], &incarnation) || incarnation < 0))) {
    return Bad(name, s,
               "is not RANK:STEP[:INCARNATION] (non-negative integers, e.g. 1:5 or 1:5:0)");
  }
  return std::optional<FaultPoint>(FaultPoint{static_cast<int>(rank), step, incarnation});
}

RankPhase ToRankPhase(TrainPhase p) {
  switch (p) {
    case TrainPhase::kIdle: return RankPhase::kIdle;
    case TrainPhase::kForward: return RankPhase::kForward;
    case TrainPhase::kBackward: return RankPhase::kBackward;
    case TrainPhase::kOptimizer: return RankPhase::kOptimizer;
    case TrainPhase::kCheckpoint: return RankPhase::kCheckpoint;
    case TrainPhase::kEval: return RankPhase::kEval;
  }
  return RankPhase::kIdle;
}

std::string HostName() {
  char buf[256] = {};
  if (gethostname(buf, sizeof buf - 1) != 0 || buf[0] == '\0') return "unknown";
  std::string host(buf);
  return Printable(host) ? host : "unknown";
}

}  // namespace

Result<std::optional<SupervisedRankEnv>> ReadSupervisedRankEnv(EnvGetter get) {
  const char* port_text = get(kEnvControlPort);
  if (port_text == nullptr) return std::optional<SupervisedRankEnv>();
  SupervisedRankEnv env;
  int64_t port = 0;
  if (!ParseInt64(port_text, &port) || port < 1 || port > 65535) {
    return Bad(kEnvControlPort, port_text, "is not a TCP port (1..65535)");
  }
  env.port = static_cast<uint16_t>(port);
  ASSIGN_OR_RETURN(env.address, Required(get, kEnvControlAddress));
  in6_addr scratch;
  if (inet_pton(AF_INET, env.address.c_str(), &scratch) != 1 &&
      inet_pton(AF_INET6, env.address.c_str(), &scratch) != 1) {
    return Bad(kEnvControlAddress, env.address, "is not an IPv4 or IPv6 literal");
  }
  if (const char* socket = get(kEnvControlSocket); socket != nullptr && *socket != '\0') {
    env.control_socket = socket;
    if (env.control_socket[0] != '/' || !Printable(env.control_socket)) {
      return Bad(kEnvControlSocket, env.control_socket, "is not an absolute path");
    }
  }
  ASSIGN_OR_RETURN(env.secret, Required(get, kEnvControlSecret));
  if (env.secret.size() > kControlMaxSecretBytes) {
    return InvalidArgument(std::string("supervised rank: environment variable ") +
                           kEnvControlSecret + " is longer than " +
                           std::to_string(kControlMaxSecretBytes) + " bytes");
  }
  ASSIGN_OR_RETURN(env.run_id, Required(get, kEnvRunId));
  if (env.run_id.size() > kControlMaxRunIdBytes || !Printable(env.run_id)) {
    return Bad(kEnvRunId, env.run_id,
               "is not printable ASCII of at most " + std::to_string(kControlMaxRunIdBytes) +
                   " bytes");
  }
  ASSIGN_OR_RETURN(const std::string incarnation, Required(get, kEnvIncarnation));
  if (!ParseInt64(incarnation, &env.incarnation) || env.incarnation < 0) {
    return Bad(kEnvIncarnation, incarnation, "is not a non-negative integer");
  }
  if (const char* hb = get(kEnvHeartbeatMs); hb != nullptr) {
    int64_t ms = 0;
    if (!ParseInt64(hb, &ms) || ms < 1 || ms > 60000) {
      return Bad(kEnvHeartbeatMs, hb, "is not a heartbeat interval in ms (1..60000)");
    }
    env.heartbeat_ms = static_cast<int>(ms);
  }
  ASSIGN_OR_RETURN(env.fault_hang, ParseFault(get, kEnvFaultHang));
  ASSIGN_OR_RETURN(env.fault_crash, ParseFault(get, kEnvFaultCrash));
  return std::optional<SupervisedRankEnv>(std::move(env));
}

// Relays the coordinator's catalog writes to the supervisor, the catalog's single writer; a
// committed entry is also reported as a commit (what the supervisor's resume choice and
// crash-loop guard follow). Knows no entries itself.
class SupervisedRank::RelayCatalog final : public CatalogSink {
 public:
  explicit RelayCatalog(ControlClient& client) : client_(client) {}

  Status Put(const CheckpointEntry& e) override {
    CatalogRecordMsg m;
    m.op = CatalogOp::kPut;
    m.entry = e;
    Status s = client_.SendCatalogRecord(m);
    if (e.status == CheckpointStatus::kCommitted) client_.ReportCommit(e.step);
    return s;
  }
  Status SetStatus(int64_t step, CheckpointStatus status, const std::string& note) override {
    CatalogRecordMsg m;
    m.op = CatalogOp::kStatus;
    m.step = step;
    m.status = status;
    m.note = note;
    return client_.SendCatalogRecord(m);
  }
  Status AddEvent(const std::string& kind, const std::string& message) override {
    CatalogRecordMsg m;
    m.op = CatalogOp::kEvent;
    m.kind = kind;
    m.message = message;
    return client_.SendCatalogRecord(m);
  }
  Result<CheckpointEntry> Get(int64_t step) const override {
    return NotFound("step " + std::to_string(step) +
                    ": the supervisor keeps the catalog; this rank only relays writes");
  }
  Status Flush() override { return client_.Flush(/*timeout_ms=*/2000); }
  void NoteHeldInMemory(int64_t step) override { client_.ReportCommit(step, /*memory_tier=*/true); }

 private:
  ControlClient& client_;
};

SupervisedRank::SupervisedRank(int rank, SupervisedRankEnv env) : rank_(rank), env_(std::move(env)) {}

SupervisedRank::~SupervisedRank() = default;

Result<std::unique_ptr<SupervisedRank>> SupervisedRank::FromEnvironment(int rank, int world_size) {
  ASSIGN_OR_RETURN(std::optional<SupervisedRankEnv> env, ReadSupervisedRankEnv(
                                              [](const char* name) -> const char* {
                                                return std::getenv(name);
                                              }));
  if (!env) return std::unique_ptr<SupervisedRank>();
  std::unique_ptr<SupervisedRank> link(new SupervisedRank(rank, std::move(*env)));
  Result<std::unique_ptr<ChaosHooks>> hooks = ChaosHooks::FromEnvironment(rank);
  if (!hooks.ok()) return hooks.status().WithPrefix("supervised rank");
  link->chaos_hooks_ = std::move(*hooks);
  ControlClientOptions o;
  o.unix_socket_path = link->env_.control_socket;
  o.address = link->env_.address;
  o.port = link->env_.port;
  o.heartbeat_interval_ms = link->env_.heartbeat_ms;
  o.hello.run_id = link->env_.run_id;
  o.hello.incarnation = link->env_.incarnation;
  o.hello.rank = rank;
  o.hello.world_size = world_size;
  o.hello.pid = static_cast<int64_t>(getpid());
  o.hello.host = HostName();
  o.hello.secret = link->env_.secret;
  // Runs on the client's thread: two relaxed loads.
  o.before_heartbeat = [](HeartbeatMsg& hb) {
    const CommActivity a = SampleCommActivity();
    if (a.waiting > 0) hb.phase = RankPhase::kCollective;
    hb.collective_seq = a.ops_launched;
  };
  auto client = ControlClient::Connect(o);
  if (!client.ok()) {
    return client.status().WithPrefix("supervised rank " + std::to_string(rank) +
                                      ": cannot reach the supervisor at " + o.address + ":" +
                                      std::to_string(o.port));
  }
  // On another host the socket's absence is expected; anything else is worth a line, since
  // this rank registers over TCP where a flood from another local user can delay it.
  if (const Status& unix = (*client)->unix_socket_status();
      !o.unix_socket_path.empty() && !unix.ok() && unix.code() != StatusCode::kNotFound) {
    std::fprintf(stderr, "tessera: rank %d: not using the supervisor's Unix socket (%s); over TCP\n",
                 rank, unix.message().c_str());
  }
  link->client_ = std::move(*client);
  link->catalog_ = std::make_unique<RelayCatalog>(*link->client_);
  return link;
}

bool SupervisedRank::FaultFires(const std::optional<FaultPoint>& f, int64_t steps_done) const {
  return f && f->rank == rank_ && f->step == steps_done &&
         (f->incarnation < 0 || f->incarnation == env_.incarnation);
}

void SupervisedRank::SetStep(int64_t steps_done) {
  // A step boundary on the training thread. The interval since the previous one is one step's
  // work (plus the rank's bookkeeping around it: metrics, checkpoints); what its threads spent
  // blocked in Work::Wait was waiting for peers, the rest is this rank's own time. A rank slowed
  // down (a slow core, a SIGSTOP duty cycle) grows the rest; its peers grow their waits. The
  // first call of a run (start or resume) only sets the baseline.
  // Published: the mean over the last few steps, not the last step alone. A rank slowed by
  // being stopped now and then has a few very slow steps among normal ones, and its heartbeat
  // thread is stopped with it: the heartbeats it does send go out right after a stop ends, while
  // the step the stop interrupted is still running, so "the last completed step" would almost
  // always be a normal one. A window of steps holds the slow ones. The value goes out before the
  // step number, so a heartbeat carrying the new step carries the new value too.
  const auto now = std::chrono::steady_clock::now();
  const int64_t wait_ns = SampleCommActivity().wait_ns;
  if (have_step_start_) {
    const int64_t wall_ns =
        std::chrono::duration_cast<std::chrono::nanoseconds>(now - step_start_).count();
    recent_compute_ns_.push_back(std::max<int64_t>(0, wall_ns - (wait_ns - step_start_wait_ns_)));
    if (recent_compute_ns_.size() > kComputeWindowSteps) recent_compute_ns_.pop_front();
    int64_t sum_ns = 0;
    for (int64_t ns : recent_compute_ns_) sum_ns += ns;
    const int64_t mean_ns = sum_ns / static_cast<int64_t>(recent_compute_ns_.size());
    client_->SetComputeMs((mean_ns + 500'000) / 1'000'000);
  }
  have_step_start_ = true;
  step_start_ = now;
  step_start_wait_ns_ = wait_ns;
  client_->SetStep(steps_done);
  if (FaultFires(env_.fault_crash, steps_done)) {
    std::fprintf(stderr, "tessera: rank %d: %s fault hook: SIGKILL at step %lld\n", rank_,
                 kEnvFaultCrash, static_cast<long long>(steps_done));
    std::fflush(stderr);
    std::raise(SIGKILL);
  }
  if (FaultFires(env_.fault_hang, steps_done)) {
    std::fprintf(stderr, "tessera: rank %d: %s fault hook: training thread hangs at step %lld\n",
                 rank_, kEnvFaultHang, static_cast<long long>(steps_done));
    std::fflush(stderr);
    for (;;) std::this_thread::sleep_for(std::chrono::seconds(1));  // heartbeats go on
  }
}

void SupervisedRank::SetPhase(TrainPhase phase) { client_->SetPhase(ToRankPhase(phase)); }

bool SupervisedRank::TakeCheckpointRequest() { return client_->ConsumeCheckpointRequest(); }

bool SupervisedRank::StopRequested() {
  if (client_->stop_requested()) return true;
  if (!client_->supervisor_lost()) return false;
  if (!told_lost_.exchange(true)) {
    std::fprintf(stderr, "tessera: rank %d lost its supervisor (%s): saving and stopping\n", rank_,
                 client_->lost_reason().c_str());
  }
  return true;
}

CatalogSink* SupervisedRank::catalog() { return catalog_.get(); }

FileSystem* SupervisedRank::checkpoint_file_system() {
  return chaos_hooks_ != nullptr ? chaos_hooks_->file_system() : nullptr;
}

OffloadFaults* SupervisedRank::offload_faults() {
  return chaos_hooks_ != nullptr ? chaos_hooks_->offload_faults() : nullptr;
}

Status SupervisedRank::Shutdown(int exit_code) {
  return client_->Shutdown(exit_code < 0 ? 0 : exit_code > 255 ? 255 : exit_code);
}

}  // namespace tessera
