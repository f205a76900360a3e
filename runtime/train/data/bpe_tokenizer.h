// runtime/train/data/bpe_tokenizer.h — byte-level BPE from a Hugging Face tokenizer.json, as
// GPT-2, Llama 3 and Qwen2 ship it: the added (special) tokens cut out of the text first, the
// rest pre-tokenized by the model's regex (pretokenize.h), each piece's UTF-8 bytes mapped to
// GPT-2's printable byte alphabet, then merged pair by pair, lowest merge rank first (with
// `ignore_merges`, a piece that is itself in the vocabulary is taken whole, as Llama 3 asks).
//
// Read from tokenizer.json: model {type BPE, vocab, merges (as "a b" or ["a", "b"]),
// ignore_merges}, added_tokens, pre_tokenizer (ByteLevel with use_regex — the GPT-2 pattern —,
// or a Sequence of a Split by one of the known patterns and a ByteLevel without regex),
// normalizer (none or NFC). The end-of-text id comes from tokenizer_config.json's eos_token
// beside it, else "<|endoftext|>".
// NFC: the text between added tokens is normalised (nfc.h) before it is pre-tokenized, as
// the tokenizers library does; Decode gives back the normalised text. Anything else a tokenizer.json asks for (byte_fallback, Metaspace, another
// pattern, lstrip/rstrip added tokens, dropout) is refused when it loads, naming it.
#pragma once

#include "runtime/core/json.h"
#include "runtime/train/data/tokenizer.h"

namespace tessera {

// `json`: tokenizer.json parsed; `eos_token`: tokenizer_config.json's (empty: none given);
// `where` names the file in messages.
Result<std::unique_ptr<Tokenizer>> MakeBpeTokenizer(const JsonValue& json, const std::string& eos_token,
                                                    const std::string& where);

}  // namespace tessera
