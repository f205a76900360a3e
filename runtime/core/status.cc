// runtime/core/status.cc — names and formatting for Status.
#include "runtime/core/status.h"

namespace tessera {

const char* StatusCodeName(StatusCode code) {
  switch (code) {
    case StatusCode::kOk: return "OK";
    case StatusCode::kInvalidArgument: return "invalid argument";
    case StatusCode::kNotFound: return "not found";
    case StatusCode::kDataLoss: return "data loss";
    case StatusCode::kIoError: return "I/O error";
    case StatusCode::kFailedPrecondition: return "failed precondition";
    case StatusCode::kOutOfRange: return "out of range";
    case StatusCode::kTimeout: return "timeout";
    case StatusCode::kAborted: return "aborted";
    case StatusCode::kInternal: return "internal";
    case StatusCode::kCorruptCheckpoint: return "corrupt checkpoint";
    case StatusCode::kNonFinite: return "non-finite training";
  }
  return "unknown";
}

std::string Status::ToString() const { return ok() ? "OK" : message_; }

Status Status::WithPrefix(const std::string& prefix) const {
  if (ok()) return *this;
  return Status(code_, prefix + ": " + message_);
}

}  // namespace tessera
