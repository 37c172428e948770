// RPC errors: a status code (gRPC's canonical codes) with a message.
//
// On a worker, a registered function that throws sends its message back with UNKNOWN; the
// runtime itself answers INVALID_ARGUMENT (arguments that do not decode as the function's
// parameters), NOT_FOUND (no such function), UNAUTHENTICATED (missing or wrong job token).
// On the caller, every failed call becomes a RemoteError naming the worker, the function, the
// code and the original message; timeouts are DEADLINE_EXCEEDED, unreachable or dead workers
// UNAVAILABLE.
#pragma once

#include <string>

#include "core/error.h"

namespace distgrad::rpc {

// gRPC's canonical status codes (the same numbers).
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

// "DEADLINE_EXCEEDED", ...
const char* status_code_name(StatusCode code);

// An error with a status code, thrown by the runtime on a worker to answer a call with it.
class StatusError : public Error {
 public:
  StatusError(StatusCode code, const std::string& message) : Error(message), code_(code) {}
  StatusCode code() const { return code_; }

 private:
  StatusCode code_;
};

// A call that failed on a remote worker or on the way there.
class RemoteError : public Error {
 public:
  RemoteError(StatusCode code, std::string worker, std::string function, std::string remote_message);

  StatusCode code() const { return code_; }
  const std::string& worker() const { return worker_; }
  const std::string& function() const { return function_; }
  // The message as the remote side (or the transport) gave it.
  const std::string& remote_message() const { return remote_message_; }

 private:
  StatusCode code_;
  std::string worker_, function_, remote_message_;
};

}  // namespace distgrad::rpc
