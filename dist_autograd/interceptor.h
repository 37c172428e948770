// Distributed autograd's call interceptor (rpc/interceptor.h): the forward half of Note
// [Send/Recv pairing] (dist_autograd/send_recv_backward.h).
//
// Caller and callee alike, before a message (a request or a reply) leaves: when a tensor of it
// requires grad, its bytes say which do and, inside a context (grad mode on), the context's id
// and a fresh message id under which a SendBackward is recorded. On arrival: the received
// tensors that required grad get a RecvBackward of that message in the context (joined on first
// contact), or, outside any context, become leaves that require grad (as PyTorch does); and a
// request's context is the current one while the function runs, so that its own calls join it.
//
// init_rpc (dist_autograd/init_rpc.h) starts every agent with it.
#pragma once

#include <memory>

#include "rpc/interceptor.h"

namespace distgrad::dist_autograd {

// Its name among an agent's interceptors.
inline constexpr char kInterceptorName[] = "dist_autograd";

std::shared_ptr<rpc::CallInterceptor> make_interceptor();

}  // namespace distgrad::dist_autograd
