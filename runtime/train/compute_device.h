// runtime/train/compute_device.h — the compute backend a rank's models run on (train.device)
// and the MFU denominator that goes with it.
//   cpu   ChooseComputeBackend (runtime/kernels/cpu_bf16_backend.h): cpu-fp32, or cpu-bf16
//         for bf16 runs where the bf16 GEMM path pays.
//   cuda  the CUDA backend (runtime/kernels/cuda_backend.h) on GPU (local rank mod GPUs), its
//         GEMMs in bf16 for bf16 runs; the rank's parameter state stays in host memory behind
//         a DeviceMirrorStore (device_mirror.h).
// Test seam: with TESSERA_DEVICE_ON_HOST=1 in the environment, cuda takes the CPU reference
// dressed as a device (its memory is host memory, its device() says kCuda), so the whole
// device path of the trainer runs, and is tested, where no GPU is (tests/e2e/
// device_train_test.cc): its results must be the cpu run's bits.
#pragma once

#include <memory>
#include <string>

#include "runtime/core/status.h"
#include "runtime/kernels/backend.h"
#include "runtime/kernels/cuda_backend.h"
#include "runtime/kernels/measuring_backend.h"
#include "runtime/train/config.h"

namespace tessera {

struct RankBackend {
  std::unique_ptr<Backend> backend;
  std::string description;  // the banner's "compute:" line
  // The rated peak of the device for this run's GEMMs in FLOP/s (cuda), 0 on CPU (the
  // trainer measures the CPU's GEMM instead).
  double rated_peak_flops = 0;
  std::string peak_source;  // e.g. "rated bf16 peak of NVIDIA H200"
};

// FailedPrecondition when train.device is cuda and no GPU is usable (or the build has no CUDA
// backend), naming why; InvalidArgument for a GPU whose rated peak is unknown and no
// train.peak_gflops was given.
Result<RankBackend> CreateRankBackend(const Config& c);

// The device backend of `o` and the GPU it runs on: the CUDA backend, or under the test seam the
// CPU reference dressed as a device (info.name says so). `tessera bench gpu` takes it too.
struct DeviceBackend {
  std::unique_ptr<Backend> backend;
  CudaDeviceInfo info;
};
Result<DeviceBackend> CreateDeviceBackend(const CudaBackendOptions& o);

// A sizing backend (measuring_backend.h) for the backend CreateRankBackend gives `c`: its
// device, and what its attention saves (the CUDA kernels' statistics, or under the test seam
// the CPU reference's probabilities), so a memory plan books what the run will reserve.
MeasuringBackend SizingBackendFor(const Config& c);

// A GPU's dense rated peak in FLOP/s for bf16 (tensor cores) or fp32 (non-tensor) GEMMs, from
// the vendor data sheets of the parts whose names contain a known key (H200, H100, A100, L40S,
// B200); 0 for any other.
double RatedPeakFlops(const std::string& gpu_name, bool bf16);

}  // namespace tessera
