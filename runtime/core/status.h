// runtime/core/status.h — expected failures as values.
//
// Owns: Status (a code and a one-line message) and Result<T> (a value or a Status).
// Expected failures — bad config, missing or corrupt files, timeouts, lost peers — travel as
// these values up to the one place that decides what to do (usually tools/, which prints the
// message and exits with the code from exit_codes.h). Broken invariants use CHECK (check.h).
// Thread-safety: values; no shared state.
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <variant>

namespace tessera {

enum class StatusCode {
  kOk = 0,
  kInvalidArgument,     // the caller's input is wrong (config value, CLI flag, shape)
  kNotFound,            // a file, key or tensor that should exist does not
  kDataLoss,            // a file exists but its bytes are wrong (bad header, truncated, checksum)
  kIoError,             // the OS refused a read/write/fsync
  kFailedPrecondition,  // the system is not in a state where this can run
  kOutOfRange,          // an index or position past the end
  kTimeout,             // a bounded wait expired
  kAborted,             // someone aborted the operation
  kInternal,            // a bug we detected but chose not to abort on
  kCorruptCheckpoint,   // no usable checkpoint: every candidate failed verification
  kNonFinite,           // training produced NaN/Inf (loss, gradient norm, parameters or
                        //   optimizer state): stopped rather than going on or saving it
};

const char* StatusCodeName(StatusCode code);

class [[nodiscard]] Status {
 public:
  Status() = default;  // OK
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status Ok() { return Status(); }
  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }
  // "<message>" for errors, "OK" for success; what a user sees.
  std::string ToString() const;
  // Returns a copy whose message is "<prefix>: <message>" (adds context on the way up).
  Status WithPrefix(const std::string& prefix) const;

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

inline Status InvalidArgument(std::string m) { return {StatusCode::kInvalidArgument, std::move(m)}; }
inline Status NotFound(std::string m) { return {StatusCode::kNotFound, std::move(m)}; }
inline Status DataLoss(std::string m) { return {StatusCode::kDataLoss, std::move(m)}; }
inline Status IoError(std::string m) { return {StatusCode::kIoError, std::move(m)}; }
inline Status FailedPrecondition(std::string m) { return {StatusCode::kFailedPrecondition, std::move(m)}; }
inline Status OutOfRange(std::string m) { return {StatusCode::kOutOfRange, std::move(m)}; }
inline Status Internal(std::string m) { return {StatusCode::kInternal, std::move(m)}; }
inline Status CorruptCheckpoint(std::string m) {
  return {StatusCode::kCorruptCheckpoint, std::move(m)};
}
inline Status NonFinite(std::string m) { return {StatusCode::kNonFinite, std::move(m)}; }

// A value or the Status explaining why there is none.
template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::move(value)) {}           // NOLINT: implicit by design
  Result(Status status) : v_(std::move(status)) {}    // NOLINT: must not be OK

  bool ok() const { return std::holds_alternative<T>(v_); }
  const Status& status() const {
    static const Status kOk;
    return ok() ? kOk : std::get<Status>(v_);
  }
  T& value() & { return std::get<T>(v_); }
  const T& value() const& { return std::get<T>(v_); }
  T&& value() && { return std::get<T>(std::move(v_)); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }

 private:
  std::variant<T, Status> v_;
};

}  // namespace tessera

#define TESSERA_CONCAT_INNER(a, b) a##b
#define TESSERA_CONCAT(a, b) TESSERA_CONCAT_INNER(a, b)

// Returns the Status from the enclosing function if `expr` is not OK.
#define RETURN_IF_ERROR(expr)                       \
  do {                                              \
    ::tessera::Status _st = (expr);                 \
    if (!_st.ok()) return _st;                      \
  } while (0)

// ASSIGN_OR_RETURN(auto x, MakeX()); declares x from a Result or returns its Status.
#define ASSIGN_OR_RETURN(lhs, expr) \
  ASSIGN_OR_RETURN_IMPL(TESSERA_CONCAT(_res_, __LINE__), lhs, expr)
#define ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                          \
  if (!tmp.ok()) return tmp.status();         \
  lhs = std::move(tmp).value()
