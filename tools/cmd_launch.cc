// tools/cmd_launch.cc — `tessera launch`: train under the supervisor (runtime/supervisor/
// supervisor.h). Validates the config and the hostfile before anything starts, turns the
// command line into SupervisorOptions, routes SIGTERM/SIGINT (preemption) and SIGUSR1
// (checkpoint now) to the supervisor, and returns its exit code.
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <climits>
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>

#include "runtime/core/exit_codes.h"
#include "runtime/core/file_util.h"
#include "runtime/supervisor/launcher.h"
#include "runtime/supervisor/private_socket.h"
#include "runtime/supervisor/supervisor.h"
#include "runtime/train/config.h"
#include "tools/args.h"
#include "tools/commands.h"

namespace tessera::cli {
namespace {

// The supervisor the signal handlers talk to (set while Run() runs). Its request methods are
// single relaxed atomic increments, which are async-signal-safe. Every signal is first counted
// in g_pending_*, then the counts are handed to the supervisor by whichever side sees it
// published: the handler itself, or AttachSupervisor for what arrived while the config was
// checked (a SIGTERM during startup is a preemption like any other, not a kill that leaves
// nothing behind). exchange() gives each count to exactly one of them, so a signal that lands
// on another thread while the supervisor is being published is neither lost nor doubled.
std::atomic<Supervisor*> g_supervisor{nullptr};
std::atomic<int> g_pending_stops{0};
std::atomic<int> g_pending_checkpoints{0};

void DeliverPending() {
  Supervisor* s = g_supervisor.load();
  if (s == nullptr) return;
  for (int n = g_pending_stops.exchange(0); n > 0; --n) s->RequestStop();
  for (int n = g_pending_checkpoints.exchange(0); n > 0; --n) s->RequestCheckpoint();
}

void OnStopSignal(int) {
  g_pending_stops.fetch_add(1);
  DeliverPending();
}
void OnCheckpointSignal(int) {
  g_pending_checkpoints.fetch_add(1);
  DeliverPending();
}

// Publishes the supervisor to the handlers and hands over what arrived before it.
void AttachSupervisor(Supervisor& supervisor) {
  g_supervisor.store(&supervisor);
  DeliverPending();
}

void InstallHandlers() {
  struct sigaction sa{};
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  sa.sa_handler = OnStopSignal;
  sigaction(SIGTERM, &sa, nullptr);
  sigaction(SIGINT, &sa, nullptr);
  sa.sa_handler = OnCheckpointSignal;
  sigaction(SIGUSR1, &sa, nullptr);
  sa.sa_handler = SIG_IGN;
  sigaction(SIGPIPE, &sa, nullptr);  // a rank's closed socket must not end the supervisor
}

// The layouts an elastic restart may shrink to: the largest data-parallel size the surviving
// slots hold (tp x pp x ep ranks per replica) that divides the micro-batches of a step, with
// more accumulation so the global batch stays the same. ZeRO 3 needs two data ranks: below
// that, ZeRO 2 (the same bits).
std::function<Result<ElasticLayout>(int)> ElasticLayouts(const ParallelConfig& par, int64_t accum) {
  return [par, accum](int slots) -> Result<ElasticLayout> {
    const int unit = par.tp * par.pp * par.ep;
    const int64_t micro = static_cast<int64_t>(par.dp) * accum;  // per step, over dp
    for (int dp = std::min(par.dp, slots / unit); dp >= 1; --dp) {
      if (micro % dp != 0) continue;
      ElasticLayout l;
      l.ranks = dp * unit;
      if (dp == par.dp) {  // hosts came back: the config's own layout again
        l.description = "the configured layout again: dp " + std::to_string(dp) +
                        ", grad_accum_steps " + std::to_string(accum) +
                        "; the checkpoint is resharded on load";
        return l;
      }
      l.args = {"--set", "parallel.dp=" + std::to_string(dp), "--set",
                "train.grad_accum_steps=" + std::to_string(micro / dp)};
      if (par.zero == 3 && dp * par.ep < 2) l.args.insert(l.args.end(), {"--set", "parallel.zero=2"});
      l.description = "dp " + std::to_string(par.dp) + " -> " + std::to_string(dp) +
                      ", grad_accum_steps " + std::to_string(accum) + " -> " +
                      std::to_string(micro / dp) + " (the global batch kept: " +
                      std::to_string(micro) + " micro-batches a step); the checkpoint is "
                      "resharded on load";
      return l;
    }
    return FailedPrecondition(std::to_string(slots) + " slots hold no data-parallel replica of " +
                              std::to_string(unit) + " ranks (tp x pp x ep)");
  };
}

// Where the ranks run and what starts them. With --hostfile: those hosts, through mpirun.
// Inside a Slurm allocation (SLURM_JOB_NODELIST set) without one: the allocation's hosts,
// written to <run_dir>/hostfile.slurm (slots from SLURM_TASKS_PER_NODE), through srun
// --mpi=pmix, or mpirun with --launcher mpirun. Elsewhere: this machine, through mpirun.
Status PlaceRanks(const ParsedArgs& p, SupervisorOptions& o) {
  const std::string launcher = p.Get("--launcher", "");
  const char* nodelist = std::getenv("SLURM_JOB_NODELIST");
  const bool in_slurm = nodelist != nullptr && *nodelist != '\0';
  if (p.Has("--hostfile")) {
    o.hostfile = p.Get("--hostfile");
  } else if (in_slurm) {
    const char* tasks = std::getenv("SLURM_TASKS_PER_NODE");
    ASSIGN_OR_RETURN(std::vector<HostfileEntry> hosts,
                     SlurmAllocationHosts(nodelist, tasks != nullptr ? tasks : ""));
    RETURN_IF_ERROR(MakeDirs(o.run_dir));
    o.hostfile = o.run_dir + "/hostfile.slurm";
    RETURN_IF_ERROR(WriteFileAtomic(o.hostfile, "# the Slurm allocation's hosts (SLURM_JOB_NODELIST, "
                                                "SLURM_TASKS_PER_NODE)\n" + HostfileText(hosts)));
  }
  // Ranks on other hosts register with the control plane over TCP: a loopback address cannot
  // be theirs (they would only fail at the startup timeout).
  if (!o.hostfile.empty()) {
    ASSIGN_OR_RETURN(std::vector<HostfileEntry> hosts, ParseHostfile(o.hostfile));
    const std::string bind = p.Get("--bind", "127.0.0.1");
    const bool loopback = bind.rfind("127.", 0) == 0 || bind == "::1" || bind == "localhost";
    if (hosts.size() > 1 && loopback && !p.Has("--advertise")) {
      return InvalidArgument("the ranks run on " + std::to_string(hosts.size()) + " hosts (" +
                             o.hostfile + "), and those on other hosts cannot reach a control "
                             "plane on " + bind + ": add --bind with this host's address as they "
                             "see it (or --bind 0.0.0.0 --advertise IP)");
    }
  }
  if (launcher == "srun" || (launcher.empty() && in_slurm && !p.Has("--hostfile"))) {
    if (!in_slurm) {
      return FailedPrecondition("--launcher srun needs a Slurm allocation (run it inside salloc or "
                                "sbatch: SLURM_JOB_NODELIST is not set)");
    }
    o.engine = LaunchEngine::kSrun;
  }
  return Status::Ok();
}

int Usage(const Status& s) {
  std::fprintf(stderr, "%s\n", s.ToString().c_str());
  return kExitUsage;
}

constexpr const char* kHelp =
    "usage: tessera launch [-n N] [--hostfile FILE] CONFIG [--set key=value ...] [options]\n\n"
    "Runs `tessera train CONFIG` on N ranks through mpirun under a supervisor that keeps the\n"
    "job alive: when a rank crashes, hangs, stops answering or a host is lost, it stops the\n"
    "whole job, and relaunches it; the ranks resume from the newest checkpoint under\n"
    "checkpoint.dir that verifies (older ones if the newest is damaged). The run always\n"
    "resumes from checkpoint.dir when it holds checkpoints (resume=auto), so after a stop the\n"
    "same command continues where it left off.\n\n"
    "  -n N                    ranks (= parallel.dp x tp x pp x ep of the config, the default)\n"
    "  --hostfile FILE         Open MPI hostfile (\"HOST slots=K\" lines), checked before launch;\n"
    "                          TCP between its hosts, every rank variable forwarded\n"
    "  --launcher mpirun|srun  what starts the ranks; inside a Slurm allocation (salloc, sbatch)\n"
    "                          the default is srun --mpi=pmix on the allocation's hosts (no\n"
    "                          --hostfile needed; sbatch --no-kill keeps the job alive when a\n"
    "                          node fails, for --spares / --elastic), elsewhere mpirun\n"
    "  --spares K              hold the hostfile's last K hosts idle: a failed rank's host that\n"
    "                          no longer answers (killed, cut off) is replaced by one at the\n"
    "                          restart, in its place (same layout: bit-identical)\n"
    "  --elastic MIN           with no spare left, restart on the surviving hosts (at least MIN)\n"
    "                          with a smaller dp and more accumulation: the same global batch,\n"
    "                          the checkpoint resharded on load\n"
    "  --set key.path=value    config override, as for tessera train (repeatable)\n"
    "  --run-dir DIR           events.jsonl, report.json, per-rank logs\n"
    "                          (default: <train.out_dir>/launch)\n"
    "  --bind ADDR             control-plane listen address (default 127.0.0.1; 0.0.0.0 for\n"
    "                          ranks on other hosts, with --advertise)\n"
    "  --advertise IP          the address ranks connect to (default: --bind); ranks on this\n"
    "                          host use a Unix socket in a private (0700) directory under\n"
    "                          $TMPDIR or /tmp instead, which other users cannot reach\n\n"
    "Detection:\n"
    "  --heartbeat-timeout S   a rank silent this long is lost: stopped process, dead host\n"
    "                          (default 10)\n"
    "  --stall-timeout S       no step finished for this long while heartbeats go on: a hang\n"
    "                          (default 0 = derived: max(--stall-floor, 10 x median step))\n"
    "  --stall-floor S         lower bound of the derived stall timeout (default 30)\n"
    "  --startup-timeout S     launch to first finished step, checkpoint load included\n"
    "                          (default 300)\n"
    "A crashed rank is seen at once (its control connection closes). Stragglers (a rank whose\n"
    "steps take 2x longer than its peers' outside collective waits) are reported, not acted on.\n\n"
    "Restarts:\n"
    "  --max-restarts N        give up after N restarts within --restart-window (default 10)\n"
    "  --restart-window S      (default 3600)\n"
    "  --crash-loop K          give up after K failures in a row without a new committed\n"
    "                          checkpoint between them (default 3)\n"
    "  --backoff S             first restart delay, doubling up to 30 s without progress\n"
    "                          (default 1)\n"
    "  --stop-grace S          TERM -> KILL when stopping a failed job (default 5)\n"
    "  --preempt-timeout S     after SIGTERM/SIGINT, time the ranks get to checkpoint and\n"
    "                          exit (default 300)\n"
    "  --strict-env            a restart refuses a checkpoint saved by other code, compiler,\n"
    "                          libraries or CPU (train.strict_env; exit 4, no restart)\n\n"
    "Signals: SIGTERM or SIGINT (Ctrl-C) = preemption: the ranks save a checkpoint at the next\n"
    "step and exit (also when it comes before they have started: they stop after their first\n"
    "step); a second one stops at once. SIGUSR1 asks for a checkpoint now.\n\n"
    "Exit codes: 0 finished, 7 stopped (resumable), 8 gave up (restart budget or crash loop),\n"
    "2 usage, 3 bad config, 4 bad input, 5 no usable checkpoint. Under Slurm, list the codes a\n"
    "requeue cures in slurm.conf (RequeueExit=7,8: a preempted or stopped job resumes from its\n"
    "checkpoint when requeued); 2-5 are never worth a requeue.\n"
    "Output: live event lines (supervisor: ...) between rank 0's progress lines, then a report\n"
    "with failures by kind, detection latency, time to the first resumed step, steps lost\n"
    "and goodput; the same events in <run-dir>/events.jsonl and the checkpoint catalog\n"
    "(tessera ckpt ls DIR --events).\n\n"
    "Example:\n"
    "  tessera launch -n 4 configs/tiny.yaml --set parallel.dp=4 \\\n"
    "      --set checkpoint.dir=/tmp/ckpt --set checkpoint.interval_steps=10\n";

}  // namespace

int RunLaunch(const Args& raw) {
  if (WantsHelp(raw)) {
    std::fputs(kHelp, stdout);
    return kExitOk;
  }
  InstallHandlers();
  Args args;  // mpirun's spelling "-n 4" / "-np 4" accepted as --np
  for (const std::string& a : raw) args.push_back(a == "-n" || a == "-np" ? "--np" : a);
  auto parsed = ParseArgs(args, "launch",
                          {"--np", "--hostfile", "--set", "--run-dir", "--bind", "--heartbeat-timeout",
                           "--stall-timeout", "--stall-floor", "--startup-timeout", "--max-restarts",
                           "--restart-window", "--crash-loop", "--backoff", "--stop-grace",
                           "--preempt-timeout", "--heartbeat-ms", "--advertise", "--spares",
                           "--elastic", "--launcher"},
                          {"--strict-env"});
  if (!parsed.ok()) return Usage(parsed.status());
  const ParsedArgs& p = *parsed;
  if (p.positional.size() != 1) {
    return Usage(InvalidArgument("tessera launch: expected exactly one CONFIG (see tessera launch --help)"));
  }
  auto np = ParseIntFlag("-n", p.Get("--np", "0"));
  if (!np.ok() || *np < 0 || *np > 4096 || (p.Has("--np") && *np == 0)) {
    return Usage(InvalidArgument("tessera launch: -n must be an integer in [1, 4096], got \"" +
                                 p.Get("--np") + "\""));
  }

  // Everything that can be checked before a process starts is checked here, so a config that
  // cannot work costs no launch (and no restart loop).
  std::vector<std::string> sets = p.All("--set");
  if (p.Has("--strict-env")) sets.push_back("train.strict_env=true");  // every incarnation's
  // checkpoint.dir first, before resume=auto (which needs it) makes the config say so less
  // plainly.
  auto as_given = LoadConfig(p.positional[0], sets);
  sets.push_back("resume=auto");
  auto config = as_given.ok() && !as_given->checkpoint.dir.empty() ? LoadConfig(p.positional[0], sets)
                                                                   : as_given;
  if (!config.ok()) {
    std::fprintf(stderr, "tessera launch: %s\n", config.status().ToString().c_str());
    return kExitBadConfig;
  }
  if (config->checkpoint.dir.empty()) {
    // A supervised run recovers by restarting from its newest checkpoint: without a
    // checkpoint root every restart would silently redo the run from step 0.
    std::fprintf(stderr,
                 "tessera launch: %s: checkpoint.dir is not set, and tessera launch needs one: it "
                 "restarts a failed job from its newest checkpoint (e.g. --set "
                 "checkpoint.dir=runs/ckpt --set checkpoint.interval_steps=100; tessera train "
                 "runs without)\n",
                 config->path.c_str());
    return kExitBadConfig;
  }
  const int world = config->parallel.world_size();
  if (*np == 0) *np = world;  // -n left out: the config's layout says
  if (world != *np) {
    std::fprintf(stderr,
                 "tessera launch: %s: parallel: dp=%d x tp=%d x pp=%d x ep=%d needs %d ranks, but -n "
                 "is %lld (change -n, or parallel.* with --set so that the product is -n)\n",
                 config->path.c_str(), config->parallel.dp, config->parallel.tp, config->parallel.pp,
                 config->parallel.ep, world, static_cast<long long>(*np));
    return kExitBadConfig;
  }
  if (const std::string l = p.Get("--launcher", "mpirun"); l != "mpirun" && l != "srun") {
    return Usage(InvalidArgument("--launcher must be mpirun or srun, got \"" + l + "\""));
  }
  auto self = SelfPath("launch");
  if (!self.ok()) return Usage(self.status());

  SupervisorOptions o;
  o.num_ranks = static_cast<int>(*np);
  o.run_dir = p.Get("--run-dir", config->train.out_dir + "/launch");
  if (Status s = PlaceRanks(p, o); !s.ok()) {
    std::fprintf(stderr, "tessera launch: %s\n", s.ToString().c_str());
    return kExitBadConfig;
  }
  o.program = *self;
  o.program_args = {"train", p.positional[0]};
  for (const std::string& s : sets) {
    o.program_args.push_back("--set");
    o.program_args.push_back(s);
  }
  o.checkpoint_root = config->checkpoint.dir;
  o.checkpoint_local = config->checkpoint.local;
  o.target_steps = config->train.steps;
  o.bind_address = p.Get("--bind", "127.0.0.1");
  o.advertise_address = p.Get("--advertise");
  o.control_socket_parent = ControlSocketParent(std::getenv("TMPDIR"));

  // Numeric options: each parsed with its flag named in the error, then the components
  // validate ranges (ValidateDetectorOptions / ValidateRestartPolicyOptions).
  struct NumberFlag {
    const char* flag;
    double* target;
  };
  double max_restarts = o.restart.max_restarts, crash_loop = o.restart.crash_loop_restarts;
  double heartbeat_ms = o.heartbeat_ms, spares = 0, elastic = 0;
  const NumberFlag numbers[] = {
      {"--heartbeat-timeout", &o.detector.heartbeat_timeout_s},
      {"--stall-timeout", &o.detector.stall_timeout_s},
      {"--stall-floor", &o.detector.stall_floor_s},
      {"--startup-timeout", &o.detector.startup_timeout_s},
      {"--restart-window", &o.restart.restart_window_s},
      {"--backoff", &o.restart.backoff_initial_s},
      {"--stop-grace", &o.stop_grace_s},
      {"--preempt-timeout", &o.preempt_timeout_s},
      {"--max-restarts", &max_restarts},
      {"--crash-loop", &crash_loop},
      {"--heartbeat-ms", &heartbeat_ms},
      {"--spares", &spares},
      {"--elastic", &elastic},
  };
  for (const NumberFlag& n : numbers) {
    if (!p.Has(n.flag)) continue;
    auto v = ParseNumberFlag(n.flag, p.Get(n.flag));
    if (!v.ok()) return Usage(v.status());
    *n.target = *v;
  }
  o.restart.max_restarts = static_cast<int>(max_restarts);
  o.restart.crash_loop_restarts = static_cast<int>(crash_loop);
  o.heartbeat_ms = static_cast<int>(heartbeat_ms);
  o.spares = static_cast<int>(spares);
  if (spares != o.spares || o.spares < 0 || (o.spares > 0 && o.hostfile.empty())) {
    return Usage(InvalidArgument("--spares must be a whole number >= 0, with --hostfile or inside a Slurm allocation"));
  }
  o.elastic_min_hosts = static_cast<int>(elastic);
  if (elastic != o.elastic_min_hosts || elastic < 0 || (elastic > 0 && o.hostfile.empty())) {
    return Usage(InvalidArgument("--elastic must be a whole number of hosts >= 0, with --hostfile or inside a Slurm allocation"));
  }
  if (o.elastic_min_hosts > 0) o.elastic = ElasticLayouts(config->parallel, config->train.grad_accum_steps);
  if (o.heartbeat_ms < 10 || o.heartbeat_ms > 60000) {
    return Usage(InvalidArgument("--heartbeat-ms must be in [10, 60000]"));
  }
  if (Status s = ValidateDetectorOptions(o.detector); !s.ok()) return Usage(s);
  if (Status s = ValidateRestartPolicyOptions(o.restart); !s.ok()) return Usage(s);
  if (o.detector.heartbeat_timeout_s * 1000 < 3 * o.heartbeat_ms) {
    return Usage(InvalidArgument("--heartbeat-timeout must be at least 3 heartbeat intervals (" +
                                 std::to_string(3 * o.heartbeat_ms) + " ms)"));
  }
  // A hang is the supervisor's to find: if the ranks' own collective timeout fires first, the
  // job still restarts, but the report can only guess who hung.
  const double stall_s = o.detector.stall_timeout_s > 0 ? o.detector.stall_timeout_s : o.detector.stall_floor_s;
  if (config->comm.timeout_s <= stall_s) {
    std::fprintf(stdout,
                 "supervisor: warning: comm.timeout_s (%g s) is not above the stall timeout (%g s): "
                 "a hang ends as a collective timeout in the ranks before the supervisor sees it\n",
                 static_cast<double>(config->comm.timeout_s), stall_s);
  }

  Supervisor supervisor(o);
  AttachSupervisor(supervisor);
  auto outcome = supervisor.Run();
  g_supervisor.store(nullptr);
  if (!outcome.ok()) {
    std::fprintf(stderr, "tessera launch: %s\n", outcome.status().ToString().c_str());
    return ExitCodeFor(outcome.status(), ExitPhase::kSupervise);
  }
  return outcome->exit_code;
}

}  // namespace tessera::cli
