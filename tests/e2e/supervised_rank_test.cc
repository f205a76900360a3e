// links: tessera_supervisor
// tests/e2e/supervised_rank_test.cc — `tessera train` as a supervised rank (tools/
// supervised_rank.h), against a real ControlServer in this process: environment validation,
// hello / heartbeats / catalog records / commit / bye, stop -> exit 7 after a committed save,
// and the fault hooks (crash: SIGKILL without bye; hang: heartbeats go on, the step stops).
#include <gtest/gtest.h>
#include <signal.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "checkpoint/commit.h"
#include "runtime/supervisor/control_server.h"
#include "tests/e2e/cli_util.h"

namespace tessera {
namespace {

using testing::CommandResult;
using testing::Repo;
using testing::RunCommand;
using testing::TempDir;

const char kRunId[] = "test-run";
const char kSecret[] = "s3cret";

std::string TrainCmd(const std::string& env, const std::string& dir, int steps) {
  return env + " " + TESSERA_BINARY + " train " + Repo("configs/tiny.yaml") +
         " --set train.steps=" + std::to_string(steps) + " --set train.threads=1" +
         " --set model.hidden_size=64 --set train.eval_batches=1 --set train.out_dir=" + dir +
         "/run --set checkpoint.dir=" + dir + "/ckpt --set checkpoint.at_end=false";
}

std::string Env(int port, const std::string& extra = "") {
  return "TESSERA_CONTROL_PORT=" + std::to_string(port) +
         " TESSERA_CONTROL_ADDRESS=127.0.0.1 TESSERA_CONTROL_SECRET=" + kSecret +
         " TESSERA_RUN_ID=" + kRunId + " TESSERA_INCARNATION=0 TESSERA_HEARTBEAT_MS=20 " + extra;
}

// Collects every event; optionally stops the rank once it reports `stop_at_step`, or kills it
// (SIGKILL to the pid its hello named) after `kill_after` heartbeats at `kill_at_step`.
struct Recorder {
  std::mutex mu;
  std::vector<ControlEvent> events;
  int64_t stop_at_step = -1;
  std::atomic<bool> stop_sent{false};
  int64_t kill_at_step = -1;
  int kill_after = 0;
  int seen_at_kill_step = 0;  // guarded by mu
  ControlServer* server = nullptr;

  void On(const ControlEvent& e) {
    bool kill_now = false;
    {
      std::lock_guard<std::mutex> lock(mu);
      events.push_back(e);
      if (e.kind == ControlEventKind::kHeartbeat && e.step == kill_at_step) {
        kill_now = ++seen_at_kill_step == kill_after;
      }
    }
    if (kill_now) ::kill(static_cast<pid_t>(server->Snapshot()[e.rank].pid), SIGKILL);
    if (stop_at_step >= 0 && e.kind == ControlEventKind::kHeartbeat && e.step >= stop_at_step &&
        !stop_sent.exchange(true)) {
      server->Broadcast(SupervisorCommand::kStop);
    }
  }
  std::vector<ControlEvent> Of(ControlEventKind kind) {
    std::lock_guard<std::mutex> lock(mu);
    std::vector<ControlEvent> out;
    for (const auto& e : events) {
      if (e.kind == kind) out.push_back(e);
    }
    return out;
  }
  // The server sees a dead peer's EOF on its own thread, maybe after the process has been
  // reaped: waits (bounded) for `kind` before the caller stops the server.
  void AwaitEvent(ControlEventKind kind, size_t count = 1) {
    for (int i = 0; i < 500 && Of(kind).size() < count; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }
};

// `socket_parent` non-empty: the server listens on a Unix socket there too, as under launch.
std::unique_ptr<ControlServer> StartServer(Recorder& rec, int world_size = 1,
                                           const std::string& socket_parent = "") {
  ControlServerOptions o;
  o.run_id = kRunId;
  o.secret = kSecret;
  o.world_size = world_size;
  o.unix_socket_parent = socket_parent;
  auto s = ControlServer::Start(o, [&rec](const ControlEvent& e) { rec.On(e); });
  EXPECT_TRUE(s.ok()) << s.status().ToString();
  rec.server = s->get();
  return std::move(*s);
}

TEST(SupervisedRank, BadEnvironmentFailsNamingTheVariable) {
  TempDir dir("supervised_env");
  struct Case {
    std::string env, names;
  } cases[] = {
      {"TESSERA_CONTROL_PORT=http", "TESSERA_CONTROL_PORT"},
      {"TESSERA_CONTROL_PORT=70000", "TESSERA_CONTROL_PORT"},
      {"TESSERA_CONTROL_PORT=5000 TESSERA_CONTROL_ADDRESS=127.0.0.1", "TESSERA_CONTROL_SECRET"},
      {"TESSERA_CONTROL_PORT=5000 TESSERA_CONTROL_ADDRESS=localhost TESSERA_CONTROL_SECRET=x",
       "TESSERA_CONTROL_ADDRESS"},
      {Env(5000, "TESSERA_INCARNATION=-1"), "TESSERA_INCARNATION"},
      {Env(5000, "TESSERA_HEARTBEAT_MS=0"), "TESSERA_HEARTBEAT_MS"},
      {Env(5000, "TESSERA_FAULT_HANG=3"), "TESSERA_FAULT_HANG"},
      {Env(5000, "TESSERA_FAULT_CRASH=a:1"), "TESSERA_FAULT_CRASH"},
      {Env(5000, "TESSERA_CONTROL_SOCKET=relative/control.sock"), "TESSERA_CONTROL_SOCKET"},
  };
  for (const Case& c : cases) {
    CommandResult r = RunCommand(TrainCmd(c.env, dir.str(), 1));
    EXPECT_EQ(r.exit_code, 1) << c.env << "\n" << r.output;
    EXPECT_NE(r.output.find(c.names), std::string::npos) << c.env << "\n" << r.output;
    EXPECT_EQ(r.output.find("run summary"), std::string::npos) << "trained anyway: " << c.env;
  }
}

TEST(SupervisedRank, ReportsToTheSupervisorAndStopsAfterACommittedSave) {
  TempDir dir("supervised_stop");
  Recorder rec;
  rec.stop_at_step = 2;
  auto server = StartServer(rec);
  CommandResult r = RunCommand(TrainCmd(Env(server->port()), dir.str(), 300));
  rec.AwaitEvent(ControlEventKind::kBye);
  server->Stop();
  EXPECT_EQ(r.exit_code, 7) << r.output;  // kExitStopped
  EXPECT_NE(r.output.find("on the supervisor's request (checkpoint step"), std::string::npos)
      << r.output;
  ASSERT_EQ(rec.Of(ControlEventKind::kRegistered).size(), 1u);
  auto heartbeats = rec.Of(ControlEventKind::kHeartbeat);
  ASSERT_GE(heartbeats.size(), 2u);
  EXPECT_GT(heartbeats.back().collective_seq, -1);
  auto commits = rec.Of(ControlEventKind::kCommit);
  ASSERT_EQ(commits.size(), 1u);
  EXPECT_GE(commits[0].step, 2);
  EXPECT_TRUE(std::filesystem::exists(dir / ("ckpt/" + StepDirName(commits[0].step))));
  bool committed_put = false;
  for (const auto& e : rec.Of(ControlEventKind::kCatalog)) {
    committed_put |= e.catalog.op == CatalogOp::kPut && e.catalog.entry.step == commits[0].step &&
                     e.catalog.entry.status == CheckpointStatus::kCommitted;
  }
  EXPECT_TRUE(committed_put);
  EXPECT_FALSE(std::filesystem::exists(dir / "ckpt/catalog"));
  auto byes = rec.Of(ControlEventKind::kBye);
  ASSERT_EQ(byes.size(), 1u);
  EXPECT_EQ(byes[0].exit_code, 7);
}

TEST(SupervisedRank, RegistersOverTheUnixSocketTheEnvironmentNames) {
  TempDir dir("supervised_unix");
  Recorder rec;
  rec.stop_at_step = 1;
  auto server = StartServer(rec, 1, dir.str());
  CommandResult r = RunCommand(TrainCmd(
      Env(server->port(), "TESSERA_CONTROL_SOCKET=" + server->unix_socket_path()), dir.str(), 300));
  rec.AwaitEvent(ControlEventKind::kBye);
  server->Stop();
  EXPECT_EQ(r.exit_code, 7) << r.output;
  auto registered = rec.Of(ControlEventKind::kRegistered);
  ASSERT_EQ(registered.size(), 1u) << r.output;
  EXPECT_EQ(registered[0].transport, ControlTransport::kUnix);
  EXPECT_EQ(registered[0].peer.rfind("unix:pid=", 0), 0u) << registered[0].peer;
  EXPECT_EQ(rec.Of(ControlEventKind::kBye).size(), 1u);
  EXPECT_EQ(r.output.find("not using the supervisor's Unix socket"), std::string::npos) << r.output;
}

TEST(SupervisedRank, FallsBackToTcpWhenTheSocketIsNotHereAndSaysWhyWhenItIsUnsafe) {
  TempDir dir("supervised_fallback");
  Recorder rec;
  rec.stop_at_step = 1;
  auto server = StartServer(rec, 1);
  // Another host: no such path. Quietly TCP.
  CommandResult r = RunCommand(TrainCmd(
      Env(server->port(), "TESSERA_CONTROL_SOCKET=/nonexistent-tessera/control.sock"), dir.str(), 300));
  EXPECT_EQ(r.exit_code, 7) << r.output;
  EXPECT_EQ(r.output.find("not using the supervisor's Unix socket"), std::string::npos) << r.output;
  // A path in a directory others can enter: refused with the reason, and still TCP.
  const std::string open_dir = dir / "open";
  std::filesystem::create_directory(open_dir);
  std::filesystem::permissions(open_dir, std::filesystem::perms(0755));
  rec.stop_sent = false;
  CommandResult r2 = RunCommand(TrainCmd(
      Env(server->port(), "TESSERA_CONTROL_SOCKET=" + open_dir + "/control.sock"), dir.str() + "/2", 300));
  server->Stop();
  EXPECT_EQ(r2.exit_code, 7) << r2.output;
  EXPECT_NE(r2.output.find("not using the supervisor's Unix socket (control socket: " + open_dir +
                           " is mode 0755"),
            std::string::npos)
      << r2.output;
  auto registered = rec.Of(ControlEventKind::kRegistered);
  ASSERT_EQ(registered.size(), 2u);
  for (const auto& e : registered) EXPECT_EQ(e.transport, ControlTransport::kTcp);
}

TEST(SupervisedRank, TwoRanksAgreeOnTheStopAndBothSayBye) {
  TempDir dir("supervised_dp2");
  Recorder rec;
  rec.stop_at_step = 2;  // sent to both ranks; they may see it after different steps
  auto server = StartServer(rec, /*world_size=*/2);
  CommandResult r = RunCommand(Repo("tools/dev/mpirun.sh") + " -np 2 env " +
                               TrainCmd(Env(server->port()), dir.str(), 300) +
                               " --set parallel.dp=2");
  rec.AwaitEvent(ControlEventKind::kBye, 2);
  server->Stop();
  EXPECT_EQ(r.exit_code, 7) << r.output;
  auto commits = rec.Of(ControlEventKind::kCommit);
  ASSERT_EQ(commits.size(), 1u) << r.output;  // only the coordinator reports
  EXPECT_NE(r.output.find("tessera: stopped at step " + std::to_string(commits[0].step) +
                          " on the supervisor's request (checkpoint step " +
                          std::to_string(commits[0].step) + " committed)"),
            std::string::npos)
      << r.output;
  auto byes = rec.Of(ControlEventKind::kBye);
  ASSERT_EQ(byes.size(), 2u);
  for (const auto& b : byes) EXPECT_EQ(b.exit_code, 7);
}

TEST(SupervisedRank, CrashHookKillsWithoutBye) {
  TempDir dir("supervised_crash");
  Recorder rec;
  auto server = StartServer(rec);
  CommandResult r = RunCommand(TrainCmd(Env(server->port(), "TESSERA_FAULT_CRASH=0:2"), dir.str(), 50));
  rec.AwaitEvent(ControlEventKind::kDisconnected);
  server->Stop();
  EXPECT_EQ(r.exit_code, 128 + 9) << r.output;
  EXPECT_NE(r.output.find("TESSERA_FAULT_CRASH fault hook"), std::string::npos) << r.output;
  EXPECT_TRUE(rec.Of(ControlEventKind::kBye).empty());
  EXPECT_EQ(rec.Of(ControlEventKind::kDisconnected).size(), 1u);
}

TEST(SupervisedRank, HangHookStopsTheStepWhileHeartbeatsGoOn) {
  TempDir dir("supervised_hang");
  Recorder rec;
  auto server = StartServer(rec);
  // The hung rank never ends by itself: killed once it has heartbeated 10 times at the hung
  // step (however long a loaded machine takes to get there), `timeout` as the backstop.
  rec.kill_at_step = 2;
  rec.kill_after = 10;
  CommandResult r = RunCommand("timeout -s KILL 120 env " +
                               TrainCmd(Env(server->port(), "TESSERA_FAULT_HANG=0:2"), dir.str(), 50));
  server->Stop();
  EXPECT_EQ(r.exit_code, 128 + 9) << r.output;
  EXPECT_NE(r.output.find("TESSERA_FAULT_HANG fault hook"), std::string::npos) << r.output;
  auto heartbeats = rec.Of(ControlEventKind::kHeartbeat);
  int at_two = 0;
  for (const auto& h : heartbeats) {
    EXPECT_LE(h.step, 2);
    at_two += h.step == 2;
  }
  EXPECT_GE(at_two, 10) << "heartbeats stopped with the training thread";
  EXPECT_TRUE(rec.Of(ControlEventKind::kBye).empty());
}

}  // namespace
}  // namespace tessera
