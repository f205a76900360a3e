// tests/fuzz/tokenizer_json_fuzz.cc — the byte-level BPE reader (MakeBpeTokenizer,
// runtime/train/data/bpe_tokenizer.h: what `tessera data tokenize --tokenizer DIR` runs on a
// model's tokenizer.json) and its encoder, on arbitrary bytes: the input up to its first NUL
// byte is the tokenizer.json, the rest the text to encode (and the eos token's name, when the
// JSON names one under "eos").
//
// Properties: no crash, hang or unbounded allocation (ids up to 2^30 must not allocate a table
// of that size); a refusal to load is kDataLoss (damaged) or kInvalidArgument (not
// implemented) with a message; a loaded tokenizer encodes the text or refuses it (kDataLoss: a
// merge produces a symbol the vocabulary lacks), and what it encodes is ids below vocab_size()
// that decode back to the text byte for byte (with an NFC normalizer: to a text that encodes
// to the same ids), the same ids again on a second encode (the word cache's path).
#include <string>
#include <vector>

#include "runtime/core/json.h"
#include "runtime/train/data/bpe_tokenizer.h"
#include "tests/fuzz/fuzz_check.h"

namespace {

void CheckCode(const tessera::Status& s, const char* what) {
  using tessera::StatusCode;
  FUZZ_CHECK(s.code() == StatusCode::kDataLoss || s.code() == StatusCode::kInvalidArgument,
             "%s refused with %s: %s", what, tessera::StatusCodeName(s.code()),
             s.message().c_str());
  FUZZ_CHECK(!s.message().empty(), "%s refused without a message", what);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tessera;
  const std::string_view all = fuzz::AsText(data, size);
  const size_t nul = all.find('\0');
  const std::string_view json_text = all.substr(0, nul);
  const std::string_view text = nul == std::string_view::npos ? std::string_view() : all.substr(nul + 1);
  Result<JsonValue> json = ParseJson(json_text);
  if (!json.ok()) return 0;  // the JSON reader has its own targets (manifest, control frames)
  std::string eos;
  if (const JsonValue* e = json->is_object() ? json->Find("eos") : nullptr; e && e->is_string()) {
    eos = e->as_string();
  }
  Result<std::unique_ptr<Tokenizer>> tok = MakeBpeTokenizer(*json, eos, "tokenizer.json");
  if (!tok.ok()) {
    CheckCode(tok.status(), "MakeBpeTokenizer");
    return 0;
  }
  Result<std::vector<int32_t>> ids = (*tok)->Encode(text);
  if (!ids.ok()) {
    CheckCode(ids.status(), "Encode");
    return 0;
  }
  for (int32_t id : *ids) {
    FUZZ_CHECK(id >= 0 && id < (*tok)->vocab_size(), "id %d outside a vocabulary of %lld", id,
               static_cast<long long>((*tok)->vocab_size()));
  }
  // Without a normalizer decoding gives the text back; with NFC its normal form, which
  // encodes to the same ids.
  const std::string back = (*tok)->Decode(*ids);
  const JsonValue* norm = json->Find("normalizer");
  if (norm == nullptr || norm->is_null()) {
    FUZZ_CHECK(back == text, "decode(encode(text)) differs: %zu bytes in, %zu out", text.size(),
               back.size());
  } else {
    Result<std::vector<int32_t>> round = (*tok)->Encode(back);
    FUZZ_CHECK(round.ok() && *round == *ids, "encode(decode(ids)) differs from ids");
  }
  Result<std::vector<int32_t>> again = (*tok)->Encode(text);
  FUZZ_CHECK(again.ok() && *again == *ids, "a second encode of the same text differs");
  if (const std::optional<int32_t> e = (*tok)->eos()) {
    FUZZ_CHECK(*e >= 0 && *e < (*tok)->vocab_size(), "eos id %d outside the vocabulary", *e);
  }
  return 0;
}
