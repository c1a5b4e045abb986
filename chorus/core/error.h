// Errors: one exception class per TensorFlow error code, all derived from chorus::Error.
//
// Policy (as in Gloo's docs/errors.md):
//   - Bad input from a caller, a missing resource, a timeout: throw the typed exception. The
//     process keeps running; the caller may catch and retry (e.g. a smaller allocation after
//     ResourceExhaustedError).
//   - Broken internal invariants: CHORUS_ENFORCE*, which throws InternalError with both values.
//   - Never abort, never assert on untrusted input.
// Messages say what was wrong, the value seen, and what is valid.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>

namespace chorus {

// TensorFlow's canonical error codes (tensorflow/core/protobuf/error_codes.proto), same numbers.
enum class ErrorCode : int {
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
};

// "INVALID_ARGUMENT", "RESOURCE_EXHAUSTED", ... as TensorFlow prints them.
std::string_view error_code_name(ErrorCode code);

// Base of every exception chorus throws. what() is "<CODE_NAME>: <message>".
class Error : public std::runtime_error {
 public:
  Error(ErrorCode code, const std::string& message);
  ErrorCode code() const noexcept { return code_; }
  // The message without the code prefix.
  const std::string& message() const noexcept { return message_; }

 private:
  ErrorCode code_;
  std::string message_;
};

#define CHORUS_DECLARE_ERROR(Name, Code)                                           \
  class Name : public Error {                                                      \
   public:                                                                         \
    explicit Name(const std::string& message) : Error(ErrorCode::Code, message) {} \
  }

CHORUS_DECLARE_ERROR(CancelledError, kCancelled);
CHORUS_DECLARE_ERROR(UnknownError, kUnknown);
CHORUS_DECLARE_ERROR(InvalidArgumentError, kInvalidArgument);
CHORUS_DECLARE_ERROR(DeadlineExceededError, kDeadlineExceeded);
CHORUS_DECLARE_ERROR(NotFoundError, kNotFound);
CHORUS_DECLARE_ERROR(AlreadyExistsError, kAlreadyExists);
CHORUS_DECLARE_ERROR(PermissionDeniedError, kPermissionDenied);
CHORUS_DECLARE_ERROR(ResourceExhaustedError, kResourceExhausted);
CHORUS_DECLARE_ERROR(FailedPreconditionError, kFailedPrecondition);
CHORUS_DECLARE_ERROR(AbortedError, kAborted);
CHORUS_DECLARE_ERROR(OutOfRangeError, kOutOfRange);
CHORUS_DECLARE_ERROR(UnimplementedError, kUnimplemented);
CHORUS_DECLARE_ERROR(InternalError, kInternal);
CHORUS_DECLARE_ERROR(UnavailableError, kUnavailable);
CHORUS_DECLARE_ERROR(DataLossError, kDataLoss);

#undef CHORUS_DECLARE_ERROR

// Throws the exception class that belongs to `code`.
[[noreturn]] void throw_error(ErrorCode code, const std::string& message);

namespace internal {

// Concatenates anything streamable: str_cat("limit ", 5, " MiB").
template <typename... Args>
std::string str_cat(const Args&... args) {
  std::ostringstream os;
  (os << ... << args);
  return os.str();
}

[[noreturn]] void throw_enforce(const char* file, int line, const std::string& message);

}  // namespace internal
}  // namespace chorus

// Throws ErrorClass(str_cat(args...)) when cond is false. For argument validation at API
// boundaries: CHORUS_REQUIRE(n > 0, InvalidArgumentError, "n must be > 0, got ", n).
#define CHORUS_REQUIRE(cond, ErrorClass, ...)                                          \
  do {                                                                                 \
    if (!(cond)) throw ::chorus::ErrorClass(::chorus::internal::str_cat(__VA_ARGS__)); \
  } while (0)

// Internal invariants: throw InternalError naming file, line and both values.
#define CHORUS_ENFORCE(cond, ...)                                                                                \
  do {                                                                                                           \
    if (!(cond))                                                                                                 \
      ::chorus::internal::throw_enforce(__FILE__, __LINE__,                                                      \
                                        ::chorus::internal::str_cat("check failed: " #cond " ", ##__VA_ARGS__)); \
  } while (0)

#define CHORUS_ENFORCE_OP(a, b, op)                                                                                 \
  do {                                                                                                              \
    const auto& chorus_a_ = (a);                                                                                    \
    const auto& chorus_b_ = (b);                                                                                    \
    if (!(chorus_a_ op chorus_b_))                                                                                  \
      ::chorus::internal::throw_enforce(                                                                            \
          __FILE__, __LINE__,                                                                                       \
          ::chorus::internal::str_cat("check failed: " #a " " #op " " #b " (", chorus_a_, " vs ", chorus_b_, ")")); \
  } while (0)
#define CHORUS_ENFORCE_EQ(a, b) CHORUS_ENFORCE_OP(a, b, ==)
#define CHORUS_ENFORCE_NE(a, b) CHORUS_ENFORCE_OP(a, b, !=)
#define CHORUS_ENFORCE_LE(a, b) CHORUS_ENFORCE_OP(a, b, <=)
#define CHORUS_ENFORCE_LT(a, b) CHORUS_ENFORCE_OP(a, b, <)
#define CHORUS_ENFORCE_GE(a, b) CHORUS_ENFORCE_OP(a, b, >=)
