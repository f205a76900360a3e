// runtime/train/hf_load.cc — the sharded HF loader (hf_load.h).
#include "runtime/train/hf_load.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <map>
#include <mutex>
#include <thread>

#include "models/lora.h"
#include "runtime/core/memory.h"

namespace tessera {
namespace {

std::string Thousands(int64_t n) {
  std::string digits = std::to_string(n), out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return out;
}

}  // namespace

Result<HfLoadReport> LoadHfShare(const std::string& path, const ModelPartition& partition,
                                 ParamState& shards, int threads, HfReadFault fault) {
  const auto start = std::chrono::steady_clock::now();
  const bool measured = ResetPeakResident();
  const int64_t rss_start = ProcessMemoryBytes(0, "VmRSS");
  // Under finetune.lora the file is the base model's: its parameters are the LoRA model's
  // first ones (same indices), and only they (the frozen ones) are read.
  const bool lora = partition.config().lora.enabled();
  const ModelConfig base = BaseModelConfig(partition.config());
  const std::vector<Parameter> specs = HfGlobalSpecs(base);
  ASSIGN_OR_RETURN(std::unique_ptr<HfWeightSource> src,
                   HfWeightSource::Open(path, base, specs, /*routing_bias=*/true,
                                        std::move(fault)));
  HfLoadReport report;
  report.threads = std::max(1, threads);
  report.files = static_cast<int>(src->num_files());
  for (const Parameter& p : specs) report.model += p.spec.global_shape.numel();
  for (const TpParam& p : partition.params()) {
    if (p.local.frozen != lora) continue;  // an adapter: not in the file
    for (const TpSegment& seg : p.segments) report.share += seg.length;
  }
  // Per thread at most a transposed block (f32) and a 16-bit conversion chunk.
  report.buffer_bytes = int64_t{report.threads} *
                        (kHfReadBufferElems * 4 + static_cast<int64_t>(kSafetensorsChunkElems) * 2);

  Status failed = Status::Ok();
  std::mutex mu;
  const ParamState::Fill fill = [&](int64_t b, int64_t e, float* out) {
    std::memset(out, 0, static_cast<size_t>(e - b) * sizeof(float));  // vocabulary padding
    if (!failed.ok()) return;
    // This call's pieces by tensor: one Read per tensor, so a transposed tensor's rows are
    // read once for all of them.
    std::map<int, std::vector<HfWeightSource::Request>> by_param;
    partition.ForEachGlobalPiece(b, e, [&](const TpParam& p, int64_t global_begin, int64_t n,
                                           int64_t local) {
      by_param[p.global_index].push_back({global_begin, n, out + (local - b)});
      report.elements += n;
    });
    std::vector<const std::pair<const int, std::vector<HfWeightSource::Request>>*> work;
    for (const auto& item : by_param) work.push_back(&item);
    std::atomic<size_t> next{0};
    auto reader = [&] {
      for (size_t i; (i = next++) < work.size();) {
        Status st = src->Read(static_cast<size_t>(work[i]->first), work[i]->second);
        if (st.ok()) continue;
        std::lock_guard<std::mutex> lock(mu);
        if (failed.ok()) failed = st;
        return;
      }
    };
    const int n = std::min<int>(report.threads, static_cast<int>(work.size()));
    std::vector<std::thread> pool;
    for (int t = 1; t < n; ++t) pool.emplace_back(reader);
    reader();
    for (std::thread& t : pool) t.join();
  };
  RETURN_IF_ERROR(lora ? shards.LoadFrozen(fill) : shards.Load(fill));
  RETURN_IF_ERROR(failed);
  report.bytes_read = src->bytes_read();
  report.routing_bias = src->routing_bias();
  report.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const int64_t hwm = ProcessMemoryBytes(0, "VmHWM");
  if (measured && rss_start >= 0 && hwm >= 0) report.peak_rss_growth = std::max<int64_t>(0, hwm - rss_start);
  return report;
}

std::string DescribeHfLoad(const HfLoadReport& r) {
  char secs[32];
  std::snprintf(secs, sizeof secs, "%.2f s", r.seconds);
  std::string s = "read " + FormatBytes(static_cast<size_t>(r.bytes_read)) + " from " + std::to_string(r.files) +
                  (r.files == 1 ? " file" : " files") + " in " + secs + " on " +
                  std::to_string(r.threads) + (r.threads == 1 ? " thread" : " threads") +
                  " for this rank's " + Thousands(r.share) + " of the model's " +
                  Thousands(r.model) + " parameters";
  s += r.peak_rss_growth >= 0 ? "; peak memory +" + FormatBytes(static_cast<size_t>(r.peak_rss_growth))
                              : std::string("; peak memory not measurable here");
  return s + " (read buffers at most " + FormatBytes(static_cast<size_t>(r.buffer_bytes)) + ")";
}

}  // namespace tessera
