// tools/cmd_data.cc — `tessera data tokenize` (text files -> token shards and their index) and
// `tessera data index` (the completion index for shards written by other tools).
#include <cstdio>
#include <algorithm>
#include <cstdlib>
#include <memory>
#include <thread>

#include "runtime/core/exit_codes.h"
#include "runtime/train/data/byte_tokenizer.h"
#include "runtime/train/data/tokenizer.h"
#include "runtime/train/data/token_shard_index.h"
#include "tools/args.h"
#include "tools/commands.h"

namespace tessera::cli {
namespace {

void PrintDataHelp() {
  std::printf(
      "usage: tessera data tokenize --input FILE [--input FILE ...] --out DIR\n"
      "                             [--val-fraction F] [--shard-tokens N]\n"
      "                             [--tokenizer MODEL_DIR [--threads N]]\n"
      "       tessera data index DIR\n\n"
      "tokenize: turns text into token shards. Without --tokenizer: one token per byte\n"
      "(vocabulary 256: train it with model.vocab_size >= 256), the inputs one stream in the order\n"
      "given. With --tokenizer, a model's own: its tokenizer.json (byte-level BPE: GPT-2, Llama 3,\n"
      "Qwen2 style; special tokens written in the text are recognised) or its tokenizer.model\n"
      "(SentencePiece: Llama 2, Mistral); each input is one document followed by the\n"
      "tokenizer's end-of-text token (tokenizer_config.json's eos_token), encoded on --threads\n"
      "threads (default: the cores), the shards the same for any thread count. The last F of the\n"
      "tokens becomes the held-out split.\n\n"
      "  --input FILE        a text file (repeatable; also accepts several files after one flag)\n"
      "  --out DIR           writes DIR/train_000000.bin ... and DIR/val_000000.bin, each through\n"
      "                      a temporary file, fsync and rename, and last DIR/index.json\n"
      "  --val-fraction F    fraction held out for evaluation, 0 <= F < 1 (default 0.05)\n"
      "  --shard-tokens N    tokens per shard file at most (default 100000000)\n"
      "  --tokenizer DIR     a model directory holding tokenizer.json or tokenizer.model\n"
      "  --threads N         encoding threads with --tokenizer (default: the cores)\n\n"
      "Example: tessera data tokenize --tokenizer ~/models/Qwen2-0.5B --input books/*.txt --out data/q\n"
      "Then train on it (configs/tiny.yaml has vocab_size 256 already):\n"
      "  tessera train configs/tiny.yaml --set data.source=shards \\\n"
      "      --set 'data.train=DIR/train_*.bin' --set 'data.val=DIR/val_*.bin'\n"
      "(data.train and data.val take a file, a pattern, or a directory: every *.bin in it,\n"
      "sorted — which in DIR would mix the val shards into training.)\n\n"
      "index: writes DIR/index.json for every *.bin token shard in DIR (the format of\n"
      "runtime/train/data/README.md), after reading each whole: its header, size and CRC-32C.\n"
      "Training refuses shards whose directory has no index.json, or whose index disagrees with\n"
      "them (a file missing, added, resized or with other bytes): the index is the mark that a\n"
      "tokenize run finished. Run `data index` for shards written by your own tools, or after\n"
      "changing a shard set on purpose. It accepts the bytes as they are now, so do not use it\n"
      "to silence a checksum mismatch you cannot explain: re-create those shards instead.\n");
}

int RunTokenize(const Args& rest) {
  auto parsed = ParseArgs(rest, "data tokenize",
                          {"--input", "--out", "--val-fraction", "--shard-tokens", "--tokenizer", "--threads"}, {});
  if (!parsed.ok()) {
    std::fprintf(stderr, "%s\n", parsed.status().ToString().c_str());
    return kExitUsage;
  }
  std::vector<std::string> inputs = parsed->All("--input");
  // "--input a.txt b.txt": the shell expands globs into positionals after the flag.
  inputs.insert(inputs.end(), parsed->positional.begin(), parsed->positional.end());
  if (inputs.empty() || !parsed->Has("--out")) {
    std::fprintf(stderr, "tessera data tokenize: --input and --out are required (see --help)\n");
    return kExitUsage;
  }
  char* end = nullptr;
  const std::string vf = parsed->Get("--val-fraction", "0.05");
  double val_fraction = std::strtod(vf.c_str(), &end);
  if (vf.empty() || *end != '\0' || !(val_fraction >= 0.0 && val_fraction < 1.0)) {
    std::fprintf(stderr, "tessera data tokenize: --val-fraction must be a number in [0, 1), got \"%s\"\n", vf.c_str());
    return kExitUsage;
  }
  auto shard_tokens = ParseIntFlag("--shard-tokens", parsed->Get("--shard-tokens", "100000000"));
  if (!shard_tokens.ok() || *shard_tokens == 0) {
    std::fprintf(stderr, "tessera data tokenize: --shard-tokens must be a positive integer\n");
    return kExitUsage;
  }
  int threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  if (parsed->Has("--threads")) {
    auto t = ParseIntFlag("--threads", parsed->Get("--threads"));
    if (!t.ok() || *t < 1 || *t > 1024) {
      std::fprintf(stderr, "tessera data tokenize: --threads must be an integer in [1, 1024]\n");
      return kExitUsage;
    }
    threads = static_cast<int>(*t);
  }
  std::unique_ptr<Tokenizer> tokenizer;
  if (parsed->Has("--tokenizer")) {
    auto loaded = LoadTokenizer(parsed->Get("--tokenizer"));
    if (!loaded.ok()) {
      std::fprintf(stderr, "tessera data tokenize: %s\n", loaded.status().ToString().c_str());
      return ExitCodeFor(loaded.status(), ExitPhase::kInput);
    }
    tokenizer = std::move(*loaded);
    std::printf("tokenizer: %s\n", tokenizer->Describe().c_str());
  }
  TokenizeStats stats;
  Status s = TokenizeFiles(inputs, parsed->Get("--out"), val_fraction, *shard_tokens, &stats,
                           tokenizer.get(), threads);
  if (!s.ok()) {
    std::fprintf(stderr, "tessera data tokenize: %s\n", s.ToString().c_str());
    return ExitCodeFor(s, ExitPhase::kInput);  // an input that is a directory is bad input too
  }
  std::printf("tokenized %lld bytes from %zu file(s): %lld train tokens in %zu shard(s), %lld val tokens\n",
              static_cast<long long>(stats.input_bytes), inputs.size(),
              static_cast<long long>(stats.train_tokens), stats.train_files.size(),
              static_cast<long long>(stats.val_tokens));
  for (const auto& f : stats.train_files) std::printf("  %s\n", f.c_str());
  for (const auto& f : stats.val_files) std::printf("  %s\n", f.c_str());
  std::printf("  %s/%s (completion index)\n", parsed->Get("--out").c_str(), kTokenShardIndexName);
  return kExitOk;
}

int RunIndex(const Args& rest) {
  auto parsed = ParseArgs(rest, "data index", {}, {});
  if (!parsed.ok()) {
    std::fprintf(stderr, "%s\n", parsed.status().ToString().c_str());
    return kExitUsage;
  }
  if (parsed->positional.size() != 1) {
    std::fprintf(stderr, "tessera data index: expected exactly one DIR (see tessera data --help)\n");
    return kExitUsage;
  }
  const std::string& dir = parsed->positional[0];
  Result<TokenShardIndex> index = IndexTokenShardDirectory(dir);
  if (!index.ok()) {
    std::fprintf(stderr, "tessera data index: %s\n", index.status().ToString().c_str());
    return ExitCodeFor(index.status(), ExitPhase::kInput);
  }
  int64_t tokens = 0;
  for (const TokenShardIndexEntry& e : index->files) {
    std::printf("  %s  %lld tokens  crc32c %08x\n", e.name.c_str(),
                static_cast<long long>(e.num_tokens), e.crc32c);
    tokens += e.num_tokens;
  }
  std::printf("indexed %zu shard(s), %lld tokens: %s/%s\n", index->files.size(),
              static_cast<long long>(tokens), dir.c_str(), kTokenShardIndexName);
  return kExitOk;
}

}  // namespace

int RunData(const Args& args) {
  const bool known = !args.empty() && (args[0] == "tokenize" || args[0] == "index");
  if (args.empty() || (!known && WantsHelp(args))) {
    PrintDataHelp();
    return args.empty() ? kExitUsage : kExitOk;
  }
  if (!known) {
    std::fprintf(stderr, "tessera data: unknown subcommand '%s' (see tessera data --help)\n", args[0].c_str());
    return kExitUsage;
  }
  Args rest(args.begin() + 1, args.end());
  if (WantsHelp(rest)) {
    PrintDataHelp();
    return kExitOk;
  }
  return args[0] == "tokenize" ? RunTokenize(rest) : RunIndex(rest);
}

}  // namespace tessera::cli
