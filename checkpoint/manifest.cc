// checkpoint/manifest.cc — the JSON form of a Manifest and the validation of untrusted ones.
// Contract in manifest.h.
//
// The JSON is exactly what SerializeManifest writes: every key present, no unknown key (a
// format change bumps kManifestVersion), so a hand-edited or damaged manifest is rejected with
// the dotted path of the first offending entry rather than half-understood:
//   {"format":"tessera-checkpoint","version":1,"step":100,
//    "tensors":[{"name":"param/wte.weight","dtype":"f32","shape":[50257,768]},...],
//    "shards":[{"rank":0,"file":"shard_0.bin","bytes":123,
//               "segments":[{"tensor":"param/wte.weight","begin":0,"end":1048576,
//                            "offset":0,"crc32c":3817238059},...]},...],
//    "state":{...},"layout":{...},"config_yaml":"...","environment":{...},
//    "stall_seconds":0.01,"write_seconds":1.5,"total_bytes":123,"checksum":"crc32c:0a1b2c3d"}
// The checksum is checked on the raw bytes before the JSON is parsed: whatever the damage, a
// manifest that does not match is refused before any field of it is believed.
#include "checkpoint/manifest.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <initializer_list>
#include <limits>
#include <string_view>
#include <unordered_map>
#include <utility>

#include "runtime/core/crc32c.h"
#include "runtime/core/check.h"

namespace tessera {
namespace {

constexpr std::string_view kFormat = "tessera-checkpoint";
// JSON values a manifest may hold: a segment is 6 values, so 2M values describe ~350k segments
// (1.3 TiB of state at 4 MiB per segment) while bounding the parse tree of a hostile file to a
// few hundred MiB.
constexpr size_t kManifestMaxJsonValues = size_t{1} << 21;
constexpr size_t kMaxNameBytes = 1024;
constexpr size_t kMaxDims = 16;

std::string Quoted(std::string_view s) {
  // Hostile names are printed bounded and escaped.
  if (s.size() > 80) return JsonQuote(s.substr(0, 80)) + "...";
  return JsonQuote(s);
}

// Product of `shape`, or false if a dimension is negative or the product (or a dimension)
// exceeds kMaxCheckpointElements.
bool CheckedNumel(const std::vector<int64_t>& shape, int64_t* out) {
  int64_t n = 1;
  for (int64_t d : shape) {
    if (d < 0 || d > kMaxCheckpointElements) return false;
    if (d != 0 && n > kMaxCheckpointElements / d) return false;
    n *= d;
  }
  if (n > kMaxCheckpointElements) return false;
  *out = n;
  return true;
}

bool ValidTensorName(std::string_view name) {
  if (name.empty() || name.size() > kMaxNameBytes) return false;
  // Printable ASCII without spaces: names appear in messages and tools' output unquoted.
  return std::all_of(name.begin(), name.end(), [](char c) { return c > 0x20 && c < 0x7f; });
}

// "shard_<1..10 digits>.bin": a plain name, so no path can leave the checkpoint directory.
bool ValidShardFileName(std::string_view file) {
  constexpr std::string_view kPrefix = "shard_", kSuffix = ".bin";
  if (file.size() <= kPrefix.size() + kSuffix.size()) return false;
  if (file.substr(0, kPrefix.size()) != kPrefix) return false;
  if (file.substr(file.size() - kSuffix.size()) != kSuffix) return false;
  const std::string_view digits =
      file.substr(kPrefix.size(), file.size() - kPrefix.size() - kSuffix.size());
  if (digits.empty() || digits.size() > 10) return false;
  return std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; });
}

int64_t ToJsonInt(uint64_t v) {
  TESSERA_CHECK(v <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max()));
  return static_cast<int64_t>(v);
}

// Non-finite timings (a clock hiccup) are written as 0: they are informational, and JSON has
// no NaN, so writing null would make the manifest unreadable.
double Finite(double v) { return std::isfinite(v) ? v : 0.0; }

// Reads typed fields of untrusted JSON objects; every error names the file and the dotted
// path of the entry ("shards[1].segments[3].offset").
class Reader {
 public:
  explicit Reader(const std::string& where) : where_(where) {}

  Status Error(const std::string& path, const std::string& what) const {
    return DataLoss(where_ + ": " + path + ": " + what);
  }

  // The object has exactly `keys`.
  Status ExactKeys(const JsonValue& obj, const std::string& path,
                   std::initializer_list<std::string_view> keys) const {
    if (!obj.is_object()) return Error(path, "expected an object");
    for (const auto& [k, v] : obj.members()) {
      if (std::find(keys.begin(), keys.end(), k) == keys.end()) {
        return Error(path, "unknown key " + Quoted(k));
      }
    }
    for (std::string_view k : keys) {
      if (obj.Find(k) == nullptr) return Error(path, "missing key \"" + std::string(k) + "\"");
    }
    return Status::Ok();
  }

  // Integer member in [lo, hi].
  Result<int64_t> Int(const JsonValue& obj, const std::string& path, std::string_view key,
                      int64_t lo, int64_t hi) const {
    const JsonValue* v = obj.Find(key);
    const std::string p = path.empty() ? std::string(key) : path + "." + std::string(key);
    if (v == nullptr) return Error(p, "missing");
    if (!v->is_integer()) return Error(p, "expected an integer");
    if (v->as_int() < lo || v->as_int() > hi) {
      return Error(p, std::to_string(v->as_int()) + " is outside [" + std::to_string(lo) + ", " +
                          std::to_string(hi) + "]");
    }
    return v->as_int();
  }

  Result<double> NonNegativeNumber(const JsonValue& obj, std::string_view key) const {
    const JsonValue* v = obj.Find(key);
    if (v == nullptr || !v->is_number() || !(v->as_double() >= 0)) {
      return Error(std::string(key), "expected a number >= 0");
    }
    return v->as_double();
  }

  Result<std::string> String(const JsonValue& obj, const std::string& path,
                             std::string_view key) const {
    const JsonValue* v = obj.Find(key);
    const std::string p = path.empty() ? std::string(key) : path + "." + std::string(key);
    if (v == nullptr || !v->is_string()) return Error(p, "expected a string");
    return v->as_string();
  }

  Result<const JsonValue*> Array(const JsonValue& obj, const std::string& path,
                                 std::string_view key) const {
    const JsonValue* v = obj.Find(key);
    const std::string p = path.empty() ? std::string(key) : path + "." + std::string(key);
    if (v == nullptr || !v->is_array()) return Error(p, "expected an array");
    return v;
  }

  Result<JsonValue> Object(const JsonValue& obj, std::string_view key) const {
    const JsonValue* v = obj.Find(key);
    if (v == nullptr || !v->is_object()) return Error(std::string(key), "expected an object");
    return *v;
  }

 private:
  const std::string& where_;
};

constexpr int64_t kInt64Max = std::numeric_limits<int64_t>::max();

// The checksum member, last in the object: ,"checksum":"crc32c:XXXXXXXX"}
constexpr std::string_view kChecksumKey = ",\"checksum\":\"crc32c:";
constexpr size_t kChecksumTail = kChecksumKey.size() + 8 + 2;  // the digits, then "}

std::string Hex8(uint32_t v) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "%08x", v);
  return buf;
}

// Why an unsealed text is not a current manifest, for a manifest without a checksum: most
// likely one written before version 2, so say that when its version says so.
Status MissingChecksum(std::string_view text, const std::string& where) {
  Result<JsonValue> j = ParseJson(text, kManifestMaxJsonValues);
  if (j.ok() && j->is_object()) {
    const JsonValue* version = j->Find("version");
    if (version != nullptr && version->is_integer() && version->as_int() != kManifestVersion) {
      return DataLoss(where + ": manifest version " + std::to_string(version->as_int()) +
                      " (written by an older Tessera, without a metadata checksum); this build "
                      "reads version " + std::to_string(kManifestVersion));
    }
  }
  return DataLoss(where + ": no metadata checksum at the end (the manifest is truncated, damaged "
                          "or not written by Tessera)");
}

Result<TensorRecord> ParseTensor(const Reader& r, const JsonValue& j, const std::string& path) {
  RETURN_IF_ERROR(r.ExactKeys(j, path, {"name", "dtype", "shape"}));
  TensorRecord t;
  ASSIGN_OR_RETURN(t.name, r.String(j, path, "name"));
  if (!ValidTensorName(t.name)) {
    return r.Error(path + ".name", Quoted(t.name) +
                                       " is not a valid tensor name (1-1024 printable ASCII "
                                       "characters, no spaces)");
  }
  ASSIGN_OR_RETURN(std::string dtype, r.String(j, path, "dtype"));
  // Only the names SerializeManifest writes.
  if (!ParseDType(dtype, &t.dtype) || DTypeName(t.dtype) != dtype) {
    return r.Error(path + ".dtype", "unknown dtype " + Quoted(dtype) + " (f32, bf16, f16, i32)");
  }
  ASSIGN_OR_RETURN(const JsonValue* shape, r.Array(j, path, "shape"));
  if (shape->items().size() > kMaxDims) {
    return r.Error(path + ".shape", std::to_string(shape->items().size()) +
                                        " dimensions (at most " + std::to_string(kMaxDims) + ")");
  }
  for (const JsonValue& d : shape->items()) {
    if (!d.is_integer() || d.as_int() < 0) {
      return r.Error(path + ".shape", "dimensions must be integers >= 0");
    }
    t.shape.push_back(d.as_int());
  }
  int64_t numel = 0;
  if (!CheckedNumel(t.shape, &numel)) {
    return r.Error(path + ".shape", "more than " + std::to_string(kMaxCheckpointElements) +
                                        " elements");
  }
  return t;
}

Result<SegmentRecord> ParseSegment(const Reader& r, const JsonValue& j, const std::string& path,
                                   const Manifest& m,
                                   const std::unordered_map<std::string, size_t>& tensor_index,
                                   uint64_t shard_bytes, uint64_t* seg_bytes) {
  RETURN_IF_ERROR(r.ExactKeys(j, path, {"tensor", "begin", "end", "offset", "crc32c"}));
  SegmentRecord s;
  ASSIGN_OR_RETURN(s.tensor, r.String(j, path, "tensor"));
  const auto it = tensor_index.find(s.tensor);
  if (it == tensor_index.end()) {
    return r.Error(path + ".tensor", Quoted(s.tensor) + " is not a listed tensor");
  }
  const TensorRecord& t = m.tensors[it->second];
  const int64_t numel = t.numel();
  ASSIGN_OR_RETURN(s.begin, r.Int(j, path, "begin", 0, kInt64Max));
  ASSIGN_OR_RETURN(s.end, r.Int(j, path, "end", 0, kInt64Max));
  if (s.begin >= s.end || s.end > numel) {
    return r.Error(path, "elements [" + std::to_string(s.begin) + ", " + std::to_string(s.end) +
                             ") are not a non-empty range inside " + Quoted(t.name) + " (" +
                             std::to_string(numel) + " elements)");
  }
  ASSIGN_OR_RETURN(const int64_t offset, r.Int(j, path, "offset", 0, kInt64Max));
  s.offset = static_cast<uint64_t>(offset);
  ASSIGN_OR_RETURN(const int64_t crc, r.Int(j, path, "crc32c", 0, 0xffffffffll));
  s.crc32c = static_cast<uint32_t>(crc);
  // <= 2^40 elements x 4 bytes: no overflow.
  *seg_bytes = static_cast<uint64_t>(s.end - s.begin) * DTypeSize(t.dtype);
  if (s.offset > shard_bytes || *seg_bytes > shard_bytes - s.offset) {
    return r.Error(path, "bytes [" + std::to_string(s.offset) + ", +" +
                             std::to_string(*seg_bytes) + ") extend past the shard's " +
                             std::to_string(shard_bytes) + " bytes");
  }
  return s;
}

Result<ShardRecord> ParseShard(const Reader& r, const JsonValue& j, const std::string& path,
                               const Manifest& m,
                               const std::unordered_map<std::string, size_t>& tensor_index) {
  RETURN_IF_ERROR(r.ExactKeys(j, path, {"rank", "file", "bytes", "segments"}));
  ShardRecord sh;
  ASSIGN_OR_RETURN(const int64_t rank, r.Int(j, path, "rank", 0, std::numeric_limits<int>::max()));
  sh.rank = static_cast<int>(rank);
  ASSIGN_OR_RETURN(sh.file, r.String(j, path, "file"));
  if (!ValidShardFileName(sh.file)) {
    return r.Error(path + ".file", Quoted(sh.file) + " is not a plain \"shard_<digits>.bin\" name");
  }
  ASSIGN_OR_RETURN(const int64_t bytes, r.Int(j, path, "bytes", 0, kInt64Max));
  sh.bytes = static_cast<uint64_t>(bytes);
  ASSIGN_OR_RETURN(const JsonValue* segments, r.Array(j, path, "segments"));
  struct Extent {
    uint64_t offset, bytes;
    size_t index;
  };
  std::vector<Extent> extents;
  extents.reserve(segments->items().size());
  sh.segments.reserve(segments->items().size());
  for (size_t i = 0; i < segments->items().size(); ++i) {
    uint64_t seg_bytes = 0;
    ASSIGN_OR_RETURN(SegmentRecord s,
                     ParseSegment(r, segments->items()[i],
                                  path + ".segments[" + std::to_string(i) + "]", m, tensor_index,
                                  sh.bytes, &seg_bytes));
    extents.push_back({s.offset, seg_bytes, i});
    sh.segments.push_back(std::move(s));
  }
  // No two segments share a byte of the file (each would then check the other's bytes).
  std::sort(extents.begin(), extents.end(),
            [](const Extent& a, const Extent& b) { return a.offset < b.offset; });
  for (size_t i = 1; i < extents.size(); ++i) {
    const Extent& prev = extents[i - 1];
    const Extent& cur = extents[i];
    if (prev.offset + prev.bytes > cur.offset) {
      return r.Error(path, "segments[" + std::to_string(prev.index) + "] and segments[" +
                               std::to_string(cur.index) + "] overlap in the file (bytes " +
                               std::to_string(cur.offset) + ".." +
                               std::to_string(prev.offset + prev.bytes) + ")");
    }
  }
  return sh;
}

}  // namespace

int64_t TensorRecord::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

const TensorRecord* Manifest::FindTensor(const std::string& name) const {
  for (const TensorRecord& t : tensors) {
    if (t.name == name) return &t;
  }
  return nullptr;
}

std::string SerializeManifest(const Manifest& m) {
  JsonWriter w;
  w.BeginObject();
  w.Key("format").String(kFormat);
  w.Key("version").Int(m.version);
  w.Key("step").Int(m.step);
  w.Key("tensors").BeginArray();
  for (const TensorRecord& t : m.tensors) {
    w.BeginObject();
    w.Key("name").String(t.name);
    w.Key("dtype").String(DTypeName(t.dtype));
    w.Key("shape").BeginArray();
    for (int64_t d : t.shape) w.Int(d);
    w.EndArray();
    w.EndObject();
  }
  w.EndArray();
  w.Key("shards").BeginArray();
  for (const ShardRecord& sh : m.shards) {
    w.BeginObject();
    w.Key("rank").Int(sh.rank);
    w.Key("file").String(sh.file);
    w.Key("bytes").Int(ToJsonInt(sh.bytes));
    w.Key("segments").BeginArray();
    for (const SegmentRecord& s : sh.segments) {
      w.BeginObject();
      w.Key("tensor").String(s.tensor);
      w.Key("begin").Int(s.begin);
      w.Key("end").Int(s.end);
      w.Key("offset").Int(ToJsonInt(s.offset));
      w.Key("crc32c").Int(s.crc32c);
      w.EndObject();
    }
    w.EndArray();
    w.EndObject();
  }
  w.EndArray();
  w.Key("state").Value(m.state);
  w.Key("layout").Value(m.layout);
  w.Key("config_yaml").String(m.config_yaml);
  w.Key("environment").Value(m.environment);
  w.Key("stall_seconds").Double(Finite(m.stall_seconds));
  w.Key("write_seconds").Double(Finite(m.write_seconds));
  w.Key("total_bytes").Int(ToJsonInt(m.total_bytes));
  w.EndObject();
  return SealManifestJson(w.str());
}

uint32_t SegmentCrcSeed(std::string_view tensor, int64_t begin, int64_t end) {
  unsigned char range[16];
  for (int i = 0; i < 8; ++i) {  // little-endian, whatever the host
    range[i] = static_cast<unsigned char>(static_cast<uint64_t>(begin) >> (8 * i));
    range[8 + i] = static_cast<unsigned char>(static_cast<uint64_t>(end) >> (8 * i));
  }
  const char separator = '\0';  // names hold no NUL (ValidTensorName), so the key is unambiguous
  uint32_t crc = Crc32c(tensor.data(), tensor.size());
  crc = Crc32c(&separator, 1, crc);
  return Crc32c(range, sizeof range, crc);
}

std::string SealManifestJson(std::string_view json) {
  TESSERA_CHECK(json.size() >= 3 && json.back() == '}');
  const std::string_view body = json.substr(0, json.size() - 1);  // without the closing brace
  return std::string(body) + std::string(kChecksumKey) + Hex8(Crc32c(body.data(), body.size())) +
         "\"}";
}

Result<std::string> UnsealManifestJson(std::string_view text, const std::string& where) {
  if (!text.empty() && text.back() == '\n') text.remove_suffix(1);  // an editor's final newline
  if (text.size() < kChecksumTail ||
      text.substr(text.size() - kChecksumTail, kChecksumKey.size()) != kChecksumKey ||
      text.substr(text.size() - 2) != "\"}") {
    return MissingChecksum(text, where);
  }
  const std::string_view body = text.substr(0, text.size() - kChecksumTail);
  const std::string_view digits = text.substr(body.size() + kChecksumKey.size(), 8);
  uint32_t stored = 0;
  for (char c : digits) {
    const int v = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
    if (v < 0) {
      return DataLoss(where + ": metadata checksum \"" + std::string(digits) +
                      "\" is not 8 lowercase hex digits");
    }
    stored = (stored << 4) | static_cast<uint32_t>(v);
  }
  const uint32_t actual = Crc32c(body.data(), body.size());
  if (stored != actual) {
    return DataLoss(where + ": metadata checksum mismatch (stored crc32c:" + Hex8(stored) +
                    ", computed crc32c:" + Hex8(actual) +
                    "): the manifest was edited or damaged after it was written");
  }
  return std::string(body) + "}";
}

Result<Manifest> ParseManifest(std::string_view text, const std::string& where) {
  if (text.size() > kMaxManifestBytes) {
    return DataLoss(where + ": " + std::to_string(text.size()) + " bytes (a manifest is at most " +
                    std::to_string(kMaxManifestBytes) + ")");
  }
  ASSIGN_OR_RETURN(const std::string unsealed, UnsealManifestJson(text, where));
  Result<JsonValue> parsed = ParseJson(unsealed, kManifestMaxJsonValues);
  if (!parsed.ok()) return parsed.status().WithPrefix(where);
  const JsonValue& j = *parsed;
  const Reader r(where);
  if (!j.is_object()) return DataLoss(where + ": not a JSON object");
  const JsonValue* format = j.Find("format");
  if (format == nullptr || !format->is_string() || format->as_string() != kFormat) {
    return DataLoss(where + ": not a Tessera checkpoint manifest (\"format\" is not \"" +
                    std::string(kFormat) + "\")");
  }
  // The version before anything else: a newer format should say so, not "unknown key".
  const JsonValue* version = j.Find("version");
  if (version == nullptr || !version->is_integer() || version->as_int() != kManifestVersion) {
    return DataLoss(where + ": manifest version " +
                    (version != nullptr && version->is_integer() ? std::to_string(version->as_int())
                                                                 : std::string("(missing)")) +
                    "; this build reads version " + std::to_string(kManifestVersion));
  }
  RETURN_IF_ERROR(r.ExactKeys(j, "manifest",
                              {"format", "version", "step", "tensors", "shards", "state",
                               "layout", "config_yaml", "environment", "stall_seconds",
                               "write_seconds", "total_bytes"}));
  Manifest m;
  m.version = kManifestVersion;
  ASSIGN_OR_RETURN(m.step, r.Int(j, "", "step", 0, kInt64Max));

  ASSIGN_OR_RETURN(const JsonValue* tensors, r.Array(j, "", "tensors"));
  std::unordered_map<std::string, size_t> tensor_index;
  m.tensors.reserve(tensors->items().size());
  for (size_t i = 0; i < tensors->items().size(); ++i) {
    const std::string path = "tensors[" + std::to_string(i) + "]";
    ASSIGN_OR_RETURN(TensorRecord t, ParseTensor(r, tensors->items()[i], path));
    if (!tensor_index.emplace(t.name, i).second) {
      return r.Error(path + ".name", Quoted(t.name) + " is listed twice");
    }
    m.tensors.push_back(std::move(t));
  }

  ASSIGN_OR_RETURN(const JsonValue* shards, r.Array(j, "", "shards"));
  std::unordered_map<std::string, size_t> files;
  m.shards.reserve(shards->items().size());
  for (size_t i = 0; i < shards->items().size(); ++i) {
    const std::string path = "shards[" + std::to_string(i) + "]";
    ASSIGN_OR_RETURN(ShardRecord sh, ParseShard(r, shards->items()[i], path, m, tensor_index));
    if (!files.emplace(sh.file, i).second) {
      return r.Error(path + ".file", Quoted(sh.file) + " is listed twice");
    }
    m.shards.push_back(std::move(sh));
  }

  ASSIGN_OR_RETURN(m.state, r.Object(j, "state"));
  ASSIGN_OR_RETURN(m.layout, r.Object(j, "layout"));
  ASSIGN_OR_RETURN(m.config_yaml, r.String(j, "", "config_yaml"));
  ASSIGN_OR_RETURN(m.environment, r.Object(j, "environment"));
  ASSIGN_OR_RETURN(m.stall_seconds, r.NonNegativeNumber(j, "stall_seconds"));
  ASSIGN_OR_RETURN(m.write_seconds, r.NonNegativeNumber(j, "write_seconds"));
  ASSIGN_OR_RETURN(const int64_t total, r.Int(j, "", "total_bytes", 0, kInt64Max));
  m.total_bytes = static_cast<uint64_t>(total);

  RETURN_IF_ERROR(ValidateCoverage(m, where));
  return m;
}

Status ValidateCoverage(const Manifest& m, const std::string& where) {
  struct Piece {
    int64_t begin, end;
    size_t shard, segment;
  };
  std::unordered_map<std::string, size_t> index;
  std::vector<int64_t> numels(m.tensors.size());
  for (size_t i = 0; i < m.tensors.size(); ++i) {
    const TensorRecord& t = m.tensors[i];
    if (!index.emplace(t.name, i).second) {
      return DataLoss(where + ": tensor " + Quoted(t.name) + " is listed twice");
    }
    if (!CheckedNumel(t.shape, &numels[i])) {
      return DataLoss(where + ": tensor " + Quoted(t.name) + " has an invalid shape");
    }
  }
  std::vector<std::vector<Piece>> pieces(m.tensors.size());
  for (size_t s = 0; s < m.shards.size(); ++s) {
    for (size_t k = 0; k < m.shards[s].segments.size(); ++k) {
      const SegmentRecord& seg = m.shards[s].segments[k];
      const auto it = index.find(seg.tensor);
      if (it == index.end()) {
        return DataLoss(where + ": " + m.shards[s].file + " segment " + std::to_string(k) +
                        " names tensor " + Quoted(seg.tensor) + ", which is not listed");
      }
      if (seg.begin < 0 || seg.begin >= seg.end || seg.end > numels[it->second]) {
        return DataLoss(where + ": " + m.shards[s].file + " segment " + std::to_string(k) +
                        ": elements [" + std::to_string(seg.begin) + ", " +
                        std::to_string(seg.end) + ") are not a non-empty range inside tensor " +
                        Quoted(seg.tensor) + " (" + std::to_string(numels[it->second]) +
                        " elements)");
      }
      pieces[it->second].push_back({seg.begin, seg.end, s, k});
    }
  }
  auto name_piece = [&](const Piece& p) {
    return m.shards[p.shard].file + " segment " + std::to_string(p.segment) + " [" +
           std::to_string(p.begin) + ", " + std::to_string(p.end) + ")";
  };
  for (size_t i = 0; i < m.tensors.size(); ++i) {
    std::vector<Piece>& ps = pieces[i];
    std::sort(ps.begin(), ps.end(), [](const Piece& a, const Piece& b) { return a.begin < b.begin; });
    const std::string tensor = "tensor " + Quoted(m.tensors[i].name);
    int64_t covered = 0;  // [0, covered) is covered exactly once so far
    for (size_t k = 0; k < ps.size(); ++k) {
      if (ps[k].begin > covered) {
        return DataLoss(where + ": " + tensor + ": elements [" + std::to_string(covered) + ", " +
                        std::to_string(ps[k].begin) + ") are in no segment");
      }
      if (ps[k].begin < covered) {
        return DataLoss(where + ": " + tensor + ": " + name_piece(ps[k - 1]) + " and " +
                        name_piece(ps[k]) + " overlap");
      }
      covered = ps[k].end;
    }
    if (covered < numels[i]) {
      return DataLoss(where + ": " + tensor + ": elements [" + std::to_string(covered) + ", " +
                      std::to_string(numels[i]) + ") are in no segment");
    }
  }
  return Status::Ok();
}

}  // namespace tessera
