// links: tessera_chaos
// tests/unit/chaos_report_test.cc — the chaos verdict (each check can fail it), totals on a
// hand-computed example, the JSON round trip, the terminal table and the SVG plot (well-formed,
// one marker per fault and recovery, escaped text, no NaN, empty and one-point inputs).
#include "runtime/chaos/chaos_report.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <sstream>
#include <string>
#include <vector>

#include "runtime/core/json.h"

namespace tessera {
namespace {

Verdict PassingVerdict() {
  Verdict v;
  v.weights_identical = true;
  v.weights_detail = "bit-identical (1.8 MiB)";
  v.committed_checkpoints = 12;
  v.checkpoints_lost = 0;
  v.faults_injected = 6;
  v.faults_detected = 6;
  v.run_completed = true;
  v.run_detail = "finished at step 200";
  v.memory_ok = true;
  return v;
}

FaultOutcome Fault(int id, std::string kind, std::string target, double injected_s, int64_t step,
                   std::string detected_as, double detection_s, double recovery_s,
                   int64_t steps_lost, std::string note = "") {
  FaultOutcome f;
  f.id = id;
  f.kind = std::move(kind);
  f.target = std::move(target);
  f.injected_s = injected_s;
  f.injected_step = step;
  f.detected = !detected_as.empty();
  f.detected_as = std::move(detected_as);
  f.detection_s = detection_s;
  f.recovery_s = recovery_s;
  f.steps_lost = steps_lost;
  f.note = std::move(note);
  return f;
}

// Seven planned faults: six injected (five detected), four of them caused a restart.
//   detection latencies known: 0.002, 2.1, 0.004, 1.0 -> median (0.004 + 1.0) / 2 = 0.502, max 2.1
//   recoveries: 1.5, 3.0, 1.2, 2.0 -> median (1.5 + 2.0) / 2 = 1.75, max 3.0
//   steps lost: 5 + 8 + 3 = 16 (the never-injected fault's 99 does not count)
ChaosReport Example() {
  ChaosReport r;
  r.scenario = "configs/chaos/mixed.yaml";
  r.schedule = "#1 kill_rank rank 2 at step 40\n#2 stop_rank rank 1 at step 80";
  r.wall_s = 70;
  r.reference_wall_s = 40;
  r.final_step = 200;
  r.goodput = 0.625;
  r.median_step_s = 0.2;
  r.faults = {
      Fault(1, "kill_rank", "rank 2", 10.0, 40, "connection_lost", 0.002, 1.5, 5),
      Fault(2, "stop_rank", "rank 1", 20.0, 80, "heartbeat_timeout", 2.1, 3.0, 8),
      Fault(3, "kill_rank", "rank 0", 30.0, 120, "connection_lost", 0.004, 1.2, 3),
      Fault(4, "corrupt_shard", "step_00000040/shard_1.bin", 40.0, 160, "ckpt_corrupt", -1, 2.0, 0),
      Fault(5, "slow_rank", "rank 3", 50.0, 170, "straggler", 1.0, -1, 0),
      Fault(6, "kill_rank", "rank 1", -1, -1, "", -1, -1, 99, "run ended before step 300"),
      Fault(7, "io_error", "every rank", 60.0, 190, "", -1, -1, 0, "writes retried"),
  };
  for (int i = 0; i < 70; ++i) {
    if (i >= 31 && i < 37) continue;  // down after fault #3: a gap the curve must show
    r.loss.push_back({static_cast<double>(i), i * 3, 4.0 - i * 0.03});
  }
  r.memory = {{0, 30, 400}, {60, 31.5, 410}};
  r.verdict = PassingVerdict();
  r.verdict.faults_detected = 5;  // #7 was missed
  return r;
}

TEST(ChaosVerdict, PassesOnlyWhenEveryCheckHolds) {
  EXPECT_TRUE(PassingVerdict().passed());
  std::vector<Verdict> failing(5, PassingVerdict());
  failing[0].weights_identical = false;
  failing[1].checkpoints_lost = 1;
  failing[2].faults_detected = 5;
  failing[3].run_completed = false;
  failing[4].memory_ok = false;
  for (size_t i = 0; i < failing.size(); ++i) {
    EXPECT_FALSE(failing[i].passed()) << "check " << i;
    ChaosReport r;
    r.verdict = failing[i];
    const std::string text = FormatChaosReport(r);
    EXPECT_EQ(text.substr(0, text.find('\n')), "chaos: FAIL (1 of 5 checks failed)") << text;
    EXPECT_TRUE(ChaosReportJson(r).Find("passed")->is_bool());
    EXPECT_FALSE(ChaosReportJson(r).Find("passed")->as_bool());
  }
}

TEST(ChaosTotals, HandComputedExample) {
  const ChaosTotals t = ComputeChaosTotals(Example());
  EXPECT_EQ(t.injected, 6);
  EXPECT_EQ(t.detected, 5);
  EXPECT_NEAR(t.detection_median_s, 0.502, 1e-12);
  EXPECT_NEAR(t.detection_max_s, 2.1, 1e-12);
  EXPECT_NEAR(t.recovery_median_s, 1.75, 1e-12);
  EXPECT_NEAR(t.recovery_max_s, 3.0, 1e-12);
  EXPECT_EQ(t.steps_lost, 16);
  // In FaultKind order; the never-injected kill_rank counts in neither column.
  using Entry = std::pair<std::string, std::pair<int, int>>;
  const std::vector<Entry> want = {{"kill_rank", {2, 2}},
                                   {"stop_rank", {1, 1}},
                                   {"slow_rank", {1, 1}},
                                   {"corrupt_shard", {1, 1}},
                                   {"io_error", {1, 0}}};
  EXPECT_EQ(t.by_kind, want);

  const ChaosTotals none = ComputeChaosTotals(ChaosReport{});
  EXPECT_EQ(none.injected, 0);
  EXPECT_EQ(none.detection_median_s, 0);
  EXPECT_TRUE(none.by_kind.empty());
}

TEST(ChaosReportJson, RoundTripsKeysAndValues) {
  const ChaosReport r = Example();
  JsonWriter w;
  w.Value(ChaosReportJson(r));
  Result<JsonValue> parsed = ParseJson(w.str());
  ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
  const JsonValue& j = *parsed;
  for (const char* key :
       {"passed", "scenario", "schedule", "wall_s", "reference_wall_s", "final_step", "goodput",
        "median_step_s", "verdict", "totals", "faults", "loss", "memory"}) {
    EXPECT_NE(j.Find(key), nullptr) << key;
  }
  EXPECT_FALSE(j.Find("passed")->as_bool());
  EXPECT_EQ(j.Find("scenario")->as_string(), r.scenario);
  EXPECT_EQ(j.Find("schedule")->as_string(), r.schedule);
  EXPECT_DOUBLE_EQ(j.Find("wall_s")->as_double(), 70);
  EXPECT_DOUBLE_EQ(j.Find("reference_wall_s")->as_double(), 40);
  EXPECT_EQ(j.Find("final_step")->as_int(), 200);
  EXPECT_DOUBLE_EQ(j.Find("goodput")->as_double(), 0.625);
  EXPECT_DOUBLE_EQ(j.Find("median_step_s")->as_double(), 0.2);

  const JsonValue& v = *j.Find("verdict");
  EXPECT_FALSE(v.Find("passed")->as_bool());
  EXPECT_TRUE(v.Find("weights_identical")->as_bool());
  EXPECT_EQ(v.Find("weights_detail")->as_string(), "bit-identical (1.8 MiB)");
  EXPECT_EQ(v.Find("committed_checkpoints")->as_int(), 12);
  EXPECT_EQ(v.Find("checkpoints_lost")->as_int(), 0);
  EXPECT_EQ(v.Find("checkpoints_detail")->as_string(), "");
  EXPECT_EQ(v.Find("faults_injected")->as_int(), 6);
  EXPECT_EQ(v.Find("faults_detected")->as_int(), 5);
  EXPECT_TRUE(v.Find("run_completed")->as_bool());
  EXPECT_EQ(v.Find("run_detail")->as_string(), "finished at step 200");
  EXPECT_TRUE(v.Find("memory_ok")->as_bool());
  EXPECT_NE(v.Find("memory_detail"), nullptr);

  const auto& faults = j.Find("faults")->items();
  ASSERT_EQ(faults.size(), r.faults.size());
  for (size_t i = 0; i < faults.size(); ++i) {
    const FaultOutcome& f = r.faults[i];
    const JsonValue& o = faults[i];
    EXPECT_EQ(o.Find("id")->as_int(), f.id);
    EXPECT_EQ(o.Find("kind")->as_string(), f.kind);
    EXPECT_EQ(o.Find("target")->as_string(), f.target);
    EXPECT_EQ(o.Find("detected")->as_bool(), f.detected);
    EXPECT_EQ(o.Find("detected_as")->as_string(), f.detected_as);
    EXPECT_EQ(o.Find("steps_lost")->as_int(), f.steps_lost);
    EXPECT_EQ(o.Find("note")->as_string(), f.note);
    // -1 (unknown / never) is null; anything else reads back exactly.
    auto check = [&](const char* key, double want) {
      const JsonValue* got = o.Find(key);
      ASSERT_NE(got, nullptr) << key;
      if (want < 0)
        EXPECT_TRUE(got->is_null()) << key << " of #" << f.id;
      else
        EXPECT_DOUBLE_EQ(got->as_double(), want) << key << " of #" << f.id;
    };
    check("injected_s", f.injected_s);
    check("injected_step", static_cast<double>(f.injected_step));
    check("detection_s", f.detection_s);
    check("recovery_s", f.recovery_s);
  }

  const auto& loss = j.Find("loss")->items();
  ASSERT_EQ(loss.size(), r.loss.size());
  EXPECT_DOUBLE_EQ(loss[5].Find("t_s")->as_double(), r.loss[5].t_s);
  EXPECT_EQ(loss[5].Find("step")->as_int(), r.loss[5].step);
  EXPECT_DOUBLE_EQ(loss[5].Find("loss")->as_double(), r.loss[5].loss);
  const auto& memory = j.Find("memory")->items();
  ASSERT_EQ(memory.size(), 2u);
  EXPECT_DOUBLE_EQ(memory[1].Find("supervisor_rss_mib")->as_double(), 31.5);
  EXPECT_DOUBLE_EQ(memory[1].Find("ranks_rss_mib")->as_double(), 410);

  const JsonValue& t = *j.Find("totals");
  EXPECT_EQ(t.Find("injected")->as_int(), 6);
  EXPECT_EQ(t.Find("detected")->as_int(), 5);
  EXPECT_NEAR(t.Find("detection_median_s")->as_double(), 0.502, 1e-12);
  EXPECT_NEAR(t.Find("recovery_max_s")->as_double(), 3.0, 1e-12);
  EXPECT_EQ(t.Find("steps_lost")->as_int(), 16);
  const JsonValue* kill = t.Find("by_kind")->Find("kill_rank");
  ASSERT_NE(kill, nullptr);
  EXPECT_EQ(kill->Find("injected")->as_int(), 2);
  EXPECT_EQ(kill->Find("detected")->as_int(), 2);
  EXPECT_EQ(t.Find("by_kind")->Find("io_error")->Find("detected")->as_int(), 0);
}

std::vector<std::string> Lines(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

TEST(FormatChaosReport, VerdictChecksFaultTableAndTotals) {
  ChaosReport r = Example();
  std::string text = FormatChaosReport(r);
  std::vector<std::string> lines = Lines(text);
  ASSERT_GT(lines.size(), 6u) << text;
  EXPECT_EQ(lines[0], "chaos: FAIL (1 of 5 checks failed)") << text;
  int ok = 0, fail = 0;
  for (int i = 1; i <= 5; ++i) {
    if (lines[i].rfind("  ok ", 0) == 0) ++ok;
    if (lines[i].rfind("  FAIL ", 0) == 0) ++fail;
  }
  EXPECT_EQ(ok, 4) << text;
  EXPECT_EQ(fail, 1) << text;
  EXPECT_NE(lines[3].find("every fault detected"), std::string::npos) << text;
  EXPECT_NE(lines[3].find("missed #7 io_error"), std::string::npos) << text;

  // The fault table: a header, then one row per fault, columns aligned with the header.
  auto header = std::find_if(lines.begin(), lines.end(), [](const std::string& l) {
    return l.find("detected as") != std::string::npos && l.find("kind") != std::string::npos;
  });
  ASSERT_NE(header, lines.end()) << text;
  const size_t kind_col = header->find("kind"), target_col = header->find("target");
  for (size_t i = 0; i < r.faults.size(); ++i) {
    const FaultOutcome& f = r.faults[i];
    const std::string& row = *(header + 1 + i);
    EXPECT_EQ(row.find(f.kind), kind_col) << row;
    EXPECT_EQ(row.find(f.target), target_col) << row;
    const std::string id = std::to_string(f.id);
    EXPECT_EQ(row.substr(kind_col - 2 - id.size(), id.size()), id) << row;  // right-aligned
  }
  EXPECT_NE(text.find("MISSED"), std::string::npos) << text;
  EXPECT_NE(text.find("run ended before step 300"), std::string::npos) << text;
  EXPECT_NE(text.find("kill_rank 2/2 detected, stop_rank 1/1 detected"), std::string::npos) << text;
  EXPECT_NE(text.find("io_error 0/1 detected"), std::string::npos) << text;
  EXPECT_NE(text.find("detection median 0.502 s, max 2.100 s"), std::string::npos) << text;
  EXPECT_NE(text.find("recovery median 1.75 s, max 3.00 s"), std::string::npos) << text;
  EXPECT_NE(text.find("steps lost 16"), std::string::npos) << text;
  EXPECT_NE(text.find("goodput 62.5%"), std::string::npos) << text;

  r.verdict.faults_detected = 6;
  text = FormatChaosReport(r);
  EXPECT_EQ(text.rfind("chaos: PASS\n", 0), 0u) << text;
}

// A small XML well-formedness check for what the SVG writer emits: tags nest and close in
// order, attribute values are quoted, and text holds no raw '<' or unescaped '&'.
bool WellFormed(const std::string& s, std::string* why) {
  std::vector<std::string> stack;
  size_t i = 0;
  while (i < s.size()) {
    if (s[i] == '&') {
      const size_t semi = s.find(';', i);
      const std::string ent = semi == std::string::npos ? "" : s.substr(i, semi - i + 1);
      if (ent != "&amp;" && ent != "&lt;" && ent != "&gt;" && ent != "&quot;" && ent != "&apos;") {
        *why = "bad entity at " + std::to_string(i);
        return false;
      }
      i = semi + 1;
      continue;
    }
    if (s[i] != '<') {
      ++i;
      continue;
    }
    size_t end = i + 1;
    bool in_quote = false;
    while (end < s.size() && (in_quote || s[end] != '>')) {
      if (s[end] == '"') in_quote = !in_quote;
      if (in_quote && s[end] == '<') {
        *why = "'<' in attribute at " + std::to_string(end);
        return false;
      }
      ++end;
    }
    if (end == s.size()) {
      *why = "unterminated tag";
      return false;
    }
    std::string tag = s.substr(i + 1, end - i - 1);
    i = end + 1;
    if (tag.empty()) {
      *why = "empty tag";
      return false;
    }
    if (tag[0] == '/') {
      const std::string name = tag.substr(1);
      if (stack.empty() || stack.back() != name) {
        *why = "mismatched </" + name + ">";
        return false;
      }
      stack.pop_back();
      continue;
    }
    const bool self_closing = tag.back() == '/';
    const std::string name = tag.substr(0, tag.find_first_of(" \n/"));
    if (name.empty() || !std::all_of(name.begin(), name.end(), [](char c) {
          return std::isalnum(static_cast<unsigned char>(c)) || c == '-';
        })) {
      *why = "bad tag name '" + name + "'";
      return false;
    }
    if (!self_closing) stack.push_back(name);
  }
  if (!stack.empty()) {
    *why = "unclosed <" + stack.back() + ">";
    return false;
  }
  return true;
}

size_t Count(const std::string& s, const std::string& what) {
  size_t n = 0;
  for (size_t p = s.find(what); p != std::string::npos; p = s.find(what, p + what.size())) ++n;
  return n;
}

void ExpectValidSvg(const std::string& svg) {
  ASSERT_EQ(svg.rfind("<svg ", 0), 0u) << svg.substr(0, 80);
  std::string trimmed = svg;
  while (!trimmed.empty() && (trimmed.back() == '\n' || trimmed.back() == ' ')) trimmed.pop_back();
  ASSERT_GE(trimmed.size(), 6u);
  EXPECT_EQ(trimmed.substr(trimmed.size() - 6), "</svg>");
  EXPECT_EQ(Count(svg, "<g ") + Count(svg, "<g>"), Count(svg, "</g>"));
  std::string why;
  EXPECT_TRUE(WellFormed(svg, &why)) << why;
  std::string lower = svg;
  std::transform(lower.begin(), lower.end(), lower.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  EXPECT_EQ(lower.find("nan"), std::string::npos);
  EXPECT_EQ(lower.find("inf"), std::string::npos);
  EXPECT_EQ(svg.find("<script"), std::string::npos);
  EXPECT_EQ(svg.find("href"), std::string::npos);
  EXPECT_NE(svg.find("wall-clock time (s)"), std::string::npos);
  EXPECT_NE(svg.find("loss (nats/token)"), std::string::npos);
}

TEST(ChaosReportSvg, MarksEveryFaultAndRecovery) {
  ChaosReport r = Example();
  r.faults[1].kind = "stop<rank>";
  r.faults[1].target = "rank \"1\" & co";
  const std::string svg = ChaosReportSvg(r);
  ExpectValidSvg(svg);
  EXPECT_EQ(Count(svg, "class=\"fault\""), 6u);     // every injected fault, not #6
  EXPECT_EQ(Count(svg, "class=\"recovery\""), 4u);  // #1..#4 restarted
  EXPECT_NE(svg.find("#2 stop&lt;rank&gt;"), std::string::npos);
  EXPECT_EQ(svg.find("stop<rank"), std::string::npos);
  EXPECT_NE(svg.find("rank &quot;1&quot; &amp; co"), std::string::npos);
  EXPECT_NE(svg.find("#7 io_error"), std::string::npos);
  EXPECT_NE(svg.find("chaos FAIL"), std::string::npos);
  EXPECT_NE(svg.find("fill=\"#ffffff\""), std::string::npos);
  // The 6 s hole after 30 s (median interval 1 s, so more than 5x) splits the curve in two.
  EXPECT_EQ(Count(svg, "<polyline"), 2u);
  EXPECT_EQ(svg, ChaosReportSvg(r));  // deterministic
}

TEST(ChaosReportSvg, EmptyAndDegenerateInputs) {
  ExpectValidSvg(ChaosReportSvg(ChaosReport{}));
  EXPECT_NE(ChaosReportSvg(ChaosReport{}).find("no loss data"), std::string::npos);

  ChaosReport one;
  one.loss = {{0, 1, 3.5}};
  const std::string svg = ChaosReportSvg(one, 10, 10);  // clamped to a usable size
  ExpectValidSvg(svg);
  EXPECT_EQ(Count(svg, "<circle"), 1u);
  EXPECT_EQ(Count(svg, "<polyline"), 0u);

  // Equal losses, equal timestamps, a non-finite point and a lone point after a long pause.
  ChaosReport odd;
  odd.loss = {{0, 1, 2.0}, {1, 2, 2.0}, {1, 3, 2.0},  {2, 4, 2.0}, {2.5, 5, std::nan("")},
              {3, 6, 2.0}, {4, 7, 2.0}, {100, 8, 2.0}};
  odd.faults = {Fault(1, "kill_rank", "rank 0", 2.5, 3, "connection_lost", 0.01, 4.0, 1)};
  const std::string odd_svg = ChaosReportSvg(odd);
  ExpectValidSvg(odd_svg);
  EXPECT_EQ(Count(odd_svg, "<polyline"), 1u);
  EXPECT_EQ(Count(odd_svg, "<circle"), 1u);
}

}  // namespace
}  // namespace tessera
