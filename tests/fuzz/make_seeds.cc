// tests/fuzz/make_seeds.cc — writes the binary seeds of the fuzz corpus with Tessera's own
// writers, so the seeds are what real runs put on disk and on the wire:
//   corpus/control_frame/      frames from the control-protocol encoders, one message each,
//                              and one connection's worth back to back
//   corpus/token_shard/        shards from WriteTokenShard (2- and 4-byte tokens, empty)
//   corpus/token_shard_index/  the index.json WriteTokenShardIndex writes over such shards
//   corpus/safetensors/        a file from WriteSafetensors with every dtype Tessera reads
// Usage (tests/fuzz/README.md): fuzz_make_seeds tests/fuzz/corpus. Overwrites those files;
// the text seeds (configs, manifests, hostfiles, HF index) are copied or written by hand.
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "models/safetensors.h"
#include "runtime/core/check.h"
#include "runtime/supervisor/control_protocol.h"
#include "runtime/train/data/token_shard.h"
#include "runtime/train/data/token_shard_index.h"

namespace tessera {
namespace {

namespace fs = std::filesystem;

void Check(const Status& s) { TESSERA_CHECK_MSG(s.ok(), "%s", s.message().c_str()); }
std::string Frame(const Result<std::string>& r) {
  Check(r.status());
  return *r;
}

void Put(const fs::path& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  TESSERA_CHECK_MSG(out.good(), "cannot write %s", path.c_str());
}

void ControlFrames(const fs::path& dir) {
  HelloMsg hello{"run-20261201-abc", 2, 1, 4, 4242, "node-a", "s3cr3t-0123456789abcdef"};
  HeartbeatMsg beat{17, RankPhase::kCollective, 341, 1764633600123, 52};
  HeartbeatMsg first_beat{0, RankPhase::kForward, 0, 1764633600000, -1};
  CatalogRecordMsg put;
  put.op = CatalogOp::kPut;
  put.entry = {100, CheckpointStatus::kCommitted, "step_00000100", 5253120, "dp=2 zero=1 precision=bf16",
               0.071, 1.25, 1764633601.5, ""};
  CatalogRecordMsg status;
  status.op = CatalogOp::kStatus;
  status.step = 100;
  status.status = CheckpointStatus::kCorrupt;
  status.note = "shard_0.bin segment 3: crc32c mismatch";
  CatalogRecordMsg event;
  event.op = CatalogOp::kEvent;
  event.kind = "resume";
  event.message = "resumed from step_00000100 (\u00e9t\u00e9)";
  const std::map<std::string, std::string> frames = {
      {"hello", Frame(EncodeHello(hello))},
      {"heartbeat", Frame(EncodeHeartbeat(beat))},
      {"heartbeat_first", Frame(EncodeHeartbeat(first_beat))},
      {"commit", Frame(EncodeCommit({100}))},
      {"bye", Frame(EncodeBye({7}))},
      {"catalog_put", Frame(EncodeCatalogRecord(put))},
      {"catalog_status", Frame(EncodeCatalogRecord(status))},
      {"catalog_event", Frame(EncodeCatalogRecord(event))},
      {"cmd_stop", EncodeCommand(SupervisorCommand::kStop)},
      {"cmd_checkpoint_now", EncodeCommand(SupervisorCommand::kCheckpointNow)},
  };
  for (const auto& [name, bytes] : frames) Put(dir / (name + ".bin"), bytes);
  Put(dir / "connection.bin", frames.at("hello") + frames.at("heartbeat_first") +
                                  frames.at("heartbeat") + frames.at("catalog_put") +
                                  frames.at("commit") + frames.at("bye"));
}

void TokenShards(const fs::path& shard_dir, const fs::path& index_dir, const fs::path& scratch) {
  std::vector<int32_t> bytes(24), wide = {0, 1, 65535, 65536, 100257};
  for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<int32_t>((i * 37) % 256);
  Check(WriteTokenShard((scratch / "train_000000.bin").string(), bytes, 2, 256));
  Check(WriteTokenShard((scratch / "train_000001.bin").string(), wide, 4, 0));
  Check(WriteTokenShard((scratch / "val_000000.bin").string(), {}, 2, 256));
  Result<TokenShardIndex> index = WriteTokenShardIndex(
      scratch.string(), {"train_000000.bin", "train_000001.bin", "val_000000.bin"});
  Check(index.status());
  fs::copy_file(scratch / "train_000000.bin", shard_dir / "u16_vocab256.bin",
                fs::copy_options::overwrite_existing);
  fs::copy_file(scratch / "train_000001.bin", shard_dir / "u32_no_vocab.bin",
                fs::copy_options::overwrite_existing);
  fs::copy_file(scratch / "val_000000.bin", shard_dir / "empty.bin",
                fs::copy_options::overwrite_existing);
  fs::copy_file(scratch / kTokenShardIndexName, index_dir / "index.json",
                fs::copy_options::overwrite_existing);
}

void Safetensors(const fs::path& dir) {
  const float f32[6] = {0.5f, -1.0f, 2.0f, 0.0f, 3.25f, -0.125f};
  const float f16_src[4] = {1.0f, -2.0f, 65504.0f, 6.1e-5f};
  const float bf16_src[4] = {1.0f, -3.0e38f, 1.0e-38f, 0.1f};
  const int32_t i32[3] = {0, -7, 2147483647};
  const std::vector<SafetensorsTensorOut> tensors = {
      {"model.embed_tokens.weight", Shape({2, 3}), f32, DType::kF32, DType::kF32},
      {"model.norm.weight", Shape({4}), f16_src, DType::kF32, DType::kF16},
      {"lm_head.weight", Shape({2, 2}), bf16_src, DType::kF32, DType::kBF16},
      {"positions", Shape({3}), i32, DType::kI32, DType::kI32},
      {"empty", Shape({0, 5}), nullptr, DType::kF32, DType::kF32},
      {"scalar", Shape(), f32, DType::kF32, DType::kF32},
  };
  Check(WriteSafetensors((dir / "every_dtype.safetensors").string(), tensors, {{"format", "pt"}}));
  Check(WriteSafetensors((dir / "no_metadata.safetensors").string(), {tensors[0]}, {}));
}

}  // namespace
}  // namespace tessera

int main(int argc, char** argv) {
  namespace fs = std::filesystem;
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s CORPUS_DIR (tests/fuzz/corpus)\n", argv[0]);
    return 2;
  }
  const fs::path corpus = argv[1];
  const fs::path scratch =
      fs::temp_directory_path() / ("tessera_fuzz_seeds." + std::to_string(::getpid()));
  fs::remove_all(scratch);
  for (const char* d : {"control_frame", "token_shard", "token_shard_index", "safetensors"}) {
    fs::create_directories(corpus / d);
  }
  fs::create_directories(scratch);
  tessera::ControlFrames(corpus / "control_frame");
  tessera::TokenShards(corpus / "token_shard", corpus / "token_shard_index", scratch);
  tessera::Safetensors(corpus / "safetensors");
  fs::remove_all(scratch);
  std::printf("wrote the binary seeds under %s\n", corpus.c_str());
  return 0;
}
