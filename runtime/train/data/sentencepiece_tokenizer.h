// runtime/train/data/sentencepiece_tokenizer.h — a model's SentencePiece tokenizer.model
// (Llama 2, Mistral, Gemma ...) through Debian's libsentencepiece: its own normaliser, pieces
// and byte fallback, exactly as the library encodes. The end-of-text id is the model's eos
// piece, when it has one.
#pragma once

#include "runtime/train/data/tokenizer.h"

namespace tessera {

// kDataLoss naming `path` when the library cannot load it (missing, damaged, not a model).
Result<std::unique_ptr<Tokenizer>> LoadSentencePiece(const std::string& path);

}  // namespace tessera
