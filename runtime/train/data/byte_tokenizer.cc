// runtime/train/data/byte_tokenizer.cc — streams input files through a fixed buffer into
// train/val token shards (see byte_tokenizer.h), then writes the completion index last.
// Memory use is O(buffer), not O(input). All or nothing: a call that fails removes every shard
// it wrote (and the index, if its write failed after the rename).
#include "runtime/train/data/byte_tokenizer.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <thread>

#include "runtime/core/check.h"
#include "runtime/core/file_util.h"
#include "runtime/train/data/token_shard.h"
#include "runtime/train/data/token_shard_index.h"

namespace tessera {
namespace {

namespace fs = std::filesystem;

// Cuts a token stream into shards named <dir>/<prefix>_NNNNNN.bin of at most shard_tokens.
class ShardSequence {
 public:
  ShardSequence(std::string dir, std::string prefix, int64_t shard_tokens,
                std::vector<std::string>* written, int64_t vocab = kByteVocabSize)
      : dir_(std::move(dir)), prefix_(std::move(prefix)), shard_tokens_(shard_tokens),
        vocab_(vocab), written_(written) {}

  Status Append(const int32_t* tokens, int64_t count) {
    while (count > 0) {
      if (writer_ == nullptr) {
        char name[64];
        std::snprintf(name, sizeof(name), "%s_%06zu.bin", prefix_.c_str(), written_->size());
        current_ = (fs::path(dir_) / name).string();
        // 2-byte tokens while the vocabulary fits, 4-byte beyond (Llama 3, Qwen2).
        ASSIGN_OR_RETURN(writer_, TokenShardWriter::Create(current_, vocab_ <= 65536 ? 2 : 4,
                                                           static_cast<uint32_t>(vocab_)));
      }
      const int64_t n = std::min(count, shard_tokens_ - writer_->num_tokens());
      RETURN_IF_ERROR(writer_->Append({tokens, static_cast<size_t>(n)}));
      tokens += n;
      count -= n;
      if (writer_->num_tokens() == shard_tokens_) RETURN_IF_ERROR(Close());
    }
    return Status::Ok();
  }

  // Listed before Finish: a commit whose final directory fsync fails has already renamed the
  // shard into place, and the caller's cleanup must still find it.
  Status Close() {
    if (writer_ == nullptr) return Status::Ok();
    written_->push_back(current_);
    Status st = writer_->Finish();
    writer_.reset();
    return st;
  }

 private:
  std::string dir_, prefix_;
  int64_t shard_tokens_;
  int64_t vocab_;
  std::vector<std::string>* written_;
  std::unique_ptr<TokenShardWriter> writer_;
  std::string current_;
};

// Streams the concatenated inputs into train then val shards (the split at train_tokens),
// listing every shard it commits (or tries to) in s.train_files / s.val_files. On an early
// return the unfinished shard's writer is destroyed, which removes its .tmp.
Status WriteShards(const std::vector<std::string>& inputs, const std::string& out_dir,
                   int64_t total_bytes, int64_t train_tokens, int64_t shard_tokens,
                   TokenizeStats& s) {
  ShardSequence train(out_dir, "train", shard_tokens, &s.train_files);
  ShardSequence val(out_dir, "val", shard_tokens, &s.val_files);
  std::vector<unsigned char> bytes(size_t{1} << 20);
  std::vector<int32_t> tokens(bytes.size());
  int64_t position = 0;  // in the concatenated stream
  for (const std::string& input : inputs) {
    // Non-blocking and regular files only (file_util.h): a FIFO swapped in after the size
    // check cannot hang the tokenizer.
    ASSIGN_OR_RETURN(const int fd, OpenRegularFileForRead(input));
    std::unique_ptr<FILE, int (*)(FILE*)> f(::fdopen(fd, "rb"), &std::fclose);
    if (f == nullptr) {
      ::close(fd);
      return IoError(input + ": cannot open for reading: " + std::strerror(errno));
    }
    while (true) {
      const size_t n = std::fread(bytes.data(), 1, bytes.size(), f.get());
      if (n == 0) {
        if (std::ferror(f.get())) return IoError(input + ": read failed: " + std::strerror(errno));
        break;
      }
      for (size_t i = 0; i < n; ++i) tokens[i] = bytes[i];
      // Tokens before train_tokens go to train, the rest to val.
      const int64_t to_train =
          std::clamp<int64_t>(train_tokens - position, 0, static_cast<int64_t>(n));
      RETURN_IF_ERROR(train.Append(tokens.data(), to_train));
      RETURN_IF_ERROR(val.Append(tokens.data() + to_train, static_cast<int64_t>(n) - to_train));
      position += static_cast<int64_t>(n);
    }
  }
  if (position != total_bytes) {
    return IoError("inputs changed while being tokenized (expected " +
                   std::to_string(total_bytes) + " bytes, read " + std::to_string(position) + ")");
  }
  RETURN_IF_ERROR(train.Close());
  return val.Close();
}

// A tokenizer's path: every input a document, read whole and encoded on `threads` threads
// (input i by thread i mod threads), its tokens then the tokenizer's eos; then the stream is
// split and written in input order, so the shards do not depend on the thread count.
Status EncodeDocuments(const std::vector<std::string>& inputs, const Tokenizer& tokenizer,
                       int threads, std::vector<std::vector<int32_t>>* docs, int64_t* bytes) {
  docs->assign(inputs.size(), {});
  std::vector<Status> status(inputs.size(), Status::Ok());
  std::vector<int64_t> sizes(inputs.size(), 0);
  auto work = [&](size_t first) {
    for (size_t i = first; i < inputs.size(); i += static_cast<size_t>(threads)) {
      auto text = ReadInputFile(inputs[i], uint64_t{4} << 30, "text to tokenize");
      if (!text.ok()) {
        status[i] = text.status();
        continue;
      }
      sizes[i] = static_cast<int64_t>(text->size());
      auto ids = tokenizer.Encode(*text);
      if (!ids.ok()) {
        status[i] = Status(ids.status().code(), inputs[i] + ": " + ids.status().message());
        continue;
      }
      (*docs)[i] = std::move(*ids);
      if (tokenizer.eos()) (*docs)[i].push_back(*tokenizer.eos());
    }
  };
  std::vector<std::thread> pool;
  for (int t = 1; t < threads; ++t) pool.emplace_back(work, static_cast<size_t>(t));
  work(0);
  for (std::thread& t : pool) t.join();
  *bytes = 0;
  for (size_t i = 0; i < inputs.size(); ++i) {
    RETURN_IF_ERROR(status[i]);
    *bytes += sizes[i];
  }
  return Status::Ok();
}

Status WriteDocuments(const std::vector<std::vector<int32_t>>& docs, const std::string& out_dir,
                      int64_t train_tokens, int64_t shard_tokens, int64_t vocab,
                      TokenizeStats& s) {
  ShardSequence train(out_dir, "train", shard_tokens, &s.train_files, vocab);
  ShardSequence val(out_dir, "val", shard_tokens, &s.val_files, vocab);
  int64_t position = 0;
  for (const std::vector<int32_t>& doc : docs) {
    const int64_t n = static_cast<int64_t>(doc.size());
    const int64_t to_train = std::clamp<int64_t>(train_tokens - position, 0, n);
    RETURN_IF_ERROR(train.Append(doc.data(), to_train));
    RETURN_IF_ERROR(val.Append(doc.data() + to_train, n - to_train));
    position += n;
  }
  RETURN_IF_ERROR(train.Close());
  return val.Close();
}

// All or nothing: removes the shards a failed call committed, so out_dir holds no partial run
// and a retry is not refused. Returns `cause`, noting any shard that could not be removed.
Status RemoveShards(const std::string& out_dir, const TokenizeStats& s, Status cause) {
  FileSystem& file_system = DefaultFileSystem();
  std::string leftovers;
  // The completion mark first, so no moment leaves an index over a partial set.
  std::vector<std::string> files = {(fs::path(out_dir) / kTokenShardIndexName).string()};
  files.insert(files.end(), s.train_files.begin(), s.train_files.end());
  files.insert(files.end(), s.val_files.begin(), s.val_files.end());
  for (const std::string& file : files) {
    Status removed = file_system.Remove(file);
    if (!removed.ok()) leftovers += "; " + removed.message();
  }
  Status synced = file_system.SyncDir(out_dir);
  if (!synced.ok()) leftovers += "; " + synced.message();
  if (leftovers.empty()) return cause;
  return Status(cause.code(), cause.message() + " (cleanup of partial shards failed" + leftovers +
                                  ")");
}

// The completion mark, written last: index.json listing every shard this call committed (each
// read back whole for its CRC-32C, so the index vouches for the bytes on disk).
Status WriteIndex(const std::string& out_dir, const TokenizeStats& s) {
  std::vector<std::string> names;
  for (const std::vector<std::string>* files : {&s.train_files, &s.val_files}) {
    for (const std::string& file : *files) names.push_back(fs::path(file).filename().string());
  }
  return WriteTokenShardIndex(out_dir, names).status();
}

}  // namespace

Status TokenizeFiles(const std::vector<std::string>& inputs, const std::string& out_dir,
                     double val_fraction, int64_t shard_tokens, TokenizeStats* stats,
                     const Tokenizer* tokenizer, int threads) {
  if (!(val_fraction >= 0.0 && val_fraction < 1.0)) {
    return InvalidArgument("val_fraction must be in [0, 1), got " + std::to_string(val_fraction));
  }
  if (shard_tokens < 1) {
    return InvalidArgument("shard_tokens must be >= 1, got " + std::to_string(shard_tokens));
  }
  if (inputs.empty()) return InvalidArgument("no input files to tokenize");
  std::error_code ec;
  int64_t total_bytes = 0;
  for (const std::string& input : inputs) {
    fs::file_status st = fs::status(input, ec);
    if (!fs::exists(st)) return NotFound(input + ": no such file");
    if (!fs::is_regular_file(st)) return InvalidArgument(input + ": not a regular file");
    const uintmax_t size = fs::file_size(input, ec);
    if (ec) return IoError(input + ": cannot read its size: " + ec.message());
    total_bytes += static_cast<int64_t>(size);
  }
  std::vector<std::vector<int32_t>> docs;
  int64_t total_tokens = total_bytes;
  if (tokenizer != nullptr) {
    RETURN_IF_ERROR(EncodeDocuments(inputs, *tokenizer, std::max(1, threads), &docs, &total_bytes));
    total_tokens = 0;
    for (const std::vector<int32_t>& d : docs) total_tokens += static_cast<int64_t>(d.size());
  }
  const int64_t val_tokens =
      static_cast<int64_t>(std::floor(val_fraction * static_cast<double>(total_tokens)));
  const int64_t train_tokens = total_tokens - val_tokens;
  if (train_tokens < 1) {
    return InvalidArgument("inputs hold " + std::to_string(total_tokens) +
                           " tokens: nothing left for the train split");
  }

  fs::create_directories(out_dir, ec);
  if (ec) return IoError(out_dir + ": cannot create directory: " + ec.message());
  for (fs::directory_iterator it(out_dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    // The index too: this call writes (and on failure removes) out_dir/index.json.
    const bool ours = ((name.rfind("train_", 0) == 0 || name.rfind("val_", 0) == 0) &&
                       name.size() > 4 && name.compare(name.size() - 4, 4, ".bin") == 0) ||
                      name == kTokenShardIndexName;
    if (ours) {
      return FailedPrecondition(out_dir + ": already holds token shards (" + name +
                                "); remove them or choose another directory");
    }
  }
  if (ec) return IoError(out_dir + ": cannot list directory: " + ec.message());

  TokenizeStats local;
  TokenizeStats& s = stats != nullptr ? *stats : local;
  s = TokenizeStats();
  Status st = tokenizer == nullptr
                  ? WriteShards(inputs, out_dir, total_bytes, train_tokens, shard_tokens, s)
                  : WriteDocuments(docs, out_dir, train_tokens, shard_tokens,
                                   tokenizer->vocab_size(), s);
  if (st.ok()) st = WriteIndex(out_dir, s);
  if (!st.ok()) {
    st = RemoveShards(out_dir, s, std::move(st));
    s = TokenizeStats();
    return st;
  }
  s.input_bytes = total_bytes;
  s.train_tokens = train_tokens;
  s.val_tokens = val_tokens;
  return Status::Ok();
}

std::string DecodeBytes(const int32_t* tokens, int64_t count) {
  std::string out(static_cast<size_t>(count), '\0');
  for (int64_t i = 0; i < count; ++i) {
    TESSERA_CHECK(tokens[i] >= 0 && tokens[i] < kByteVocabSize);
    out[static_cast<size_t>(i)] = static_cast<char>(tokens[i]);
  }
  return out;
}

}  // namespace tessera
