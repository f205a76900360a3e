// optimizer/optimizer_config.cc — names of the optimizer enums, as written in YAML.
#include "optimizer/optimizer_config.h"

namespace tessera {

const char* LrDecayName(LrDecay d) {
  switch (d) {
    case LrDecay::kCosine: return "cosine";
    case LrDecay::kLinear: return "linear";
    case LrDecay::kConstant: return "constant";
  }
  return "?";
}

const char* OptimizerOffloadName(OptimizerOffload o) {
  switch (o) {
    case OptimizerOffload::kNone: return "none";
    case OptimizerOffload::kCpu: return "cpu";
    case OptimizerOffload::kNvme: return "nvme";
  }
  return "?";
}

}  // namespace tessera
