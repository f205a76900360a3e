// models/safetensors.cc — safetensors reader (validate-then-pread), writer (temp + fsync +
// rename) and the sharded-index loader. See safetensors.h for the contracts.
#include "models/safetensors.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <numeric>
#include <set>

#include "models/quote.h"
#include "runtime/core/check.h"
#include "runtime/core/file_util.h"
#include "runtime/core/json.h"

namespace tessera {
namespace {

static_assert(std::endian::native == std::endian::little,
              "safetensors data is little-endian; a big-endian host needs byte swaps");

// Conversions and I/O go through bounded chunks so a multi-GB tensor needs no second copy.

std::string ErrnoText(int err) { return std::strerror(err); }

// Strict safetensors dtype names. Returns false with *known = true for names the format defines
// but Tessera does not read, so the error can say "unsupported" rather than "unknown".
bool ParseSafetensorsDType(std::string_view s, DType* out, bool* known) {
  *known = true;
  if (s == "F32") { *out = DType::kF32; return true; }
  if (s == "F16") { *out = DType::kF16; return true; }
  if (s == "BF16") { *out = DType::kBF16; return true; }
  if (s == "I32") { *out = DType::kI32; return true; }
  static const char* const kOthers[] = {"F64", "I64", "U64", "U32", "I16", "U16", "I8", "U8",
                                        "BOOL", "F8_E4M3", "F8_E5M2", "F8_E8M0", "F4", "F6_E2M3",
                                        "F6_E3M2", "C64"};
  *known = std::find(std::begin(kOthers), std::end(kOthers), s) != std::end(kOthers);
  return false;
}

const char* SafetensorsDTypeName(DType t) {
  switch (t) {
    case DType::kF32: return "F32";
    case DType::kF16: return "F16";
    case DType::kBF16: return "BF16";
    case DType::kI32: return "I32";
  }
  return "?";
}

// Parses one header entry (everything but the data-section bounds and overlap checks).
Status ParseTensorEntry(const std::string& path, const std::string& name, const JsonValue& v,
                        uint64_t data_bytes, SafetensorsTensorInfo* info) {
  const std::string where = path + ": tensor " + Quote(name);
  if (!v.is_object()) return DataLoss(where + ": header entry is not a JSON object");
  info->name = name;

  const JsonValue* dtype = v.Find("dtype");
  if (dtype == nullptr || !dtype->is_string()) {
    return DataLoss(where + ": missing or non-string \"dtype\"");
  }
  bool known = false;
  if (!ParseSafetensorsDType(dtype->as_string(), &info->dtype, &known)) {
    if (known) {
      return InvalidArgument(where + ": unsupported dtype " + dtype->as_string() +
                             " (supported: F32, F16, BF16, I32)");
    }
    return DataLoss(where + ": unknown dtype " + JsonQuote(dtype->as_string()));
  }

  const JsonValue* shape = v.Find("shape");
  if (shape == nullptr || !shape->is_array()) {
    return DataLoss(where + ": missing or non-array \"shape\"");
  }
  if (shape->items().size() > static_cast<size_t>(Shape::kMaxDims)) {
    return InvalidArgument(where + ": shape has rank " + std::to_string(shape->items().size()) +
                           ", more than the supported " + std::to_string(Shape::kMaxDims));
  }
  // The product of the non-zero dimensions must fit in int64 even when another dimension is 0,
  // so that Shape::numel() (which multiplies left to right) can never overflow.
  int64_t numel = 1;
  bool overflow = false, has_zero = false;
  for (const JsonValue& d : shape->items()) {
    if (!d.is_integer() || d.as_int() < 0) {
      return DataLoss(where + ": shape must be an array of non-negative integers");
    }
    info->shape.push_back(d.as_int());
    has_zero = has_zero || d.as_int() == 0;
    if (d.as_int() != 0 && !overflow) overflow = __builtin_mul_overflow(numel, d.as_int(), &numel);
  }
  if (has_zero) numel = 0;

  const JsonValue* offs = v.Find("data_offsets");
  if (offs == nullptr || !offs->is_array() || offs->items().size() != 2 ||
      !offs->items()[0].is_integer() || !offs->items()[1].is_integer() ||
      offs->items()[0].as_int() < 0 || offs->items()[1].as_int() < 0) {
    return DataLoss(where + ": \"data_offsets\" must be [begin, end] of non-negative integers");
  }
  info->data_begin = static_cast<uint64_t>(offs->items()[0].as_int());
  info->data_end = static_cast<uint64_t>(offs->items()[1].as_int());
  if (info->data_begin > info->data_end) {
    return DataLoss(where + ": data_offsets begin " + std::to_string(info->data_begin) +
                    " > end " + std::to_string(info->data_end));
  }
  if (info->data_end > data_bytes) {
    return DataLoss(where + ": data_offsets end " + std::to_string(info->data_end) +
                    " is beyond the data section (" + std::to_string(data_bytes) +
                    " bytes): file truncated");
  }
  uint64_t need = 0;
  if (overflow || __builtin_mul_overflow(static_cast<uint64_t>(numel),
                                         static_cast<uint64_t>(DTypeSize(info->dtype)), &need)) {
    return DataLoss(where + ": shape " + info->shape.ToString() + " is too large");
  }
  if (info->nbytes() != need) {
    return DataLoss(where + ": byte size mismatch: data_offsets span " +
                    std::to_string(info->nbytes()) + " bytes but shape " +
                    info->shape.ToString() + " of " + SafetensorsDTypeName(info->dtype) +
                    " needs " + std::to_string(need));
  }
  return Status::Ok();
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Reader

SafetensorsFile::~SafetensorsFile() {
  if (fd_ >= 0) ::close(fd_);
}

Result<uint64_t> ParseSafetensorsPrefix(std::span<const unsigned char> first_bytes,
                                        uint64_t file_bytes, const std::string& path) {
  if (file_bytes < 8) {
    return DataLoss(path + ": file is " + std::to_string(file_bytes) +
                    " bytes, shorter than the 8-byte header length prefix");
  }
  TESSERA_CHECK(first_bytes.size() >= 8);
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | first_bytes[i];
  if (n > kSafetensorsMaxHeaderBytes) {
    return DataLoss(path + ": header length " + std::to_string(n) +
                    " is absurd (limit 100 MiB): corrupt file");
  }
  if (n > file_bytes - 8) {
    return DataLoss(path + ": header length " + std::to_string(n) + " exceeds the " +
                    std::to_string(file_bytes - 8) + " bytes after the prefix: file truncated "
                    "or corrupt");
  }
  return n;
}

Result<SafetensorsHeader> ParseSafetensorsHeader(std::string_view json, uint64_t data_bytes,
                                                 const std::string& path) {
  Result<JsonValue> parsed = ParseJson(json);
  if (!parsed.ok()) {
    return DataLoss(path + ": header is not valid JSON: " + parsed.status().message());
  }
  if (!parsed->is_object()) return DataLoss(path + ": header is not a JSON object");

  SafetensorsHeader h;
  for (const auto& [key, value] : parsed->members()) {
    if (key == "__metadata__") {
      if (!value.is_object()) return DataLoss(path + ": __metadata__ is not a JSON object");
      for (const auto& [mk, mv] : value.members()) {
        if (!mv.is_string()) {
          return DataLoss(path + ": __metadata__ value for " + Quote(mk) +
                          " is not a string (must be a map of strings)");
        }
        h.metadata[mk] = mv.as_string();
      }
      continue;
    }
    SafetensorsTensorInfo info;
    RETURN_IF_ERROR(ParseTensorEntry(path, key, value, data_bytes, &info));
    h.tensors.push_back(std::move(info));
  }

  // Overlap: sort non-empty ranges by begin; each must start at or after the furthest end so far.
  std::vector<size_t> order;
  for (size_t i = 0; i < h.tensors.size(); ++i) {
    if (h.tensors[i].nbytes() > 0) order.push_back(i);
  }
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return h.tensors[a].data_begin < h.tensors[b].data_begin;
  });
  for (size_t k = 1; k < order.size(); ++k) {
    const SafetensorsTensorInfo& prev = h.tensors[order[k - 1]];
    const SafetensorsTensorInfo& cur = h.tensors[order[k]];
    if (cur.data_begin < prev.data_end) {
      return DataLoss(path + ": tensors " + Quote(prev.name) + " [" +
                      std::to_string(prev.data_begin) + ", " + std::to_string(prev.data_end) +
                      ") and " + Quote(cur.name) + " [" + std::to_string(cur.data_begin) + ", " +
                      std::to_string(cur.data_end) + ") overlap");
    }
  }
  return h;
}

Result<std::unique_ptr<SafetensorsFile>> SafetensorsFile::Open(const std::string& path) {
  std::unique_ptr<SafetensorsFile> f(new SafetensorsFile());
  f->path_ = path;
  // Non-blocking, regular files only (file_util.h): a FIFO named as weights cannot hang.
  Result<int> fd = OpenRegularFileForRead(path);
  if (!fd.ok()) {
    if (fd.status().code() == StatusCode::kNotFound) return NotFound(path + ": safetensors file not found");
    return fd.status();
  }
  f->fd_ = *fd;
  struct stat st;
  if (::fstat(f->fd_, &st) != 0) return IoError(path + ": fstat failed: " + ErrnoText(errno));
  f->file_bytes_ = static_cast<uint64_t>(st.st_size);
  unsigned char prefix[8] = {};
  if (f->file_bytes_ >= 8) RETURN_IF_ERROR(f->ReadBytes(0, 8, prefix));
  ASSIGN_OR_RETURN(const uint64_t n, ParseSafetensorsPrefix(prefix, f->file_bytes_, path));
  f->header_bytes_ = n;
  std::string header(n, '\0');
  RETURN_IF_ERROR(f->ReadBytes(8, n, header.data()));
  ASSIGN_OR_RETURN(SafetensorsHeader h, ParseSafetensorsHeader(header, f->file_bytes_ - 8 - n, path));
  f->tensors_ = std::move(h.tensors);
  f->metadata_ = std::move(h.metadata);
  // Names are unique: the JSON parser refuses duplicate keys.
  for (size_t i = 0; i < f->tensors_.size(); ++i) f->index_[f->tensors_[i].name] = i;
  return f;
}

const SafetensorsTensorInfo* SafetensorsFile::Find(std::string_view name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : &tensors_[it->second];
}

Status SafetensorsFile::ReadBytes(uint64_t file_offset, size_t n, void* out) const {
  return PreadAll(fd_, out, n, file_offset, path_);
}

Status SafetensorsFile::ReadRaw(const SafetensorsTensorInfo& info, void* out) const {
  TESSERA_CHECK(Find(info.name) == &info);
  return ReadBytes(8 + header_bytes_ + info.data_begin, info.nbytes(), out);
}

Status SafetensorsFile::ReadAsF32(const SafetensorsTensorInfo& info, float* out) const {
  return ReadRangeAsF32(info, 0, info.numel(), out);
}

Status SafetensorsFile::ReadRangeAsF32(const SafetensorsTensorInfo& info, int64_t begin, int64_t n,
                                       float* out) const {
  TESSERA_CHECK(Find(info.name) == &info);
  TESSERA_CHECK(begin >= 0 && n >= 0 && begin + n <= info.numel());
  const uint64_t base = 8 + header_bytes_ + info.data_begin;
  switch (info.dtype) {
    case DType::kF32:
      return ReadBytes(base + static_cast<uint64_t>(begin) * 4, static_cast<size_t>(n) * 4, out);
    case DType::kF16:
    case DType::kBF16: {
      const bool bf16 = info.dtype == DType::kBF16;
      const size_t total = static_cast<size_t>(n);
      std::vector<uint16_t> buf(std::min(total, kSafetensorsChunkElems));
      for (size_t done = 0; done < total;) {
        const size_t k = std::min(total - done, kSafetensorsChunkElems);
        RETURN_IF_ERROR(ReadBytes(base + (static_cast<uint64_t>(begin) + done) * 2, k * 2, buf.data()));
        for (size_t i = 0; i < k; ++i) out[done + i] = bf16 ? Bf16ToF32(buf[i]) : F16ToF32(buf[i]);
        done += k;
      }
      return Status::Ok();
    }
    case DType::kI32:
      break;
  }
  return InvalidArgument(path_ + ": tensor " + Quote(info.name) + " has dtype " +
                         SafetensorsDTypeName(info.dtype) + ", not a float type");
}

// ---------------------------------------------------------------------------------------------
// Writer

namespace {

Status ValidateOut(const SafetensorsTensorOut& t, const std::string& path) {
  const std::string where = path + ": tensor " + Quote(t.name);
  if (t.name.empty()) return InvalidArgument(path + ": empty tensor name");
  if (t.name == "__metadata__") return InvalidArgument(where + ": reserved name");
  for (int i = 0; i < t.shape.rank(); ++i) {
    if (t.shape[i] < 0) return InvalidArgument(where + ": negative dimension in shape");
  }
  if (t.data == nullptr && t.shape.numel() > 0) return InvalidArgument(where + ": null data");
  const bool same = t.source_dtype == t.dtype;
  const bool narrow = t.source_dtype == DType::kF32 &&
                      (t.dtype == DType::kF16 || t.dtype == DType::kBF16);
  if (!same && !narrow) {
    return InvalidArgument(where + ": cannot store " + std::string(DTypeName(t.source_dtype)) +
                           " data as " + SafetensorsDTypeName(t.dtype));
  }
  return Status::Ok();
}

Status WriteTensorData(AtomicFileWriter& out, const SafetensorsTensorOut& t) {
  const size_t total = static_cast<size_t>(t.shape.numel());
  if (t.source_dtype == t.dtype) return out.Append(t.data, total * DTypeSize(t.dtype));
  const float* src = static_cast<const float*>(t.data);
  const bool bf16 = t.dtype == DType::kBF16;
  std::vector<uint16_t> buf(std::min(total, kSafetensorsChunkElems));
  for (size_t done = 0; done < total;) {
    size_t n = std::min(total - done, kSafetensorsChunkElems);
    for (size_t i = 0; i < n; ++i) {
      buf[i] = bf16 ? F32ToBf16(src[done + i]) : F32ToF16(src[done + i]);
    }
    RETURN_IF_ERROR(out.Append(buf.data(), n * 2));
    done += n;
  }
  return Status::Ok();
}

}  // namespace

Status WriteSafetensors(const std::string& path, const std::vector<SafetensorsTensorOut>& tensors,
                        const std::map<std::string, std::string>& metadata, FileSystem& fs) {
  std::vector<size_t> order(tensors.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::sort(order.begin(), order.end(),
            [&](size_t a, size_t b) { return tensors[a].name < tensors[b].name; });
  for (size_t k = 0; k < order.size(); ++k) {
    RETURN_IF_ERROR(ValidateOut(tensors[order[k]], path));
    if (k > 0 && tensors[order[k]].name == tensors[order[k - 1]].name) {
      return InvalidArgument(path + ": duplicate tensor name " + Quote(tensors[order[k]].name));
    }
  }

  JsonWriter w;
  w.BeginObject();
  if (!metadata.empty()) {
    w.Key("__metadata__").BeginObject();
    for (const auto& [k, v] : metadata) w.Key(k).String(v);
    w.EndObject();
  }
  uint64_t offset = 0;
  for (size_t i : order) {
    const SafetensorsTensorOut& t = tensors[i];
    const uint64_t nbytes = static_cast<uint64_t>(t.shape.numel()) * DTypeSize(t.dtype);
    w.Key(t.name).BeginObject();
    w.Key("dtype").String(SafetensorsDTypeName(t.dtype));
    w.Key("shape").BeginArray();
    for (int d = 0; d < t.shape.rank(); ++d) w.Int(t.shape[d]);
    w.EndArray();
    w.Key("data_offsets").BeginArray().Int(static_cast<int64_t>(offset))
        .Int(static_cast<int64_t>(offset + nbytes)).EndArray();
    w.EndObject();
    offset += nbytes;
  }
  w.EndObject();
  std::string header = w.str();
  header.append((8 - header.size() % 8) % 8, ' ');  // data section starts 8-aligned
  uint8_t prefix[8];
  for (int i = 0; i < 8; ++i) prefix[i] = static_cast<uint8_t>(header.size() >> (8 * i));

  // A failure anywhere below destroys the writer, which removes "<path>.tmp".
  ASSIGN_OR_RETURN(std::unique_ptr<AtomicFileWriter> out, AtomicFileWriter::Create(path, fs));
  RETURN_IF_ERROR(out->Append(prefix, 8));
  RETURN_IF_ERROR(out->Append(header.data(), header.size()));
  for (size_t i : order) RETURN_IF_ERROR(WriteTensorData(*out, tensors[i]));
  return out->Commit();
}

// ---------------------------------------------------------------------------------------------
// Checkpoints (one file or a sharded index)

Result<std::unique_ptr<SafetensorsCheckpoint>> SafetensorsCheckpoint::OpenFile(
    const std::string& path) {
  ASSIGN_OR_RETURN(std::unique_ptr<SafetensorsFile> file, SafetensorsFile::Open(path));
  auto ckpt = std::make_unique<SafetensorsCheckpoint>();
  ckpt->path_ = path;
  for (const SafetensorsTensorInfo& info : file->tensors()) {
    ckpt->entries_.emplace(info.name, Entry{file.get(), &info});
  }
  ckpt->files_.push_back(std::move(file));
  return ckpt;
}

namespace {

// Shard names come from a file we do not control: keep them inside the index's directory.
bool IsSafeRelativePath(const std::string& s) {
  if (s.empty() || s[0] == '/') return false;
  for (const auto& part : std::filesystem::path(s)) {
    if (part == "..") return false;
  }
  return true;
}

// A shard's real location (symlinks resolved) must stay inside the index's directory: a
// name that passes IsSafeRelativePath can still be a link planted to lead elsewhere. One
// layout is allowed beyond it: the Hugging Face hub cache, where <repo>/snapshots/<rev>/NAME
// links to <repo>/blobs/<hash> (the files of the same repository, as the hub stores them).
Status CheckShardStaysInside(const std::string& index_path, const std::filesystem::path& dir,
                             const std::string& shard) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::path base = fs::weakly_canonical(dir.empty() ? fs::path(".") : dir, ec);
  if (ec) return IoError(index_path + ": cannot resolve its directory: " + ec.message());
  const fs::path target = fs::weakly_canonical(base / shard, ec);
  if (ec) return IoError(index_path + ": cannot resolve shard " + Quote(shard) + ": " + ec.message());
  auto inside = [](const fs::path& p, const fs::path& root) {
    const fs::path rel = p.lexically_relative(root);
    return !rel.empty() && *rel.begin() != ".." && !rel.is_absolute();
  };
  if (inside(target, base)) return Status::Ok();
  const bool hub_snapshot = base.parent_path().filename() == "snapshots";
  if (hub_snapshot && inside(target, base.parent_path().parent_path() / "blobs")) return Status::Ok();
  return DataLoss(index_path + ": shard " + Quote(shard) + " resolves to " + target.string() +
                  ", outside the index's directory " + base.string() +
                  " (a symbolic link out of it?): refused");
}

}  // namespace

Result<std::map<std::string, std::string, std::less<>>> ParseSafetensorsIndex(
    std::string_view text, const std::string& index_path) {
  Result<JsonValue> parsed = ParseJson(text);
  if (!parsed.ok()) {
    return DataLoss(index_path + ": index is not valid JSON: " + parsed.status().message());
  }
  if (!parsed->is_object()) return DataLoss(index_path + ": index is not a JSON object");
  const JsonValue* meta = parsed->Find("metadata");
  if (meta != nullptr && !meta->is_object() && !meta->is_null()) {
    return DataLoss(index_path + ": \"metadata\" is not a JSON object");
  }
  const JsonValue* map = parsed->Find("weight_map");
  if (map == nullptr || !map->is_object()) {
    return DataLoss(index_path + ": missing or non-object \"weight_map\"");
  }
  std::map<std::string, std::string, std::less<>> weight_map;  // tensor -> shard file name
  for (const auto& [tensor, shard] : map->members()) {
    if (!shard.is_string() || !IsSafeRelativePath(shard.as_string())) {
      return DataLoss(index_path + ": weight_map entry " + Quote(tensor) +
                      " must be a relative file name inside the index's directory");
    }
    weight_map[tensor] = shard.as_string();
  }
  return weight_map;
}

Result<std::unique_ptr<SafetensorsCheckpoint>> SafetensorsCheckpoint::OpenIndex(
    const std::string& index_path) {
  ASSIGN_OR_RETURN(std::string text, ReadFileToString(index_path, kSafetensorsMaxHeaderBytes));
  ASSIGN_OR_RETURN(const auto weight_map, ParseSafetensorsIndex(text, index_path));
  std::set<std::string> shard_names;
  for (const auto& [tensor, shard] : weight_map) shard_names.insert(shard);

  auto ckpt = std::make_unique<SafetensorsCheckpoint>();
  ckpt->path_ = index_path;
  const std::filesystem::path dir = std::filesystem::path(index_path).parent_path();
  std::vector<std::string> file_shard_names;  // parallel to ckpt->files_
  for (const std::string& shard : shard_names) {
    RETURN_IF_ERROR(CheckShardStaysInside(index_path, dir, shard));
    Result<std::unique_ptr<SafetensorsFile>> file = SafetensorsFile::Open((dir / shard).string());
    if (!file.ok()) return file.status().WithPrefix(index_path + ": shard " + Quote(shard));
    ckpt->files_.push_back(std::move(file).value());
    file_shard_names.push_back(shard);
  }
  // Duplicates first: a tensor in two shards is the most specific thing to report.
  for (const auto& file : ckpt->files_) {
    for (const SafetensorsTensorInfo& info : file->tensors()) {
      auto [it, inserted] = ckpt->entries_.emplace(info.name, Entry{file.get(), &info});
      if (!inserted) {
        return DataLoss(index_path + ": tensor " + Quote(info.name) + " appears in both " +
                        it->second.file->path() + " and " + file->path());
      }
    }
  }
  for (size_t f = 0; f < ckpt->files_.size(); ++f) {
    const std::string& shard = file_shard_names[f];
    for (const SafetensorsTensorInfo& info : ckpt->files_[f]->tensors()) {
      auto listed = weight_map.find(info.name);
      if (listed == weight_map.end()) {
        return DataLoss(index_path + ": shard " + Quote(shard) + " contains tensor " +
                        Quote(info.name) + " that the weight_map does not list");
      }
      if (listed->second != shard) {
        return DataLoss(index_path + ": tensor " + Quote(info.name) + " is listed in shard " +
                        Quote(listed->second) + " but found in " + Quote(shard));
      }
    }
  }
  for (const auto& [tensor, shard] : weight_map) {
    if (ckpt->entries_.find(tensor) == ckpt->entries_.end()) {
      return DataLoss(index_path + ": index lists tensor " + Quote(tensor) + " in shard " +
                      Quote(shard) + ", but that file does not contain it");
    }
  }
  return ckpt;
}

const SafetensorsCheckpoint::Entry* SafetensorsCheckpoint::Find(std::string_view name) const {
  auto it = entries_.find(name);
  return it == entries_.end() ? nullptr : &it->second;
}

}  // namespace tessera
