// Distributed autograd: contexts, backward and grad across workers (TorchOpt's
// torchopt.distributed.autograd over PyTorch's distributed autograd in FAST mode).
//
// Inside an autograd::Context, every RPC that carries tensors requiring grad links the graphs
// of the caller and the callee (Note [Send/Recv pairing] in dist_autograd/send_recv_backward.h;
// RPC started with init_rpc, dist_autograd/init_rpc.h, carries what it needs), replies included.
// backward(ctx, roots) then runs a pass (dist_autograd/backward_pass.h) from the roots; each
// RecvBackward it reaches sends its gradients to the worker that sent the tensors, which runs
// its own engine from the matching SendBackward and sends on; every worker accumulates the
// gradients of its leaves in the context, and the call returns when every hop has finished.
// See docs/distributed-autograd.md for the algorithm and a diagram.
//
//   {
//     dg::autograd::Context ctx;                           // torch's `with context() as ctx`
//     dg::Tensor t3 = dg::rpc::rpc_sync("worker1", my_add, t1, t2);
//     dg::Tensor loss = (t3 * t4).sum();
//     dg::autograd::backward(ctx, {loss});                 // t1.grad(), t2.grad(), t4.grad() set
//     auto grads = dg::autograd::get_gradients(ctx);       // this worker's leaves -> gradients
//   }                                                      // released here and on every worker
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "autograd/node.h"
#include "dist_autograd/context.h"

namespace distgrad::autograd {

// A distributed autograd context for a scope: created on construction and made this thread's
// current context; on destruction released here and, without waiting, on every worker that
// took part (transitively). Not copyable.
class Context {
 public:
  Context();
  ~Context();
  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;

  int64_t id() const { return state_->id(); }

 private:
  dist_autograd::ContextPtr state_;
  dist_autograd::ContextScope scope_;
};

// Runs a distributed backward pass from `roots` (one-element tensors; gradients of ones), adds
// the gradients this pass computed for this worker's leaves into their .grad() (only for
// `inputs` when given), and accumulates every worker's in the context. `retain_graph` applies
// on every worker. Errors anywhere come back naming the worker.
void backward(const Context& context, const TensorList& roots, bool retain_graph = false,
              const TensorList& inputs = {});
// The same pass, leaving .grad() alone: returns the context's gradients of `inputs` (leaves of
// this worker). An input without one is an error unless `allow_unused` (then undefined).
TensorList grad(const Context& context, const TensorList& outputs, const TensorList& inputs, bool retain_graph = false,
                bool allow_unused = false);

// The gradients accumulated in the context for this worker's leaves.
class GradientMap {
 public:
  explicit GradientMap(std::vector<dist_autograd::LeafGradient> entries) : entries_(std::move(entries)) {}
  // The gradient of `leaf`; throws when it has none in the context.
  const Tensor& at(const Tensor& leaf) const;
  bool contains(const Tensor& leaf) const;
  size_t size() const { return entries_.size(); }
  auto begin() const { return entries_.begin(); }
  auto end() const { return entries_.end(); }

 private:
  std::vector<dist_autograd::LeafGradient> entries_;
};
GradientMap get_gradients(const Context& context);
// The same by id, on any worker the context reached (PyTorch's get_gradients(context_id)): a
// remote function given the driver's ctx.id() reads its own leaves' gradients. Throws naming
// this worker when the context is not (or no longer) here.
GradientMap get_gradients(int64_t context_id);

}  // namespace distgrad::autograd

namespace distgrad::dist_autograd {

// Contexts alive in this process (released ones are gone), for tests and diagnostics.
size_t num_live_contexts();

}  // namespace distgrad::dist_autograd
