// runtime/kernels/cuda/reduce.cu — the plain column sum (a Linear layer's bias gradient).
#include "runtime/kernels/cuda/column_sum.cuh"

namespace tessera::cuda {
namespace {

}  // namespace

int64_t ColumnSumScratchFloats(int64_t C) { return kColumnSumBlocks * C; }

void ColumnSumAccumulate(cudaStream_t s, float* acc, const float* x, int64_t N, int64_t C,
                         float* scratch) {
  ColumnSum(s, acc, Element{x, C}, N, C, scratch);
}

}  // namespace tessera::cuda
