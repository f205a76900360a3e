// tests/fuzz/token_shard_fuzz.cc — the token shard header check (ParseTokenShardHeader,
// runtime/train/data/token_shard.h) on arbitrary bytes taken as a whole shard file.
//
// Properties: no crash or out-of-bounds read (the input is handed over at the length a
// reader would pass, min(32, file size), so ASan sees any read past it); a refusal is
// kDataLoss with a message; an accepted header has token_bytes 2 or 4, num_tokens >= 0 and a
// file of exactly 32 + num_tokens * token_bytes bytes.
#include <algorithm>

#include "runtime/train/data/token_shard.h"
#include "tests/fuzz/fuzz_check.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tessera;
  const size_t head = std::min<size_t>(size, kTokenShardHeaderBytes);
  const int64_t file_bytes = static_cast<int64_t>(size);
  Result<TokenShardInfo> info = ParseTokenShardHeader({data, head}, file_bytes, "fuzz.bin");
  if (!info.ok()) {
    fuzz::CheckRefusal(info.status(), StatusCode::kDataLoss, "ParseTokenShardHeader");
    return 0;
  }
  FUZZ_CHECK(info->token_bytes == 2 || info->token_bytes == 4, "token_bytes %d",
             info->token_bytes);
  FUZZ_CHECK(info->num_tokens >= 0, "num_tokens %lld", static_cast<long long>(info->num_tokens));
  FUZZ_CHECK(kTokenShardHeaderBytes + info->num_tokens * info->token_bytes == file_bytes,
             "accepted %lld tokens of %d bytes in a %lld-byte file",
             static_cast<long long>(info->num_tokens), info->token_bytes,
             static_cast<long long>(file_bytes));
  return 0;
}
