// tests/fuzz/safetensors_index_fuzz.cc — the model.safetensors.index.json parser
// (ParseSafetensorsIndex, models/safetensors.h: the part of SafetensorsCheckpoint::OpenIndex
// that reads the file's text) on arbitrary text.
//
// Properties: no crash, hang or unbounded allocation; a refusal is kDataLoss with a message;
// an accepted weight_map names only shard files inside the index's directory (relative, no
// ".." component).
#include <filesystem>

#include "models/safetensors.h"
#include "tests/fuzz/fuzz_check.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tessera;
  auto map = ParseSafetensorsIndex(fuzz::AsText(data, size), "fuzz/model.safetensors.index.json");
  if (!map.ok()) {
    fuzz::CheckRefusal(map.status(), StatusCode::kDataLoss, "ParseSafetensorsIndex");
    return 0;
  }
  for (const auto& [tensor, shard] : *map) {
    FUZZ_CHECK(!shard.empty() && shard[0] != '/', "shard \"%s\" of %s is not relative",
               shard.c_str(), tensor.c_str());
    for (const auto& part : std::filesystem::path(shard)) {
      FUZZ_CHECK(part != "..", "shard \"%s\" of %s leaves the directory", shard.c_str(),
                 tensor.c_str());
    }
  }
  return 0;
}
