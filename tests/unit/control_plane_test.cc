// links: tessera_supervisor
// tests/unit/control_plane_test.cc — the control plane over real loopback TCP: protocol
// encode/decode, registration, heartbeats, commits, broadcast commands, hostile clients
// (wrong secret, garbage, oversized frames, silence, duplicate rank, stale incarnation) and
// how fast a dead rank's closed connection is reported. The Unix socket, the choice between it
// and TCP, and floods: control_transport_test.cc.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <mutex>
#include <thread>
#include <vector>

#include "runtime/supervisor/control_client.h"
#include "runtime/supervisor/control_protocol.h"
#include "runtime/supervisor/control_server.h"
#include "tests/testing/control_plane_fixture.h"

namespace tessera {
namespace {

using testing::ClosedByServer;
using testing::Clock;
using testing::Fixture;
using testing::kIncarnation;
using testing::kRunId;
using testing::kSecret;
using testing::RawConnect;
using testing::RawSend;
using std::chrono::milliseconds;

// The other rank keeps heartbeating after a hostile connection is thrown out.
void ExpectRankUnharmed(Fixture& f, int rank) {
  const int64_t before = f.server->Snapshot()[rank].heartbeats;
  std::this_thread::sleep_for(milliseconds(100));
  const RankState s = f.server->Snapshot()[rank];
  EXPECT_TRUE(s.connected);
  EXPECT_GT(s.heartbeats, before);
}

TEST(ControlProtocol, RoundTrips) {
  HelloMsg h{"run-1", 7, 2, 4, 4242, "host-a", "sec"};
  Result<std::string> f = EncodeHello(h);
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  const auto* hdr = reinterpret_cast<const unsigned char*>(f->data());
  ASSERT_EQ(*DecodeFrameLength(hdr), f->size() - 4);
  Result<RankMessage> m = DecodeRankMessage(f->substr(4));
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_EQ(m->type, RankMessageType::kHello);
  EXPECT_EQ(m->hello.run_id, "run-1");
  EXPECT_EQ(m->hello.incarnation, 7);
  EXPECT_EQ(m->hello.rank, 2);
  EXPECT_EQ(m->hello.world_size, 4);
  EXPECT_EQ(m->hello.pid, 4242);
  EXPECT_EQ(m->hello.host, "host-a");
  EXPECT_EQ(m->hello.secret, "sec");

  for (int p = 0; p <= static_cast<int>(RankPhase::kIdle); ++p) {
    // compute_ms walks its whole range: -1 (not measured yet), 0, a real value, the bound.
    const int64_t compute[] = {-1, 0, 41, kControlMaxComputeMs};
    const int64_t compute_ms = compute[p % 4];
    HeartbeatMsg hb{123456789012, static_cast<RankPhase>(p), 99, 1700000000000, compute_ms};
    Result<RankMessage> d = DecodeRankMessage(EncodeHeartbeat(hb)->substr(4));
    ASSERT_TRUE(d.ok()) << d.status().ToString();
    EXPECT_EQ(d->heartbeat.step, 123456789012);
    EXPECT_EQ(d->heartbeat.phase, static_cast<RankPhase>(p));
    EXPECT_EQ(d->heartbeat.collective_seq, 99);
    EXPECT_EQ(d->heartbeat.unix_ms, 1700000000000);
    EXPECT_EQ(d->heartbeat.compute_ms, compute_ms);
  }
  EXPECT_EQ(HeartbeatMsg{}.compute_ms, -1);  // "not measured yet" unless a rank says otherwise
  HeartbeatMsg out_of_range{1, RankPhase::kForward, 0, 0, -2};
  EXPECT_EQ(EncodeHeartbeat(out_of_range).status().code(), StatusCode::kInvalidArgument);
  out_of_range.compute_ms = kControlMaxComputeMs + 1;
  EXPECT_EQ(EncodeHeartbeat(out_of_range).status().code(), StatusCode::kInvalidArgument);
  Result<RankMessage> c = DecodeRankMessage(EncodeCommit(CommitMsg{40})->substr(4));
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->type, RankMessageType::kCommit);
  EXPECT_EQ(c->commit.step, 40);
  Result<RankMessage> b = DecodeRankMessage(EncodeBye(ByeMsg{75})->substr(4));
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(b->bye.exit_code, 75);
  for (SupervisorCommand cmd : {SupervisorCommand::kStop, SupervisorCommand::kCheckpointNow}) {
    Result<SupervisorCommand> d = DecodeCommand(EncodeCommand(cmd).substr(4));
    ASSERT_TRUE(d.ok());
    EXPECT_EQ(*d, cmd);
  }
  EXPECT_TRUE(ConstantTimeEquals("abc", "abc"));
  EXPECT_FALSE(ConstantTimeEquals("abc", "abd"));
  EXPECT_FALSE(ConstantTimeEquals("abc", "abcd"));
  EXPECT_FALSE(ConstantTimeEquals("abc", ""));
}

TEST(ControlProtocol, RejectsMalformedMessages) {
  const char* bad[] = {
      "not json",
      "[1,2]",
      R"({"step":1})",
      R"({"type":"launch_missiles"})",
      R"({"type":"heartbeat","step":1,"phase":"dancing","collective_seq":0,"compute_ms":5,"unix_ms":0})",
      R"({"type":"heartbeat","step":-1,"phase":"forward","collective_seq":0,"compute_ms":5,"unix_ms":0})",
      R"({"type":"heartbeat","step":"1","phase":"forward","collective_seq":0,"compute_ms":5,"unix_ms":0})",
      R"({"type":"heartbeat","step":1.5,"phase":"forward","collective_seq":0,"compute_ms":5,"unix_ms":0})",
      R"({"type":"heartbeat","step":1,"phase":"forward","collective_seq":0,"compute_ms":5})",
      R"({"type":"heartbeat","step":1,"phase":"forward","collective_seq":0,"compute_ms":5,"unix_ms":0,"x":1})",
      R"({"type":"heartbeat","step":1,"phase":"forward","collective_seq":0,"unix_ms":0})",
      R"({"type":"heartbeat","step":1,"phase":"forward","collective_seq":0,"compute_ms":-2,"unix_ms":0})",
      R"({"type":"heartbeat","step":1,"phase":"forward","collective_seq":0,"compute_ms":1000000001,"unix_ms":0})",
      R"({"type":"heartbeat","step":1,"phase":"forward","collective_seq":0,"compute_ms":2.5,"unix_ms":0})",
      R"({"type":"commit","step":-5})",
      R"({"type":"bye","exit_code":300})",
      R"({"type":"hello","run_id":"r","incarnation":0,"rank":4,"world_size":4,"pid":1,"host":"h","secret":"s"})",
      R"({"type":"hello","run_id":"r","incarnation":0,"rank":0,"world_size":4,"pid":0,"host":"h","secret":"s"})",
      R"({"type":"hello","run_id":"","incarnation":0,"rank":0,"world_size":4,"pid":1,"host":"h","secret":"s"})",
      R"({"type":"hello","run_id":"r","incarnation":-1,"rank":0,"world_size":4,"pid":1,"host":"h","secret":"s"})",
      R"({"type":"hello","run_id":"r","incarnation":0,"rank":0,"world_size":4,"pid":1,"host":"h\n","secret":"s"})",
      R"({"type":"hello","run_id":"r","incarnation":0,"rank":0,"world_size":4,"pid":1,"host":"h","secret":""})",
      R"({"type":"hello","run_id":"r","incarnation":0,"rank":99999999999,"world_size":4,"pid":1,"host":"h","secret":"s"})",
      R"({"type":"commit","step":1,"step":2})",
  };
  for (const char* body : bad) {
    Result<RankMessage> m = DecodeRankMessage(body);
    EXPECT_FALSE(m.ok()) << body;
    if (!m.ok()) {
      EXPECT_EQ(m.status().code(), StatusCode::kDataLoss) << body;
    }
  }
  for (const char* body :
       {R"({"cmd":"reboot"})", R"({"cmd":"stop","x":1})", R"({"cmd":1})", "[]"}) {
    EXPECT_FALSE(DecodeCommand(body).ok()) << body;
  }
  const unsigned char zero[4] = {0, 0, 0, 0};
  const unsigned char huge[4] = {0xff, 0xff, 0xff, 0xff};
  const unsigned char just_over[4] = {0x01, 0x00, 0x01, 0x00};  // 65537
  EXPECT_FALSE(DecodeFrameLength(zero).ok());
  EXPECT_FALSE(DecodeFrameLength(huge).ok());
  EXPECT_FALSE(DecodeFrameLength(just_over).ok());
  const unsigned char at_limit[4] = {0x00, 0x00, 0x01, 0x00};  // 65536
  EXPECT_TRUE(DecodeFrameLength(at_limit).ok());
  // Encoders refuse what decoders would refuse.
  EXPECT_FALSE(EncodeHello(HelloMsg{"r", 0, 5, 4, 1, "h", "s"}).ok());
  EXPECT_FALSE(EncodeCommit(CommitMsg{-1}).ok());
  EXPECT_FALSE(EncodeFrame(std::string(kControlMaxFrameBytes + 1, 'x')).ok());
}

TEST(ControlPlane, RegisterAndHeartbeats) {
  Fixture f;
  auto client = f.Connect(1);
  ASSERT_NE(client, nullptr);
  client->SetStep(17);
  client->SetPhase(RankPhase::kBackward);
  client->SetCollectiveSeq(5);
  EXPECT_EQ(f.WaitRegistered(1).kind, ControlEventKind::kRegistered);
  ControlEvent hb = f.log.WaitFor(
      [](const ControlEvent& e) { return e.kind == ControlEventKind::kHeartbeat && e.step == 17; });
  ASSERT_EQ(hb.kind, ControlEventKind::kHeartbeat);
  EXPECT_EQ(hb.rank, 1);
  EXPECT_EQ(hb.phase, RankPhase::kBackward);
  EXPECT_EQ(hb.collective_seq, 5);
  const RankState s = f.server->Snapshot()[1];
  EXPECT_TRUE(s.connected);
  EXPECT_EQ(s.pid, 1001);
  EXPECT_EQ(s.host, "node1");
  EXPECT_EQ(s.step, 17);
  EXPECT_EQ(s.phase, RankPhase::kBackward);
  EXPECT_FALSE(f.server->Snapshot()[0].connected);

  EXPECT_TRUE(client->Shutdown(0).ok());
  ControlEvent bye = f.log.WaitFor([](const ControlEvent& e) {
    return e.kind == ControlEventKind::kDisconnected && e.rank == 1;
  });
  EXPECT_EQ(bye.exit_code, 0);
  EXPECT_TRUE(f.server->Snapshot()[1].said_bye);
  EXPECT_FALSE(f.server->Snapshot()[1].connected);
}

TEST(ControlPlane, CommitReported) {
  Fixture f;
  auto client = f.Connect(0);
  ASSERT_NE(client, nullptr);
  client->ReportCommit(100);
  ControlEvent e =
      f.log.WaitFor([](const ControlEvent& ev) { return ev.kind == ControlEventKind::kCommit; });
  EXPECT_EQ(e.rank, 0);
  EXPECT_EQ(e.step, 100);
  EXPECT_EQ(f.server->Snapshot()[0].last_commit_step, 100);
}

TEST(ControlPlane, BroadcastReachesEveryRank) {
  Fixture f;
  std::mutex mu;
  std::vector<SupervisorCommand> seen;
  auto opts = f.ClientOptions(0);
  opts.on_command = [&](SupervisorCommand c) {
    std::lock_guard<std::mutex> lock(mu);
    seen.push_back(c);
  };
  auto c0 = f.Connect(opts);
  auto c1 = f.Connect(1);
  ASSERT_NE(c0, nullptr);
  ASSERT_NE(c1, nullptr);
  f.WaitRegistered(0);
  f.WaitRegistered(1);
  EXPECT_EQ(f.server->Broadcast(SupervisorCommand::kCheckpointNow), 2);
  EXPECT_EQ(f.server->Broadcast(SupervisorCommand::kStop), 2);
  const auto deadline = Clock::now() + milliseconds(1500);
  while (Clock::now() < deadline && !(c0->stop_requested() && c1->stop_requested())) {
    std::this_thread::sleep_for(milliseconds(2));
  }
  EXPECT_TRUE(c0->stop_requested());
  EXPECT_TRUE(c1->stop_requested());
  EXPECT_TRUE(c1->checkpoint_requested());
  EXPECT_TRUE(c1->ConsumeCheckpointRequest());
  EXPECT_FALSE(c1->checkpoint_requested());
  std::lock_guard<std::mutex> lock(mu);
  ASSERT_EQ(seen.size(), 2u);
  EXPECT_EQ(seen[0], SupervisorCommand::kCheckpointNow);
  EXPECT_EQ(seen[1], SupervisorCommand::kStop);
}

TEST(ControlPlane, WrongSecretRejectedOthersUnharmed) {
  Fixture f;
  auto good = f.Connect(0);
  ASSERT_NE(good, nullptr);
  f.WaitRegistered(0);
  auto opts = f.ClientOptions(1);
  opts.hello.secret = "guess";
  auto bad = f.Connect(opts);
  ASSERT_NE(bad, nullptr);  // hello sent; the answer is a closed connection
  ControlEvent e = f.WaitRejected();
  EXPECT_EQ(e.reason, "wrong secret");
  EXPECT_EQ(e.rank, -1);
  const auto deadline = Clock::now() + milliseconds(1000);
  while (Clock::now() < deadline && !bad->supervisor_lost())
    std::this_thread::sleep_for(milliseconds(2));
  EXPECT_TRUE(bad->supervisor_lost());
  EXPECT_FALSE(f.server->Snapshot()[1].connected);
  ExpectRankUnharmed(f, 0);
  EXPECT_EQ(f.server->rejected_connections(), 1);
}

TEST(ControlPlane, GarbageBytesRejected) {
  Fixture f;
  auto good = f.Connect(0);
  f.WaitRegistered(0);
  // A well-formed length around a body that is not JSON.
  int fd = RawConnect(f.server->port());
  RawSend(fd, *EncodeFrame("\x01\x02garbage\xff{{{"));
  EXPECT_NE(f.WaitRejected().reason.find("protocol error"), std::string::npos);
  EXPECT_TRUE(ClosedByServer(fd));
  ::close(fd);
  // Something that is not this protocol at all (its first 4 bytes read as a huge length).
  fd = RawConnect(f.server->port());
  RawSend(fd, "GET / HTTP/1.1\r\nHost: x\r\n\r\n");
  EXPECT_TRUE(ClosedByServer(fd));
  ::close(fd);
  EXPECT_EQ(f.server->rejected_connections(), 2);
  ExpectRankUnharmed(f, 0);
}

TEST(ControlPlane, OversizedLengthPrefixRejected) {
  Fixture f;
  int fd = RawConnect(f.server->port());
  RawSend(fd, std::string("\xff\xff\xff\x7f", 4));  // ~2 GiB announced
  ControlEvent e = f.WaitRejected();
  EXPECT_NE(e.reason.find("exceeds the limit"), std::string::npos) << e.reason;
  EXPECT_TRUE(ClosedByServer(fd));
  ::close(fd);
}

TEST(ControlPlane, HelloThatNeverComesTimesOut) {
  Fixture f(2, /*hello_timeout_ms=*/200);
  const auto t0 = Clock::now();
  int fd = RawConnect(f.server->port());
  RawSend(fd, std::string("\x10\x00", 2));  // half a header, then silence
  ControlEvent e = f.WaitRejected();
  EXPECT_NE(e.reason.find("no hello within 200 ms"), std::string::npos) << e.reason;
  EXPECT_GE(e.time - t0, milliseconds(190));
  EXPECT_TRUE(ClosedByServer(fd));
  ::close(fd);
}

TEST(ControlPlane, FirstFrameMustBeHello) {
  Fixture f;
  int fd = RawConnect(f.server->port());
  RawSend(fd, *EncodeHeartbeat(HeartbeatMsg{1, RankPhase::kForward, 0, 0}));
  EXPECT_EQ(f.WaitRejected().reason, "first frame is not a hello");
  EXPECT_TRUE(ClosedByServer(fd));
  ::close(fd);
}

TEST(ControlPlane, DuplicateRankRejected) {
  Fixture f;
  auto first = f.Connect(1);
  f.WaitRegistered(1);
  auto second = f.Connect(1);
  ControlEvent e = f.WaitRejected();
  EXPECT_NE(e.reason.find("duplicate rank 1"), std::string::npos) << e.reason;
  EXPECT_EQ(e.rank, 1);
  EXPECT_EQ(f.server->Snapshot()[1].pid, 1001);
  ExpectRankUnharmed(f, 1);
  EXPECT_EQ(f.log.Count(ControlEventKind::kDisconnected), 0);
}

TEST(ControlPlane, StaleIncarnationAndForeignRunRejected) {
  Fixture f;
  auto opts = f.ClientOptions(0);
  opts.hello.incarnation = kIncarnation - 1;
  auto stale = f.Connect(opts);
  ControlEvent e = f.WaitRejected();
  EXPECT_NE(e.reason.find("stale incarnation 2 (current 3)"), std::string::npos) << e.reason;
  opts = f.ClientOptions(0);
  opts.hello.run_id = "other-run";
  auto foreign = f.Connect(opts);
  e = f.log.WaitFor([](const ControlEvent& ev) {
    return ev.kind == ControlEventKind::kRejected && ev.reason.find("run_id") != std::string::npos;
  });
  EXPECT_EQ(e.kind, ControlEventKind::kRejected);
  EXPECT_FALSE(f.server->Snapshot()[0].ever_registered);
}

// The crash-detection path: a rank process dies (SIGKILL), the kernel closes its socket, the
// server must report kDisconnected in well under a second.
TEST(ControlPlane, KilledRankDetectedQuickly) {
  Fixture f;
  const std::string hello = *EncodeHello(f.Hello(0));
  const uint16_t port = f.server->port();
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    // Only raw syscalls here: the parent is multi-threaded.
    int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(port);
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) ::_exit(1);
    if (::write(fd, hello.data(), hello.size()) != static_cast<ssize_t>(hello.size())) ::_exit(1);
    for (;;) ::pause();
  }
  ASSERT_EQ(f.WaitRegistered(0).kind, ControlEventKind::kRegistered);
  const auto killed_at = Clock::now();
  ASSERT_EQ(::kill(child, SIGKILL), 0);
  ControlEvent e = f.log.WaitFor([](const ControlEvent& ev) {
    return ev.kind == ControlEventKind::kDisconnected && ev.rank == 0;
  });
  int wstatus = 0;
  ::waitpid(child, &wstatus, 0);
  ASSERT_EQ(e.kind, ControlEventKind::kDisconnected);
  const double latency_ms = std::chrono::duration<double, std::milli>(e.time - killed_at).count();
  std::printf("disconnect detection latency after SIGKILL: %.3f ms (%s)\n", latency_ms,
              e.reason.c_str());
  EXPECT_LT(latency_ms, 500.0);
  EXPECT_EQ(e.exit_code, -1);  // no bye: an abnormal end
  EXPECT_FALSE(f.server->Snapshot()[0].connected);
}

TEST(ControlPlane, ClosedSocketDetectedQuickly) {
  Fixture f;
  int fd = RawConnect(f.server->port());
  RawSend(fd, *EncodeHello(f.Hello(1)));
  f.WaitRegistered(1);
  const auto closed_at = Clock::now();
  ::close(fd);
  ControlEvent e = f.log.WaitFor(
      [](const ControlEvent& ev) { return ev.kind == ControlEventKind::kDisconnected; });
  ASSERT_EQ(e.kind, ControlEventKind::kDisconnected);
  const double latency_ms = std::chrono::duration<double, std::milli>(e.time - closed_at).count();
  std::printf("disconnect detection latency after close(): %.3f ms\n", latency_ms);
  EXPECT_LT(latency_ms, 500.0);
}

TEST(ControlPlane, ClientNotesSupervisorGoneAndNeverBlocks) {
  Fixture f;
  auto client = f.Connect(0);
  f.WaitRegistered(0);
  f.server->Stop();
  const auto deadline = Clock::now() + milliseconds(1000);
  while (Clock::now() < deadline && !client->supervisor_lost())
    std::this_thread::sleep_for(milliseconds(2));
  EXPECT_TRUE(client->supervisor_lost());
  EXPECT_FALSE(client->lost_reason().empty());
  const auto t0 = Clock::now();
  client->SetStep(5);
  client->ReportCommit(5);
  Status s = client->Shutdown(0);
  EXPECT_EQ(s.code(), StatusCode::kAborted);
  EXPECT_LT(Clock::now() - t0, milliseconds(200));
}

TEST(ControlPlane, ConnectFailsFastWithoutListener) {
  uint16_t port = 0;
  {
    Fixture f;
    port = f.server->port();
  }  // stopped: nothing listens on the port now
  ControlClientOptions o;
  o.port = port;
  o.hello = HelloMsg{kRunId, kIncarnation, 0, 1, 1, "h", kSecret};
  Result<std::unique_ptr<ControlClient>> c = ControlClient::Connect(o);
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), StatusCode::kIoError);
  o.hello.rank = 3;  // invalid hello never leaves the process
  EXPECT_EQ(ControlClient::Connect(o).status().code(), StatusCode::kInvalidArgument);
}

TEST(ControlPlane, BadServerOptionsRefused) {
  ControlServerOptions o;
  o.run_id = kRunId;
  o.secret = kSecret;
  o.bind_address = "not-an-ip";
  EXPECT_EQ(ControlServer::Start(o, nullptr).status().code(), StatusCode::kInvalidArgument);
  o.bind_address = "127.0.0.1";
  o.secret.clear();
  EXPECT_EQ(ControlServer::Start(o, nullptr).status().code(), StatusCode::kInvalidArgument);
}

CatalogRecordMsg PutRecord() {
  CatalogRecordMsg r;
  r.op = CatalogOp::kPut;
  r.entry.step = 200;
  r.entry.status = CheckpointStatus::kCommitted;
  r.entry.dir = "step_00000200";
  r.entry.bytes = (uint64_t{1} << 40) + 3;
  r.entry.layout = "dp=2 zero=1 precision=fp32";
  r.entry.stall_seconds = 0.0125;
  r.entry.write_seconds = 1.5;
  r.entry.commit_unix_s = 1.7e9 + 0.5;
  r.entry.note = "with \"quotes\"\nand a newline";
  return r;
}
CatalogRecordMsg StatusRecord() {
  CatalogRecordMsg r;
  r.op = CatalogOp::kStatus;
  r.step = 100;
  r.status = CheckpointStatus::kCorrupt;
  r.note = "failed verification on rank(s) 1";
  return r;
}
CatalogRecordMsg EventRecord() {
  CatalogRecordMsg r;
  r.op = CatalogOp::kEvent;
  r.kind = "commit";
  r.message = "step 200 committed: 1.0 MiB";
  return r;
}

void ExpectSameRecord(const CatalogRecordMsg& a, const CatalogRecordMsg& b) {
  ASSERT_EQ(a.op, b.op);
  switch (a.op) {
    case CatalogOp::kPut:
      EXPECT_EQ(a.entry.step, b.entry.step);
      EXPECT_EQ(a.entry.status, b.entry.status);
      EXPECT_EQ(a.entry.dir, b.entry.dir);
      EXPECT_EQ(a.entry.bytes, b.entry.bytes);
      EXPECT_EQ(a.entry.layout, b.entry.layout);
      EXPECT_EQ(a.entry.stall_seconds, b.entry.stall_seconds);
      EXPECT_EQ(a.entry.write_seconds, b.entry.write_seconds);
      EXPECT_EQ(a.entry.commit_unix_s, b.entry.commit_unix_s);
      EXPECT_EQ(a.entry.note, b.entry.note);
      break;
    case CatalogOp::kStatus:
      EXPECT_EQ(a.step, b.step);
      EXPECT_EQ(a.status, b.status);
      EXPECT_EQ(a.note, b.note);
      break;
    case CatalogOp::kEvent:
      EXPECT_EQ(a.kind, b.kind);
      EXPECT_EQ(a.message, b.message);
      break;
  }
}

Result<RankMessage> DecodeFrame(const std::string& frame) {
  return DecodeRankMessage(std::string_view(frame).substr(kControlFrameHeaderBytes));
}

TEST(ControlProtocol, CatalogRecordsRoundTrip) {
  for (const CatalogRecordMsg& r : {PutRecord(), StatusRecord(), EventRecord()}) {
    Result<std::string> f = EncodeCatalogRecord(r);
    ASSERT_TRUE(f.ok()) << f.status().ToString();
    Result<RankMessage> m = DecodeFrame(*f);
    ASSERT_TRUE(m.ok()) << m.status().ToString();
    EXPECT_EQ(m->type, RankMessageType::kCatalog);
    ExpectSameRecord(r, m->catalog);
  }
  // The documented wire form decodes as written.
  Result<RankMessage> m = DecodeRankMessage(
      R"({"type":"catalog","op":"status","step":5,"status":"corrupt","note":"bad shard"})");
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_EQ(m->catalog.op, CatalogOp::kStatus);
  EXPECT_EQ(m->catalog.step, 5);
  EXPECT_EQ(m->catalog.status, CheckpointStatus::kCorrupt);
  EXPECT_EQ(m->catalog.note, "bad shard");
}

// Records the writes ApplyCatalogRecord performs.
class RecordingSink : public CatalogSink {
 public:
  Status Put(const CheckpointEntry& e) override {
    calls.push_back("put " + std::to_string(e.step) + " " + CheckpointStatusName(e.status));
    return Status::Ok();
  }
  Status SetStatus(int64_t step, CheckpointStatus st, const std::string& note) override {
    calls.push_back("status " + std::to_string(step) + " " + CheckpointStatusName(st) + " " + note);
    return Status::Ok();
  }
  Status AddEvent(const std::string& kind, const std::string& message) override {
    calls.push_back("event " + kind + " " + message);
    return Status::Ok();
  }
  Result<CheckpointEntry> Get(int64_t step) const override {
    return NotFound("no entry for step " + std::to_string(step));
  }
  std::vector<std::string> calls;
};

TEST(ControlProtocol, ApplyCatalogRecordPerformsTheWrite) {
  RecordingSink sink;
  ASSERT_TRUE(ApplyCatalogRecord(PutRecord(), sink).ok());
  ASSERT_TRUE(ApplyCatalogRecord(StatusRecord(), sink).ok());
  ASSERT_TRUE(ApplyCatalogRecord(EventRecord(), sink).ok());
  const std::vector<std::string> want = {
      "put 200 committed", "status 100 corrupt failed verification on rank(s) 1",
      "event commit step 200 committed: 1.0 MiB"};
  EXPECT_EQ(sink.calls, want);
}

TEST(ControlProtocol, MalformedCatalogRecordsNameTheField) {
  const std::string entry =
      R"({"step":1,"status":"writing","dir":"d","bytes":0,"layout":"","stall_seconds":0,)"
      R"("write_seconds":0,"commit_unix_s":0,"note":""})";
  struct Case {
    std::string body, field;
  };
  const Case cases[] = {
      {R"({"type":"catalog","op":"erase","step":1})", "op"},
      {R"({"type":"catalog","kind":"x","message":"y"})", "op"},
      {R"({"type":"catalog","op":"event","kind":"x"})", "message"},
      {R"({"type":"catalog","op":"event","kind":"","message":"y"})", "kind"},
      {R"({"type":"catalog","op":"event","kind":"a\nb","message":"y"})", "kind"},
      {R"({"type":"catalog","op":"event","kind":"x","message":"y","extra":1})", "extra"},
      {R"({"type":"catalog","op":"status","step":-1,"status":"corrupt","note":""})", "step"},
      {R"({"type":"catalog","op":"status","step":1,"status":"lost","note":""})", "status"},
      {R"({"type":"catalog","op":"status","step":1,"status":"corrupt"})", "note"},
      {R"({"type":"catalog","op":"put","entry":[]})", "entry"},
      {R"({"type":"catalog","op":"put"})", "entry"},
      {R"({"type":"catalog","op":"put","entry":)" + entry + R"(,"step":1})", "step"},
      {R"({"type":"catalog","op":"put","entry":{"step":1}})", "status"},
      {R"({"type":"catalog","op":"put","entry":)" +
           entry.substr(0, entry.size() - 1) + R"(,"color":"red"}})",
       "color"},
  };
  for (const Case& c : cases) {
    Result<RankMessage> m = DecodeRankMessage(c.body);
    ASSERT_FALSE(m.ok()) << c.body;
    EXPECT_EQ(m.status().code(), StatusCode::kDataLoss) << c.body;
    EXPECT_NE(m.status().message().find(c.field), std::string::npos)
        << c.body << " -> " << m.status().message();
  }
  // Encoders refuse what decoders would refuse.
  CatalogRecordMsg bad = EventRecord();
  bad.kind = std::string(kControlMaxCatalogKindBytes + 1, 'k');
  EXPECT_EQ(EncodeCatalogRecord(bad).status().code(), StatusCode::kInvalidArgument);
  bad = PutRecord();
  bad.entry.step = -1;
  EXPECT_EQ(EncodeCatalogRecord(bad).status().code(), StatusCode::kInvalidArgument);
  bad = PutRecord();
  bad.entry.write_seconds = std::nan("");
  EXPECT_EQ(EncodeCatalogRecord(bad).status().code(), StatusCode::kInvalidArgument);
}

TEST(ControlProtocol, OversizedCatalogTextIsCutToFit) {
  const std::string marker = "\xe2\x80\xa6(truncated)";
  CatalogRecordMsg status = StatusRecord();
  status.note = std::string(3 * kControlMaxFrameBytes, 'n');
  CatalogRecordMsg event = EventRecord();
  // Control characters take 6 bytes escaped, multi-byte characters must not be split.
  for (int i = 0; i < 20000; ++i) event.message += i % 2 ? "\x01" : "\xc3\xa9";
  CatalogRecordMsg put = PutRecord();
  put.entry.note = std::string(kControlMaxFrameBytes, '"');
  for (const CatalogRecordMsg* r : {&status, &event, &put}) {
    Result<std::string> f = EncodeCatalogRecord(*r);
    ASSERT_TRUE(f.ok()) << f.status().ToString();
    EXPECT_LE(f->size(), kControlFrameHeaderBytes + kControlMaxFrameBytes);
    // Nearly full: the text was cut, not dropped.
    EXPECT_GT(f->size(), kControlMaxFrameBytes - 16);
    Result<RankMessage> m = DecodeFrame(*f);
    ASSERT_TRUE(m.ok()) << m.status().ToString();
    const CatalogRecordMsg& got = m->catalog;
    const std::string& text = got.op == CatalogOp::kPut      ? got.entry.note
                              : got.op == CatalogOp::kStatus ? got.note
                                                             : got.message;
    const std::string& full = r->op == CatalogOp::kPut      ? r->entry.note
                              : r->op == CatalogOp::kStatus ? r->note
                                                            : r->message;
    ASSERT_GE(text.size(), marker.size());
    EXPECT_EQ(text.substr(text.size() - marker.size()), marker);
    const std::string kept = text.substr(0, text.size() - marker.size());
    EXPECT_EQ(full.compare(0, kept.size(), kept), 0) << "the kept text is a prefix";
    if (r == &event) {
      EXPECT_NE(static_cast<unsigned char>(kept.back()), 0xc3) << "a character was split";
    }
  }
  // A record that fits is sent whole, without a marker.
  Result<std::string> f = EncodeCatalogRecord(StatusRecord());
  ASSERT_TRUE(f.ok());
  EXPECT_EQ(f->find("truncated"), std::string::npos);
}

TEST(ControlPlane, CatalogRecordArrivesAsAnEvent) {
  Fixture f;
  auto client = f.Connect(0);
  ASSERT_NE(client, nullptr);
  ASSERT_EQ(f.WaitRegistered(0).kind, ControlEventKind::kRegistered);
  const CatalogRecordMsg sent[] = {PutRecord(), StatusRecord(), EventRecord()};
  for (const CatalogRecordMsg& r : sent) ASSERT_TRUE(client->SendCatalogRecord(r).ok());
  CatalogRecordMsg invalid = EventRecord();
  invalid.kind.clear();
  EXPECT_EQ(client->SendCatalogRecord(invalid).code(), StatusCode::kInvalidArgument);
  for (const CatalogRecordMsg& r : sent) {
    ControlEvent e = f.log.WaitFor([&](const ControlEvent& ev) {
      return ev.kind == ControlEventKind::kCatalog && ev.catalog.op == r.op;
    });
    ASSERT_EQ(e.kind, ControlEventKind::kCatalog);
    EXPECT_EQ(e.rank, 0);
    ExpectSameRecord(r, e.catalog);
  }
  EXPECT_STREQ(ControlEventKindName(ControlEventKind::kCatalog), "catalog");
  EXPECT_EQ(f.log.Count(ControlEventKind::kDisconnected), 0) << "no protocol error";
  EXPECT_TRUE(client->Shutdown(0).ok());
  EXPECT_EQ(f.log.Count(ControlEventKind::kCatalog), 3) << "the invalid record was not sent";
}

TEST(ControlPlane, FlushReturnsOnceQueuedRecordsAreWrittenAndFailsWithoutASupervisor) {
  Fixture f;
  auto client = f.Connect(0);
  ASSERT_NE(client, nullptr);
  ASSERT_EQ(f.WaitRegistered(0).kind, ControlEventKind::kRegistered);
  for (int i = 0; i < 50; ++i) ASSERT_TRUE(client->SendCatalogRecord(EventRecord()).ok());
  ASSERT_TRUE(client->Flush(5000).ok());
  // Written to the socket: the supervisor receives every one, even with nothing else sent.
  for (int i = 0; i < 300 && f.log.Count(ControlEventKind::kCatalog) < 50; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_EQ(f.log.Count(ControlEventKind::kCatalog), 50);
  EXPECT_TRUE(client->Flush(1000).ok()) << "nothing queued: at once";
  EXPECT_TRUE(client->Shutdown(0).ok());
  EXPECT_EQ(client->Flush(1000).code(), StatusCode::kAborted) << "after shutdown";
}

TEST(ControlPlane, BeforeHeartbeatMayOverwriteFields) {
  Fixture f;
  ControlClientOptions o = f.ClientOptions(1);
  o.before_heartbeat = [](HeartbeatMsg& hb) {
    hb.phase = RankPhase::kCollective;
    hb.collective_seq = 77;
  };
  auto client = f.Connect(o);
  ASSERT_NE(client, nullptr);
  client->SetPhase(RankPhase::kForward);
  client->SetCollectiveSeq(3);
  client->SetStep(9);
  ControlEvent hb = f.log.WaitFor(
      [](const ControlEvent& e) { return e.kind == ControlEventKind::kHeartbeat && e.step == 9; });
  ASSERT_EQ(hb.kind, ControlEventKind::kHeartbeat);
  EXPECT_EQ(hb.phase, RankPhase::kCollective);
  EXPECT_EQ(hb.collective_seq, 77);
}

}  // namespace
}  // namespace tessera
