// runtime/plan/cluster.cc — see cluster.h.
#include "runtime/plan/cluster.h"

#include <cmath>
#include <cstdio>
#include <tuple>

#include "runtime/core/file_util.h"
#include "runtime/core/yaml_reader.h"
#include "runtime/core/yaml_tree.h"

namespace tessera {
namespace {

constexpr double kGiB = 1073741824.0;
constexpr double kGB = 1e9;

// A number in `unit`s into *out (absent: unchanged).
Status Scaled(YamlMap& m, const std::string& key, const NumberRange& range, double unit, double* out) {
  double v = *out / unit;
  RETURN_IF_ERROR(m.Number(key, range, &v));
  *out = v * unit;
  return Status::Ok();
}

Status ReadLink(YamlMap& links, const std::string& key, double* bandwidth, double* latency) {
  ASSIGN_OR_RETURN(YamlMap l, links.Child(key));
  RETURN_IF_ERROR(l.Require("bandwidth_gbs"));
  RETURN_IF_ERROR(Scaled(l, "bandwidth_gbs", kPositive, kGB, bandwidth));
  RETURN_IF_ERROR(Scaled(l, "latency_us", kNonNegative, 1e-6, latency));
  return l.Finish();
}

// `s` inside a YAML double-quoted scalar: backslashes and quotes escaped.
std::string Quoted(const std::string& s) {
  std::string out;
  for (char ch : s) {
    if (ch == '"' || ch == '\\') out += '\\';
    out += ch;
  }
  return out;
}

}  // namespace

Result<ClusterSpec> LoadClusterFromText(const std::string& text, const std::string& origin) {
  ASSIGN_OR_RETURN(const YamlNode root, ParseYaml(text, origin));
  YamlContext ctx(origin);
  ASSIGN_OR_RETURN(YamlMap top, YamlMap::Make(&ctx, &root, "", &root));
  ClusterSpec c;
  RETURN_IF_ERROR(top.String("name", &c.name));
  RETURN_IF_ERROR(top.Require("hosts"));
  RETURN_IF_ERROR(top.Int("hosts", 1, 1 << 20, &c.hosts));
  RETURN_IF_ERROR(top.Require("devices_per_host"));
  RETURN_IF_ERROR(top.Int("devices_per_host", 1, 4096, &c.devices_per_host));
  if (c.devices() > (int64_t{1} << 20)) {
    return top.ValueError("hosts", "hosts x devices_per_host = " + std::to_string(c.devices()) +
                                       " exceeds 1048576 devices (the configs' rank limit)");
  }
  {
    RETURN_IF_ERROR(top.Require("device"));
    ASSIGN_OR_RETURN(YamlMap d, top.Child("device"));
    RETURN_IF_ERROR(d.Enum<DeviceKind>("kind", {{"gpu", DeviceKind::kGpu}, {"cpu", DeviceKind::kCpu}}, &c.kind));
    RETURN_IF_ERROR(d.Require("memory_gb"));
    RETURN_IF_ERROR(Scaled(d, "memory_gb", kPositive, kGiB, &c.device_memory));
    RETURN_IF_ERROR(d.Require("gemm_tflops"));
    RETURN_IF_ERROR(Scaled(d, "gemm_tflops", kPositive, 1e12, &c.gemm_flops));
    c.peak_flops = c.gemm_flops;
    c.fp32_gemm_flops = c.gemm_flops;
    RETURN_IF_ERROR(Scaled(d, "fp32_gemm_tflops", kPositive, 1e12, &c.fp32_gemm_flops));
    RETURN_IF_ERROR(d.Number("gemm_half_size", kNonNegative, &c.gemm_half_size));
    c.fp32_gemm_half_size = c.gemm_half_size;
    RETURN_IF_ERROR(d.Number("fp32_gemm_half_size", kNonNegative, &c.fp32_gemm_half_size));
    RETURN_IF_ERROR(Scaled(d, "peak_tflops", kPositive, 1e12, &c.peak_flops));
    RETURN_IF_ERROR(d.Require("memory_bandwidth_gbs"));
    RETURN_IF_ERROR(Scaled(d, "memory_bandwidth_gbs", kPositive, kGB, &c.memory_bandwidth));
    c.elementwise_rate = c.memory_bandwidth / 16.0;
    RETURN_IF_ERROR(Scaled(d, "elementwise_gelems", kPositive, 1e9, &c.elementwise_rate));
    RETURN_IF_ERROR(d.Finish());
  }
  {
    if (c.devices() > 1) RETURN_IF_ERROR(top.Require("links"));
    ASSIGN_OR_RETURN(YamlMap l, top.Child("links"));
    if (c.devices_per_host > 1) RETURN_IF_ERROR(l.Require("intra_host"));
    if (l.Has("intra_host")) RETURN_IF_ERROR(ReadLink(l, "intra_host", &c.intra_bandwidth, &c.intra_latency));
    c.inter_bandwidth = c.intra_bandwidth;
    c.inter_latency = c.intra_latency;
    if (c.hosts > 1) RETURN_IF_ERROR(l.Require("inter_host"));
    if (l.Has("inter_host")) RETURN_IF_ERROR(ReadLink(l, "inter_host", &c.inter_bandwidth, &c.inter_latency));
    RETURN_IF_ERROR(Scaled(l, "host_device_gbs", kNonNegative, kGB, &c.host_device_bandwidth));
    RETURN_IF_ERROR(l.Finish());
  }
  {
    ASSIGN_OR_RETURN(YamlMap h, top.Child("host"));
    c.host_memory = c.device_memory * c.devices_per_host;
    RETURN_IF_ERROR(Scaled(h, "memory_gb", kPositive, kGiB, &c.host_memory));
    RETURN_IF_ERROR(Scaled(h, "nvme_bandwidth_gbs", kNonNegative, kGB, &c.nvme_bandwidth));
    // Offload to a disk of unknown size could not be checked: the two come together.
    if (h.Has("nvme_bandwidth_gbs")) RETURN_IF_ERROR(h.Require("nvme_capacity_tb"));
    RETURN_IF_ERROR(Scaled(h, "nvme_capacity_tb", kNonNegative, 1e12, &c.nvme_capacity));
    RETURN_IF_ERROR(h.Finish());
  }
  RETURN_IF_ERROR(top.Finish());
  return c;
}

Result<ClusterSpec> LoadCluster(const std::string& path) {
  ASSIGN_OR_RETURN(const std::string text, ReadFileToString(path));
  return LoadClusterFromText(text, path);
}

std::string ClusterYaml(const ClusterSpec& c) {
  char buf[1024];
  std::snprintf(buf, sizeof buf,
                "name: \"%s\"\nhosts: %d\ndevices_per_host: %d\n"
                "device:\n  kind: %s\n  memory_gb: %.3f\n  gemm_tflops: %.6g\n  fp32_gemm_tflops: %.6g\n"
                "  gemm_half_size: %.4g\n  fp32_gemm_half_size: %.4g\n  peak_tflops: %.6g\n"
                "  memory_bandwidth_gbs: %.4g\n  elementwise_gelems: %.4g\n",
                Quoted(c.name).c_str(), c.hosts, c.devices_per_host, c.kind == DeviceKind::kCpu ? "cpu" : "gpu",
                c.device_memory / kGiB, c.gemm_flops / 1e12, c.fp32_gemm_flops / 1e12, c.gemm_half_size,
                c.fp32_gemm_half_size, c.peak_flops / 1e12, c.memory_bandwidth / kGB, c.elementwise_rate / 1e9);
  std::string out = buf;
  // Links only where the file had them (a host of one device needs none).
  std::string links;
  for (const auto& [key, bw, lat] : {std::tuple{"intra_host", c.intra_bandwidth, c.intra_latency},
                                     std::tuple{"inter_host", c.inter_bandwidth, c.inter_latency}}) {
    if (bw <= 0) continue;
    std::snprintf(buf, sizeof buf, "  %s: {bandwidth_gbs: %.4g, latency_us: %.3g}\n", key, bw / kGB, lat * 1e6);
    links += buf;
  }
  if (c.host_device_bandwidth > 0) {
    std::snprintf(buf, sizeof buf, "  host_device_gbs: %.4g\n", c.host_device_bandwidth / kGB);
    links += buf;
  }
  if (!links.empty()) out += "links:\n" + links;
  std::snprintf(buf, sizeof buf, "host:\n  memory_gb: %.3f\n  nvme_bandwidth_gbs: %.4g\n  nvme_capacity_tb: %.4g\n",
                c.host_memory / kGiB, c.nvme_bandwidth / kGB, c.nvme_capacity / 1e12);
  return out + buf;
}

double ClusterSpec::GemmRate(bool fp32, double m, double n, double k) const {
  const double rate = fp32 ? fp32_gemm_flops : gemm_flops;
  const double half = fp32 ? fp32_gemm_half_size : gemm_half_size;
  if (half <= 0) return rate;
  const double s = std::cbrt(m * n * k);
  return rate * s / (s + half);
}

std::string DescribeCluster(const ClusterSpec& c) {
  char buf[320];
  std::snprintf(buf, sizeof buf,
                "%s: %d host%s x %d device%s (%.1f GiB, %.4g TFLOP/s sustained GEMM, %.4g peak), "
                "links %.4g GB/s in a host, %.4g GB/s between hosts",
                c.name.c_str(), c.hosts, c.hosts == 1 ? "" : "s", c.devices_per_host,
                c.devices_per_host == 1 ? "" : "s", c.device_memory / kGiB, c.gemm_flops / 1e12,
                c.peak_flops / 1e12, c.intra_bandwidth / kGB, c.inter_bandwidth / kGB);
  return buf;
}

}  // namespace tessera
