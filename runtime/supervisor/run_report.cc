// runtime/supervisor/run_report.cc — see run_report.h for the definitions.
#include "runtime/supervisor/run_report.h"

#include <algorithm>
#include <cstdio>
#include <utility>

#include "runtime/supervisor/text.h"

namespace tessera {
namespace {

double Max(const std::vector<double>& v) {
  return v.empty() ? 0 : *std::max_element(v.begin(), v.end());
}

int64_t StepsLost(const FailureRecord& f) {
  if (f.step_at_failure < 0 || f.resume_step < 0) return 0;
  return std::max<int64_t>(0, f.step_at_failure - f.resume_step);
}

JsonValue Str(std::string s) { return JsonValue::String(std::move(s)); }
JsonValue Int(int64_t v) { return JsonValue::Integer(v); }
JsonValue Num(double v) { return JsonValue::Number(v); }

JsonValue RanksJson(const std::vector<int>& ranks) {
  std::vector<JsonValue> items;
  for (int r : ranks) items.push_back(Int(r));
  return JsonValue::Array(std::move(items));
}

}  // namespace

RunTotals ComputeTotals(const RunReport& report) {
  RunTotals t;
  std::vector<double> detection_s, recovery_s;
  for (const FailureRecord& f : report.failures) {
    ++t.failures;
    ++t.failures_by_kind[f.kind];
    detection_s.push_back(f.detected_s - f.failed_s);
    if (f.resumed_s >= 0) {
      ++t.recovered;
      recovery_s.push_back(f.resumed_s - f.failed_s);
    }
    t.steps_lost += StepsLost(f);
  }
  t.detection_median_s = Median(detection_s);
  t.detection_max_s = Max(detection_s);
  t.recovery_median_s = Median(recovery_s);
  t.recovery_max_s = Max(recovery_s);
  const int64_t start_step = report.incarnations.empty() ? 0 : report.incarnations[0].start_step;
  if (report.final_step > start_step && report.step_s > 0) {
    t.productive_s = static_cast<double>(report.final_step - start_step) * report.step_s;
  }
  if (report.wall_s > 0) t.goodput = std::clamp(t.productive_s / report.wall_s, 0.0, 1.0);
  return t;
}

std::string FormatRunReport(const RunReport& report) {
  const RunTotals t = ComputeTotals(report);
  std::string out;
  out += StrFormat("run %s: %s at step %lld/%lld after %.1f s, %zu incarnation%s, %d failure%s\n",
                report.run_id.c_str(), report.outcome.c_str(),
                static_cast<long long>(report.final_step),
                static_cast<long long>(report.target_steps), report.wall_s,
                report.incarnations.size(), report.incarnations.size() == 1 ? "" : "s",
                t.failures, t.failures == 1 ? "" : "s");
  if (!report.outcome_detail.empty()) out += "  " + report.outcome_detail + "\n";

  if (!report.failures.empty()) {
    out += StrFormat("  %-3s %-4s %-18s %-8s %8s %15s %14s %10s %11s\n", "#", "inc", "kind", "ranks",
                  "step", "detected after", "resumed after", "resume at", "steps lost");
    int i = 0;
    for (const FailureRecord& f : report.failures) {
      const std::string resumed =
          f.resumed_s >= 0 ? StrFormat("%.2f s", f.resumed_s - f.failed_s) : std::string("never");
      const std::string resume_at =
          f.resume_step >= 0 ? std::to_string(f.resume_step) : std::string("?");
      out += StrFormat("  %-3d %-4lld %-18s %-8s %8lld %13.3f s %14s %10s %11lld\n", ++i,
                    static_cast<long long>(f.incarnation), f.kind.c_str(),
                    JoinRanks(f.ranks).c_str(), static_cast<long long>(f.step_at_failure),
                    f.detected_s - f.failed_s, resumed.c_str(), resume_at.c_str(),
                    static_cast<long long>(StepsLost(f)));
      out += "      " + f.detail + "\n";
    }
    std::string kinds;
    for (const auto& [kind, n] : t.failures_by_kind) {
      if (!kinds.empty()) kinds += ", ";
      kinds += StrFormat("%s %d", kind.c_str(), n);
    }
    out += StrFormat("  all %d failure%s detected (%s); detection median %.3f s, max %.3f s\n",
                  t.failures, t.failures == 1 ? "" : "s", kinds.c_str(), t.detection_median_s,
                  t.detection_max_s);
    out += StrFormat("  %d/%d resumed; failure to first resumed step median %.2f s, max %.2f s; "
                  "steps lost %lld\n",
                  t.recovered, t.failures, t.recovery_median_s, t.recovery_max_s,
                  static_cast<long long>(t.steps_lost));
  } else {
    out += "  no failures\n";
  }
  const int64_t start_step = report.incarnations.empty() ? 0 : report.incarnations[0].start_step;
  out += StrFormat("  goodput %.1f%%: productive %.1f s (%lld steps x %.4f s per step) over wall %.1f s\n",
                100 * t.goodput, t.productive_s,
                static_cast<long long>(std::max<int64_t>(0, report.final_step - start_step)),
                report.step_s, report.wall_s);
  for (const StragglerRecord& s : report.stragglers) {
    out += StrFormat("  straggler at %.1f s: %s\n", s.at_s, s.detail.c_str());
  }
  return out;
}

JsonValue RunReportJson(const RunReport& report) {
  const RunTotals t = ComputeTotals(report);
  std::vector<JsonValue> incarnations;
  for (const IncarnationRecord& inc : report.incarnations) {
    incarnations.push_back(JsonValue::Object({
        {"incarnation", Int(inc.incarnation)},
        {"launched_s", Num(inc.launched_s)},
        {"ended_s", Num(inc.ended_s)},
        {"start_step", Int(inc.start_step)},
        {"last_step", Int(inc.last_step)},
        {"outcome", Str(inc.outcome)},
        {"ranks_over_unix_socket", Int(inc.ranks_over_unix_socket)},
        {"ranks_over_tcp", Int(inc.ranks_over_tcp)},
    }));
  }
  std::vector<JsonValue> failures;
  for (const FailureRecord& f : report.failures) {
    failures.push_back(JsonValue::Object({
        {"incarnation", Int(f.incarnation)},
        {"kind", Str(f.kind)},
        {"ranks", RanksJson(f.ranks)},
        {"detail", Str(f.detail)},
        {"exit_code", Int(f.exit_code)},
        {"failed_s", Num(f.failed_s)},
        {"detected_s", Num(f.detected_s)},
        {"resumed_s", Num(f.resumed_s)},
        {"step_at_failure", Int(f.step_at_failure)},
        {"resume_step", Int(f.resume_step)},
        {"load_s", Num(f.load_s)},
        {"detection_s", Num(f.detected_s - f.failed_s)},
        {"recovery_s", f.resumed_s >= 0 ? Num(f.resumed_s - f.failed_s) : JsonValue::Null()},
        {"steps_lost", Int(StepsLost(f))},
    }));
  }
  std::vector<JsonValue> stragglers;
  for (const StragglerRecord& s : report.stragglers) {
    stragglers.push_back(JsonValue::Object(
        {{"rank", Int(s.rank)}, {"detail", Str(s.detail)}, {"at_s", Num(s.at_s)}}));
  }
  std::vector<std::pair<std::string, JsonValue>> by_kind;
  for (const auto& [kind, n] : t.failures_by_kind) by_kind.emplace_back(kind, Int(n));
  JsonValue totals = JsonValue::Object({
      {"failures", Int(t.failures)},
      {"recovered", Int(t.recovered)},
      {"failures_by_kind", JsonValue::Object(std::move(by_kind))},
      {"detection_median_s", Num(t.detection_median_s)},
      {"detection_max_s", Num(t.detection_max_s)},
      {"recovery_median_s", Num(t.recovery_median_s)},
      {"recovery_max_s", Num(t.recovery_max_s)},
      {"steps_lost", Int(t.steps_lost)},
      {"productive_s", Num(t.productive_s)},
      {"goodput", Num(t.goodput)},
  });
  return JsonValue::Object({
      {"run_id", Str(report.run_id)},
      {"outcome", Str(report.outcome)},
      {"outcome_detail", Str(report.outcome_detail)},
      {"wall_s", Num(report.wall_s)},
      {"start_unix_s", Num(report.start_unix_s)},
      {"final_step", Int(report.final_step)},
      {"target_steps", Int(report.target_steps)},
      {"step_s", Num(report.step_s)},
      {"incarnations", JsonValue::Array(std::move(incarnations))},
      {"failures", JsonValue::Array(std::move(failures))},
      {"stragglers", JsonValue::Array(std::move(stragglers))},
      {"totals", std::move(totals)},
  });
}

}  // namespace tessera
