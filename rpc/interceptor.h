// CallInterceptor: code that takes part in every call an agent makes or serves, and carries
// bytes of its own in the call and in its reply. Distributed autograd is one (its context and
// message ids, which tensors require grad); rpc itself never reads the bytes.
//
// An agent runs the interceptors it was started with (RpcOptions::interceptors), in that order,
// at four points of each call:
//
//   caller: before_request ---- request ---> callee: on_request, the function runs
//   caller: on_reply       <---- reply ----- callee: before_reply
//
// A `before_*` returns bytes (empty: nothing to say) that travel in the frame's header under
// the interceptor's name; the peer's matching `on_*` receives them (empty when the other side
// said nothing). The object on_request returns stays alive until the reply has been encoded, so
// it can hold thread-local state for the function's run (distributed autograd makes the call's
// context current with it). Every process of a job must start its agent with the same
// interceptors: a call carrying bytes for an interceptor the callee lacks fails with
// FAILED_PRECONDITION naming it.
//
// Interceptors run on the thread that makes the call (before_request), on the executor thread
// that serves it (on_request, before_reply) and on the thread that completes it (on_reply), for
// many calls at once: they must be thread-safe. An exception thrown by one fails that call (a
// StatusError keeps its code; rpc/errors.h).
//
//   class Stamp final : public rpc::CallInterceptor {
//    public:
//     std::string_view name() const override { return "stamp"; }
//     std::string before_request(const rpc::CallSite& call, const std::vector<Tensor>&) override {
//       return "from " + std::to_string(rpc::get_rank());
//     }
//   };
//   rpc::RpcOptions options;
//   options.interceptors.push_back(std::make_shared<Stamp>());
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/tensor.h"

namespace distgrad::rpc {

// The call an interceptor is told about.
struct CallSite {
  int peer;                   // the callee, on the caller's side; the caller, on the callee's
  std::string_view function;  // the registered function's name
};

class CallInterceptor {
 public:
  virtual ~CallInterceptor() = default;

  // Unique among an agent's interceptors; its bytes travel under this name.
  virtual std::string_view name() const = 0;

  // Caller: `tensors` (the arguments') are about to leave for `call.peer`.
  virtual std::string before_request(const CallSite& call, const std::vector<Tensor>& tensors) { return {}; }
  // Callee: the request arrived, its tensors decoded (and modifiable: autograd attaches history).
  virtual std::shared_ptr<void> on_request(const CallSite& call, std::vector<Tensor>& tensors, std::string_view bytes) {
    return nullptr;
  }
  // Callee: the function returned `tensors` (the result's), about to go back to `call.peer`.
  virtual std::string before_reply(const CallSite& call, const std::vector<Tensor>& tensors) { return {}; }
  // Caller: the reply arrived, its tensors decoded.
  virtual void on_reply(const CallSite& call, std::vector<Tensor>& tensors, std::string_view bytes) {}
};

}  // namespace distgrad::rpc
