// models/model_config.cc — names of the model enums, as written in YAML.
#include "models/model_config.h"

namespace tessera {

const char* ModelFamilyName(ModelFamily f) { return f == ModelFamily::kGpt2 ? "gpt2" : "llama"; }

const char* RecomputePolicyName(RecomputePolicy p) {
  switch (p) {
    case RecomputePolicy::kNone: return "none";
    case RecomputePolicy::kSelective: return "selective";
    case RecomputePolicy::kFull: return "full";
  }
  return "?";
}

}  // namespace tessera
