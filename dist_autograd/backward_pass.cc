#include "dist_autograd/backward_pass.h"

#include <algorithm>
#include <exception>

#include "autograd/engine.h"
#include "autograd/grad_mode.h"
#include "autograd/ops.h"
#include "dist_autograd/context.h"
#include "dist_autograd/send_recv_backward.h"
#include "rpc/rpc.h"
#include "trace/trace.h"

namespace distgrad::dist_autograd {
namespace {

using autograd::Edge;
using autograd::TensorList;

// The roots of a run that starts at `send` with `grads`.
std::vector<Edge> message_roots(const std::shared_ptr<SendBackward>& send, int64_t message_id,
                                const TensorList& grads) {
  DISTGRAD_CHECK(grads.size() == send->num_inputs(), "distributed autograd: message ", message_id, " carried ",
                 send->num_inputs(), " tensors but ", grads.size(), " gradients came back");
  std::vector<Edge> roots;
  for (size_t i = 0; i < grads.size(); ++i) roots.push_back({send, static_cast<uint32_t>(i)});
  return roots;
}

// A gradient message (registered under a reserved name): runs this worker's part of pass
// `pass_id` from the send function of `message_id`, sent by the run `sender` of worker `from`;
// returns the gradients for `from`'s send functions.
ReturnedGradients propagate_gradients(int64_t context_id, int64_t pass_id, int64_t message_id,
                                      std::vector<Tensor> grads, PassOptions options, int from, RunOrder sender) {
  trace::Span span("dist_autograd.message", "gradient message");  // trace/statistics.h counts these
  if (span.active()) {
    int64_t bytes = 0;
    for (const Tensor& grad : grads) bytes += grad.defined() ? static_cast<int64_t>(grad.nbytes()) : 0;
    span.arg("context", context_id);
    span.arg("pass", pass_id);
    span.arg("from", int64_t{from});
    span.arg("bytes", bytes);
  }
  ContextPtr context = ContextContainer::instance().find(context_id);
  DISTGRAD_CHECK(context != nullptr, "distributed autograd: context ", context_id, " is not known on ",
                 rpc::get_worker_name(), " (it was released, or the forward pass never reached this worker)");
  const std::shared_ptr<SendBackward> send = context->send(message_id);
  std::vector<Edge> roots = message_roots(send, message_id, grads);
  RunOrder order{send->order()};
  order.insert(order.end(), sender.begin(), sender.end());
  return context->join_pass(pass_id, options)->run(*context, roots, std::move(grads), from, std::move(order));
}
DISTGRAD_REMOTE_NAMED(propagate_gradients, "__distgrad.autograd.propagate");

}  // namespace

void BackwardPass::run_engine(DistAutogradContext& context, const Run& run, const std::vector<Edge>& roots,
                              TensorList grads, std::exception_ptr& failure) {
  {
    std::lock_guard<std::mutex> lock(runs_mutex_);
    for (const Edge& root : roots) roots_.push_back(root.function);
  }
  autograd::ExecuteOptions options;
  options.keep_graph = true;  // Note [Graphs kept through a pass]
  options.create_graph = options_.create_graph;
  options.roots_in_order = true;                                              // Note [Gradient waves]
  if (!capture_edges_.empty()) options.run_nodes_made_since = oldest_input_;  // Note [Passes stop below the inputs]
  options.accumulate_leaf = [&context, &run](const Tensor& leaf, const Tensor& grad) {
    context.accumulate(leaf, grad, run.order);
  };
  trace::Span span("dist_autograd", "local pass");
  span.arg("pass", id_);
  span.arg("roots", static_cast<int64_t>(roots.size()));
  try {
    autograd::GradModeGuard grad_mode(options_.create_graph);
    const TensorList captured = autograd::Engine::execute(roots, std::move(grads), options, capture_edges_);
    if (!captured.empty()) add_captured(captured);
  } catch (...) {
    if (!failure) failure = std::current_exception();
  }
}

void BackwardPass::add_captured(const TensorList& captured) {
  std::lock_guard<std::mutex> lock(captured_mutex_);
  if (captured_.empty()) captured_.resize(captured.size());
  for (size_t i = 0; i < captured.size(); ++i) {
    if (!captured[i].defined()) continue;
    captured_[i] = captured_[i].defined() ? captured_[i] + captured[i] : captured[i];  // recorded with create_graph
  }
}

TensorList BackwardPass::captured() const {
  std::lock_guard<std::mutex> lock(captured_mutex_);
  return captured_.empty() ? TensorList(capture_edges_.size()) : captured_;
}

std::vector<std::shared_ptr<autograd::Node>> BackwardPass::roots() const {
  std::lock_guard<std::mutex> lock(runs_mutex_);
  return roots_;
}

ReturnedGradients BackwardPass::run(DistAutogradContext& context, const std::vector<Edge>& roots, TensorList grads,
                                    int caller, RunOrder order) {
  std::list<Run>::iterator run;
  {
    std::lock_guard<std::mutex> lock(runs_mutex_);
    run = runs_.insert(runs_.end(), Run{std::this_thread::get_id(), caller, std::move(order), {}, {}});
  }
  std::exception_ptr failure;
  run_engine(context, *run, roots, std::move(grads), failure);
  // Every message is awaited, even after a failure: none outlives the pass that sent it. The
  // replies that bring gradients back continue the pass here in waves (Note [Gradient waves]):
  // the messages sent so far are awaited in MessageOrder, then one run of the engine goes on from
  // every send their replies name, which may send more.
  for (size_t next = 0; next < run->sent.size();) {
    std::stable_sort(run->sent.begin() + static_cast<std::ptrdiff_t>(next), run->sent.end(),
                     [](const SentMessage& a, const SentMessage& b) { return a.order < b.order; });
    const size_t wave_end = run->sent.size();
    std::vector<Edge> wave_roots;
    TensorList wave_grads;
    for (; next < wave_end; ++next) {
      ReturnedGradients returned;
      try {
        returned = run->sent[next].reply.get();
      } catch (...) {
        if (!failure) failure = std::current_exception();
      }
      if (returned.empty() || failure) continue;
      try {
        std::vector<std::pair<std::shared_ptr<SendBackward>, size_t>> sends;  // (send, index in returned)
        for (size_t m = 0; m < returned.size(); ++m) sends.emplace_back(context.send(returned[m].first), m);
        std::stable_sort(sends.begin(), sends.end(),
                         [](const auto& a, const auto& b) { return a.first->order() < b.first->order(); });
        for (auto& [send, m] : sends) {
          auto& [message_id, tensors] = returned[m];
          for (Edge& edge : message_roots(send, message_id, tensors)) wave_roots.push_back(std::move(edge));
          for (Tensor& tensor : tensors) wave_grads.push_back(std::move(tensor));
        }
      } catch (...) {
        failure = std::current_exception();
      }
    }
    if (!wave_roots.empty() && !failure) run_engine(context, *run, wave_roots, std::move(wave_grads), failure);
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

bool BackwardPass::send_gradients(int64_t context_id, int worker, int64_t message_id, const MessageOrder& order,
                                  std::vector<Tensor>& grads) {
  Run* run = run_on_this_thread();
  if (run == nullptr) return false;
  if (worker == run->caller) {
    run->for_caller.emplace_back(message_id, std::move(grads));
    return true;
  }
  // The message is made inside the context only to be recorded (Note [Differentiable gradient
  // messages]); otherwise the gradients themselves are not.
  ContextScope scope(options_.create_graph ? ContextContainer::instance().find(context_id) : nullptr);
  run->sent.push_back({order, rpc::rpc_async(worker, &propagate_gradients, context_id, id_, message_id,
                                             std::move(grads), options_, rpc::get_rank(), run->order)});
  return true;
}

void send_gradients(DistAutogradContext& context, int worker, int64_t message_id, const MessageOrder& order,
                    std::vector<Tensor> grads) {
  std::shared_ptr<BackwardPass> pass = context.pass();
  if (pass != nullptr && pass->send_gradients(context.id(), worker, message_id, order, grads)) return;
  // A local backward reached the node: its gradients start a pass of their own, on `worker` and
  // from there on. Nothing here would run gradients that came back in the reply: ask for none.
  ContextScope outside(nullptr);
  const int64_t pass_id = ContextContainer::instance().next_message_id();
  rpc::rpc_sync(worker, &propagate_gradients, context.id(), pass_id, message_id, std::move(grads), PassOptions{},
                /*from=*/-1, RunOrder{});
}

}  // namespace distgrad::dist_autograd
