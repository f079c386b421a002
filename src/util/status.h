// Status and Result<T>: how errors cross module boundaries.
//
// A Status is either ok or carries a code and a human-readable message that names what was
// wrong and why (the file, the tensor, the field). Nothing in graft throws across a module
// boundary; a server never calls exit().
#pragma once

#include <string>
#include <utility>
#include <variant>

namespace graft {

enum class StatusCode {
  kOk = 0,
  kInvalidArgument,  // a request, flag or field has a bad value
  kNotFound,         // a file, tensor or name does not exist
  kCorrupt,          // a file's bytes contradict its own format (truncated, overlapping, ...)
  kUnsupported,      // well-formed, but a feature graft does not implement
  kIo,               // the operating system refused (open, mmap, read, write)
  kResourceExhausted,  // a queue or memory budget is full right now: retry later
  kUnavailable,      // shutting down or not serving
  kDeadlineExceeded, // ran past its time limit
  kCancelled,        // its caller went away (a client hung up) before it was done
  kInternal,         // a broken invariant inside graft
};

const char* StatusCodeName(StatusCode code);

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status Ok() { return Status(); }
  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }
  // "corrupt: model.safetensors: tensor 'x': ..." — code name, then the message.
  std::string ToString() const;
  // Returns a copy whose message is prefixed with `context: `.
  Status WithContext(const std::string& context) const;

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

inline Status InvalidArgument(std::string m) { return {StatusCode::kInvalidArgument, std::move(m)}; }
inline Status NotFound(std::string m) { return {StatusCode::kNotFound, std::move(m)}; }
inline Status Corrupt(std::string m) { return {StatusCode::kCorrupt, std::move(m)}; }
inline Status Unsupported(std::string m) { return {StatusCode::kUnsupported, std::move(m)}; }
inline Status IoError(std::string m) { return {StatusCode::kIo, std::move(m)}; }
inline Status ResourceExhausted(std::string m) { return {StatusCode::kResourceExhausted, std::move(m)}; }
inline Status Unavailable(std::string m) { return {StatusCode::kUnavailable, std::move(m)}; }
inline Status DeadlineExceeded(std::string m) { return {StatusCode::kDeadlineExceeded, std::move(m)}; }
inline Status Cancelled(std::string m) { return {StatusCode::kCancelled, std::move(m)}; }
inline Status Internal(std::string m) { return {StatusCode::kInternal, std::move(m)}; }

// Result<T>: a value or a non-ok Status.
template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::move(value)) {}                        // NOLINT: implicit by design
  Result(Status status) : v_(std::move(status)) {}                 // NOLINT: implicit by design
  bool ok() const { return std::holds_alternative<T>(v_); }
  const Status& status() const {
    static const Status kOkStatus;
    return ok() ? kOkStatus : std::get<Status>(v_);
  }
  T& value() & { return std::get<T>(v_); }
  const T& value() const& { return std::get<T>(v_); }
  T&& value() && { return std::get<T>(std::move(v_)); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() & { return value(); }

 private:
  std::variant<T, Status> v_;
};

}  // namespace graft

#define GRAFT_CONCAT_INNER(a, b) a##b
#define GRAFT_CONCAT(a, b) GRAFT_CONCAT_INNER(a, b)

#define GRAFT_RETURN_IF_ERROR(expr)          \
  do {                                       \
    ::graft::Status _graft_st = (expr);      \
    if (!_graft_st.ok()) return _graft_st;   \
  } while (0)

#define GRAFT_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                                \
  if (!tmp.ok()) return tmp.status();               \
  lhs = std::move(tmp).value()

#define GRAFT_ASSIGN_OR_RETURN(lhs, expr) \
  GRAFT_ASSIGN_OR_RETURN_IMPL(GRAFT_CONCAT(_graft_r_, __LINE__), lhs, expr)
