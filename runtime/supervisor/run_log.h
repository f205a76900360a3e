// runtime/supervisor/run_log.h — where a supervised run's events go.
//
// Owns: the run's event stream. Every event becomes a line for the user ("supervisor: [t] kind
// message" on `out`), a JSON line in <run_dir>/events.jsonl ({unix_s, t_s, run_id,
// incarnation, kind, message} and, when the event concerns particular ranks, "ranks": [..])
// and, unless told otherwise, a catalog event "supervisor_<kind>". The message is for people;
// programs reading events.jsonl (tessera chaos) match on kind and ranks, never on its text. Rejected control-plane connections are aggregated (one line per 10 s
// with a count), so a client hammering the port cannot flood the catalog or slow the loop.
// Thread-safety: one thread (the supervisor's loop).
#pragma once

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "checkpoint/catalog.h"
#include "runtime/core/status.h"

namespace tessera {

class RunLog {
 public:
  using Clock = std::chrono::steady_clock;

  // `out` may be null (no lines). Times are seconds after `start`.
  RunLog(FILE* out, std::string run_id, Clock::time_point start);
  ~RunLog();
  RunLog(const RunLog&) = delete;
  RunLog& operator=(const RunLog&) = delete;

  // Opens <run_dir>/events.jsonl for appending; `catalog` (may be null) gets the events too.
  Status Open(const std::string& run_dir, Catalog* catalog);

  // `ranks` (may be empty): the ranks the event is about, ascending (a straggler's rank).
  void Emit(int64_t incarnation, const std::string& kind, const std::string& message,
            bool to_catalog = true, const std::vector<int>& ranks = {});
  // A rejected connection: counted, reported at most once per 10 s (the first at once).
  void Rejected(int64_t incarnation, const std::string& peer, const std::string& reason);
  // Reports rejections counted but not yet reported (end of an incarnation).
  void FlushRejected(int64_t incarnation);

  double Now() const;
  double At(Clock::time_point t) const;
  double start_unix_s() const { return start_unix_s_; }
  Catalog* catalog() { return catalog_; }
  const std::string& run_id() const { return run_id_; }

 private:
  FILE* out_;
  std::string run_id_;
  Clock::time_point start_;
  double start_unix_s_;
  FILE* events_ = nullptr;
  Catalog* catalog_ = nullptr;
  int64_t rejected_pending_ = 0;
  std::string last_rejection_;
  Clock::time_point last_rejection_report_{};
};

}  // namespace tessera
