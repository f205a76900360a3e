// End to end: `tessera ckpt ls | verify | export | gc` on checkpoint roots built here with the
// checkpoint library itself (ShardWriter, CommitCheckpoint, Catalog): a tiny GPT-2 whose
// parameters are split over two shard files, the way a dp=2 run saves them.
// links: tessera_train
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "checkpoint/catalog.h"
#include "checkpoint/commit.h"
#include "checkpoint/shard_file.h"
#include "models/hf_weights.h"
#include "models/param_layout.h"
#include "runtime/train/config.h"
#include "runtime/train/saved_state.h"
#include "tests/e2e/cli_util.h"

namespace tessera::testing {
namespace {

// The value of flat element i of the checkpoint of `step`: distinct per step and element.
float ParamValue(int64_t step, int64_t i) {
  return static_cast<float>(std::sin(0.001 * static_cast<double>(i) + static_cast<double>(step)));
}

// The line of `output` that contains `needle` ("" if none).
std::string LineWith(const std::string& output, const std::string& needle) {
  std::istringstream in(output);
  for (std::string line; std::getline(in, line);) {
    if (line.find(needle) != std::string::npos) return line;
  }
  return "";
}

class CkptCli : public ::testing::Test {
 protected:
  void SetUp() override {
    config_text_ = ReadFile(Repo("configs/tiny.yaml"));
    auto config = LoadConfig(Repo("configs/tiny.yaml"));
    ASSERT_TRUE(config.ok()) << config.status().ToString();
    model_ = config->model;
    decls_ = DeclareParameters(model_);
  }

  // Commits step_<step> under root_: every "param/<name>" in fp32 plus one AdamW moment,
  // elements [0, n/2) of each tensor in shard_0.bin and [n/2, n) in shard_1.bin. With
  // `record`, also enters it into the catalog as committed.
  void Save(int64_t step, bool record = true) {
    ASSERT_TRUE(PrepareStaging(root_, step).ok());
    const std::string staging = root_ + "/" + StagingDirName(step);
    auto w0 = ShardWriter::Create(staging, 0);
    auto w1 = ShardWriter::Create(staging, 1);
    ASSERT_TRUE(w0.ok() && w1.ok());
    Manifest m;
    m.step = step;
    int64_t flat = 0;
    auto add = [&](const std::string& name, const Shape& shape) {
      const int64_t n = shape.numel();
      std::vector<float> v(n);
      for (int64_t i = 0; i < n; ++i) v[i] = ParamValue(step, flat + i);
      flat += n;
      TensorRecord t;
      t.name = name;
      for (int d = 0; d < shape.rank(); ++d) t.shape.push_back(shape[d]);
      m.tensors.push_back(t);
      ASSERT_TRUE((*w0)->Append(name, 0, n / 2, DType::kF32, v.data()).ok());
      ASSERT_TRUE((*w1)->Append(name, n / 2, n, DType::kF32, v.data() + n / 2).ok());
    };
    for (const ParamDecl& d : decls_) add("param/" + d.name, d.shape);
    add("exp_avg/wte.weight", decls_[0].shape);  // not a parameter: export must skip it
    auto r0 = (*w0)->Finish();
    auto r1 = (*w1)->Finish();
    ASSERT_TRUE(r0.ok() && r1.ok());
    m.shards = {*r0, *r1};
    SavedTrainerState state;  // what a trainer saves (verify checks it like a resume does)
    state.step = step;
    state.adamw_step = step;
    m.state = SavedStateJson(state);
    m.layout = JsonValue::Object({{"dp", JsonValue::Integer(2)},
                                  {"zero", JsonValue::Integer(1)},
                                  {"precision", JsonValue::String("fp32")}});
    m.config_yaml = config_text_;
    m.stall_seconds = 0.012;
    m.write_seconds = 0.345;
    m.total_bytes = r0->bytes + r1->bytes;
    Status st = CommitCheckpoint(root_, m);
    ASSERT_TRUE(st.ok()) << st.ToString();
    if (!record) return;
    CheckpointEntry e;
    e.step = step;
    e.status = CheckpointStatus::kCommitted;
    e.dir = StepDirName(step);
    e.bytes = m.total_bytes;
    e.layout = "dp=2 zero=1 precision=fp32";
    e.stall_seconds = m.stall_seconds;
    e.write_seconds = m.write_seconds;
    e.commit_unix_s = 1.7e9;
    Record(e);
  }

  void Record(const CheckpointEntry& e) {
    auto cat = Catalog::Open(root_, false);
    ASSERT_TRUE(cat.ok()) << cat.status().ToString();
    ASSERT_TRUE((*cat)->Put(e).ok());
  }

  bool OnDisk(int64_t step) const { return std::filesystem::exists(root_ + "/" + StepDirName(step)); }

  TempDir dir_{"ckpt_cli"};
  std::string root_ = dir_ / "ckpt";
  std::string config_text_;
  ModelConfig model_;
  std::vector<ParamDecl> decls_;
};

TEST_F(CkptCli, LsMergesCatalogAndDiskWhileARunHoldsTheCatalog) {
  Save(100);
  Save(200);
  Save(300, /*record=*/false);  // committed, but the catalog never heard of it
  CheckpointEntry gone;
  gone.step = 400;
  gone.status = CheckpointStatus::kCommitted;
  gone.dir = StepDirName(400);
  Record(gone);                 // in the catalog, directory missing
  CheckpointEntry failed;
  failed.step = 500;
  failed.status = CheckpointStatus::kFailed;
  failed.note = "ENOSPC writing shard_1.bin";
  Record(failed);

  // A training run holds the catalog for writing; ls opens it read-only beside it.
  auto writer = Catalog::Open(root_, false);
  ASSERT_TRUE(writer.ok());
  CommandResult r = Tessera("ckpt ls " + root_);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const std::string l100 = LineWith(r.output, "   100  ");
  EXPECT_NE(l100.find("committed"), std::string::npos) << r.output;
  EXPECT_NE(l100.find("dp=2 zero=1 precision=fp32"), std::string::npos) << r.output;
  EXPECT_NE(l100.find("0.345 s"), std::string::npos) << r.output;
  EXPECT_NE(l100.find("MiB"), std::string::npos) << r.output;
  const std::string l300 = LineWith(r.output, "   300  ");
  EXPECT_NE(l300.find("NOT IN CATALOG"), std::string::npos) << r.output;
  EXPECT_NE(l300.find("dp=2 zero=1 precision=fp32"), std::string::npos) << "from its manifest\n" << r.output;
  EXPECT_NE(LineWith(r.output, "   400  ").find("MISSING"), std::string::npos) << r.output;
  const std::string l500 = LineWith(r.output, "   500  ");
  EXPECT_NE(l500.find("failed"), std::string::npos) << r.output;
  EXPECT_NE(l500.find("ENOSPC"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("2 flagged"), std::string::npos) << r.output;
  writer->reset();

  // Without a catalog: from disk only, and it says so.
  std::filesystem::remove_all(root_ + "/catalog");
  r = Tessera("ckpt ls " + root_);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("listing from disk only"), std::string::npos) << r.output;
  EXPECT_NE(LineWith(r.output, "   300  ").find("committed"), std::string::npos) << r.output;
  EXPECT_EQ(LineWith(r.output, "   400  "), "") << r.output;

  // What a resume would pass over or sweep is named, not left out.
  WriteFile(root_ + "/step_00000600", "not a directory");
  std::filesystem::create_directories(root_ + "/step_00000700.tmp");
  r = Tessera("ckpt ls " + root_);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(LineWith(r.output, "not a checkpoint").find("step_00000600 (a regular file)"),
            std::string::npos) << r.output;
  EXPECT_NE(LineWith(r.output, "cut short").find("step_00000700.tmp"), std::string::npos) << r.output;

  r = Tessera("ckpt ls " + dir_ / "no_such_root");
  EXPECT_EQ(r.exit_code, 4) << r.output;
  EXPECT_NE(r.output.find("no_such_root"), std::string::npos) << r.output;
}

TEST_F(CkptCli, VerifyPassesThenNamesTheCorruptShard) {
  Save(100);
  Save(200);
  CommandResult r = Tessera("ckpt verify " + root_);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find(StepDirName(200)), std::string::npos) << "newest by default\n" << r.output;
  EXPECT_NE(r.output.find("MB/s"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("OK"), std::string::npos) << r.output;

  // One flipped bit in the middle of shard_1.bin of step 200.
  const std::string shard = root_ + "/" + StepDirName(200) + "/shard_1.bin";
  {
    std::fstream f(shard, std::ios::in | std::ios::out | std::ios::binary);
    ASSERT_TRUE(f.good());
    const auto size = std::filesystem::file_size(shard);
    f.seekg(size / 2);
    char c = 0;
    f.read(&c, 1);
    c ^= 0x10;
    f.seekp(size / 2);
    f.write(&c, 1);
  }
  r = Tessera("ckpt verify " + root_);
  EXPECT_EQ(r.exit_code, 5) << r.output;
  EXPECT_NE(r.output.find("shard_1.bin"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("tensor"), std::string::npos) << r.output;
  r = Tessera("ckpt verify " + root_ + " --step 100");
  EXPECT_EQ(r.exit_code, 0) << "the older checkpoint is intact\n" << r.output;
  r = Tessera("ckpt verify " + root_ + " --step 150");
  EXPECT_EQ(r.exit_code, 4) << r.output;
  EXPECT_NE(r.output.find("committed: 100, 200"), std::string::npos) << r.output;
}

TEST_F(CkptCli, ExportWritesTheParametersAsHuggingFaceWeights) {
  Save(100);
  Save(200);
  const std::string out = dir_ / "model.safetensors";
  CommandResult r = Tessera("ckpt export " + root_ + " --step 100 --out " + out);
  ASSERT_EQ(r.exit_code, 0) << r.output;

  // Load it back the way `tessera train --set init_from=...` would, and compare with what
  // step 100 saved (not step 200: --step chose).
  int64_t total = 0;
  for (const ParamDecl& d : decls_) total += d.shape.numel();
  std::vector<float> buffer(total, -1.0f);
  std::vector<Parameter> params;
  int64_t offset = 0;
  for (const ParamDecl& d : decls_) {
    Parameter p;
    p.spec = ShardSpec::Whole(d.name, d.shape);
    p.kind = d.kind;
    p.value = Tensor(buffer.data() + offset, DType::kF32, d.shape);
    p.offset = offset;
    p.hf_transposed = d.hf_transposed;
    params.push_back(p);
    offset += d.shape.numel();
  }
  Status st = LoadHfWeights(out, model_, params);
  ASSERT_TRUE(st.ok()) << st.ToString();
  for (int64_t i = 0; i < total; ++i) {
    ASSERT_EQ(buffer[i], ParamValue(100, i)) << "flat element " << i;
  }

  r = Tessera("ckpt export " + root_ + " --out " + dir_ / "bf16.safetensors" + " --dtype bf16");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find(StepDirName(200)), std::string::npos) << "newest by default\n" << r.output;
  st = LoadHfWeights(dir_ / "bf16.safetensors", model_, params);
  ASSERT_TRUE(st.ok()) << st.ToString();
  for (int64_t i = 0; i < total; i += 97) {
    EXPECT_NEAR(buffer[i], ParamValue(200, i), 1.0 / 128) << "flat element " << i;
  }
}

TEST_F(CkptCli, ExportRejectsACheckpointWhoseConfigDoesNotLoad) {
  config_text_ = "model:\n  family: gpt3\n";
  Save(100);
  CommandResult r = Tessera("ckpt export " + root_ + " --out " + dir_ / "x.safetensors");
  EXPECT_EQ(r.exit_code, 4) << r.output;
  EXPECT_NE(r.output.find("manifest.json config_yaml"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("model.family"), std::string::npos) << r.output;
  EXPECT_FALSE(std::filesystem::exists(dir_ / "x.safetensors"));
}

TEST_F(CkptCli, GcDeletesByPolicyRecordsItAndRefusesWhileARunHoldsTheCatalog) {
  for (int64_t step : {100, 200, 300, 400, 500}) Save(step);
  {
    auto writer = Catalog::Open(root_, false);
    ASSERT_TRUE(writer.ok());
    CommandResult r = Tessera("ckpt gc " + root_ + " --keep-last 2");
    EXPECT_NE(r.exit_code, 0) << r.output;
    EXPECT_NE(r.output.find("only one writer"), std::string::npos) << r.output;
    for (int64_t step : {100, 200, 300, 400, 500}) EXPECT_TRUE(OnDisk(step)) << "nothing deleted";
  }
  CommandResult r = Tessera("ckpt gc " + root_ + " --keep-last 2 --keep-every 200 --dry-run");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("would delete step_00000100"), std::string::npos) << r.output;
  EXPECT_TRUE(OnDisk(100));

  r = Tessera("ckpt gc " + root_ + " --keep-last 2 --keep-every 200");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("deleted step_00000100"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("deleted step_00000300"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("kept 3: 200 400 500"), std::string::npos) << r.output;
  for (int64_t step : {100, 300}) EXPECT_FALSE(OnDisk(step)) << step;
  for (int64_t step : {200, 400, 500}) EXPECT_TRUE(OnDisk(step)) << step;

  auto cat = Catalog::Open(root_, true);
  ASSERT_TRUE(cat.ok());
  for (int64_t step : {100, 300}) {
    auto e = (*cat)->Get(step);
    ASSERT_TRUE(e.ok());
    EXPECT_EQ(e->status, CheckpointStatus::kDeleted);
    EXPECT_NE(e->note.find("keep_last=2"), std::string::npos) << e->note;
  }
  EXPECT_EQ((*cat)->Get(200)->status, CheckpointStatus::kCommitted);
  auto events = (*cat)->Events();
  ASSERT_TRUE(events.ok());
  EXPECT_EQ(events->size(), 2u);

  // ls shows the deleted ones as deleted, without flags.
  r = Tessera("ckpt ls " + root_);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(LineWith(r.output, "   100  ").find("deleted"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("flagged"), std::string::npos) << r.output;

  // Defaults: keep the 3 newest; nothing left to delete.
  r = Tessera("ckpt gc " + root_);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("deleted 0, kept 3"), std::string::npos) << r.output;
}

TEST_F(CkptCli, UsageErrorsExitTwo) {
  for (const char* args : {"ckpt", "ckpt frobnicate x", "ckpt ls", "ckpt ls a b", "ckpt verify x --step -3",
                           "ckpt verify x --bogus", "ckpt export x", "ckpt export x --out y --dtype i32",
                           "ckpt gc x --keep-last 0", "ckpt gc x --keep-every many"}) {
    CommandResult r = Tessera(args);
    EXPECT_EQ(r.exit_code, 2) << args << "\n" << r.output;
    EXPECT_FALSE(r.output.empty()) << args;
  }
  CommandResult r = Tessera("ckpt --help");
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_NE(r.output.find("tessera ckpt verify DIR"), std::string::npos);
  r = Tessera("ckpt gc --help");
  EXPECT_EQ(r.exit_code, 0);
}

}  // namespace
}  // namespace tessera::testing
