// runtime/train/data/sentencepiece_tokenizer.cc — tokenizer.model through libsentencepiece
// (sentencepiece_tokenizer.h).
#include "runtime/train/data/sentencepiece_tokenizer.h"

#include <sentencepiece_processor.h>

#include "runtime/core/file_util.h"

namespace tessera {
namespace {

class SentencePieceTokenizer final : public Tokenizer {
 public:
  explicit SentencePieceTokenizer(std::string path) : path_(std::move(path)) {}

  Status Load() {
    // The library reads any file it is given; a size cap and a regular-file check first.
    RETURN_IF_ERROR(ReadInputFile(path_, uint64_t{1} << 30, "SentencePiece model").status());
    const auto status = sp_.Load(path_);
    if (!status.ok()) return DataLoss(path_ + ": not a SentencePiece model: " + status.ToString());
    return Status::Ok();
  }

  Result<std::vector<int32_t>> Encode(std::string_view text) const override {
    std::vector<int> ids;
    const auto status = sp_.Encode(text, &ids);
    if (!status.ok()) return InvalidArgument(path_ + ": cannot encode: " + status.ToString());
    return std::vector<int32_t>(ids.begin(), ids.end());
  }

  std::string Decode(std::span<const int32_t> ids) const override {
    std::string out;
    (void)sp_.Decode(std::vector<int>(ids.begin(), ids.end()), &out);
    return out;
  }

  int64_t vocab_size() const override { return sp_.GetPieceSize(); }
  std::optional<int32_t> eos() const override {
    return sp_.eos_id() >= 0 ? std::optional<int32_t>(sp_.eos_id()) : std::nullopt;
  }
  std::string Describe() const override {
    return "SentencePiece (" + path_ + ", " + std::to_string(vocab_size()) + " pieces)";
  }

 private:
  std::string path_;
  sentencepiece::SentencePieceProcessor sp_;
};

}  // namespace

Result<std::unique_ptr<Tokenizer>> LoadSentencePiece(const std::string& path) {
  auto t = std::make_unique<SentencePieceTokenizer>(path);
  RETURN_IF_ERROR(t->Load());
  return std::unique_ptr<Tokenizer>(std::move(t));
}

}  // namespace tessera
