// runtime/chaos/audit.cc — see audit.h.
#include "runtime/chaos/audit.h"

#include <map>

#include "checkpoint/catalog.h"
#include "checkpoint/commit.h"
#include "checkpoint/shard_file.h"
#include "runtime/core/file_util.h"
#include "runtime/supervisor/text.h"

namespace tessera {

Result<WeightComparison> CompareWeightFiles(const std::string& reference,
                                            const std::string& candidate) {
  ASSIGN_OR_RETURN(std::string a, ReadFileToString(reference));
  ASSIGN_OR_RETURN(std::string b, ReadFileToString(candidate));
  WeightComparison c;
  if (a == b) {
    c.identical = true;
    c.detail = StrFormat("bit-identical (%.2f MiB)", a.size() / 1048576.0);
    return c;
  }
  int64_t differ = 0;
  int64_t first = -1;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) {
    if (a[i] != b[i]) {
      ++differ;
      if (first < 0) first = static_cast<int64_t>(i);
    }
  }
  c.detail = StrFormat("DIFFERENT: %lld of %zu bytes differ (first at byte %lld)%s",
                       static_cast<long long>(differ), a.size(), static_cast<long long>(first),
                       a.size() != b.size() ? StrFormat(", sizes %zu vs %zu", a.size(), b.size()).c_str() : "");
  return c;
}

Result<CheckpointAudit> AuditCheckpoints(const std::string& root, const std::set<int64_t>& damaged_steps) {
  CheckpointAudit audit;
  ASSIGN_OR_RETURN(std::vector<int64_t> on_disk, CommittedSteps(root));
  std::map<int64_t, CheckpointEntry> entries;
  if (auto catalog = Catalog::Open(root, /*read_only=*/true); catalog.ok()) {
    ASSIGN_OR_RETURN(std::vector<CheckpointEntry> list, (*catalog)->List());
    for (CheckpointEntry& e : list) entries[e.step] = std::move(e);
  } else if (catalog.status().code() != StatusCode::kNotFound) {
    return catalog.status();
  }
  std::string lost;
  auto lose = [&](int64_t step, const std::string& why) {
    ++audit.lost;
    lost += StrFormat("%sstep %lld: %s", lost.empty() ? "" : "; ", static_cast<long long>(step), why.c_str());
  };
  auto verify = [&](int64_t step) -> std::string {
    auto reader = CheckpointReader::Open(root + "/" + StepDirName(step));
    if (!reader.ok()) return reader.status().ToString();
    auto bytes = (*reader)->VerifyAll();
    return bytes.ok() ? std::string() : bytes.status().ToString();
  };
  std::set<int64_t> disk(on_disk.begin(), on_disk.end());
  for (const auto& [step, e] : entries) {
    switch (e.status) {
      case CheckpointStatus::kCommitted:
        ++audit.committed;
        if (!disk.count(step)) {
          lose(step, "the catalog says committed, the directory is gone");
        } else if (std::string why = verify(step); !why.empty()) {
          if (!damaged_steps.count(step)) lose(step, "does not verify: " + why);
        }
        break;
      case CheckpointStatus::kDeleted:
        ++audit.committed;
        if (e.note != "retention") lose(step, "deleted, but not by retention (" + e.note + ")");
        break;
      case CheckpointStatus::kCorrupt:
        ++audit.committed;
        if (!damaged_steps.count(step)) lose(step, "marked corrupt, but the scenario never damaged it: " + e.note);
        break;
      case CheckpointStatus::kWriting:
      case CheckpointStatus::kFailed:
        break;  // never committed: nothing to lose
    }
  }
  for (int64_t step : on_disk) {
    if (entries.count(step)) continue;
    ++audit.committed;  // committed on disk, its catalog record lost with its rank
    if (std::string why = verify(step); !why.empty() && !damaged_steps.count(step)) {
      lose(step, "does not verify: " + why);
    }
  }
  audit.detail = audit.lost == 0
                     ? StrFormat("every one verified or deleted by retention (%zu damaged on purpose)",
                                 damaged_steps.size())
                     : lost;
  return audit;
}

}  // namespace tessera
