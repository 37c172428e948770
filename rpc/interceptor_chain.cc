#include "rpc/interceptor_chain.h"

#include <algorithm>
#include <string>

#include "core/error.h"
#include "rpc/errors.h"

namespace distgrad::rpc {

InterceptorChain::InterceptorChain(std::vector<std::shared_ptr<CallInterceptor>> interceptors)
    : interceptors_(std::move(interceptors)) {
  for (size_t i = 0; i < interceptors_.size(); ++i) {
    DISTGRAD_CHECK(interceptors_[i] != nullptr, "init_rpc: RpcOptions::interceptors[", i, "] is null");
    const std::string_view name = interceptors_[i]->name();
    DISTGRAD_CHECK(!name.empty(), "init_rpc: RpcOptions::interceptors[", i, "] has an empty name");
    for (size_t j = 0; j < i; ++j) {
      DISTGRAD_CHECK(interceptors_[j]->name() != name, "init_rpc: two interceptors are named '", name,
                     "' (RpcOptions::interceptors[", j, "] and [", i, "])");
    }
  }
}

bool InterceptorChain::contains(std::string_view name) const {
  return std::any_of(interceptors_.begin(), interceptors_.end(),
                     [&](const auto& interceptor) { return interceptor->name() == name; });
}

void InterceptorChain::attach(std::string (CallInterceptor::*before)(const CallSite&, const std::vector<Tensor>&),
                              const CallSite& call, const std::vector<Tensor>& tensors, Extensions& extensions) const {
  for (const std::shared_ptr<CallInterceptor>& interceptor : interceptors_) {
    std::string bytes = ((*interceptor).*before)(call, tensors);
    if (bytes.empty()) continue;
    wire::Extension* extension = extensions.Add();
    extension->set_interceptor(std::string(interceptor->name()));
    extension->set_data(std::move(bytes));
  }
}

std::vector<std::string_view> InterceptorChain::bytes_for_each(const Extensions& extensions, const CallSite& call,
                                                               const char* message) const {
  std::vector<std::string_view> bytes(interceptors_.size());
  for (const wire::Extension& extension : extensions) {
    auto it = std::find_if(interceptors_.begin(), interceptors_.end(),
                           [&](const auto& interceptor) { return interceptor->name() == extension.interceptor(); });
    if (it == interceptors_.end()) {
      throw StatusError(StatusCode::kFailedPrecondition,
                        std::string(message) + " of " + std::string(call.function) +
                            " carries bytes for the call interceptor '" + extension.interceptor() +
                            "', which this process does not run: every process of a job must start RPC with the "
                            "same interceptors (init_rpc adds distributed autograd's)");
    }
    bytes[it - interceptors_.begin()] = extension.data();
  }
  return bytes;
}

void InterceptorChain::before_request(const CallSite& call, const std::vector<Tensor>& tensors,
                                      wire::CallHeader& header) const {
  attach(&CallInterceptor::before_request, call, tensors, *header.mutable_extensions());
}

void InterceptorChain::on_reply(const CallSite& call, std::vector<Tensor>& tensors,
                                const wire::ReplyHeader& header) const {
  const std::vector<std::string_view> bytes = bytes_for_each(header.extensions(), call, "the reply");
  for (size_t i = 0; i < interceptors_.size(); ++i) interceptors_[i]->on_reply(call, tensors, bytes[i]);
}

InterceptorChain::Scopes InterceptorChain::on_request(const CallSite& call, std::vector<Tensor>& tensors,
                                                      const wire::CallHeader& header) const {
  const std::vector<std::string_view> bytes = bytes_for_each(header.extensions(), call, "the call");
  Scopes scopes;
  scopes.reserve(interceptors_.size());
  for (size_t i = 0; i < interceptors_.size(); ++i) {
    scopes.push_back(interceptors_[i]->on_request(call, tensors, bytes[i]));
  }
  return scopes;
}

void InterceptorChain::before_reply(const CallSite& call, const std::vector<Tensor>& tensors,
                                    wire::ReplyHeader& header) const {
  attach(&CallInterceptor::before_reply, call, tensors, *header.mutable_extensions());
}

}  // namespace distgrad::rpc
