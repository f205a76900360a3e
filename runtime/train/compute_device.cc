// runtime/train/compute_device.cc — CreateRankBackend (compute_device.h).
#include "runtime/train/compute_device.h"

#include <cstdlib>
#include <cstring>

#include "runtime/kernels/cpu_backend.h"
#include "runtime/kernels/cpu_bf16_backend.h"
#include "runtime/kernels/cuda_backend.h"

namespace tessera {
namespace {

// The test seam of compute_device.h, read once per process.
bool DeviceOnHost() {
  static const bool on = [] {
    const char* v = std::getenv("TESSERA_DEVICE_ON_HOST");
    return v != nullptr && std::strcmp(v, "1") == 0;
  }();
  return on;
}

int LocalRank() {
  const char* v = std::getenv("OMPI_COMM_WORLD_LOCAL_RANK");
  return v != nullptr ? std::atoi(v) : 0;
}

// Dense (no sparsity) rated peaks in TFLOP/s from the vendor's data sheets, fp32 = the
// non-tensor-core rate. The first key a GPU's name contains wins, so the PCIe and NVL parts
// (lower clocks and power) come before the SXM names they contain.
struct RatedPeak {
  const char* name;
  double bf16, fp32;
};
constexpr RatedPeak kRatedPeaks[] = {
    {"H100 PCIe", 756.0, 51.2}, {"H100 NVL", 835.0, 60.0}, {"H200 NVL", 835.0, 60.0},
    {"H200", 989.4, 66.9},      {"H100", 989.4, 66.9},     {"A100", 312.0, 19.5},
    {"L40S", 362.1, 91.6},      {"B200", 2250.0, 80.0},
};

Result<RankBackend> CreateCuda(const Config& c, DType dtype) {
  RankBackend r;
  CudaBackendOptions o;
  o.gemm_dtype = dtype == DType::kBF16 ? DType::kBF16 : DType::kF32;
  if (!DeviceOnHost()) {
    RETURN_IF_ERROR(CudaAvailable());
    o.device = LocalRank() % CudaDeviceCount();
  }
  ASSIGN_OR_RETURN(DeviceBackend d, CreateDeviceBackend(o));
  r.backend = std::move(d.backend);
  if (DeviceOnHost()) {
    r.description = "cpu-as-device: the device path on host memory (TESSERA_DEVICE_ON_HOST=1)";
    return r;
  }
  const bool bf16 = o.gemm_dtype == DType::kBF16;
  r.description = std::string(r.backend->name()) + " on " + d.info.name + " (device " +
                  std::to_string(o.device) + ", " + std::to_string(d.info.memory_bytes >> 30) +
                  " GiB); parameter state and optimizer in host memory";
  r.rated_peak_flops = RatedPeakFlops(d.info.name, bf16);
  r.peak_source = std::string("rated ") + (bf16 ? "bf16" : "fp32") + " peak of " + d.info.name;
  if (r.rated_peak_flops == 0 && c.train.peak_gflops <= 0) {
    return InvalidArgument("train.device: cuda on " + d.info.name +
                           ": its rated peak is not known here, so MFU has no denominator: "
                           "set train.peak_gflops to its dense " + (bf16 ? "bf16" : "fp32") +
                           " GFLOP/s");
  }
  return r;
}

}  // namespace

Result<DeviceBackend> CreateDeviceBackend(const CudaBackendOptions& o) {
  DeviceBackend d;
  if (DeviceOnHost()) {
    d.backend = std::make_unique<CpuAsDeviceBackend>();
    d.info.name = "host memory (TESSERA_DEVICE_ON_HOST=1)";
    return d;
  }
  ASSIGN_OR_RETURN(d.info, CudaDevice(o.device));
  ASSIGN_OR_RETURN(d.backend, CreateCudaBackend(o));
  return d;
}

MeasuringBackend SizingBackendFor(const Config& c) {
  if (c.train.device != ComputeDevice::kCuda) return MeasuringBackend::Sizing(Device::kCpu);
  return MeasuringBackend::Sizing(Device::kCuda, /*saves_probabilities=*/DeviceOnHost());
}

double RatedPeakFlops(const std::string& gpu_name, bool bf16) {
  for (const RatedPeak& p : kRatedPeaks) {
    if (gpu_name.find(p.name) != std::string::npos) return (bf16 ? p.bf16 : p.fp32) * 1e12;
  }
  return 0;
}

Result<RankBackend> CreateRankBackend(const Config& c) {
  const DType dtype = PrecisionDType(c.precision);
  if (c.train.device == ComputeDevice::kCuda) return CreateCuda(c, dtype);
  ComputeBackendChoice choice = ChooseComputeBackend(dtype);
  RankBackend r;
  r.backend = std::move(choice.backend);
  r.description = std::move(choice.description);
  return r;
}

}  // namespace tessera
