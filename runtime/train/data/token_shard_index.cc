// runtime/train/data/token_shard_index.cc — reading, writing and building `index.json` for a
// token shard directory. Contracts and the format in token_shard_index.h.
#include "runtime/train/data/token_shard_index.h"

#include <algorithm>
#include <filesystem>
#include <set>

#include "runtime/core/json.h"
#include "runtime/train/data/token_shard.h"

namespace tessera {
namespace {

namespace fs = std::filesystem;

constexpr char kIndexFormat[] = "tessera-token-shard-index";
constexpr uint64_t kMaxIndexBytes = uint64_t{64} << 20;  // ~300k entries

std::string IndexPathOf(const std::string& dir) {
  return (fs::path(dir) / kTokenShardIndexName).string();
}

// A name that stays inside the index's directory.
bool IsPlainName(const std::string& name) {
  return !name.empty() && name != "." && name != ".." && name.find('/') == std::string::npos &&
         name.find('\0') == std::string::npos;
}

// Members of `obj` beyond `allowed`: the first one, for the error.
const std::string* UnknownKey(const JsonValue& obj, std::initializer_list<const char*> allowed) {
  for (const auto& member : obj.members()) {
    // A named reference, not a structured binding: clang 14 (the fuzz build) cannot capture one.
    const std::string& key = member.first;
    if (std::none_of(allowed.begin(), allowed.end(), [&](const char* k) { return key == k; })) {
      return &key;
    }
  }
  return nullptr;
}

// obj[key] as an integer in [lo, hi]; `where` prefixes the error.
Result<int64_t> IntField(const JsonValue& obj, const char* key, int64_t lo, int64_t hi,
                         const std::string& where) {
  const JsonValue* v = obj.Find(key);
  if (v == nullptr) return DataLoss(where + ": missing \"" + key + "\"");
  if (!v->is_integer() || v->as_int() < lo || v->as_int() > hi) {
    return DataLoss(where + ": \"" + key + "\" must be an integer in [" + std::to_string(lo) +
                    ", " + std::to_string(hi) + "]");
  }
  return v->as_int();
}

Result<std::string> StringField(const JsonValue& obj, const char* key, const std::string& where) {
  const JsonValue* v = obj.Find(key);
  if (v == nullptr) return DataLoss(where + ": missing \"" + key + "\"");
  if (!v->is_string()) return DataLoss(where + ": \"" + key + "\" must be a string");
  return v->as_string();
}

Result<TokenShardIndexEntry> ParseEntry(const JsonValue& v, const std::string& where) {
  if (!v.is_object()) return DataLoss(where + ": must be an object");
  if (const std::string* k = UnknownKey(v, {"name", "split", "token_bytes", "vocab_size",
                                            "num_tokens", "bytes", "crc32c"})) {
    return DataLoss(where + ": unknown key \"" + *k + "\"");
  }
  TokenShardIndexEntry e;
  ASSIGN_OR_RETURN(e.name, StringField(v, "name", where));
  if (!IsPlainName(e.name)) {
    return DataLoss(where + ": name \"" + e.name + "\" is not a file name in this directory");
  }
  const std::string at = where + " (" + e.name + ")";
  ASSIGN_OR_RETURN(e.split, StringField(v, "split", at));
  if (e.split != "train" && e.split != "val" && !e.split.empty()) {
    return DataLoss(at + ": split must be \"train\", \"val\" or \"\", got \"" + e.split + "\"");
  }
  ASSIGN_OR_RETURN(const int64_t token_bytes, IntField(v, "token_bytes", 2, 4, at));
  if (token_bytes == 3) return DataLoss(at + ": \"token_bytes\" must be 2 or 4");
  e.token_bytes = static_cast<int>(token_bytes);
  ASSIGN_OR_RETURN(const int64_t vocab, IntField(v, "vocab_size", 0, UINT32_MAX, at));
  e.vocab_size = static_cast<uint32_t>(vocab);
  ASSIGN_OR_RETURN(e.num_tokens, IntField(v, "num_tokens", 0, INT64_MAX / 4, at));
  ASSIGN_OR_RETURN(e.bytes, IntField(v, "bytes", kTokenShardHeaderBytes, INT64_MAX, at));
  ASSIGN_OR_RETURN(const int64_t crc, IntField(v, "crc32c", 0, UINT32_MAX, at));
  e.crc32c = static_cast<uint32_t>(crc);
  return e;
}

}  // namespace

const TokenShardIndexEntry* TokenShardIndex::Find(std::string_view name) const {
  for (const TokenShardIndexEntry& e : files) {
    if (e.name == name) return &e;
  }
  return nullptr;
}

std::string ShardSplitOfName(std::string_view name) {
  if (name.rfind("train", 0) == 0) return "train";
  if (name.rfind("val", 0) == 0) return "val";
  return "";
}

std::string TokenShardIndexToJson(const TokenShardIndex& index) {
  std::string out = "{\"format\":\"" + std::string(kIndexFormat) +
                    "\",\"version\":" + std::to_string(kTokenShardIndexVersion) + ",\"files\":[";
  for (size_t i = 0; i < index.files.size(); ++i) {
    const TokenShardIndexEntry& e = index.files[i];
    JsonWriter w;
    w.BeginObject();
    w.Key("name").String(e.name).Key("split").String(e.split);
    w.Key("token_bytes").Int(e.token_bytes).Key("vocab_size").Int(e.vocab_size);
    w.Key("num_tokens").Int(e.num_tokens).Key("bytes").Int(e.bytes);
    w.Key("crc32c").Int(e.crc32c);
    w.EndObject();
    out += (i == 0 ? "\n" : ",\n") + w.str();
  }
  return out + "\n]}\n";
}

Result<TokenShardIndex> ParseTokenShardIndex(std::string_view json, const std::string& path) {
  const std::string malformed = path + ": malformed shard index";
  Result<JsonValue> parsed = ParseJson(json);
  if (!parsed.ok()) return DataLoss(malformed + ": " + parsed.status().message());
  const JsonValue& root = *parsed;
  if (!root.is_object()) return DataLoss(malformed + ": not a JSON object");
  if (const std::string* k = UnknownKey(root, {"format", "version", "files"})) {
    return DataLoss(malformed + ": unknown key \"" + *k + "\"");
  }
  ASSIGN_OR_RETURN(const std::string format, StringField(root, "format", malformed));
  if (format != kIndexFormat) {
    return DataLoss(malformed + ": format is \"" + format + "\", expected \"" + kIndexFormat +
                    "\"");
  }
  ASSIGN_OR_RETURN(const int64_t version, IntField(root, "version", 0, INT64_MAX, malformed));
  if (version != kTokenShardIndexVersion) {
    return DataLoss(malformed + ": version " + std::to_string(version) + " (this build reads " +
                    std::to_string(kTokenShardIndexVersion) + ")");
  }
  const JsonValue* files = root.Find("files");
  if (files == nullptr || !files->is_array()) {
    return DataLoss(malformed + ": \"files\" must be an array");
  }
  TokenShardIndex index;
  std::set<std::string> names;
  for (size_t i = 0; i < files->items().size(); ++i) {
    ASSIGN_OR_RETURN(TokenShardIndexEntry e,
                     ParseEntry(files->items()[i], malformed + ": files[" + std::to_string(i) + "]"));
    if (!names.insert(e.name).second) {
      return DataLoss(malformed + ": " + e.name + " is listed twice");
    }
    index.files.push_back(std::move(e));
  }
  std::sort(index.files.begin(), index.files.end(),
            [](const auto& a, const auto& b) { return a.name < b.name; });
  return index;
}

Result<TokenShardIndex> ReadTokenShardIndex(const std::string& dir, FileSystem& fs) {
  const std::string path = IndexPathOf(dir);
  Result<int> fd = fs.OpenForRead(path);  // refuses a FIFO or directory without blocking
  if (!fd.ok() && fd.status().code() == StatusCode::kNotFound) {
    return DataLoss(path + ": missing: nothing vouches that the shards in " + dir +
                    " are complete (an interrupted `tessera data tokenize` leaves no index). "
                    "Re-run the tokenizer, or for shards written by another tool run "
                    "`tessera data index " + dir + "`");
  }
  if (!fd.ok()) return fd.status();
  std::string text;
  Result<uint64_t> size = fs.FileSize(*fd, path);
  Status read = size.status();
  if (read.ok() && *size > kMaxIndexBytes) {
    read = DataLoss(path + ": " + std::to_string(*size) + " bytes is larger than a shard index "
                    "can be (" + std::to_string(kMaxIndexBytes) + ")");
  }
  if (read.ok()) {
    text.resize(static_cast<size_t>(*size));
    read = fs.ReadAt(*fd, text.data(), text.size(), 0, path);
  }
  (void)fs.Close(*fd, path);
  RETURN_IF_ERROR(read);
  return ParseTokenShardIndex(text, path);
}

Result<TokenShardIndex> WriteTokenShardIndex(const std::string& dir,
                                             const std::vector<std::string>& names,
                                             FileSystem& fs) {
  if (names.empty()) return InvalidArgument(dir + ": no shards to index");
  TokenShardIndex index;
  for (const std::string& name : names) {
    if (!IsPlainName(name)) {
      return InvalidArgument(name + ": not a file name inside " + dir);
    }
    ASSIGN_OR_RETURN(const TokenShardScan scan, ScanTokenShard((fs::path(dir) / name).string(), fs));
    TokenShardIndexEntry e;
    e.name = name;
    e.split = ShardSplitOfName(name);
    e.token_bytes = scan.info.token_bytes;
    e.vocab_size = scan.info.vocab_size;
    e.num_tokens = scan.info.num_tokens;
    e.bytes = scan.file_bytes;
    e.crc32c = scan.crc32c;
    index.files.push_back(std::move(e));
  }
  std::sort(index.files.begin(), index.files.end(),
            [](const auto& a, const auto& b) { return a.name < b.name; });
  for (size_t i = 1; i < index.files.size(); ++i) {
    if (index.files[i].name == index.files[i - 1].name) {
      return InvalidArgument(dir + ": " + index.files[i].name + " given twice");
    }
  }
  RETURN_IF_ERROR(WriteFileAtomic(IndexPathOf(dir), TokenShardIndexToJson(index), fs));
  return index;
}

Result<TokenShardIndex> IndexTokenShardDirectory(const std::string& dir, FileSystem& fs) {
  Result<std::vector<std::string>> listed = fs.ListDir(dir);
  if (!listed.ok()) return listed.status();
  std::vector<std::string> names;
  for (const std::string& name : *listed) {
    std::error_code ec;
    const bool bin = name.size() > 4 && name.compare(name.size() - 4, 4, ".bin") == 0;
    if (bin && fs::is_regular_file(fs::path(dir) / name, ec)) names.push_back(name);
  }
  if (names.empty()) return NotFound(dir + ": no token shards (*.bin) to index");
  return WriteTokenShardIndex(dir, names, fs);
}

}  // namespace tessera
