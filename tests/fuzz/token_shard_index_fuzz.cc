// tests/fuzz/token_shard_index_fuzz.cc — the token shard directory's index.json parser
// (ParseTokenShardIndex, runtime/train/data/token_shard_index.h) on arbitrary text.
//
// Properties: no crash, hang or unbounded allocation; a refusal is kDataLoss with a message;
// an accepted index lists plain, unique names sorted by name with fields in range, and
// TokenShardIndexToJson of it parses back to an equal index.
#include "runtime/train/data/token_shard.h"
#include "runtime/train/data/token_shard_index.h"
#include "tests/fuzz/fuzz_check.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tessera;
  Result<TokenShardIndex> index = ParseTokenShardIndex(fuzz::AsText(data, size), "fuzz/index.json");
  if (!index.ok()) {
    fuzz::CheckRefusal(index.status(), StatusCode::kDataLoss, "ParseTokenShardIndex");
    return 0;
  }
  for (size_t i = 0; i < index->files.size(); ++i) {
    const TokenShardIndexEntry& e = index->files[i];
    FUZZ_CHECK(!e.name.empty() && e.name != "." && e.name != ".." &&
                   e.name.find('/') == std::string::npos,
               "name \"%s\" leaves the directory", e.name.c_str());
    FUZZ_CHECK(i == 0 || index->files[i - 1].name < e.name, "names not sorted and unique at %zu", i);
    FUZZ_CHECK(e.token_bytes == 2 || e.token_bytes == 4, "token_bytes %d", e.token_bytes);
    FUZZ_CHECK(e.num_tokens >= 0 && e.bytes >= kTokenShardHeaderBytes, "counts out of range");
    FUZZ_CHECK(e.split == "train" || e.split == "val" || e.split.empty(), "split \"%s\"",
               e.split.c_str());
  }
  const std::string json = TokenShardIndexToJson(*index);
  Result<TokenShardIndex> again = ParseTokenShardIndex(json, "fuzz/index.json (rewritten)");
  FUZZ_CHECK(again.ok(), "the rewritten index does not parse: %s\n%s",
             again.status().message().c_str(), json.c_str());
  FUZZ_CHECK(again->files == index->files, "the rewritten index differs:\n%s", json.c_str());
  return 0;
}
