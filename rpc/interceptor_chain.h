// InterceptorChain: an agent's call interceptors (rpc/interceptor.h) applied to the headers of
// its frames (internal to rpc/).
//
// The bytes a `before_*` returns travel as a wire::Extension named after its interceptor (none
// when it returns nothing); on arrival each interceptor's `on_*` receives its own extension's
// bytes, or empty ones. An extension named after no interceptor of the chain is refused with
// FAILED_PRECONDITION: the peer started RPC with interceptors this process lacks.
#pragma once

#include <memory>
#include <string_view>
#include <vector>

#include "proto/worker.pb.h"
#include "rpc/interceptor.h"

namespace distgrad::rpc {

class InterceptorChain {
 public:
  // Throws distgrad::Error naming the interceptor when one is null, unnamed or named twice.
  explicit InterceptorChain(std::vector<std::shared_ptr<CallInterceptor>> interceptors);

  // Objects that live while a served function runs and its reply is encoded.
  using Scopes = std::vector<std::shared_ptr<void>>;

  bool contains(std::string_view name) const;

  // Caller side.
  void before_request(const CallSite& call, const std::vector<Tensor>& tensors, wire::CallHeader& header) const;
  void on_reply(const CallSite& call, std::vector<Tensor>& tensors, const wire::ReplyHeader& header) const;
  // Callee side.
  Scopes on_request(const CallSite& call, std::vector<Tensor>& tensors, const wire::CallHeader& header) const;
  void before_reply(const CallSite& call, const std::vector<Tensor>& tensors, wire::ReplyHeader& header) const;

 private:
  using Extensions = google::protobuf::RepeatedPtrField<wire::Extension>;

  // Adds what each interceptor's `before` says about the call to `extensions`.
  void attach(std::string (CallInterceptor::*before)(const CallSite&, const std::vector<Tensor>&), const CallSite& call,
              const std::vector<Tensor>& tensors, Extensions& extensions) const;
  // The bytes `extensions` carry for each interceptor, in the chain's order (empty for none);
  // throws StatusError (FAILED_PRECONDITION) for bytes meant for an interceptor not in the chain.
  std::vector<std::string_view> bytes_for_each(const Extensions& extensions, const CallSite& call,
                                               const char* message) const;

  const std::vector<std::shared_ptr<CallInterceptor>> interceptors_;
};

}  // namespace distgrad::rpc
