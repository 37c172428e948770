#include "dist_autograd/backward_pass.h"

#include <exception>

#include "autograd/engine.h"
#include "autograd/grad_mode.h"
#include "dist_autograd/context.h"
#include "dist_autograd/send_recv_backward.h"
#include "rpc/rpc.h"

namespace distgrad::dist_autograd {
namespace {

using autograd::Edge;
using autograd::TensorList;

// The roots of a run that starts at the send function of `message_id` with `grads`.
std::vector<Edge> message_roots(const DistAutogradContext& context, int64_t message_id, const TensorList& grads) {
  std::shared_ptr<SendBackward> send = context.send(message_id);
  DISTGRAD_CHECK(grads.size() == send->num_inputs(), "distributed autograd: message ", message_id, " carried ",
                 send->num_inputs(), " tensors but ", grads.size(), " gradients came back");
  std::vector<Edge> roots;
  for (size_t i = 0; i < grads.size(); ++i) roots.push_back({send, static_cast<uint32_t>(i)});
  return roots;
}

// Runs the local engine from `roots`; records its failure, if any, in `failure`.
void run_engine(DistAutogradContext& context, const std::vector<Edge>& roots, TensorList grads,
                std::exception_ptr& failure) {
  autograd::ExecuteOptions options;
  options.keep_graph = true;  // Note [Graphs kept through a pass]
  options.accumulate_leaf = [&context](const Tensor& leaf, const Tensor& grad) { context.accumulate(leaf, grad); };
  try {
    autograd::NoGradGuard no_grad;
    autograd::Engine::execute(roots, std::move(grads), options);
  } catch (...) {
    if (!failure) failure = std::current_exception();
  }
}

// A gradient message (registered under a reserved name): runs this worker's part of pass
// `pass_id` from the send function of `message_id`; returns the gradients for `from`'s send
// functions.
ReturnedGradients propagate_gradients(int64_t context_id, int64_t pass_id, int64_t message_id,
                                      std::vector<Tensor> grads, bool retain_graph, int from) {
  ContextPtr context = ContextContainer::instance().find(context_id);
  DISTGRAD_CHECK(context != nullptr, "distributed autograd: context ", context_id, " is not known on ",
                 rpc::get_worker_name(), " (it was released, or the forward pass never reached this worker)");
  std::vector<Edge> roots = message_roots(*context, message_id, grads);
  return context->join_pass(pass_id, retain_graph)->run(*context, roots, std::move(grads), from);
}
DISTGRAD_REMOTE_NAMED(propagate_gradients, "__distgrad.autograd.propagate");

}  // namespace

ReturnedGradients BackwardPass::run(DistAutogradContext& context, const std::vector<Edge>& roots, TensorList grads,
                                    int caller) {
  std::list<Run>::iterator run;
  {
    std::lock_guard<std::mutex> lock(runs_mutex_);
    run = runs_.insert(runs_.end(), Run{std::this_thread::get_id(), caller, {}, {}});
  }
  std::exception_ptr failure;
  run_engine(context, roots, std::move(grads), failure);
  // Every message is awaited, even after a failure: none outlives the pass that sent it. Replies
  // that bring gradients back continue the pass here, which may send more messages.
  for (size_t i = 0; i < run->sent.size(); ++i) {
    ReturnedGradients returned;
    try {
      returned = run->sent[i].get();
    } catch (...) {
      if (!failure) failure = std::current_exception();
    }
    if (returned.empty() || failure) continue;
    std::vector<Edge> message_edges;
    TensorList message_grads;
    try {
      for (auto& [message_id, tensors] : returned) {
        for (Edge& edge : message_roots(context, message_id, tensors)) message_edges.push_back(std::move(edge));
        for (Tensor& tensor : tensors) message_grads.push_back(std::move(tensor));
      }
    } catch (...) {
      failure = std::current_exception();
      continue;
    }
    run_engine(context, message_edges, std::move(message_grads), failure);
  }
  ReturnedGradients for_caller = std::move(run->for_caller);
  {
    std::lock_guard<std::mutex> lock(runs_mutex_);
    runs_.erase(run);
  }
  if (failure) std::rethrow_exception(failure);
  return for_caller;
}

BackwardPass::Run* BackwardPass::run_on_this_thread() {
  std::lock_guard<std::mutex> lock(runs_mutex_);
  for (Run& run : runs_) {
    if (run.thread == std::this_thread::get_id()) return &run;
  }
  return nullptr;
}

bool BackwardPass::send_gradients(int64_t context_id, int worker, int64_t message_id, std::vector<Tensor>& grads) {
  Run* run = run_on_this_thread();
  if (run == nullptr) return false;
  if (worker == run->caller) {
    run->for_caller.emplace_back(message_id, std::move(grads));
    return true;
  }
  ContextScope outside(nullptr);  // the gradients themselves are not recorded
  run->sent.push_back(rpc::rpc_async(worker, &propagate_gradients, context_id, id_, message_id, std::move(grads),
                                     retain_graph_, rpc::get_rank()));
  return true;
}

void send_gradients(DistAutogradContext& context, int worker, int64_t message_id, std::vector<Tensor> grads) {
  std::shared_ptr<BackwardPass> pass = context.pass();
  if (pass != nullptr && pass->send_gradients(context.id(), worker, message_id, grads)) return;
  // A local backward reached the node: its gradients start a pass of their own, on `worker` and
  // from there on. Nothing here would run gradients that came back in the reply: ask for none.
  ContextScope outside(nullptr);
  const int64_t pass_id = ContextContainer::instance().next_message_id();
  rpc::rpc_sync(worker, &propagate_gradients, context.id(), pass_id, message_id, std::move(grads),
                /*retain_graph=*/false, /*from=*/-1);
}

}  // namespace distgrad::dist_autograd
