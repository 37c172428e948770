// Distributed autograd's call interceptor (rpc/interceptor.h): the forward half of Note
// [Send/Recv pairing] (dist_autograd/send_recv_backward.h).
//
// Caller, before a request leaves: inside a context (grad mode on), every call carries the
// context's id and its place in the context's order of calls (Note [Call order]), whatever its
// tensors, as PyTorch does for user functions: a worker whose result depends on its own
// parameters joins the context and records its reply. When a tensor of the message requires
// grad, its bytes also say which do, and a SendBackward is recorded under a fresh message id.
// Outside a context only which tensors require grad travels; with grad mode off, only that the
// caller had it off. Callee, before the reply leaves: the same for the result's tensors, inside
// the request's context; nothing when the caller had grad mode off (the result does not require
// grad there). On arrival: the received tensors that required grad get a RecvBackward of that
// message in the context (joined on first contact), or, outside any context, become leaves that
// require grad (as PyTorch does); and a request's context is the current one while the function
// runs, so that its own calls join it.
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
