// tests/unit/catalog_test.cc — the RocksDB checkpoint catalog: entries and events round-trip,
// one writer at a time (also across processes), readers alongside the writer, and values that
// are not ours reported as errors; the entry's JSON form (also sent over the control plane)
// round-trips and its strict parse names the bad field.
// links: tessera_checkpoint
//
// The garbage-value test plants bytes with RocksDB's own API: nothing in Catalog's interface
// can write a malformed value, which is exactly the point.
#include "checkpoint/catalog.h"

#include <gtest/gtest.h>
#include <rocksdb/db.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

#include "runtime/core/json.h"
#include "tests/testing/temp_dir.h"

namespace tessera {
namespace {

using testing::ScopedTempDir;

CheckpointEntry Entry(int64_t step, CheckpointStatus status) {
  CheckpointEntry e;
  e.step = step;
  e.status = status;
  e.dir = "step_" + std::to_string(step);
  e.bytes = (uint64_t{1} << 40) + static_cast<uint64_t>(step);  // past 32 bits on purpose
  e.layout = "dp=4 zero=3 precision=bf16";
  e.stall_seconds = 0.125 + step;
  e.write_seconds = 2.5;
  e.commit_unix_s = 1.7e9 + 0.25;
  e.note = "note with \"quotes\" and\nnewline";
  return e;
}

void ExpectSame(const CheckpointEntry& a, const CheckpointEntry& b) {
  EXPECT_EQ(a.step, b.step);
  EXPECT_EQ(a.status, b.status);
  EXPECT_EQ(a.dir, b.dir);
  EXPECT_EQ(a.bytes, b.bytes);
  EXPECT_EQ(a.layout, b.layout);
  EXPECT_EQ(a.stall_seconds, b.stall_seconds);
  EXPECT_EQ(a.write_seconds, b.write_seconds);
  EXPECT_EQ(a.commit_unix_s, b.commit_unix_s);
  EXPECT_EQ(a.note, b.note);
}

TEST(Catalog, PutGetListRoundTrip) {
  ScopedTempDir dir("catalog");
  const std::string root = dir / "ckpts";  // created by the writer's Open
  auto cat = Catalog::Open(root, /*read_only=*/false);
  ASSERT_TRUE(cat.ok()) << cat.status().ToString();
  // Out of order, and 1000 < 200 as text: the list must still come back by step.
  for (int64_t step : {1000, 200, 5, 0}) {
    ASSERT_TRUE((*cat)->Put(Entry(step, CheckpointStatus::kCommitted)).ok());
  }
  auto got = (*cat)->Get(200);
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  ExpectSame(*got, Entry(200, CheckpointStatus::kCommitted));
  EXPECT_EQ((*cat)->Get(7).status().code(), StatusCode::kNotFound);

  // Put replaces.
  CheckpointEntry e = Entry(5, CheckpointStatus::kFailed);
  e.note = "ENOSPC";
  ASSERT_TRUE((*cat)->Put(e).ok());
  auto list = (*cat)->List();
  ASSERT_TRUE(list.ok()) << list.status().ToString();
  ASSERT_EQ(list->size(), 4u);
  EXPECT_EQ((*list)[0].step, 0);
  EXPECT_EQ((*list)[1].step, 5);
  EXPECT_EQ((*list)[2].step, 200);
  EXPECT_EQ((*list)[3].step, 1000);
  ExpectSame((*list)[1], e);
  EXPECT_EQ((*cat)->Put(Entry(-1, CheckpointStatus::kWriting)).code(), StatusCode::kInvalidArgument);
}

TEST(Catalog, StatusNames) {
  EXPECT_STREQ(CheckpointStatusName(CheckpointStatus::kWriting), "writing");
  EXPECT_STREQ(CheckpointStatusName(CheckpointStatus::kCommitted), "committed");
  EXPECT_STREQ(CheckpointStatusName(CheckpointStatus::kFailed), "failed");
  EXPECT_STREQ(CheckpointStatusName(CheckpointStatus::kCorrupt), "corrupt");
  EXPECT_STREQ(CheckpointStatusName(CheckpointStatus::kDeleted), "deleted");
}

TEST(Catalog, SetStatusKeepsTheRestOfTheEntry) {
  ScopedTempDir dir("catalog");
  auto cat = Catalog::Open(dir.str(), false);
  ASSERT_TRUE(cat.ok()) << cat.status().ToString();
  ASSERT_TRUE((*cat)->Put(Entry(300, CheckpointStatus::kCommitted)).ok());
  ASSERT_TRUE((*cat)->SetStatus(300, CheckpointStatus::kCorrupt, "shard_1.bin: CRC mismatch").ok());
  auto got = (*cat)->Get(300);
  ASSERT_TRUE(got.ok());
  CheckpointEntry want = Entry(300, CheckpointStatus::kCorrupt);
  want.note = "shard_1.bin: CRC mismatch";
  ExpectSame(*got, want);
  Status missing = (*cat)->SetStatus(301, CheckpointStatus::kDeleted, "");
  EXPECT_EQ(missing.code(), StatusCode::kNotFound);
  EXPECT_NE(missing.message().find("301"), std::string::npos) << missing.message();
}

TEST(Catalog, EventsComeBackInTheOrderAddedAcrossReopens) {
  ScopedTempDir dir("catalog");
  {
    auto cat = Catalog::Open(dir.str(), false);
    ASSERT_TRUE(cat.ok());
    // Many within one millisecond: the sequence number must keep them apart and in order.
    for (int i = 0; i < 40; ++i) ASSERT_TRUE((*cat)->AddEvent("commit", "event " + std::to_string(i)).ok());
  }
  {
    auto cat = Catalog::Open(dir.str(), false);  // a second run appends
    ASSERT_TRUE(cat.ok());
    for (int i = 40; i < 45; ++i) ASSERT_TRUE((*cat)->AddEvent("resume", "event " + std::to_string(i)).ok());
    auto events = (*cat)->Events();
    ASSERT_TRUE(events.ok()) << events.status().ToString();
    ASSERT_EQ(events->size(), 45u);
    for (int i = 0; i < 45; ++i) {
      EXPECT_EQ((*events)[i].message, "event " + std::to_string(i));
      EXPECT_EQ((*events)[i].kind, i < 40 ? "commit" : "resume");
      if (i > 0) {
        EXPECT_GE((*events)[i].unix_s, (*events)[i - 1].unix_s);
      }
    }
    EXPECT_GT((*events)[0].unix_s, 1.6e9);  // wall-clock seconds, not milliseconds
  }
}

TEST(Catalog, ReopenReadOnlyAfterClose) {
  ScopedTempDir dir("catalog");
  {
    auto cat = Catalog::Open(dir.str(), false);
    ASSERT_TRUE(cat.ok());
    ASSERT_TRUE((*cat)->Put(Entry(10, CheckpointStatus::kCommitted)).ok());
    ASSERT_TRUE((*cat)->AddEvent("commit", "step 10").ok());
  }
  auto ro = Catalog::Open(dir.str(), /*read_only=*/true);
  ASSERT_TRUE(ro.ok()) << ro.status().ToString();
  auto got = (*ro)->Get(10);
  ASSERT_TRUE(got.ok());
  ExpectSame(*got, Entry(10, CheckpointStatus::kCommitted));
  auto events = (*ro)->Events();
  ASSERT_TRUE(events.ok());
  ASSERT_EQ(events->size(), 1u);
  EXPECT_EQ((*events)[0].message, "step 10");
  // Writes through a read-only catalog are refused with a message, not attempted.
  EXPECT_EQ((*ro)->Put(Entry(11, CheckpointStatus::kCommitted)).code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ((*ro)->SetStatus(10, CheckpointStatus::kDeleted, "").code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ((*ro)->AddEvent("x", "y").code(), StatusCode::kFailedPrecondition);
}

// Disk the open catalog's files occupy (allocated blocks, which fallocate'd reservations count
// in), not their sizes.
uint64_t AllocatedBytes(const std::string& dir) {
  uint64_t total = 0;
  for (const auto& f : std::filesystem::directory_iterator(dir)) {
    struct stat st {};
    if (::stat(f.path().c_str(), &st) == 0) total += static_cast<uint64_t>(st.st_blocks) * 512;
  }
  return total;
}

TEST(Catalog, AnOpenCatalogReservesLittleOfTheCheckpointVolume) {
  // RocksDB's defaults reserved ~76 MiB (a 64 MiB memtable's log, a 4 MiB MANIFEST) while the
  // catalog was open, so a nearly full checkpoint volume refused shards it had room for.
  ScopedTempDir dir("catalog");
  auto cat = Catalog::Open(dir.str(), /*read_only=*/false);
  ASSERT_TRUE(cat.ok()) << cat.status().ToString();
  for (int64_t step = 0; step < 200; ++step) {
    ASSERT_TRUE((*cat)->Put(Entry(step, CheckpointStatus::kCommitted)).ok());
    ASSERT_TRUE((*cat)->AddEvent("commit", "step " + std::to_string(step)).ok());
  }
  EXPECT_LT(AllocatedBytes(dir / "catalog"), uint64_t{4} << 20);
  auto list = (*cat)->List();
  ASSERT_TRUE(list.ok());
  EXPECT_EQ(list->size(), 200u);
}

TEST(Catalog, ReadOnlyOpenOfAMissingCatalogIsNotFound) {
  ScopedTempDir dir("catalog");
  auto ro = Catalog::Open(dir / "nothing_here", true);
  ASSERT_FALSE(ro.ok());
  EXPECT_EQ(ro.status().code(), StatusCode::kNotFound);
  EXPECT_NE(ro.status().message().find("nothing_here/catalog"), std::string::npos);
}

TEST(Catalog, ReaderWhileTheWriterHoldsIt) {
  ScopedTempDir dir("catalog");
  auto writer = Catalog::Open(dir.str(), false);
  ASSERT_TRUE(writer.ok());
  ASSERT_TRUE((*writer)->Put(Entry(100, CheckpointStatus::kCommitted)).ok());
  ASSERT_TRUE((*writer)->Put(Entry(200, CheckpointStatus::kWriting)).ok());
  // `tessera ckpt ls` during training: the writer's synced log is replayed by the reader.
  auto reader = Catalog::Open(dir.str(), true);
  ASSERT_TRUE(reader.ok()) << reader.status().ToString();
  auto list = (*reader)->List();
  ASSERT_TRUE(list.ok()) << list.status().ToString();
  ASSERT_EQ(list->size(), 2u);
  EXPECT_EQ((*list)[1].status, CheckpointStatus::kWriting);
  // The writer carries on while the reader is open.
  ASSERT_TRUE((*writer)->SetStatus(200, CheckpointStatus::kCommitted, "").ok());
  auto fresh = Catalog::Open(dir.str(), true);
  ASSERT_TRUE(fresh.ok());
  auto got = (*fresh)->Get(200);
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(got->status, CheckpointStatus::kCommitted);
}

TEST(Catalog, SecondWriterInThisProcessFailsNamingTheLock) {
  ScopedTempDir dir("catalog");
  auto first = Catalog::Open(dir.str(), false);
  ASSERT_TRUE(first.ok());
  auto second = Catalog::Open(dir.str(), false);
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), StatusCode::kIoError);
  const std::string& m = second.status().message();
  EXPECT_NE(m.find(dir.str() + "/catalog"), std::string::npos) << m;
  EXPECT_NE(m.find("only one writer"), std::string::npos) << m;
  first->reset();
  EXPECT_TRUE(Catalog::Open(dir.str(), false).ok()) << "the lock goes with the first writer";
}

// The real case: a training run holds the catalog and `tessera ckpt gc` (another process)
// tries to open it for writing. The child forks before this process opens anything.
TEST(Catalog, SecondWriterInAnotherProcessFails) {
  ScopedTempDir dir("catalog");
  int go[2], answer[2];
  ASSERT_EQ(pipe(go), 0);
  ASSERT_EQ(pipe(answer), 0);
  pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    char c;
    if (read(go[0], &c, 1) != 1) _exit(2);
    auto cat = Catalog::Open(dir.str(), false);
    std::string msg = cat.ok() ? "OPENED" : cat.status().message();
    if (write(answer[1], msg.data(), msg.size()) < 0) _exit(3);
    _exit(0);
  }
  close(go[0]);
  close(answer[1]);
  auto first = Catalog::Open(dir.str(), false);
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  ASSERT_EQ(write(go[1], "g", 1), 1);
  close(go[1]);
  std::string msg;
  char buf[512];
  for (ssize_t n; (n = read(answer[0], buf, sizeof buf)) > 0;) msg.append(buf, n);
  close(answer[0]);
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  EXPECT_NE(msg, "OPENED");
  EXPECT_NE(msg.find("lock"), std::string::npos) << msg;
  EXPECT_NE(msg.find("only one writer"), std::string::npos) << msg;
}

TEST(Catalog, GarbageValuesAreReportedNotFatal) {
  ScopedTempDir dir("catalog");
  {
    auto cat = Catalog::Open(dir.str(), false);
    ASSERT_TRUE(cat.ok());
    ASSERT_TRUE((*cat)->Put(Entry(1, CheckpointStatus::kCommitted)).ok());
  }
  {
    rocksdb::DB* raw = nullptr;
    ASSERT_TRUE(rocksdb::DB::Open(rocksdb::Options(), dir / "catalog", &raw).ok());
    std::unique_ptr<rocksdb::DB> db(raw);
    const rocksdb::WriteOptions wo;
    ASSERT_TRUE(db->Put(wo, "ckpt/00000000000000000002", std::string("\x00\xff{not json", 11)).ok());
    ASSERT_TRUE(db->Put(wo, "ckpt/00000000000000000003", "{\"step\":3,\"status\":7}").ok());
    ASSERT_TRUE(db->Put(wo, "ckpt/00000000000000000004",
                        "{\"step\":4,\"status\":\"vanished\",\"dir\":\"\",\"bytes\":0,\"layout\":\"\","
                        "\"stall_seconds\":0,\"write_seconds\":0,\"commit_unix_s\":0,\"note\":\"\"}").ok());
    ASSERT_TRUE(db->Put(wo, "ckpt/00000000000000000005",
                        "{\"step\":6,\"status\":\"committed\",\"dir\":\"\",\"bytes\":0,\"layout\":\"\","
                        "\"stall_seconds\":0,\"write_seconds\":0,\"commit_unix_s\":0,\"note\":\"\"}").ok());
    ASSERT_TRUE(db->Put(wo, "event/00000000000000000001/0000000000", "[[[[[[").ok());
    ASSERT_TRUE(db->Close().ok());
  }
  auto cat = Catalog::Open(dir.str(), true);
  ASSERT_TRUE(cat.ok()) << cat.status().ToString();
  EXPECT_TRUE((*cat)->Get(1).ok()) << "a good entry stays readable beside bad ones";
  for (int64_t step : {2, 3, 4, 5}) {
    auto got = (*cat)->Get(step);
    ASSERT_FALSE(got.ok()) << step;
    EXPECT_EQ(got.status().code(), StatusCode::kDataLoss);
    EXPECT_NE(got.status().message().find("ckpt/0000000000000000000" + std::to_string(step)),
              std::string::npos) << got.status().message();
  }
  EXPECT_NE((*cat)->Get(3).status().message().find("\"status\""), std::string::npos);
  EXPECT_NE((*cat)->Get(4).status().message().find("vanished"), std::string::npos);
  auto list = (*cat)->List();
  ASSERT_FALSE(list.ok());
  EXPECT_EQ(list.status().code(), StatusCode::kDataLoss);
  auto events = (*cat)->Events();
  ASSERT_FALSE(events.ok());
  EXPECT_EQ(events.status().code(), StatusCode::kDataLoss);
}

TEST(Catalog, GarbageDatabaseFilesFailTheOpenWithAMessage) {
  ScopedTempDir dir("catalog");
  {
    auto cat = Catalog::Open(dir.str(), false);
    ASSERT_TRUE(cat.ok());
    ASSERT_TRUE((*cat)->Put(Entry(1, CheckpointStatus::kCommitted)).ok());
  }
  std::ofstream(dir / "catalog/CURRENT", std::ios::trunc) << "MANIFEST-999999\n";
  for (bool read_only : {true, false}) {
    auto cat = Catalog::Open(dir.str(), read_only);
    ASSERT_FALSE(cat.ok()) << read_only;
    EXPECT_NE(cat.status().message().find(dir / "catalog"), std::string::npos)
        << cat.status().message();
  }
}

TEST(CatalogJson, EntryRoundTripsThroughJsonText) {
  for (CheckpointStatus st : {CheckpointStatus::kWriting, CheckpointStatus::kCommitted,
                              CheckpointStatus::kFailed, CheckpointStatus::kCorrupt,
                              CheckpointStatus::kDeleted}) {
    const CheckpointEntry e = Entry(42, st);
    JsonWriter w;
    w.Value(CheckpointEntryToJson(e));
    auto parsed = ParseJson(w.str());
    ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
    auto back = CheckpointEntryFromJson(*parsed);
    ASSERT_TRUE(back.ok()) << back.status().ToString();
    ExpectSame(e, *back);
    auto name = ParseCheckpointStatus(CheckpointStatusName(st));
    ASSERT_TRUE(name.ok());
    EXPECT_EQ(*name, st);
  }
  EXPECT_EQ(ParseCheckpointStatus("Committed").status().code(), StatusCode::kDataLoss);
}

TEST(CatalogJson, StrictParseNamesTheField) {
  JsonWriter w;
  w.Value(CheckpointEntryToJson(Entry(7, CheckpointStatus::kCommitted)));
  const std::string good = w.str();
  // Each case replaces one piece of the good text; the error must name `field`.
  struct Case {
    std::string from, to, field;
  };
  const Case cases[] = {
      {"\"step\":7", "\"step\":\"7\"", "step"},
      {"\"step\":7", "\"step\":-7", "step"},
      {"\"step\":7", "\"stepp\":7", "step"},
      {"\"status\":\"committed\"", "\"status\":\"vanished\"", "status"},
      {"\"status\":\"committed\"", "\"status\":3", "status"},
      {"\"dir\":\"step_7\"", "\"dir\":null", "dir"},
      {"\"bytes\":", "\"bytes\":-", "bytes"},
      {"\"write_seconds\":2.5", "\"write_seconds\":-2.5", "write_seconds"},
      {"\"write_seconds\":2.5", "\"write_seconds\":\"2.5\"", "write_seconds"},
      {"\"layout\":", "\"layout_\":", "layout"},
  };
  for (const Case& c : cases) {
    std::string text = good;
    const size_t at = text.find(c.from);
    ASSERT_NE(at, std::string::npos) << c.from << " in " << good;
    text.replace(at, c.from.size(), c.to);
    auto parsed = ParseJson(text);
    ASSERT_TRUE(parsed.ok()) << text;
    auto e = CheckpointEntryFromJson(*parsed);
    ASSERT_FALSE(e.ok()) << text;
    EXPECT_EQ(e.status().code(), StatusCode::kDataLoss) << text;
    EXPECT_NE(e.status().message().find("\"" + c.field + "\""), std::string::npos)
        << e.status().message();
  }
  EXPECT_EQ(CheckpointEntryFromJson(JsonValue::Array({})).status().code(), StatusCode::kDataLoss);
}

}  // namespace
}  // namespace tessera
