#include "rpc/errors.h"

namespace distgrad::rpc {
namespace {

std::string describe(StatusCode code, const std::string& worker, const std::string& function,
                     const std::string& message) {
  std::string what = code == StatusCode::kUnknown
                         ? "remote exception in " + function + " on " + worker
                         : "call of " + function + " on " + worker + " failed (" + status_code_name(code) + ")";
  return what + ": " + message;
}

}  // namespace

const char* status_code_name(StatusCode code) {
  switch (code) {
    case StatusCode::kOk: return "OK";
    case StatusCode::kCancelled: return "CANCELLED";
    case StatusCode::kUnknown: return "UNKNOWN";
    case StatusCode::kInvalidArgument: return "INVALID_ARGUMENT";
    case StatusCode::kDeadlineExceeded: return "DEADLINE_EXCEEDED";
    case StatusCode::kNotFound: return "NOT_FOUND";
    case StatusCode::kAlreadyExists: return "ALREADY_EXISTS";
    case StatusCode::kPermissionDenied: return "PERMISSION_DENIED";
    case StatusCode::kResourceExhausted: return "RESOURCE_EXHAUSTED";
    case StatusCode::kFailedPrecondition: return "FAILED_PRECONDITION";
    case StatusCode::kAborted: return "ABORTED";
    case StatusCode::kOutOfRange: return "OUT_OF_RANGE";
    case StatusCode::kUnimplemented: return "UNIMPLEMENTED";
    case StatusCode::kInternal: return "INTERNAL";
    case StatusCode::kUnavailable: return "UNAVAILABLE";
    case StatusCode::kDataLoss: return "DATA_LOSS";
    case StatusCode::kUnauthenticated: return "UNAUTHENTICATED";
  }
  return "UNKNOWN_CODE";
}

RemoteError::RemoteError(StatusCode code, std::string worker, std::string function, std::string remote_message)
    : Error(describe(code, worker, function, remote_message)),
      code_(code),
      worker_(std::move(worker)),
      function_(std::move(function)),
      remote_message_(std::move(remote_message)) {}

}  // namespace distgrad::rpc
