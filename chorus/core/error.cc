#include <chorus/core/error.h>

namespace chorus {

std::string_view error_code_name(ErrorCode code) {
  switch (code) {
    case ErrorCode::kCancelled: return "CANCELLED";
    case ErrorCode::kUnknown: return "UNKNOWN";
    case ErrorCode::kInvalidArgument: return "INVALID_ARGUMENT";
    case ErrorCode::kDeadlineExceeded: return "DEADLINE_EXCEEDED";
    case ErrorCode::kNotFound: return "NOT_FOUND";
    case ErrorCode::kAlreadyExists: return "ALREADY_EXISTS";
    case ErrorCode::kPermissionDenied: return "PERMISSION_DENIED";
    case ErrorCode::kResourceExhausted: return "RESOURCE_EXHAUSTED";
    case ErrorCode::kFailedPrecondition: return "FAILED_PRECONDITION";
    case ErrorCode::kAborted: return "ABORTED";
    case ErrorCode::kOutOfRange: return "OUT_OF_RANGE";
    case ErrorCode::kUnimplemented: return "UNIMPLEMENTED";
    case ErrorCode::kInternal: return "INTERNAL";
    case ErrorCode::kUnavailable: return "UNAVAILABLE";
    case ErrorCode::kDataLoss: return "DATA_LOSS";
  }
  return "UNKNOWN";
}

Error::Error(ErrorCode code, const std::string& message)
    : std::runtime_error(std::string(error_code_name(code)) + ": " + message), code_(code), message_(message) {}

void throw_error(ErrorCode code, const std::string& message) {
  switch (code) {
    case ErrorCode::kCancelled: throw CancelledError(message);
    case ErrorCode::kInvalidArgument: throw InvalidArgumentError(message);
    case ErrorCode::kDeadlineExceeded: throw DeadlineExceededError(message);
    case ErrorCode::kNotFound: throw NotFoundError(message);
    case ErrorCode::kAlreadyExists: throw AlreadyExistsError(message);
    case ErrorCode::kPermissionDenied: throw PermissionDeniedError(message);
    case ErrorCode::kResourceExhausted: throw ResourceExhaustedError(message);
    case ErrorCode::kFailedPrecondition: throw FailedPreconditionError(message);
    case ErrorCode::kAborted: throw AbortedError(message);
    case ErrorCode::kOutOfRange: throw OutOfRangeError(message);
    case ErrorCode::kUnimplemented: throw UnimplementedError(message);
    case ErrorCode::kInternal: throw InternalError(message);
    case ErrorCode::kUnavailable: throw UnavailableError(message);
    case ErrorCode::kDataLoss: throw DataLossError(message);
    case ErrorCode::kUnknown: break;
  }
  throw UnknownError(message);
}

namespace internal {
void throw_enforce(const char* file, int line, const std::string& message) {
  throw InternalError(str_cat(message, " at ", file, ":", line, " (a chorus bug: please report it with this message)"));
}
}  // namespace internal
}  // namespace chorus
