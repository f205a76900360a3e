// tests/fuzz/config_fuzz.cc — the config reader (LoadConfigFromText, runtime/train/config.h:
// the YAML pre-check of runtime/core/yaml_input.h, yaml-cpp, the typed readers and the
// cross-field checks) on arbitrary text.
//
// Properties: no crash, hang or unbounded allocation; a refusal is kInvalidArgument with a
// message (kInternal would mean a yaml-cpp exception escaped a reader: a bug); and a config
// that loads writes a resolved_yaml that loads again to exactly the same resolved_yaml, i.e.
// the resolved config of a run parses back to the same values (issue 13).
#include "runtime/train/config.h"
#include "tests/fuzz/fuzz_check.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tessera;
  const std::string text(fuzz::AsText(data, size));
  const std::string origin = "fuzz.yaml";
  Result<Config> first = LoadConfigFromText(text, origin);
  if (!first.ok()) {
    fuzz::CheckRefusal(first.status(), StatusCode::kInvalidArgument, "LoadConfigFromText");
    return 0;
  }
  Result<Config> again = LoadConfigFromText(first->resolved_yaml, origin);
  FUZZ_CHECK(again.ok(), "the resolved config does not load: %s\n--- resolved:\n%s",
             again.status().message().c_str(), first->resolved_yaml.c_str());
  FUZZ_CHECK(again->resolved_yaml == first->resolved_yaml,
             "the resolved config loads to other values\n--- first:\n%s\n--- again:\n%s",
             first->resolved_yaml.c_str(), again->resolved_yaml.c_str());
  return 0;
}
