// tests/unit/host_tier_test.cc — the memory tier's parts on their own: the replica channel
// over real loopback TCP (put, get, refusals, a transfer cut midway, a silent peer as a named
// timeout), buddy placement, the inventory and the choice of the step to resume, and a lazy
// CheckpointReader over a FetchingFileSystem that fetches only the shards a read needs.
// The whole tier in a job: tests/multirank/supervisor_faults.py (case memory) and
// multihost_equivalence.py (a lost host, resumed from memory on a spare).
// links: tessera_train
#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <thread>
#include <string>
#include <vector>

#include "checkpoint/replica_channel.h"
#include "checkpoint/shard_file.h"
#include "runtime/train/host_tier.h"
#include "tests/testing/temp_dir.h"

namespace tessera {
namespace {

using testing::ScopedTempDir;

constexpr uint64_t kSecret = 0x1234abcd5678ef01ull;
constexpr uint32_t kLoopback = 0x7f000001;

std::string Slurp(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

void Spit(const std::string& path, const std::string& bytes) {
  std::filesystem::create_directories(std::filesystem::path(path).parent_path());
  std::ofstream(path, std::ios::binary) << bytes;
}

TEST(ReplicaChannel, PutThenGetRoundTrip) {
  ScopedTempDir server_root("replica_srv"), local("replica_cli");
  auto server = ReplicaServer::Start(server_root.str(), kLoopback, kSecret, 5);
  ASSERT_TRUE(server.ok()) << server.status().ToString();
  std::string bytes(3 << 20, '\0');  // several chunks
  for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<char>(i * 131 + 7);
  Spit(local.str() + "/shard_3.bin", bytes);
  const PeerAddress peer = (*server)->address();
  ASSERT_TRUE(PutFile(peer, kSecret, "step_00000004.tmp/shard_3.bin", local.str() + "/shard_3.bin", 5).ok());
  EXPECT_EQ(Slurp(server_root.str() + "/step_00000004.tmp/shard_3.bin"), bytes);
  EXPECT_EQ((*server)->bytes_received(), bytes.size());
  // Nothing but the file itself is left in the directory (the temporary name was renamed).
  EXPECT_EQ(std::distance(std::filesystem::directory_iterator(server_root.str() + "/step_00000004.tmp"),
                          std::filesystem::directory_iterator()), 1);

  ASSERT_TRUE(GetFile(peer, kSecret, "step_00000004.tmp/shard_3.bin", local.str() + "/back.bin", 5).ok());
  EXPECT_EQ(Slurp(local.str() + "/back.bin"), bytes);
}

TEST(ReplicaChannel, RefusesWhatItMustNotServe) {
  ScopedTempDir server_root("replica_srv"), local("replica_cli");
  Spit(server_root.str() + "/step_1/manifest.json", "{}");
  auto server = ReplicaServer::Start(server_root.str(), kLoopback, kSecret, 5);
  ASSERT_TRUE(server.ok());
  const PeerAddress peer = (*server)->address();
  Status st = GetFile(peer, kSecret, "step_1/absent.bin", local.str() + "/x", 5);
  EXPECT_EQ(st.code(), StatusCode::kNotFound) << st.ToString();
  EXPECT_FALSE(std::filesystem::exists(local.str() + "/x"));
  st = GetFile(peer, kSecret + 1, "step_1/manifest.json", local.str() + "/x", 5);
  EXPECT_EQ(st.code(), StatusCode::kFailedPrecondition) << st.ToString();
  EXPECT_NE(st.message().find("wrong secret"), std::string::npos) << st.ToString();
  for (const char* bad : {"../etc/passwd", "/etc/passwd", "a//b", "a/./b", "a/", "", "a b", "a/../../x"}) {
    EXPECT_FALSE(ValidReplicaPath(bad)) << bad;
    EXPECT_EQ(GetFile(peer, kSecret, bad, local.str() + "/x", 5).code(), StatusCode::kInvalidArgument) << bad;
  }
  EXPECT_TRUE(ValidReplicaPath("step_00000004.tmp/shard_12.bin"));
  // A refused put of a large file still gets the refusal, not a reset of the connection.
  Spit(local.str() + "/big.bin", std::string(3 << 20, 'x'));
  st = PutFile(peer, kSecret + 1, "step_1.tmp/shard_0.bin", local.str() + "/big.bin", 5);
  EXPECT_EQ(st.code(), StatusCode::kFailedPrecondition) << st.ToString();
  EXPECT_FALSE(std::filesystem::exists(server_root.str() + "/step_1.tmp/shard_0.bin"));
  // A FIFO under the root does not block the server (opened non-blocking, refused as not a file).
  ASSERT_EQ(::mkfifo((server_root.str() + "/step_1/fifo.bin").c_str(), 0644), 0);
  st = GetFile(peer, kSecret, "step_1/fifo.bin", local.str() + "/x", 5);
  EXPECT_EQ(st.code(), StatusCode::kIoError) << st.ToString();
  EXPECT_NE(st.message().find("not a regular file"), std::string::npos) << st.ToString();
}

TEST(ReplicaChannel, APutCutMidwayLeavesNoFile) {
  ScopedTempDir server_root("replica_srv");
  auto server = ReplicaServer::Start(server_root.str(), kLoopback, kSecret, 5);
  ASSERT_TRUE(server.ok());
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons((*server)->address().port);
  a.sin_addr.s_addr = htonl(kLoopback);
  ASSERT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  const std::string path = "step_2.tmp/shard_0.bin";
  std::string req;
  auto put = [&](const void* p, size_t n) { req.append(static_cast<const char*>(p), n); };
  const uint32_t magic = 0x50525354;
  const uint8_t version = 1, op = 'P';
  const uint16_t len = static_cast<uint16_t>(path.size());
  const uint64_t size = 1000;
  put(&magic, 4); put(&version, 1); put(&op, 1); put(&len, 2); put(&kSecret, 8);
  req += path;
  put(&size, 8);
  req += std::string(10, 'x');  // 10 of the 1000 bytes, then the link dies
  ASSERT_EQ(::write(fd, req.data(), req.size()), static_cast<ssize_t>(req.size()));
  ::close(fd);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  EXPECT_FALSE(std::filesystem::exists(server_root.str() + "/" + path));
  size_t left = 0;
  for (auto& e : std::filesystem::recursive_directory_iterator(server_root.str())) left += e.is_regular_file();
  EXPECT_EQ(left, 0u) << "a partial temporary file was left behind";
}

TEST(ReplicaChannel, ASilentPeerIsANamedTimeout) {
  // A socket that listens but never answers (its accept queue takes the connection).
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(kLoopback);
  ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  ASSERT_EQ(::listen(fd, 4), 0);
  socklen_t alen = sizeof a;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &alen);
  ScopedTempDir local("replica_cli");
  const auto t0 = std::chrono::steady_clock::now();
  Status st = GetFile({kLoopback, ntohs(a.sin_port)}, kSecret, "step_1/manifest.json", local.str() + "/m", 1);
  const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ::close(fd);
  EXPECT_EQ(st.code(), StatusCode::kTimeout) << st.ToString();
  EXPECT_LT(waited, 10.0);
}

TEST(HostTier, BuddiesLiveOnTheNextHost) {
  // Ranks 0, 1 on host A; 2, 3 on host B; 4 on host C.
  const HostRing ring = PlaceBuddies({7, 7, 9, 9, 11});
  EXPECT_EQ(ring.hosts, 3);
  EXPECT_EQ(ring.host_of, (std::vector<int>{0, 0, 1, 1, 2}));
  EXPECT_EQ(ring.leader, (std::vector<bool>{true, false, true, false, true}));
  EXPECT_EQ(ring.buddy, (std::vector<int>{2, 3, 4, 4, 0}));
  for (size_t r = 0; r < ring.buddy.size(); ++r) {
    EXPECT_NE(ring.host_of[ring.buddy[r]], ring.host_of[r]) << "rank " << r << "'s replica on its own host";
  }
  const HostRing one = PlaceBuddies({5, 5});
  EXPECT_EQ(one.hosts, 1);
  EXPECT_EQ(one.buddy, (std::vector<int>{-1, -1}));
}

TEST(HostTier, ChoosesTheNewestStepTheSurvivorsHoldWhole) {
  // Rank 0's host: steps 8 (shards 0, 1) and 6 (all three); rank 1's host (a spare: nothing);
  // rank 2's host: step 10 (shard 2 only) and 8 (shard 2).
  std::vector<std::vector<HeldStep>> held = {
      {{8, 3, {0, 1}}, {6, 3, {0, 1, 2}}}, {}, {{10, 3, {2}}, {8, 3, {2}}}};
  // Through the wire encoding, as the ranks exchange it.
  std::vector<double> all;
  size_t width = 0;
  for (const auto& h : held) width = std::max(width, EncodeHeld(h).size());
  for (const auto& h : held) {
    std::vector<double> e = EncodeHeld(h);
    e.resize(width, 0.0);
    all.insert(all.end(), e.begin(), e.end());
  }
  auto decoded = DecodeHeld(all, width, 3);
  ASSERT_TRUE(decoded.ok());
  std::vector<std::string> skipped;
  std::vector<HeldChoice> c = CompleteSteps(*decoded, -1, &skipped);
  ASSERT_EQ(c.size(), 2u);
  EXPECT_EQ(c[0].step, 8);
  EXPECT_EQ(c[0].manifest_holders, (std::vector<int>{0, 2}));
  EXPECT_EQ(c[0].shard_holders, (std::vector<std::vector<int>>{{0}, {0}, {2}}));
  EXPECT_EQ(c[1].step, 6);  // the fallback
  ASSERT_EQ(skipped.size(), 1u);
  EXPECT_EQ(skipped[0], "step 10: shard 0 is on no surviving host");
  // The disk has step 9: nothing in memory is as new.
  EXPECT_TRUE(CompleteSteps(*decoded, 9, nullptr).empty());
  // Hosts that disagree on a step's shard count: that step is not trusted.
  held[2][1].shards = 4;
  c = CompleteSteps(held, -1, &skipped);
  ASSERT_EQ(c.size(), 1u);
  EXPECT_EQ(c[0].step, 6);
}

// A two-shard checkpoint: tensor "param/a" on shard 0, "param/b" on shard 1.
void WriteTwoShards(const std::string& dir) {
  std::filesystem::create_directories(dir);
  std::vector<float> a(100, 1.5f), b(50, -2.0f);
  auto w0 = ShardWriter::Create(dir, 0);
  auto w1 = ShardWriter::Create(dir, 1);
  ASSERT_TRUE(w0.ok() && w1.ok());
  ASSERT_TRUE((*w0)->Append("param/a", 0, 100, DType::kF32, a.data()).ok());
  ASSERT_TRUE((*w1)->Append("param/b", 0, 50, DType::kF32, b.data()).ok());
  Manifest m;
  m.step = 4;
  m.tensors = {{"param/a", {100}, DType::kF32}, {"param/b", {50}, DType::kF32}};
  m.shards = {*(*w0)->Finish(), *(*w1)->Finish()};
  ASSERT_TRUE(WriteFileAtomic(dir + "/manifest.json", SerializeManifest(m)).ok());
}

TEST(HostTier, FetchesOnlyTheShardsAReadNeeds) {
  ScopedTempDir peer_root("tier_peer"), here("tier_here");
  WriteTwoShards(peer_root.str() + "/step_00000004");
  auto server = ReplicaServer::Start(peer_root.str(), kLoopback, kSecret, 5);
  ASSERT_TRUE(server.ok());
  const PeerAddress peer = (*server)->address();
  const std::string dir = here.str() + "/step_00000004";
  FetchingFileSystem fs(DefaultFileSystem(), dir,
                        {{"manifest.json", {peer}}, {"shard_0.bin", {peer}}, {"shard_1.bin", {peer}}},
                        kSecret, 5);
  auto reader = CheckpointReader::Open(dir, fs, /*lazy_shards=*/true);
  ASSERT_TRUE(reader.ok()) << reader.status().ToString();
  EXPECT_EQ(fs.files_fetched(), 1);  // the manifest only
  std::vector<float> b(50);
  ASSERT_TRUE((*reader)->Read("param/b", 0, 50, b.data()).ok());
  EXPECT_EQ(b, std::vector<float>(50, -2.0f));
  EXPECT_EQ(fs.files_fetched(), 2);
  EXPECT_TRUE(std::filesystem::exists(dir + "/shard_1.bin"));
  EXPECT_FALSE(std::filesystem::exists(dir + "/shard_0.bin")) << "a shard no read needed was fetched";
}

TEST(HostTier, AFetchedShardIsVerifiedLikeAnyOther) {
  ScopedTempDir peer_root("tier_peer"), here("tier_here");
  const std::string src = peer_root.str() + "/step_00000004";
  WriteTwoShards(src);
  {  // one byte of shard 0's data flipped on the peer
    std::fstream f(src + "/shard_0.bin", std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(20);
    f.put('\x55');
  }
  auto server = ReplicaServer::Start(peer_root.str(), kLoopback, kSecret, 5);
  ASSERT_TRUE(server.ok());
  const PeerAddress peer = (*server)->address();
  const std::string dir = here.str() + "/step_00000004";
  FetchingFileSystem fs(DefaultFileSystem(), dir, {{"manifest.json", {peer}}, {"shard_0.bin", {peer}}},
                        kSecret, 5);
  auto reader = CheckpointReader::Open(dir, fs, /*lazy_shards=*/true);
  ASSERT_TRUE(reader.ok());
  std::vector<float> a(100);
  Status st = (*reader)->Read("param/a", 0, 100, a.data());
  EXPECT_EQ(st.code(), StatusCode::kDataLoss) << st.ToString();
  // A shard no holder has: missing, i.e. damage the resume falls back from.
  std::vector<float> b(50);
  st = (*reader)->Read("param/b", 0, 50, b.data());
  EXPECT_EQ(st.code(), StatusCode::kDataLoss) << st.ToString();
  EXPECT_NE(st.message().find("missing"), std::string::npos) << st.ToString();
}

}  // namespace
}  // namespace tessera
