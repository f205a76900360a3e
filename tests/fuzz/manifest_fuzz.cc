// tests/fuzz/manifest_fuzz.cc — the checkpoint manifest parser (ParseManifest,
// checkpoint/manifest.h: checksum envelope, JSON, every field validated, coverage) on
// arbitrary text.
//
// Raw bytes almost never carry a matching CRC-32C, so each input is parsed twice: as it is
// (the envelope: UnsealManifestJson's checks) and, when it looks like the JSON object a writer
// seals (ends in '}', SealManifestJson's precondition), sealed first, so mutations of the
// manifest's body reach the field validation. The seeds are real manifests without their
// checksum member, plus one sealed as written.
//
// Properties: no crash, hang or unbounded allocation; a refusal is kDataLoss with a message;
// an accepted manifest covers every tensor exactly once (ValidateCoverage), and
// SerializeManifest of it parses again to the same manifest (numbers compared by value: the
// writer prints 3.0 as 3, which reads back as an integer).
#include <cmath>
#include <string>

#include "checkpoint/manifest.h"
#include "tests/fuzz/fuzz_check.h"

namespace tessera {
namespace {

bool SameNumber(const JsonValue& a, const JsonValue& b) {
  if (a.is_integer() && b.is_integer()) return a.as_int() == b.as_int();
  return a.as_double() == b.as_double();
}

bool SameJson(const JsonValue& a, const JsonValue& b) {
  if (a.is_number() && b.is_number()) return SameNumber(a, b);
  if (a.type() != b.type()) return false;
  switch (a.type()) {
    case JsonValue::Type::kNull: return true;
    case JsonValue::Type::kBool: return a.as_bool() == b.as_bool();
    case JsonValue::Type::kString: return a.as_string() == b.as_string();
    case JsonValue::Type::kNumber: return SameNumber(a, b);
    case JsonValue::Type::kArray:
      if (a.items().size() != b.items().size()) return false;
      for (size_t i = 0; i < a.items().size(); ++i) {
        if (!SameJson(a.items()[i], b.items()[i])) return false;
      }
      return true;
    case JsonValue::Type::kObject:
      if (a.members().size() != b.members().size()) return false;
      for (size_t i = 0; i < a.members().size(); ++i) {
        if (a.members()[i].first != b.members()[i].first ||
            !SameJson(a.members()[i].second, b.members()[i].second)) {
          return false;
        }
      }
      return true;
  }
  return false;
}

bool SameManifest(const Manifest& a, const Manifest& b) {
  if (a.version != b.version || a.step != b.step || a.tensors.size() != b.tensors.size() ||
      a.shards.size() != b.shards.size() || a.config_yaml != b.config_yaml ||
      a.stall_seconds != b.stall_seconds || a.write_seconds != b.write_seconds ||
      a.total_bytes != b.total_bytes || !SameJson(a.state, b.state) ||
      !SameJson(a.layout, b.layout) || !SameJson(a.environment, b.environment)) {
    return false;
  }
  for (size_t i = 0; i < a.tensors.size(); ++i) {
    const TensorRecord &x = a.tensors[i], &y = b.tensors[i];
    if (x.name != y.name || x.shape != y.shape || x.dtype != y.dtype) return false;
  }
  for (size_t i = 0; i < a.shards.size(); ++i) {
    const ShardRecord &x = a.shards[i], &y = b.shards[i];
    if (x.rank != y.rank || x.file != y.file || x.bytes != y.bytes ||
        x.segments.size() != y.segments.size()) {
      return false;
    }
    for (size_t k = 0; k < x.segments.size(); ++k) {
      const SegmentRecord &s = x.segments[k], &t = y.segments[k];
      if (s.tensor != t.tensor || s.begin != t.begin || s.end != t.end || s.offset != t.offset ||
          s.crc32c != t.crc32c) {
        return false;
      }
    }
  }
  return true;
}

void CheckManifest(std::string_view text) {
  const std::string where = "fuzz/manifest.json";
  Result<Manifest> m = ParseManifest(text, where);
  if (!m.ok()) {
    fuzz::CheckRefusal(m.status(), StatusCode::kDataLoss, "ParseManifest");
    return;
  }
  const Status coverage = ValidateCoverage(*m, where);
  FUZZ_CHECK(coverage.ok(), "accepted a manifest that fails coverage: %s",
             coverage.message().c_str());
  const std::string rewritten = SerializeManifest(*m);
  Result<Manifest> again = ParseManifest(rewritten, where + " (rewritten)");
  FUZZ_CHECK(again.ok(), "the rewritten manifest does not parse: %s\n%s",
             again.status().message().c_str(), rewritten.c_str());
  FUZZ_CHECK(SameManifest(*m, *again), "the rewritten manifest differs:\n%s", rewritten.c_str());
}

}  // namespace
}  // namespace tessera

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tessera;
  const std::string_view text = fuzz::AsText(data, size);
  CheckManifest(text);
  if (text.size() >= 3 && text.back() == '}') CheckManifest(SealManifestJson(text));
  return 0;
}
