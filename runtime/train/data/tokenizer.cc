// runtime/train/data/tokenizer.cc — the byte tokenizer and LoadTokenizer (tokenizer.h).
#include "runtime/train/data/tokenizer.h"

#include <filesystem>

#include "runtime/core/file_util.h"
#include "runtime/core/json.h"
#include "runtime/train/data/bpe_tokenizer.h"
#include "runtime/train/data/byte_tokenizer.h"
#include "runtime/train/data/sentencepiece_tokenizer.h"

namespace tessera {
namespace {

class ByteTokenizer final : public Tokenizer {
 public:
  Result<std::vector<int32_t>> Encode(std::string_view text) const override {
    std::vector<int32_t> ids(text.size());
    for (size_t i = 0; i < text.size(); ++i) ids[i] = static_cast<unsigned char>(text[i]);
    return ids;
  }
  std::string Decode(std::span<const int32_t> ids) const override {
    return DecodeBytes(ids.data(), static_cast<int64_t>(ids.size()));
  }
  int64_t vocab_size() const override { return kByteVocabSize; }
  std::optional<int32_t> eos() const override { return std::nullopt; }
  std::string Describe() const override { return "bytes (one token per byte, 256 ids)"; }
};

// tokenizer_config.json's eos_token: a string, or {"content": ...}; "" when absent.
std::string EosToken(const std::filesystem::path& dir) {
  auto text = ReadInputFile((dir / "tokenizer_config.json").string(), uint64_t{64} << 20,
                            "tokenizer config");
  if (!text.ok()) return "";
  auto json = ParseJson(*text);
  if (!json.ok() || !json->is_object()) return "";
  const JsonValue* eos = json->Find("eos_token");
  if (eos != nullptr && eos->is_object()) eos = eos->Find("content");
  return eos != nullptr && eos->is_string() ? eos->as_string() : "";
}

}  // namespace

std::unique_ptr<Tokenizer> MakeByteTokenizer() { return std::make_unique<ByteTokenizer>(); }

Result<std::unique_ptr<Tokenizer>> LoadTokenizer(const std::string& dir) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::path d(dir);
  const fs::path json_path = d / "tokenizer.json", model_path = d / "tokenizer.model";
  if (fs::exists(json_path, ec)) {
    ASSIGN_OR_RETURN(std::string text, ReadInputFile(json_path.string(), uint64_t{256} << 20,
                                                     "tokenizer.json"));
    auto json = ParseJson(text, size_t{1} << 24);
    if (!json.ok()) return DataLoss(json_path.string() + ": not JSON: " + json.status().message());
    return MakeBpeTokenizer(*json, EosToken(d), json_path.string());
  }
  if (fs::exists(model_path, ec)) return LoadSentencePiece(model_path.string());
  return NotFound(dir + ": holds neither tokenizer.json (byte-level BPE) nor tokenizer.model "
                  "(SentencePiece)");
}

}  // namespace tessera
