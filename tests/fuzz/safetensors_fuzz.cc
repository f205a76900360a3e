// tests/fuzz/safetensors_fuzz.cc — the safetensors header checks (ParseSafetensorsPrefix and
// ParseSafetensorsHeader, models/safetensors.h: what SafetensorsFile::Open runs) on arbitrary
// bytes taken as a whole file: the 8-byte length prefix, the JSON header, the data section.
//
// Properties: no crash, hang or unbounded allocation (a length field cannot make the reader
// allocate more than the input holds); a refusal is kDataLoss (kInvalidArgument for a dtype
// the format defines that Tessera does not read) with a message; an accepted header is the
// Reader contract: every tensor's bytes lie inside the data section, match its dtype and
// shape (at most Shape::kMaxDims dimensions, none negative), no two tensors overlap, names
// are unique and none is "__metadata__".
#include <algorithm>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "models/safetensors.h"
#include "tests/fuzz/fuzz_check.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tessera;
  const std::string path = "fuzz.safetensors";
  Result<uint64_t> n = ParseSafetensorsPrefix({data, std::min<size_t>(size, 8)}, size, path);
  if (!n.ok()) {
    fuzz::CheckRefusal(n.status(), StatusCode::kDataLoss, "ParseSafetensorsPrefix");
    return 0;
  }
  FUZZ_CHECK(*n <= size - 8, "header length %llu in a %zu-byte file",
             static_cast<unsigned long long>(*n), size);
  const uint64_t data_bytes = size - 8 - *n;
  Result<SafetensorsHeader> h =
      ParseSafetensorsHeader(fuzz::AsText(data + 8, static_cast<size_t>(*n)), data_bytes, path);
  if (!h.ok()) {
    const StatusCode code = h.status().code() == StatusCode::kInvalidArgument
                                ? StatusCode::kInvalidArgument
                                : StatusCode::kDataLoss;
    fuzz::CheckRefusal(h.status(), code, "ParseSafetensorsHeader");
    return 0;
  }
  std::set<std::string> names;
  std::vector<std::pair<uint64_t, uint64_t>> ranges;
  for (const SafetensorsTensorInfo& t : h->tensors) {
    FUZZ_CHECK(t.name != "__metadata__" && names.insert(t.name).second, "tensor name \"%s\"",
               t.name.c_str());
    FUZZ_CHECK(t.shape.rank() <= Shape::kMaxDims, "rank %d", t.shape.rank());
    for (int d = 0; d < t.shape.rank(); ++d) FUZZ_CHECK(t.shape[d] >= 0, "negative dimension");
    FUZZ_CHECK(t.data_begin <= t.data_end && t.data_end <= data_bytes,
               "tensor %s bytes [%llu, %llu) outside a %llu-byte data section", t.name.c_str(),
               static_cast<unsigned long long>(t.data_begin),
               static_cast<unsigned long long>(t.data_end),
               static_cast<unsigned long long>(data_bytes));
    FUZZ_CHECK(t.numel() >= 0 && static_cast<uint64_t>(t.numel()) * DTypeSize(t.dtype) == t.nbytes(),
               "tensor %s: %llu bytes for %lld elements", t.name.c_str(),
               static_cast<unsigned long long>(t.nbytes()), static_cast<long long>(t.numel()));
    if (t.nbytes() > 0) ranges.emplace_back(t.data_begin, t.data_end);
  }
  std::sort(ranges.begin(), ranges.end());
  for (size_t i = 1; i < ranges.size(); ++i) {
    FUZZ_CHECK(ranges[i - 1].second <= ranges[i].first, "accepted overlapping tensors");
  }
  return 0;
}
