#include "dist_autograd/dist_autograd.h"

#include <algorithm>
#include <limits>
#include <mutex>
#include <set>
#include <string>
#include <unordered_map>
#include <unordered_set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "autograd/accumulate_grad.h"
#include "autograd/autograd_meta.h"
#include "autograd/grad_mode.h"
#include "core/creation.h"
#include "dist_autograd/backward_pass.h"
#include "dist_autograd/interceptor.h"
#include "dist_autograd/send_recv_backward.h"
#include "rpc/rpc.h"
#include "trace/trace.h"

namespace distgrad::dist_autograd {
namespace {

using autograd::Edge;
using autograd::Node;
using autograd::TensorList;

// Frees the saved tensors of every node reachable from `roots` (the end of a pass that does not
// retain its graph, Note [Graphs kept through a pass]).
void release_graph_from(const std::vector<std::shared_ptr<Node>>& roots) {
  std::unordered_set<Node*> seen;
  std::vector<Node*> stack;
  for (const auto& root : roots) {
    if (root && seen.insert(root.get()).second) stack.push_back(root.get());
  }
  while (!stack.empty()) {
    Node* node = stack.back();
    stack.pop_back();
    node->release_variables();
    for (const Edge& edge : node->next_edges()) {
      if (edge.is_valid() && seen.insert(edge.function.get()).second) stack.push_back(edge.function.get());
    }
  }
}

// The internal messages of distributed autograd that release state (registered functions with
// reserved names; the gradient messages are in backward_pass.cc).

std::vector<rpc::Future<void>> forward_to_workers(const ContextPtr& context, int except,
                                                  void (*message)(int64_t, int64_t, int), int64_t argument);

// Releases the context here and on the workers it talked to, except the one that asked.
void release_context(int64_t context_id, int64_t, int from) {
  if (ContextPtr context = ContextContainer::instance().release(context_id)) {
    forward_to_workers(context, from, &release_context, 0);
  }
}
DISTGRAD_REMOTE_NAMED(release_context, "__distgrad.autograd.release");

// Frees the graph pass `pass_id` ran over here and on the workers the context talked to, and
// returns once they have too; a pass id already seen stops the message (Note [Graphs kept
// through a pass]). Only the pass's own graph: the message may arrive after the program went on
// to record more in the context.
void release_pass_graph(int64_t context_id, int64_t pass_id, int from) {
  ContextPtr context = ContextContainer::instance().find(context_id);
  if (context == nullptr || !context->mark_pass_released(pass_id)) return;
  if (const std::shared_ptr<BackwardPass> pass = context->pass(); pass != nullptr && pass->id() == pass_id) {
    release_graph_from(pass->roots());
  }
  for (const rpc::Future<void>& done : forward_to_workers(context, from, &release_pass_graph, pass_id)) done.wait();
}
DISTGRAD_REMOTE_NAMED(release_pass_graph, "__distgrad.autograd.release_graph");

// Sends `message` about `context` to every worker it talked to but `except`, without waiting
// (a slow or dead peer never blocks the sender; failures are ignored: the peer is gone). Returns
// the calls, for a sender that needs to know when they are done.
std::vector<rpc::Future<void>> forward_to_workers(const ContextPtr& context, int except,
                                                  void (*message)(int64_t, int64_t, int), int64_t argument) {
  std::vector<rpc::Future<void>> calls;
  if (!rpc::is_initialized()) return calls;
  ContextScope outside(nullptr);  // the messages are about the context, not in it
  const int self = rpc::get_rank();
  for (int worker : context->workers()) {
    if (worker == except || worker == self) continue;
    try {
      calls.push_back(rpc::rpc_async(worker, message, context->id(), argument, self));
    } catch (const std::exception&) {  // the job is shutting down: nothing left to release there
    }
  }
  return calls;
}

// The graph releases (release_pass_graph) sent at the end of the last pass of each of this
// process's contexts that did not retain its graph. The next pass of the context waits for them,
// so that it never runs over a graph that a worker has not finished freeing (Note [Graphs kept
// through a pass]).
struct PendingReleases {
  std::mutex mutex;  // guards by_context
  std::unordered_map<int64_t, std::vector<rpc::Future<void>>> by_context ABSL_GUARDED_BY(mutex);
};

PendingReleases& pending_releases() {
  static auto* pending = new PendingReleases;  // never destroyed, as the contexts
  return *pending;
}

std::vector<rpc::Future<void>> take_pending_releases(int64_t context_id) {
  PendingReleases& pending = pending_releases();
  std::lock_guard<std::mutex> lock(pending.mutex);
  auto it = pending.by_context.find(context_id);
  if (it == pending.by_context.end()) return {};
  std::vector<rpc::Future<void>> calls = std::move(it->second);
  pending.by_context.erase(it);
  return calls;
}

// What a driver's pass brought this worker: its leaves' gradients, and those captured at the
// capture edges it was given.
struct PassResult {
  std::vector<LeafGradient> leaves;
  TensorList captured;
};

// The driver's pass: runs the engine from the roots, then releases the graph everywhere unless
// retained.
PassResult run_pass(const ContextPtr& state, const TensorList& roots, PassOptions options, const char* op,
                    std::vector<Edge> capture_edges = {}, uint64_t oldest_input = 0) {
  DISTGRAD_CHECK(!roots.empty(), op, ": expected at least one root");
  std::vector<Edge> edges;
  TensorList grads;
  for (size_t i = 0; i < roots.size(); ++i) {
    roots[i].check_defined(op);
    DISTGRAD_CHECK(roots[i].numel() == 1, op, ": roots must be scalars (one element); root ", i, " is a ",
                   roots[i].describe());
    Edge edge = autograd::gradient_edge(roots[i]);
    DISTGRAD_CHECK(edge.is_valid(), op, ": root ", i, " (a ", roots[i].describe(), ") does not require grad");
    edges.push_back(std::move(edge));
    grads.push_back(ones_like(roots[i]));
  }
  DistAutogradContext& context = *state;
  for (const rpc::Future<void>& done : take_pending_releases(context.id())) done.wait();
  const int64_t pass_id = ContextContainer::instance().next_message_id();
  trace::Span span("dist_autograd.pass", "backward pass");  // trace/statistics.h counts these
  span.arg("context", context.id());
  span.arg("pass", pass_id);
  std::shared_ptr<BackwardPass> pass = context.begin_pass(pass_id, options);
  pass->capture(std::move(capture_edges), oldest_input);
  // A pass that failed somewhere ends as one that did not (its graph released unless retained,
  // what it accumulated kept), and the context stays usable, as PyTorch's: the run awaited every
  // message it sent, so no part of the pass is still running anywhere.
  std::exception_ptr failure;
  try {
    pass->run(context, edges, std::move(grads), /*caller=*/-1, RunOrder{});
  } catch (...) {
    failure = std::current_exception();
  }
  if (!options.retain_graph) {
    std::vector<std::shared_ptr<Node>> nodes = context.send_functions();
    for (const Edge& edge : edges) nodes.push_back(edge.function);
    release_graph_from(nodes);
    context.mark_pass_released(pass_id);
    std::vector<rpc::Future<void>> calls = forward_to_workers(state, -1, &release_pass_graph, pass_id);
    if (!calls.empty()) {
      PendingReleases& pending = pending_releases();
      std::lock_guard<std::mutex> lock(pending.mutex);
      pending.by_context[context.id()] = std::move(calls);
    }
  }
  PassResult result{context.end_pass(), pass->captured()};
  span.arg("failed", int64_t{failure != nullptr});
  if (failure) std::rethrow_exception(failure);
  return result;
}

}  // namespace

}  // namespace distgrad::dist_autograd

namespace distgrad::autograd {

namespace {

// A context is created outside any other, in a process whose RPC, if running, carries
// distributed autograd.
dist_autograd::ContextPtr new_context() {
  if (const dist_autograd::ContextPtr outer = dist_autograd::current_context()) {
    DISTGRAD_FAIL("autograd::Context: this thread is already in distributed autograd context ", outer->id(),
                  dist_autograd::current_call().empty() ? "" : " (a remote function runs in its caller's context)",
                  "; contexts do not nest, as in PyTorch: make the calls and the backward in that context, or "
                  "open the new one after it ends");
  }
  DISTGRAD_CHECK(!rpc::is_initialized() || rpc::agent().runs_interceptor(dist_autograd::kInterceptorName),
                 "autograd::Context: RPC was started without distributed autograd's call interceptor "
                 "(rpc::start_agent); start it with init_rpc or auto_init_rpc (dist_autograd/init_rpc.h), or add "
                 "dist_autograd::make_interceptor() to RpcOptions::interceptors");
  return dist_autograd::ContextContainer::instance().create();
}

}  // namespace

Context::Context() : state_(new_context()), scope_(state_) {}

Context::~Context() {
  dist_autograd::take_pending_releases(state_->id());
  if (dist_autograd::ContextContainer::instance().release(state_->id()) != nullptr) {
    dist_autograd::forward_to_workers(state_, -1, &dist_autograd::release_context, 0);
  }
}

namespace {

// The context `context` names in this process; `op` names the caller in the error.
dist_autograd::ContextPtr find_context(ContextId context, const char* op) {
  dist_autograd::ContextPtr state = dist_autograd::ContextContainer::instance().find(context.value());
  DISTGRAD_CHECK(state != nullptr, op, ": context ", context.value(), " is not known on ",
                 rpc::is_initialized() ? rpc::get_worker_name() : std::string("this process"),
                 " (it was released, or no call inside it reached this worker)");
  return state;
}

// What a distributed pass does not take: grad_outputs (roots are scalars).
void check_distributed_options(const TensorList& grad_outputs, const char* op) {
  DISTGRAD_CHECK(grad_outputs.empty(), op, ": a distributed pass starts from one-element roots with gradient 1; ",
                 grad_outputs.size(), " grad_outputs were given (multiply the roots by them instead)");
}

// retain_graph defaults to create_graph, as in PyTorch.
dist_autograd::PassOptions pass_options(const std::optional<bool>& retain_graph, bool create_graph) {
  return {.retain_graph = retain_graph.value_or(create_graph), .create_graph = create_graph};
}

}  // namespace

void backward(ContextId context, const TensorList& roots, const BackwardOptions& options) {
  check_distributed_options(options.grad_outputs, "backward");
  dist_autograd::ContextPtr state = find_context(context, "backward");
  const TensorList& inputs = options.inputs;
  for (size_t i = 0; i < inputs.size(); ++i) {
    inputs[i].check_defined("backward");
    DISTGRAD_CHECK(inputs[i].requires_grad() && inputs[i].is_leaf(), "backward: input ", i, " (a ",
                   inputs[i].describe(),
                   ") must be a leaf that requires grad: distributed gradients are collected at leaves");
  }
  const dist_autograd::PassResult pass =
      dist_autograd::run_pass(state, roots, pass_options(options.retain_graph, options.create_graph), "backward");
  for (const dist_autograd::LeafGradient& entry : pass.leaves) {
    const bool wanted = inputs.empty() || std::any_of(inputs.begin(), inputs.end(),
                                                      [&](const Tensor& input) { return input.is_same(entry.leaf); });
    GradModeGuard recorded(options.create_graph);  // with create_graph, .grad() keeps its graph
    if (wanted) autograd::accumulate_grad(entry.leaf, entry.grad);
  }
}

void backward(ContextId context, const TensorList& roots, bool retain_graph, const TensorList& inputs) {
  backward(context, roots, BackwardOptions{.retain_graph = retain_graph, .inputs = inputs});
}

TensorList grad(ContextId context, const TensorList& outputs, const TensorList& inputs, const GradOptions& options) {
  check_distributed_options(options.grad_outputs, "grad");
  dist_autograd::ContextPtr state = find_context(context, "grad");
  // Leaves get their gradients from the context; the others (a MAML inner loop's adapted
  // weights) from the edges the driver's runs capture.
  std::vector<Edge> capture_edges;
  uint64_t oldest_input = std::numeric_limits<uint64_t>::max();
  for (size_t i = 0; i < inputs.size(); ++i) {
    inputs[i].check_defined("grad");
    DISTGRAD_CHECK(inputs[i].requires_grad(), "grad: input ", i, " (a ", inputs[i].describe(),
                   ") does not require grad");
    Edge edge = autograd::gradient_edge(inputs[i]);
    oldest_input = std::min(oldest_input, edge.function->sequence_nr());
    if (!inputs[i].is_leaf()) capture_edges.push_back(std::move(edge));
  }
  const dist_autograd::PassResult pass =
      dist_autograd::run_pass(state, outputs, pass_options(options.retain_graph, options.create_graph), "grad",
                              std::move(capture_edges), oldest_input);
  const GradientMap leaves(pass.leaves);
  TensorList result;
  size_t captured = 0;
  for (size_t i = 0; i < inputs.size(); ++i) {
    Tensor gradient;
    if (!inputs[i].is_leaf()) {
      gradient = pass.captured[captured++];
    } else if (leaves.contains(inputs[i])) {
      gradient = leaves.at(inputs[i]);
    }
    DISTGRAD_CHECK(gradient.defined() || options.allow_unused, "grad: input ", i, " (a ", inputs[i].describe(),
                   ") was not used to compute the outputs; pass allow_unused=true if that is expected");
    result.push_back(gradient);
  }
  return result;
}

TensorList grad(ContextId context, const TensorList& outputs, const TensorList& inputs, bool retain_graph,
                bool allow_unused) {
  return grad(context, outputs, inputs, GradOptions{.retain_graph = retain_graph, .allow_unused = allow_unused});
}

const Tensor& GradientMap::at(const Tensor& leaf) const {
  for (const dist_autograd::LeafGradient& entry : entries_) {
    if (entry.leaf.is_same(leaf)) return entry.grad;
  }
  DISTGRAD_FAIL("get_gradients: no gradient for the ", leaf.describe(), " in this context");
}

bool GradientMap::contains(const Tensor& leaf) const {
  return std::any_of(entries_.begin(), entries_.end(),
                     [&](const dist_autograd::LeafGradient& entry) { return entry.leaf.is_same(leaf); });
}

GradientMap get_gradients(ContextId context) {
  return GradientMap(find_context(context, "get_gradients")->gradients());
}

const ContextDebugInfo* DebugInfo::find(int64_t id) const {
  for (const ContextDebugInfo& context : contexts) {
    if (context.id == id) return &context;
  }
  return nullptr;
}

std::string DebugInfo::str() const {
  std::string text = absl::StrCat(num_autograd_contexts, num_autograd_contexts == 1 ? " context" : " contexts");
  for (const ContextDebugInfo& context : contexts) {
    absl::StrAppend(&text, "; context ", context.id, ": ", context.num_send_functions, " sends, ",
                    context.num_recv_functions, " recvs, workers [", absl::StrJoin(context.known_workers, ", "), "], ",
                    context.num_gradients, " gradients");
  }
  return text;
}

DebugInfo get_debug_info() {
  DebugInfo info;
  for (const dist_autograd::ContextPtr& context : dist_autograd::ContextContainer::instance().contexts()) {
    const std::set<int> workers = context->workers();
    info.contexts.push_back({.id = context->id(),
                             .num_send_functions = context->send_functions().size(),
                             .num_recv_functions = context->num_recv_functions(),
                             .known_workers = std::vector<int>(workers.begin(), workers.end()),
                             .num_gradients = context->gradients().size()});
  }
  std::sort(info.contexts.begin(), info.contexts.end(),
            [](const ContextDebugInfo& a, const ContextDebugInfo& b) { return a.id < b.id; });
  info.num_autograd_contexts = info.contexts.size();
  return info;
}

}  // namespace distgrad::autograd
