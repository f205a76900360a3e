// runtime/plan/cluster.h — the machines a plan places a model on: hosts of identical devices,
// what one device holds and computes, the links between devices in a host and between hosts,
// and each host's memory and local NVMe.
//
// A CLUSTER file (YAML, read by the strict reader of the configs: errors name file:line:col):
//   name: h100-dgx                 # free text for the report
//   hosts: 512
//   devices_per_host: 8
//   device:
//     kind: gpu                    # gpu | cpu: Tessera's CPU backends, whose bf16 path keeps
//                                  #   attention's products in fp32 (default gpu)
//     memory_gb: 80                # what one rank may hold (GiB)
//     gemm_tflops: 600             # sustained bf16/fp16 GEMM rate on large shapes
//     fp32_gemm_tflops: 300        # the same for fp32 runs (default: gemm_tflops)
//     gemm_half_size: 256          # the GEMM size (geometric mean of M, N, K) reaching half
//                                  #   that rate: small GEMMs run slower (default 0: none do)
//     fp32_gemm_half_size: 128     # the same for fp32 (default: gemm_half_size)
//     peak_tflops: 989             # rated peak: the MFU denominator (default: gemm_tflops)
//     memory_bandwidth_gbs: 3350   # for the bandwidth-bound work (AdamW, copies)
//     elementwise_gelems: 200      # elements/s (1e9) of an activation's forward + backward
//                                  #   (GELU): the rate of the softmax, norms and activations
//                                  #   around the GEMMs (default: memory bandwidth / 16 bytes)
//   links:
//     intra_host: {bandwidth_gbs: 450, latency_us: 3}   # per device, e.g. NVLink
//     inter_host: {bandwidth_gbs: 50, latency_us: 10}   # per device: its share of the NICs
//     host_device_gbs: 55          # host <-> device copies (PCIe); 0: the device is the host
//   host:
//     memory_gb: 2048
//     nvme_bandwidth_gbs: 25       # local NVMe, read or write, the whole host
//     nvme_capacity_tb: 30
// Units are decimal (GB/s = 1e9 bytes/s, TB = 1e12 bytes of NVMe, as drives are sold) except
// memory sizes, which are GiB as the memory reports print them. At most 2^20 devices in all
// (the configs' rank limit); a host of one device needs no intra_host link.
// Thread-safety: values.
#pragma once

#include <cstdint>
#include <string>

#include "runtime/core/status.h"

namespace tessera {

enum class DeviceKind { kGpu, kCpu };

struct ClusterSpec {
  std::string name = "cluster";
  DeviceKind kind = DeviceKind::kGpu;
  int hosts = 1;
  int devices_per_host = 1;
  double device_memory = 0;      // bytes one rank may hold
  double gemm_flops = 0;         // FLOP/s sustained by large bf16/fp16 GEMMs
  double fp32_gemm_flops = 0;    // the same in fp32
  double gemm_half_size = 0;     // GEMM size at half the rate (GemmRate); 0: every size full
  double fp32_gemm_half_size = 0;
  double peak_flops = 0;         // FLOP/s rated (MFU denominator)
  double memory_bandwidth = 0;   // bytes/s per device
  double elementwise_rate = 0;   // elements/s of GELU forward + backward per device
  double intra_bandwidth = 0;    // bytes/s per device within a host
  double intra_latency = 0;      // seconds per message within a host
  double inter_bandwidth = 0;    // bytes/s per device between hosts
  double inter_latency = 0;      // seconds per message between hosts
  double host_device_bandwidth = 0;  // bytes/s per device, host <-> device; 0: same memory
  double host_memory = 0;        // bytes per host
  double nvme_bandwidth = 0;     // bytes/s per host
  double nvme_capacity = 0;      // bytes per host

  int64_t devices() const { return static_cast<int64_t>(hosts) * devices_per_host; }
  // FLOP/s of an M x N x K GEMM: the large-shape rate times s / (s + gemm_half_size), s the
  // geometric mean of M, N and K (small GEMMs are bound by loads and per-call overhead).
  double GemmRate(bool fp32, double m, double n, double k) const;
  // Whether the devices are the host itself (a CPU cluster: optimizer.offload cpu moves nothing).
  bool host_is_device() const { return host_device_bandwidth <= 0; }
};

// Reads a CLUSTER file; InvalidArgument at file:line:col for a bad or unknown key.
Result<ClusterSpec> LoadCluster(const std::string& path);
Result<ClusterSpec> LoadClusterFromText(const std::string& text, const std::string& origin);

// The spec as a CLUSTER file reads it (the report's header and `--cluster this --emit-cluster`).
std::string ClusterYaml(const ClusterSpec& c);

// One line: "512 hosts x 8 devices (80 GiB, 600 TFLOP/s), 450/50 GB/s".
std::string DescribeCluster(const ClusterSpec& c);

}  // namespace tessera
