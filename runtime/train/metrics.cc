// runtime/train/metrics.cc — formatting of progress lines and summaries; the JSONL writer.
#include "runtime/train/metrics.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <memory>

#include "runtime/core/file_util.h"
#include "runtime/core/json.h"
#include "runtime/core/memory.h"

namespace tessera {

std::string FormatDuration(double s) {
  char buf[32];
  if (!std::isfinite(s) || s < 0) return "?";
  if (s < 60) {
    std::snprintf(buf, sizeof buf, "%.1fs", s);
  } else if (s < 3600) {
    std::snprintf(buf, sizeof buf, "%dm%02ds", static_cast<int>(s) / 60, static_cast<int>(s) % 60);
  } else {
    std::snprintf(buf, sizeof buf, "%dh%02dm", static_cast<int>(s) / 3600,
                  (static_cast<int>(s) % 3600) / 60);
  }
  return buf;
}

namespace {
std::string FormatRate(double tok_s) {
  char buf[32];
  if (tok_s >= 1e6) std::snprintf(buf, sizeof buf, "%.2fM", tok_s / 1e6);
  else if (tok_s >= 1e3) std::snprintf(buf, sizeof buf, "%.1fk", tok_s / 1e3);
  else std::snprintf(buf, sizeof buf, "%.0f", tok_s);
  return buf;
}
}  // namespace

std::string FormatMemoryTable(const std::vector<double>& all, int ranks) {
  const int kinds = static_cast<int>(MemoryKind::kCount);
  std::string out = "  per-rank peak memory (reserved):\n    rank";
  char buf[64];
  for (int k = 0; k < kinds; ++k) {
    std::snprintf(buf, sizeof buf, " %16s", MemoryKindName(static_cast<MemoryKind>(k)));
    out += buf;
  }
  out += "\n";
  for (int r = 0; r < ranks; ++r) {
    std::snprintf(buf, sizeof buf, "    %4d", r);
    out += buf;
    for (int k = 0; k < kinds; ++k) {
      std::snprintf(buf, sizeof buf, " %16s",
                    FormatBytes(static_cast<size_t>(all[r * kinds + k])).c_str());
      out += buf;
    }
    out += "\n";
  }
  return out;
}

std::string FormatProgressLine(const StepMetrics& m) {
  char buf[320];
  int width = static_cast<int>(std::to_string(m.total_steps).size());
  std::string floor;
  if (m.floor) {
    char f[48];
    std::snprintf(f, sizeof f, " (floor %+.4f)", m.loss - *m.floor);
    floor = f;
  }
  std::string val;
  if (m.val_loss) {
    char v[48];
    std::snprintf(v, sizeof v, " | val %.4f", *m.val_loss);
    val = v;
  }
  std::string scale;
  if (m.loss_scale) {
    char v[48];
    std::snprintf(v, sizeof v, " | scale %.*f", *m.loss_scale == std::floor(*m.loss_scale) ? 0 : 4,
                  *m.loss_scale);
    scale = v;
  }
  std::snprintf(buf, sizeof buf,
                "step %*lld/%lld | loss %.4f%s%s | lr %.2e | gnorm %.3f%s%s | %s tok/s | MFU %.1f%% | ETA %s",
                width, static_cast<long long>(m.step), static_cast<long long>(m.total_steps),
                m.loss, floor.c_str(), val.c_str(), m.lr, m.grad_norm,
                m.skipped ? (m.nonfinite ? " (skipped: non-finite)" : " (skipped)") : "",
                scale.c_str(), FormatRate(m.tokens_per_second).c_str(),
                100.0 * m.mfu, FormatDuration(m.eta_seconds).c_str());
  if (m.moe && !m.moe->layers.empty()) return std::string(buf) + " | " + FormatMoeProgress(*m.moe);
  return buf;
}

std::string FormatSummary(const TrainSummary& s, const std::string& memory_report,
                          const std::string& out_dir) {
  std::string out = "\n== run summary ==\n";
  char line[256];
  auto add = [&out, &line](int n) { out.append(line, std::min<size_t>(n, sizeof line - 1)); };
  add(std::snprintf(line, sizeof line, "  wall time        %s (%.1f s)\n",
                    FormatDuration(s.wall_seconds).c_str(), s.wall_seconds));
  add(std::snprintf(line, sizeof line, "  steps            %lld (%lld skipped)\n",
                    static_cast<long long>(s.steps), static_cast<long long>(s.skipped_steps)));
  if (s.nonfinite_steps > 0 || s.spikes > 0) {
    add(std::snprintf(line, sizeof line, "  guard            %lld non-finite step(s) skipped, %lld loss spike(s)\n",
                      static_cast<long long>(s.nonfinite_steps), static_cast<long long>(s.spikes)));
  }
  add(std::snprintf(line, sizeof line, "  tokens           %lld (%.0f tok/s)\n",
                    static_cast<long long>(s.tokens), s.tokens / std::max(s.wall_seconds, 1e-9)));
  add(std::snprintf(line, sizeof line, "  final loss       %.4f (mean of the last %lld steps)\n",
                    s.final_loss, static_cast<long long>(s.final_loss_steps)));
  add(std::snprintf(line, sizeof line, "  best loss        %.4f\n", s.best_loss));
  if (s.val_loss) add(std::snprintf(line, sizeof line, "  held-out loss    %.4f\n", *s.val_loss));
  if (s.floor) {
    const double final = s.val_loss ? *s.val_loss : s.final_loss;
    add(std::snprintf(line, sizeof line, "  entropy floor    %.4f (gap %+.4f nats)\n", *s.floor,
                      final - *s.floor));
  }
  out += "  peak memory by kind:\n" + memory_report;
  out += s.moe_histogram;
  out += "  outputs          " + out_dir + "/{metrics.jsonl,model.safetensors,config.yaml,env.json}\n";
  return out;
}

Status TruncateMetrics(const std::string& path, int64_t last_step) {
  auto text = ReadFileToString(path);
  if (!text.ok()) return text.status().code() == StatusCode::kNotFound ? Status::Ok() : text.status();
  std::string kept;
  size_t begin = 0;
  while (begin < text->size()) {
    size_t end = text->find('\n', begin);
    if (end == std::string::npos) end = text->size();
    const std::string line = text->substr(begin, end - begin);
    begin = end + 1;
    auto v = ParseJson(line, 256);
    if (!v.ok()) continue;  // a line cut by the crash
    const JsonValue* step = v->Find("step");
    if (step != nullptr && step->is_integer() && step->as_int() <= last_step) kept += line + "\n";
  }
  return WriteFileAtomic(path, kept);
}

Result<std::unique_ptr<MetricsFile>> MetricsFile::Create(const std::string& path, bool append) {
  FILE* f = std::fopen(path.c_str(), append ? "a" : "w");
  if (!f) return IoError(path + ": cannot create metrics file: " + std::strerror(errno));
  return std::unique_ptr<MetricsFile>(new MetricsFile(path, f));
}

MetricsFile::~MetricsFile() {
  if (file_) std::fclose(file_);
}

Status MetricsFile::Append(const StepMetrics& m) {
  JsonWriter w;
  w.BeginObject();
  w.Key("step").Int(m.step);
  w.Key("loss").Double(m.loss);
  if (m.floor) w.Key("floor_gap").Double(m.loss - *m.floor);
  if (m.val_loss) w.Key("val_loss").Double(*m.val_loss);
  w.Key("lr").Double(m.lr);
  w.Key("grad_norm").Double(m.grad_norm);
  w.Key("skipped").Bool(m.skipped);
  if (m.nonfinite) w.Key("nonfinite").Bool(true);
  if (m.spike_z) w.Key("spike_z").Double(*m.spike_z);
  if (m.loss_scale) w.Key("loss_scale").Double(*m.loss_scale);
  w.Key("tokens").Int(m.total_tokens);
  w.Key("step_s").Double(m.step_seconds);
  w.Key("elapsed_s").Double(m.elapsed_seconds);
  w.Key("tok_per_s").Double(m.tokens_per_second);
  w.Key("mfu").Double(m.mfu);
  if (m.moe && !m.moe->layers.empty()) {
    w.Key("moe_aux_loss").Double(m.moe->aux_loss);
    w.Key("moe_imbalance").Double(m.moe->worst_imbalance);
    w.Key("moe").BeginArray();
    for (const MoeLayerReport& l : m.moe->layers) {
      w.BeginObject();
      w.Key("layer").Int(l.layer);
      w.Key("counts").BeginArray();
      for (int64_t c : l.counts) w.Int(c);
      w.EndArray();
      w.Key("dropped").Double(l.dropped);
      w.Key("imbalance").Double(l.imbalance);
      w.Key("aux_loss").Double(l.aux_loss);
      w.Key("bias_min").Double(l.bias_min);
      w.Key("bias_max").Double(l.bias_max);
      w.EndObject();
    }
    w.EndArray();
  }
  w.EndObject();
  std::string line = w.str() + "\n";
  if (std::fwrite(line.data(), 1, line.size(), file_) != line.size() || std::fflush(file_) != 0) {
    return IoError(path_ + ": cannot write metrics: " + std::strerror(errno));
  }
  return Status::Ok();
}

}  // namespace tessera
