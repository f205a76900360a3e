// runtime/kernels/cpu/vec.cc — out-of-line constants of vec.h (see the note at ExpF there).
#include "runtime/kernels/cpu/vec.h"

namespace tessera::cpu::vec {

const float kExpMinArg = -87.3f;
const float kExpMaxArg = 88.3f;

}  // namespace tessera::cpu::vec
