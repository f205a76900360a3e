// runtime/supervisor/run_log.cc — see run_log.h.
#include "runtime/supervisor/run_log.h"

#include "runtime/core/json.h"

namespace tessera {
namespace {

double UnixNow() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

constexpr auto kRejectionReportInterval = std::chrono::seconds(10);

}  // namespace

RunLog::RunLog(FILE* out, std::string run_id, Clock::time_point start)
    : out_(out), run_id_(std::move(run_id)), start_(start),
      start_unix_s_(UnixNow() - std::chrono::duration<double>(Clock::now() - start).count()) {}

RunLog::~RunLog() {
  if (events_ != nullptr) std::fclose(events_);
}

Status RunLog::Open(const std::string& run_dir, Catalog* catalog) {
  catalog_ = catalog;
  const std::string path = run_dir + "/events.jsonl";
  events_ = std::fopen(path.c_str(), "a");
  if (events_ == nullptr) return IoError(path + ": cannot open for appending");
  return Status::Ok();
}

double RunLog::Now() const { return At(Clock::now()); }

double RunLog::At(Clock::time_point t) const {
  return std::chrono::duration<double>(t - start_).count();
}

void RunLog::Emit(int64_t incarnation, const std::string& kind, const std::string& message,
                  bool to_catalog, const std::vector<int>& ranks) {
  const double t = Now();
  if (out_ != nullptr) {
    std::fprintf(out_, "supervisor: [%7.2f s] %-10s %s\n", t, kind.c_str(), message.c_str());
    std::fflush(out_);
  }
  if (events_ != nullptr) {
    JsonWriter w;
    w.BeginObject();
    w.Key("unix_s").Double(UnixNow());
    w.Key("t_s").Double(t);
    w.Key("run_id").String(run_id_);
    w.Key("incarnation").Int(incarnation);
    w.Key("kind").String(kind);
    w.Key("message").String(message);
    if (!ranks.empty()) {
      w.Key("ranks").BeginArray();
      for (int r : ranks) w.Int(r);
      w.EndArray();
    }
    w.EndObject();
    std::fprintf(events_, "%s\n", w.str().c_str());
    std::fflush(events_);
  }
  if (catalog_ != nullptr && to_catalog) (void)catalog_->AddEvent("supervisor_" + kind, message);
}

void RunLog::Rejected(int64_t incarnation, const std::string& peer, const std::string& reason) {
  ++rejected_pending_;
  last_rejection_ = "from " + peer + ": " + reason;
  if (Clock::now() - last_rejection_report_ >= kRejectionReportInterval) FlushRejected(incarnation);
}

void RunLog::FlushRejected(int64_t incarnation) {
  if (rejected_pending_ == 0) return;
  Emit(incarnation, "rejected",
       std::to_string(rejected_pending_) + " control connection(s) refused (last " +
           last_rejection_ + ")");
  rejected_pending_ = 0;
  last_rejection_report_ = Clock::now();
}

}  // namespace tessera
