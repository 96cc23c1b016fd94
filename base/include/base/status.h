// Status and Result<T>: how every sweep library reports a failure.
// Functions that can fail return one of these; no exception crosses a library boundary.
// Both are plain values: copy them freely, share none across threads without your own lock.
#pragma once

#include <cassert>
#include <string>
#include <string_view>
#include <utility>
#include <variant>

namespace sweep {

class Status {
 public:
  enum class Code {
    kOk = 0,
    kInvalidArgument,  // the user's input is wrong (config, flag, parameter value)
    kNotFound,         // a named thing (sweep, trial, file) does not exist
    kAlreadyExists,    // creating something whose name is taken
    kIoError,          // the operating system refused (disk, pipe, process)
    kCorruption,       // stored data does not parse or does not match its checksum
    kBusy,             // someone else holds the resource (database lock)
    kUnavailable,      // the machine refused for now (disk full, quota, read-only file
                       // system): the same work can succeed once that is put right
    kAborted,          // stopped on request
    kInternal,         // a bug of ours
  };

  Status() = default;
  static Status Ok() { return Status(); }
  static Status InvalidArgument(std::string msg) {
    return Status(Code::kInvalidArgument, std::move(msg));
  }
  static Status NotFound(std::string msg) { return Status(Code::kNotFound, std::move(msg)); }
  static Status AlreadyExists(std::string msg) {
    return Status(Code::kAlreadyExists, std::move(msg));
  }
  static Status IoError(std::string msg) { return Status(Code::kIoError, std::move(msg)); }
  static Status Corruption(std::string msg) { return Status(Code::kCorruption, std::move(msg)); }
  static Status Busy(std::string msg) { return Status(Code::kBusy, std::move(msg)); }
  static Status Unavailable(std::string msg) { return Status(Code::kUnavailable, std::move(msg)); }
  static Status Aborted(std::string msg) { return Status(Code::kAborted, std::move(msg)); }
  static Status Internal(std::string msg) { return Status(Code::kInternal, std::move(msg)); }

  bool ok() const { return code_ == Code::kOk; }
  Code code() const { return code_; }
  const std::string& message() const { return message_; }

  // The same code with another message.
  Status WithMessage(std::string message) const {
    if (ok()) return *this;
    return Status(code_, std::move(message));
  }

  // The same status with "context: " put before its message, for adding where it happened.
  Status WithContext(std::string_view context) const {
    if (ok()) return *this;
    return Status(code_, std::string(context) + ": " + message_);
  }

 private:
  Status(Code code, std::string message) : code_(code), message_(std::move(message)) {}
  Code code_ = Code::kOk;
  std::string message_;
};

// Either a T or a non-ok Status.
template <typename T>
class Result {
 public:
  Result(T value) : v_(std::move(value)) {}  // NOLINT: implicit by design
  Result(Status status) : v_(std::move(status)) {
    assert(!std::get<Status>(v_).ok() && "Result needs a value or an error");
  }

  bool ok() const { return std::holds_alternative<T>(v_); }
  const Status& status() const {
    static const Status kOk;
    return ok() ? kOk : std::get<Status>(v_);
  }
  T& value() & { return std::get<T>(v_); }
  const T& value() const& { return std::get<T>(v_); }
  T&& value() && { return std::get<T>(std::move(v_)); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }

 private:
  std::variant<T, Status> v_;
};

}  // namespace sweep

#define SWEEP_CONCAT_INNER_(a, b) a##b
#define SWEEP_CONCAT_(a, b) SWEEP_CONCAT_INNER_(a, b)

#define SWEEP_RETURN_IF_ERROR(expr)                \
  do {                                             \
    ::sweep::Status sweep_status_ = (expr);        \
    if (!sweep_status_.ok()) return sweep_status_; \
  } while (0)

#define SWEEP_ASSIGN_OR_RETURN_IMPL_(tmp, lhs, expr) \
  auto tmp = (expr);                                 \
  if (!tmp.ok()) return tmp.status();                \
  lhs = std::move(tmp).value()

#define SWEEP_ASSIGN_OR_RETURN(lhs, expr) \
  SWEEP_ASSIGN_OR_RETURN_IMPL_(SWEEP_CONCAT_(sweep_result_, __LINE__), lhs, expr)
