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
//
// backward, grad and get_gradients take the Context or its id: a function that a worker runs
// with the driver's ctx.id() may run a backward pass of that context from its own tensors
// (torch.distributed.autograd.backward(context_id, roots)).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "autograd/autograd.h"
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

// A distributed autograd context: the Context itself, or its id on any worker the context
// reached (a remote function given the driver's ctx.id()).
class ContextId {
 public:
  ContextId(const Context& context) : id_(context.id()) {}  // NOLINT(google-explicit-constructor)
  ContextId(int64_t id) : id_(id) {}                        // NOLINT(google-explicit-constructor)
  int64_t value() const { return id_; }

 private:
  int64_t id_;
};

// Runs a distributed backward pass from `roots` (one-element tensors; gradients of ones), adds
// the gradients this pass computed for this worker's leaves into their .grad() (only for
// `inputs` when given), and accumulates every worker's in the context. `retain_graph` (default:
// create_graph) applies on every worker. With `create_graph` the pass records itself on every
// worker and in its messages, so the gradients can be differentiated again by a further pass of
// the context (Note [Differentiable gradient messages], dist_autograd/backward_pass.h).
// Errors anywhere come back naming the worker.
void backward(ContextId context, const TensorList& roots, const BackwardOptions& options);
void backward(ContextId context, const TensorList& roots, bool retain_graph = false, const TensorList& inputs = {});
// The same pass, leaving .grad() alone: returns the gradients of `inputs`, tensors of this
// worker that require grad: leaves (their gradients of this pass, as accumulated in the context)
// or not (the gradients arriving at them, as local grad captures them: a MAML inner loop's
// adapted weights). An input without one is an error unless `allow_unused` (then undefined).
TensorList grad(ContextId context, const TensorList& outputs, const TensorList& inputs, const GradOptions& options);
TensorList grad(ContextId context, const TensorList& outputs, const TensorList& inputs, bool retain_graph = false,
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
// On any worker the context reached (PyTorch's get_gradients(context_id)): a remote function
// given the driver's ctx.id() reads its own leaves' gradients. Throws naming this worker when the
// context is not (or no longer) here.
GradientMap get_gradients(ContextId context);

// One context as this process holds it (torch's ctx._send_functions(), _recv_functions() and
// _known_worker_ids()).
struct ContextDebugInfo {
  int64_t id = 0;
  // SendBackward nodes: messages from this process that carried tensors requiring grad.
  size_t num_send_functions = 0;
  // RecvBackward nodes: messages to this process that carried tensors requiring grad.
  size_t num_recv_functions = 0;
  // The ranks this process's calls in the context reached, ascending.
  std::vector<int> known_workers = {};
  // This process's leaves with a gradient accumulated in the context.
  size_t num_gradients = 0;
};

// What distributed autograd holds in this process, a snapshot for tests and diagnostics
// (torch.distributed.autograd._get_debug_info()). Released contexts are gone from it.
struct DebugInfo {
  size_t num_autograd_contexts = 0;
  std::vector<ContextDebugInfo> contexts = {};  // ascending id

  // The context `id`, or null when it is not (or no longer) in this process.
  const ContextDebugInfo* find(int64_t id) const;
  // "2 contexts; context 1: 3 sends, 2 recvs, workers [1, 2], 2 gradients; context 7: ...".
  std::string str() const;
};
DebugInfo get_debug_info();

}  // namespace distgrad::autograd
