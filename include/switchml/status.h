// switchml/status.h — error values used at every boundary of the library.
//
// Errors are values: functions that can fail because of user input,
// configuration or the network return `Status` or `StatusOr<T>`; they never abort the host.
//
//   switchml::StatusOr<int> ParsePort(std::string_view s);
//   auto port = ParsePort("48864");
//   if (!port.ok()) { std::cerr << port.status() << "\n"; return 1; }
//   use(*port);
//
// Status is a small value type (a code and a message); it is cheap to move, and copying an OK
// status allocates nothing. Thread-compatible (like any value type).
#pragma once

#include <cstdint>
#include <optional>
#include <ostream>
#include <string>
#include <string_view>
#include <utility>

namespace switchml {

// The codes follow gRPC/Abseil canonical codes; pick the most specific one.
enum class StatusCode : int {
  kOk = 0,
  kCancelled = 1,
  kUnknown = 2,
  kInvalidArgument = 3,
  kDeadlineExceeded = 4,
  kNotFound = 5,
  kAlreadyExists = 6,
  kPermissionDenied = 7,
  kResourceExhausted = 8,
  kFailedPrecondition = 9,
  kAborted = 10,
  kOutOfRange = 11,
  kUnimplemented = 12,
  kInternal = 13,
  kUnavailable = 14,
  kDataLoss = 15,
  kUnauthenticated = 16,
};

std::string_view StatusCodeName(StatusCode code);

class [[nodiscard]] Status {
 public:
  Status() = default;  // OK
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}

  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }
  // "INVALID_ARGUMENT: num_workers must be in [1, 256], got 0" (or "OK").
  std::string ToString() const;
  // Returns a copy whose message is "<prefix>: <message>"; OK stays OK.
  Status WithContext(std::string_view prefix) const;

  friend bool operator==(const Status& a, const Status& b) {
    return a.code_ == b.code_ && a.message_ == b.message_;
  }

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

inline Status OkStatus() { return Status(); }
inline Status InvalidArgumentError(std::string m) { return {StatusCode::kInvalidArgument, std::move(m)}; }
inline Status DeadlineExceededError(std::string m) { return {StatusCode::kDeadlineExceeded, std::move(m)}; }
inline Status UnavailableError(std::string m) { return {StatusCode::kUnavailable, std::move(m)}; }
inline Status FailedPreconditionError(std::string m) { return {StatusCode::kFailedPrecondition, std::move(m)}; }
inline Status InternalError(std::string m) { return {StatusCode::kInternal, std::move(m)}; }
inline Status CancelledError(std::string m) { return {StatusCode::kCancelled, std::move(m)}; }
inline Status OutOfRangeError(std::string m) { return {StatusCode::kOutOfRange, std::move(m)}; }
inline Status ResourceExhaustedError(std::string m) { return {StatusCode::kResourceExhausted, std::move(m)}; }
inline Status AlreadyExistsError(std::string m) { return {StatusCode::kAlreadyExists, std::move(m)}; }
inline Status NotFoundError(std::string m) { return {StatusCode::kNotFound, std::move(m)}; }
inline Status PermissionDeniedError(std::string m) { return {StatusCode::kPermissionDenied, std::move(m)}; }
inline Status UnimplementedError(std::string m) { return {StatusCode::kUnimplemented, std::move(m)}; }
inline Status AbortedError(std::string m) { return {StatusCode::kAborted, std::move(m)}; }
inline Status DataLossError(std::string m) { return {StatusCode::kDataLoss, std::move(m)}; }
inline Status UnauthenticatedError(std::string m) { return {StatusCode::kUnauthenticated, std::move(m)}; }

std::ostream& operator<<(std::ostream& os, const Status& s);

// Either a value or a non-OK status. Accessing the value of an error is a programming error
// (checked: it aborts with the status message), so always test ok() first.
template <typename T>
class [[nodiscard]] StatusOr {
 public:
  StatusOr(const T& value) : value_(value) {}                 // NOLINT(implicit)
  StatusOr(T&& value) : value_(std::move(value)) {}           // NOLINT(implicit)
  StatusOr(Status status) : status_(std::move(status)) {      // NOLINT(implicit)
    if (status_.ok()) status_ = InternalError("StatusOr constructed from an OK status");
  }

  bool ok() const { return value_.has_value(); }
  const Status& status() const { return status_; }
  const T& value() const& { CheckOk(); return *value_; }
  T& value() & { CheckOk(); return *value_; }
  T&& value() && { CheckOk(); return std::move(*value_); }
  const T& operator*() const& { return value(); }
  T& operator*() & { return value(); }
  T&& operator*() && { return std::move(*this).value(); }
  const T* operator->() const { return &value(); }
  T* operator->() { return &value(); }

 private:
  void CheckOk() const;
  Status status_;
  std::optional<T> value_;
};

[[noreturn]] void DieOnBadStatusOrAccess(const Status& s);

template <typename T>
void StatusOr<T>::CheckOk() const {
  if (!value_.has_value()) DieOnBadStatusOrAccess(status_);
}

}  // namespace switchml

// Propagates a non-OK Status from an expression returning Status.
#define SWITCHML_RETURN_IF_ERROR(expr)                 \
  do {                                                 \
    ::switchml::Status switchml_status_ = (expr);      \
    if (!switchml_status_.ok()) return switchml_status_; \
  } while (0)

#define SWITCHML_CONCAT_INNER_(a, b) a##b
#define SWITCHML_CONCAT_(a, b) SWITCHML_CONCAT_INNER_(a, b)
// SWITCHML_ASSIGN_OR_RETURN(auto x, Expr()); propagates the error of a StatusOr.
#define SWITCHML_ASSIGN_OR_RETURN(lhs, expr) \
  SWITCHML_ASSIGN_OR_RETURN_IMPL_(SWITCHML_CONCAT_(switchml_statusor_, __LINE__), lhs, expr)
#define SWITCHML_ASSIGN_OR_RETURN_IMPL_(tmp, lhs, expr) \
  auto tmp = (expr);                                    \
  if (!tmp.ok()) return tmp.status();                   \
  lhs = std::move(tmp).value()
