// runtime/chaos/chaos_report.cc — the verdict, the totals and the three views of a chaos run
// (see chaos_report.h for the data).
//
// JSON layout (ChaosReportJson): the report's scalar fields by their names, "passed",
// "verdict" (every Verdict field plus "passed"), "faults" (one object per FaultOutcome, every
// field by its name; injected_s, injected_step, detection_s and recovery_s are null where the
// struct says -1 = unknown/never), "loss" ([{t_s, step, loss}]), "memory" ([{t_s,
// supervisor_rss_mib, ranks_rss_mib}]) and "totals" (ChaosTotals, by_kind as an object
// kind -> {injected, detected}).
//
// The SVG is deterministic: every number is printed with a fixed precision, nothing depends on
// the locale or the clock, and no NaN or infinity can reach the output (non-finite loss points
// are dropped, degenerate ranges widened).
// Thread-safety: pure functions.
#include "runtime/chaos/chaos_report.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "runtime/chaos/scenario.h"
#include "runtime/supervisor/text.h"

namespace tessera {
namespace {

double Max(const std::vector<double>& v) {
  return v.empty() ? 0 : *std::max_element(v.begin(), v.end());
}

bool Injected(const FaultOutcome& f) { return f.injected_s >= 0; }

// Position of a kind in FaultKind order, so totals list kinds as the scenario docs do; unknown
// names sort after every known one (then by name).
int KindOrder(const std::string& kind) {
  Result<FaultKind> k = ParseFaultKind(kind);
  return k.ok() ? static_cast<int>(*k) : 1000;
}

JsonValue Str(std::string s) { return JsonValue::String(std::move(s)); }
JsonValue Int(int64_t v) { return JsonValue::Integer(v); }
JsonValue Num(double v) { return JsonValue::Number(v); }
JsonValue Bool(bool b) { return JsonValue::Bool(b); }
// -1 (or any negative) means unknown / never in FaultOutcome.
JsonValue NumOrNull(double v) { return v >= 0 ? Num(v) : JsonValue::Null(); }
JsonValue IntOrNull(int64_t v) { return v >= 0 ? Int(v) : JsonValue::Null(); }

// ---- the five checks, shared by the table (and the count in its first line) -------------

struct Check {
  const char* name;
  bool ok;
  std::string detail;
};

std::vector<Check> Checks(const ChaosReport& report) {
  const Verdict& v = report.verdict;
  std::vector<Check> checks;
  checks.push_back({"weights identical", v.weights_identical,
                    v.weights_detail.empty() ? std::string(v.weights_identical ? "yes" : "no")
                                             : v.weights_detail});
  std::string ckpt =
      StrFormat("%lld of %lld committed lost", static_cast<long long>(v.checkpoints_lost),
                static_cast<long long>(v.committed_checkpoints));
  if (!v.checkpoints_detail.empty()) ckpt += "; " + v.checkpoints_detail;
  checks.push_back({"no checkpoint lost", v.checkpoints_lost == 0, ckpt});
  std::string faults =
      StrFormat("%d of %d injected detected", v.faults_detected, v.faults_injected);
  std::string missed;
  for (const FaultOutcome& f : report.faults) {
    if (!Injected(f) || f.detected) continue;
    missed += StrFormat("%s#%d %s", missed.empty() ? "" : ", ", f.id, f.kind.c_str());
  }
  if (!missed.empty()) faults += "; missed " + missed;
  checks.push_back({"every fault detected", v.faults_detected >= v.faults_injected, faults});
  checks.push_back(
      {"run completed", v.run_completed,
       v.run_detail.empty() ? std::string(v.run_completed ? "yes" : "no") : v.run_detail});
  checks.push_back({"memory", v.memory_ok,
                    v.memory_detail.empty() ? std::string("not a soak run") : v.memory_detail});
  return checks;
}

// ---- text table ---------------------------------------------------------------------------

// Columns padded to their widest cell, two spaces apart; the last column is not padded.
std::string RenderTable(const std::vector<std::string>& header, const std::vector<bool>& right,
                        const std::vector<std::vector<std::string>>& rows, const char* indent) {
  std::vector<size_t> width(header.size(), 0);
  for (size_t c = 0; c < header.size(); ++c) width[c] = header[c].size();
  for (const auto& row : rows) {
    for (size_t c = 0; c < row.size(); ++c) width[c] = std::max(width[c], row[c].size());
  }
  auto line = [&](const std::vector<std::string>& cells) {
    std::string out = indent;
    for (size_t c = 0; c < cells.size(); ++c) {
      const bool last = c + 1 == cells.size();
      const std::string pad(width[c] - cells[c].size(), ' ');
      if (right[c])
        out += pad + cells[c];
      else
        out += last ? cells[c] : cells[c] + pad;
      if (!last) out += "  ";
    }
    while (!out.empty() && out.back() == ' ') out.pop_back();
    return out + "\n";
  };
  std::string out = line(header);
  for (const auto& row : rows) out += line(row);
  return out;
}

// ---- SVG helpers --------------------------------------------------------------------------

// Text for XML character data and attribute values. Characters XML 1.0 forbids (control
// characters other than tab and newlines) become '?' so the document stays well-formed.
std::string XmlEscape(const std::string& s) {
  std::string out;
  out.reserve(s.size());
  for (char ch : s) {
    const unsigned char c = static_cast<unsigned char>(ch);
    switch (ch) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      case '\'':
        out += "&apos;";
        break;
      default:
        if (c < 0x20 && c != '\t' && c != '\n' && c != '\r')
          out += '?';
        else
          out += ch;
    }
  }
  return out;
}

// A pixel coordinate with one decimal; a non-finite value (which the callers never produce)
// becomes 0 rather than "nan" in the document.
std::string Px(double v) { return StrFormat("%.1f", std::isfinite(v) ? v : 0.0); }

// A linear axis over [lo, hi] with "nice" ticks (1, 2 or 5 x 10^k apart).
struct Axis {
  double lo = 0, hi = 1, step = 0.2;
  int decimals = 1;
};

Axis NiceAxis(double lo, double hi, int target_ticks) {
  if (!std::isfinite(lo) || !std::isfinite(hi)) lo = 0, hi = 1;
  if (hi < lo) std::swap(lo, hi);
  if (hi - lo < 1e-12) {
    // A single value: widen around it by a little so the point sits mid-axis.
    const double half = std::max(0.5, std::fabs(lo) * 0.05);
    lo -= half;
    hi += half;
  }
  const double raw = (hi - lo) / target_ticks;
  const double mag = std::pow(10.0, std::floor(std::log10(raw)));
  const double norm = raw / mag;
  const double step = (norm < 1.5 ? 1 : norm < 3 ? 2 : norm < 7 ? 5 : 10) * mag;
  Axis a;
  a.step = step;
  a.lo = std::floor(lo / step + 1e-9) * step;
  a.hi = std::ceil(hi / step - 1e-9) * step;
  if (a.hi <= a.lo) a.hi = a.lo + step;
  a.decimals = std::clamp(static_cast<int>(-std::floor(std::log10(step) + 1e-9)), 0, 6);
  return a;
}

std::string TickLabel(const Axis& a, double v) {
  if (std::fabs(v) < a.step * 1e-6) v = 0;  // no "-0.0"
  return StrFormat("%.*f", a.decimals, v);
}

struct Frame {
  double left, top, right, bottom;  // plot area in pixels
  Axis x, y;
  double X(double t_s) const { return left + (t_s - x.lo) / (x.hi - x.lo) * (right - left); }
  double Y(double loss) const { return bottom - (loss - y.lo) / (y.hi - y.lo) * (bottom - top); }
};

void AppendAxes(const Frame& f, std::string& out) {
  out += "<g class=\"axes\" stroke=\"#333333\" stroke-width=\"1\" fill=\"none\">\n";
  out += "<rect x=\"" + Px(f.left) + "\" y=\"" + Px(f.top) + "\" width=\"" + Px(f.right - f.left) +
         "\" height=\"" + Px(f.bottom - f.top) + "\"/>\n";
  out += "</g>\n<g class=\"ticks\" font-size=\"11\" fill=\"#333333\">\n";
  const int nx = static_cast<int>(std::lround((f.x.hi - f.x.lo) / f.x.step));
  for (int i = 0; i <= nx; ++i) {
    const double v = f.x.lo + i * f.x.step;
    const std::string x = Px(f.X(v));
    out += "<line x1=\"" + x + "\" y1=\"" + Px(f.bottom) + "\" x2=\"" + x + "\" y2=\"" +
           Px(f.bottom + 5) + "\" stroke=\"#333333\"/>\n";
    out += "<line x1=\"" + x + "\" y1=\"" + Px(f.top) + "\" x2=\"" + x + "\" y2=\"" + Px(f.bottom) +
           "\" stroke=\"#e5e5e5\"/>\n";
    out += "<text x=\"" + x + "\" y=\"" + Px(f.bottom + 18) + "\" text-anchor=\"middle\">" +
           TickLabel(f.x, v) + "</text>\n";
  }
  const int ny = static_cast<int>(std::lround((f.y.hi - f.y.lo) / f.y.step));
  for (int i = 0; i <= ny; ++i) {
    const double v = f.y.lo + i * f.y.step;
    const std::string y = Px(f.Y(v));
    out += "<line x1=\"" + Px(f.left - 5) + "\" y1=\"" + y + "\" x2=\"" + Px(f.left) + "\" y2=\"" +
           y + "\" stroke=\"#333333\"/>\n";
    out += "<line x1=\"" + Px(f.left) + "\" y1=\"" + y + "\" x2=\"" + Px(f.right) + "\" y2=\"" + y +
           "\" stroke=\"#e5e5e5\"/>\n";
    out += "<text x=\"" + Px(f.left - 8) + "\" y=\"" + Px(f.Y(v) + 4) + "\" text-anchor=\"end\">" +
           TickLabel(f.y, v) + "</text>\n";
  }
  out += "</g>\n<g class=\"axis-labels\" font-size=\"12\" fill=\"#000000\">\n";
  out += "<text x=\"" + Px((f.left + f.right) / 2) + "\" y=\"" + Px(f.bottom + 38) +
         "\" text-anchor=\"middle\">wall-clock time (s)</text>\n";
  const double ly = (f.top + f.bottom) / 2;
  out += "<text transform=\"translate(" + Px(f.left - 50) + "," + Px(ly) +
         ") rotate(-90)\" text-anchor=\"middle\">loss (nats/token)</text>\n";
  out += "</g>\n";
}

// The loss curve, broken where the job was down: consecutive points further apart than 5x the
// median interval start a new polyline. A run of one point is drawn as a dot.
void AppendLoss(const Frame& f, const std::vector<LossPoint>& points, std::string& out) {
  out +=
      "<g class=\"loss\" fill=\"none\" stroke=\"#1f77b4\" stroke-width=\"1.5\" "
      "stroke-linejoin=\"round\">\n";
  std::vector<double> intervals;
  for (size_t i = 1; i < points.size(); ++i) {
    const double dt = points[i].t_s - points[i - 1].t_s;
    if (dt > 0) intervals.push_back(dt);
  }
  const double median_dt = Median(intervals);
  const double gap_s = median_dt > 0 ? 5 * median_dt : -1;  // -1: never break
  auto flush = [&](size_t begin, size_t end) {
    if (end - begin == 1) {
      out += "<circle cx=\"" + Px(f.X(points[begin].t_s)) + "\" cy=\"" +
             Px(f.Y(points[begin].loss)) + "\" r=\"2\" fill=\"#1f77b4\" stroke=\"none\"/>\n";
      return;
    }
    out += "<polyline points=\"";
    for (size_t i = begin; i < end; ++i) {
      if (i > begin) out += ' ';
      out += Px(f.X(points[i].t_s)) + "," + Px(f.Y(points[i].loss));
    }
    out += "\"/>\n";
  };
  size_t begin = 0;
  for (size_t i = 1; i <= points.size(); ++i) {
    if (i == points.size() || (gap_s > 0 && points[i].t_s - points[i - 1].t_s > gap_s)) {
      flush(begin, i);
      begin = i;
    }
  }
  out += "</g>\n";
}

// Fault lines (red, dashed, at injection) with rotated "#id kind" labels, and recovery lines
// (green, at the first resumed step). Labels that would overlap the previous one are moved
// down a row, so a dense campaign stays legible.
void AppendFaults(const Frame& f, const std::vector<FaultOutcome>& faults, std::string& out) {
  constexpr double kCharPx = 5.6, kLabelFont = 10, kRowGapPx = 10;
  size_t longest = 0;
  for (const FaultOutcome& fo : faults) {
    longest = std::max(longest, StrFormat("#%d %s", fo.id, fo.kind.c_str()).size());
  }
  const double row_px = longest * kCharPx + kRowGapPx;
  const int rows = std::clamp(static_cast<int>((f.bottom - f.top) / row_px), 1, 3);
  std::vector<double> row_last_x(rows, -1e9);

  out += "<g class=\"faults\">\n";
  for (const FaultOutcome& fo : faults) {
    if (!Injected(fo)) continue;
    const std::string x = Px(f.X(fo.injected_s));
    std::string tip = StrFormat("#%d %s, %s, injected at %.2f s", fo.id, fo.kind.c_str(),
                                fo.target.c_str(), fo.injected_s);
    if (fo.injected_step >= 0)
      tip += StrFormat(" (step %lld)", static_cast<long long>(fo.injected_step));
    tip += fo.detected ? StrFormat(", detected as %s", fo.detected_as.c_str()) : ", NOT detected";
    out += "<line class=\"fault\" x1=\"" + x + "\" y1=\"" + Px(f.top) + "\" x2=\"" + x +
           "\" y2=\"" + Px(f.bottom) +
           "\" stroke=\"#d62728\" stroke-width=\"1.2\" stroke-dasharray=\"5,4\">"
           "<title>" +
           XmlEscape(tip) + "</title></line>\n";
    const double xv = f.X(fo.injected_s);
    int row = 0;
    while (row < rows && xv - row_last_x[row] < kLabelFont + 2) ++row;
    if (row == rows) row = 0;  // every row crowded here: accept an overlap
    row_last_x[row] = xv;
    const double ly = f.top + 4 + row * row_px;
    out += "<text class=\"fault-label\" transform=\"translate(" + Px(xv + 3) + "," + Px(ly) +
           ") rotate(90)\" font-size=\"10\" fill=\"#d62728\">" +
           XmlEscape(StrFormat("#%d %s", fo.id, fo.kind.c_str())) + "</text>\n";
  }
  for (const FaultOutcome& fo : faults) {
    if (!Injected(fo) || fo.recovery_s < 0) continue;
    const std::string x = Px(f.X(fo.injected_s + fo.recovery_s));
    out += "<line class=\"recovery\" x1=\"" + x + "\" y1=\"" + Px(f.top) + "\" x2=\"" + x +
           "\" y2=\"" + Px(f.bottom) + "\" stroke=\"#2ca02c\" stroke-width=\"1.2\"><title>" +
           XmlEscape(StrFormat("#%d recovered after %.2f s", fo.id, fo.recovery_s)) +
           "</title></line>\n";
  }
  out += "</g>\n";
}

// One row under the title, outside the plot, so it never hides a fault label.
void AppendLegend(const Frame& f, std::string& out) {
  struct Entry {
    const char* label;
    const char* color;
    const char* dash;
    double width_px;
  };
  const Entry entries[] = {{"loss", "#1f77b4", "", 70},
                           {"fault injected", "#d62728", " stroke-dasharray=\"5,4\"", 120},
                           {"recovered (first resumed step)", "#2ca02c", "", 0}};
  const double y = f.top - 12;
  double x = f.left;
  out += "<g class=\"legend\" font-size=\"11\">\n";
  for (const Entry& e : entries) {
    out += "<line x1=\"" + Px(x) + "\" y1=\"" + Px(y) + "\" x2=\"" + Px(x + 24) + "\" y2=\"" +
           Px(y) + "\" stroke=\"" + e.color + "\" stroke-width=\"1.5\"" + e.dash + "/>\n";
    out += "<text x=\"" + Px(x + 30) + "\" y=\"" + Px(y + 4) + "\" fill=\"#000000\">" + e.label +
           "</text>\n";
    x += 30 + e.width_px;
  }
  out += "</g>\n";
}

}  // namespace

bool Verdict::passed() const {
  return weights_identical && checkpoints_lost == 0 && faults_detected >= faults_injected &&
         run_completed && memory_ok;
}

ChaosTotals ComputeChaosTotals(const ChaosReport& report) {
  ChaosTotals t;
  std::vector<double> detection_s, recovery_s;
  for (const FaultOutcome& f : report.faults) {
    auto it = std::find_if(t.by_kind.begin(), t.by_kind.end(),
                           [&](const auto& e) { return e.first == f.kind; });
    if (it == t.by_kind.end()) it = t.by_kind.insert(t.by_kind.end(), {f.kind, {0, 0}});
    if (!Injected(f)) continue;
    ++t.injected;
    ++it->second.first;
    if (f.detected) {
      ++t.detected;
      ++it->second.second;
      if (f.detection_s >= 0) detection_s.push_back(f.detection_s);
    }
    if (f.recovery_s >= 0) recovery_s.push_back(f.recovery_s);
    t.steps_lost += std::max<int64_t>(0, f.steps_lost);
  }
  std::stable_sort(t.by_kind.begin(), t.by_kind.end(), [](const auto& a, const auto& b) {
    const int oa = KindOrder(a.first), ob = KindOrder(b.first);
    return oa != ob ? oa < ob : a.first < b.first;
  });
  t.detection_median_s = Median(detection_s);
  t.detection_max_s = Max(detection_s);
  t.recovery_median_s = Median(recovery_s);
  t.recovery_max_s = Max(recovery_s);
  return t;
}

JsonValue ChaosReportJson(const ChaosReport& report) {
  const Verdict& v = report.verdict;
  const ChaosTotals t = ComputeChaosTotals(report);
  JsonValue verdict = JsonValue::Object({
      {"passed", Bool(v.passed())},
      {"weights_identical", Bool(v.weights_identical)},
      {"weights_detail", Str(v.weights_detail)},
      {"committed_checkpoints", Int(v.committed_checkpoints)},
      {"checkpoints_lost", Int(v.checkpoints_lost)},
      {"checkpoints_detail", Str(v.checkpoints_detail)},
      {"faults_injected", Int(v.faults_injected)},
      {"faults_detected", Int(v.faults_detected)},
      {"run_completed", Bool(v.run_completed)},
      {"run_detail", Str(v.run_detail)},
      {"memory_ok", Bool(v.memory_ok)},
      {"memory_detail", Str(v.memory_detail)},
  });
  std::vector<JsonValue> faults;
  for (const FaultOutcome& f : report.faults) {
    faults.push_back(JsonValue::Object({
        {"id", Int(f.id)},
        {"kind", Str(f.kind)},
        {"target", Str(f.target)},
        {"injected_s", NumOrNull(f.injected_s)},
        {"injected_step", IntOrNull(f.injected_step)},
        {"detected", Bool(f.detected)},
        {"detected_as", Str(f.detected_as)},
        {"detection_s", NumOrNull(f.detection_s)},
        {"recovery_s", NumOrNull(f.recovery_s)},
        {"steps_lost", Int(f.steps_lost)},
        {"note", Str(f.note)},
    }));
  }
  std::vector<JsonValue> loss;
  for (const LossPoint& p : report.loss) {
    loss.push_back(
        JsonValue::Object({{"t_s", Num(p.t_s)}, {"step", Int(p.step)}, {"loss", Num(p.loss)}}));
  }
  std::vector<JsonValue> memory;
  for (const MemorySample& m : report.memory) {
    memory.push_back(JsonValue::Object({{"t_s", Num(m.t_s)},
                                        {"supervisor_rss_mib", Num(m.supervisor_rss_mib)},
                                        {"ranks_rss_mib", Num(m.ranks_rss_mib)}}));
  }
  std::vector<std::pair<std::string, JsonValue>> by_kind;
  for (const auto& [kind, counts] : t.by_kind) {
    by_kind.push_back({kind, JsonValue::Object({{"injected", Int(counts.first)},
                                                {"detected", Int(counts.second)}})});
  }
  JsonValue totals = JsonValue::Object({
      {"injected", Int(t.injected)},
      {"detected", Int(t.detected)},
      {"detection_median_s", Num(t.detection_median_s)},
      {"detection_max_s", Num(t.detection_max_s)},
      {"recovery_median_s", Num(t.recovery_median_s)},
      {"recovery_max_s", Num(t.recovery_max_s)},
      {"steps_lost", Int(t.steps_lost)},
      {"by_kind", JsonValue::Object(std::move(by_kind))},
  });
  return JsonValue::Object({
      {"passed", Bool(v.passed())},
      {"scenario", Str(report.scenario)},
      {"schedule", Str(report.schedule)},
      {"wall_s", Num(report.wall_s)},
      {"reference_wall_s", Num(report.reference_wall_s)},
      {"final_step", Int(report.final_step)},
      {"goodput", Num(report.goodput)},
      {"median_step_s", Num(report.median_step_s)},
      {"verdict", std::move(verdict)},
      {"totals", std::move(totals)},
      {"faults", JsonValue::Array(std::move(faults))},
      {"loss", JsonValue::Array(std::move(loss))},
      {"memory", JsonValue::Array(std::move(memory))},
  });
}

std::string FormatChaosReport(const ChaosReport& report) {
  const std::vector<Check> checks = Checks(report);
  const int failed = static_cast<int>(
      std::count_if(checks.begin(), checks.end(), [](const Check& c) { return !c.ok; }));
  std::string out =
      failed == 0 ? "chaos: PASS\n"
                  : StrFormat("chaos: FAIL (%d of %zu checks failed)\n", failed, checks.size());
  size_t name_w = 0;
  for (const Check& c : checks) name_w = std::max(name_w, std::string(c.name).size());
  for (const Check& c : checks) {
    out += StrFormat("  %-4s  %-*s  %s\n", c.ok ? "ok" : "FAIL", static_cast<int>(name_w), c.name,
                     c.detail.c_str());
  }
  out += StrFormat("scenario %s: final step %lld, wall %.1f s", report.scenario.c_str(),
                   static_cast<long long>(report.final_step), report.wall_s);
  out += report.reference_wall_s > 0 ? StrFormat(" (reference %.1f s)\n", report.reference_wall_s)
                                     : std::string(" (reference reused)\n");

  const ChaosTotals t = ComputeChaosTotals(report);
  if (report.faults.empty()) {
    out += "\nno faults\n";
  } else {
    out += StrFormat("\nfaults (%d of %zu injected)\n", t.injected, report.faults.size());
    std::vector<std::vector<std::string>> rows;
    for (const FaultOutcome& f : report.faults) {
      const bool injected = Injected(f);
      std::string as = !injected    ? "-"
                       : f.detected ? (f.detected_as.empty() ? "yes" : f.detected_as)
                                    : "MISSED";
      rows.push_back({
          std::to_string(f.id),
          f.kind,
          f.target,
          injected && f.injected_step >= 0 ? std::to_string(f.injected_step) : "-",
          as,
          !injected || !f.detected ? "-"
          : f.detection_s >= 0     ? StrFormat("%.3f", f.detection_s)
                                   : "?",
          injected && f.recovery_s >= 0 ? StrFormat("%.2f", f.recovery_s) : "-",
          injected ? std::to_string(f.steps_lost) : "-",
          !injected && f.note.empty() ? "not injected" : f.note,
      });
    }
    out += RenderTable({"id", "kind", "target", "step", "detected as", "detection s", "recovery s",
                        "steps lost", "note"},
                       {true, false, false, true, false, true, true, true, false}, rows, "  ");
  }

  out += "\ntotals\n";
  // Kinds on as few lines as fit in a terminal (a campaign of every kind has nine).
  std::string kinds;
  for (const auto& [kind, counts] : t.by_kind) {
    const std::string item =
        StrFormat("%s %d/%d detected", kind.c_str(), counts.second, counts.first);
    if (kinds.empty()) {
      kinds = "  " + item;
    } else if (kinds.size() + 2 + item.size() > 100) {
      out += kinds + ",\n";
      kinds = "  " + item;
    } else {
      kinds += ", " + item;
    }
  }
  if (!kinds.empty()) out += kinds + "\n";
  out += StrFormat("  %d/%d detected; detection median %.3f s, max %.3f s\n", t.detected,
                   t.injected, t.detection_median_s, t.detection_max_s);
  const auto recovered =
      std::count_if(report.faults.begin(), report.faults.end(),
                    [](const FaultOutcome& f) { return Injected(f) && f.recovery_s >= 0; });
  out += recovered > 0 ? StrFormat("  recovery median %.2f s, max %.2f s\n", t.recovery_median_s,
                                   t.recovery_max_s)
                       : std::string("  recovery: no restarts\n");
  out += StrFormat("  steps lost %lld\n", static_cast<long long>(t.steps_lost));
  out += StrFormat("  goodput %.1f%% (median step %.4f s, wall %.1f s)\n", 100 * report.goodput,
                   report.median_step_s, report.wall_s);
  return out;
}

std::string ChaosReportSvg(const ChaosReport& report, int width, int height) {
  // Below this the margins leave no plot; clamp rather than fail (a picture is best effort).
  width = std::max(width, 320);
  height = std::max(height, 200);

  std::vector<LossPoint> points;
  for (const LossPoint& p : report.loss) {
    if (std::isfinite(p.t_s) && std::isfinite(p.loss)) points.push_back(p);
  }
  std::stable_sort(points.begin(), points.end(),
                   [](const LossPoint& a, const LossPoint& b) { return a.t_s < b.t_s; });

  double t_max = std::isfinite(report.wall_s) ? std::max(0.0, report.wall_s) : 0;
  for (const LossPoint& p : points) t_max = std::max(t_max, p.t_s);
  for (const FaultOutcome& f : report.faults) {
    if (!Injected(f) || !std::isfinite(f.injected_s)) continue;
    t_max = std::max(
        t_max, f.injected_s + (std::isfinite(f.recovery_s) ? std::max(0.0, f.recovery_s) : 0));
  }
  double t_min = 0;
  for (const LossPoint& p : points) t_min = std::min(t_min, p.t_s);
  if (t_max <= t_min) t_max = t_min + 1;

  double loss_lo = 0, loss_hi = 1;
  if (!points.empty()) {
    loss_lo = loss_hi = points[0].loss;
    for (const LossPoint& p : points)
      loss_lo = std::min(loss_lo, p.loss), loss_hi = std::max(loss_hi, p.loss);
  }

  Frame f;
  f.left = 72;
  f.right = width - 20;
  f.top = 58;
  f.bottom = height - 52;
  f.x = NiceAxis(t_min, t_max, 8);
  f.y = NiceAxis(loss_lo, loss_hi, 5);

  const bool passed = report.verdict.passed();
  const ChaosTotals t = ComputeChaosTotals(report);
  std::string title = StrFormat("chaos %s", passed ? "PASS" : "FAIL");
  if (!report.scenario.empty()) title += ": " + report.scenario;
  title += StrFormat(" (%d/%d faults detected, final step %lld, goodput %.1f%%)", t.detected,
                     t.injected, static_cast<long long>(report.final_step), 100 * report.goodput);

  std::string out;
  out += StrFormat(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" version=\"1.1\" width=\"%d\" "
      "height=\"%d\" viewBox=\"0 0 %d %d\" font-family=\"sans-serif\">\n",
      width, height, width, height);
  out += "<title>" + XmlEscape(title) + "</title>\n";
  out += StrFormat("<rect x=\"0\" y=\"0\" width=\"%d\" height=\"%d\" fill=\"#ffffff\"/>\n", width,
                   height);
  out += "<text x=\"" + Px(f.left) + "\" y=\"26\" font-size=\"15\" font-weight=\"bold\" fill=\"" +
         (passed ? "#2ca02c" : "#d62728") + "\">" + XmlEscape(title) + "</text>\n";
  AppendAxes(f, out);
  if (points.empty()) {
    out += "<text x=\"" + Px((f.left + f.right) / 2) + "\" y=\"" + Px((f.top + f.bottom) / 2) +
           "\" text-anchor=\"middle\" font-size=\"13\" fill=\"#777777\">no loss data</text>\n";
  } else {
    AppendLoss(f, points, out);
  }
  AppendFaults(f, report.faults, out);
  AppendLegend(f, out);
  out += "</svg>\n";
  return out;
}

}  // namespace tessera
