#include "autograd/distributed/dist_autograd.h"

#include <exception>
#include <mutex>
#include <unordered_map>
#include <unordered_set>

#include "autograd/accumulate_grad.h"
#include "autograd/autograd_meta.h"
#include "autograd/distributed/dist_engine.h"
#include "autograd/distributed/functions.h"
#include "autograd/engine.h"
#include "autograd/grad_mode.h"
#include "core/creation.h"
#include "rpc/rpc.h"

namespace distgrad::autograd {
namespace distributed {
namespace {

std::string this_worker() { return rpc::worker_name(rpc::world_info().rank, rpc::world_info().world_size); }

// Whether the pass running on this thread keeps its graph after it ends (set by the engine's
// entry points; read where a pass crosses to another worker).
thread_local bool pass_retains_graph = false;

class RetainGraphScope {
 public:
  explicit RetainGraphScope(bool retain) : previous_(pass_retains_graph) { pass_retains_graph = retain; }
  ~RetainGraphScope() { pass_retains_graph = previous_; }
  RetainGraphScope(const RetainGraphScope&) = delete;
  RetainGraphScope& operator=(const RetainGraphScope&) = delete;

 private:
  bool previous_;
};

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

// The internal messages of distributed autograd (registered functions with reserved names).

// The roots of a pass that starts at the send function of `message_id` with `grads`.
std::vector<Edge> message_roots(const DistAutogradContext& context, int64_t message_id, const TensorList& grads) {
  std::shared_ptr<SendBackward> send = context.send(message_id);
  DISTGRAD_CHECK(grads.size() == send->num_inputs(), "distributed autograd: message ", message_id, " carried ",
                 send->num_inputs(), " tensors but ", grads.size(), " gradients came back");
  std::vector<Edge> roots;
  for (size_t i = 0; i < grads.size(); ++i) roots.push_back({send, static_cast<uint32_t>(i)});
  return roots;
}

// Runs this worker's part of a pass from the send function of `message_id`; returns the
// gradients for `from`'s send functions (Note [Gradient messages in flight]).
ReturnedGradients propagate_gradients(int64_t context_id, int64_t message_id, std::vector<Tensor> grads,
                                      bool retain_graph, int from) {
  ContextPtr context = ContextContainer::instance().find(context_id);
  DISTGRAD_CHECK(context != nullptr, "distributed autograd: context ", context_id, " is not known on ", this_worker(),
                 " (it was released, or the forward pass never reached this worker)");
  std::vector<Edge> roots = message_roots(*context, message_id, grads);
  return run_local_pass(*context, roots, std::move(grads), retain_graph, from);
}
DISTGRAD_REMOTE_NAMED(propagate_gradients, "__distgrad.autograd.propagate");

std::vector<rpc::Future<void>> forward_to_workers(const ContextPtr& context, int except,
                                                  void (*message)(int64_t, int64_t, int), int64_t argument);

// Releases the context here and on the workers it talked to, except the one that asked.
void release_context(int64_t context_id, int64_t, int from) {
  if (ContextPtr context = ContextContainer::instance().release(context_id)) {
    forward_to_workers(context, from, &release_context, 0);
  }
}
DISTGRAD_REMOTE_NAMED(release_context, "__distgrad.autograd.release");

// Frees the graph of the context's send functions here and on the workers it talked to, and
// returns once they have too; a pass id already seen stops the message (Note [Graphs kept
// through a pass]).
void release_pass_graph(int64_t context_id, int64_t pass_id, int from) {
  ContextPtr context = ContextContainer::instance().find(context_id);
  if (context == nullptr || !context->mark_pass_released(pass_id)) return;
  release_graph_from(context->send_functions());
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
  const int self = rpc::world_info().rank;
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

// --- the forward hooks (Note [Send/Recv pairing])

bool any_requires_grad(const std::vector<Tensor>& tensors) {
  if (!GradMode::is_enabled()) return false;
  for (const Tensor& tensor : tensors) {
    if (tensor.requires_grad()) return true;
  }
  return false;
}

void record_send(int to, const std::vector<Tensor>& tensors, rpc::AutogradIds& ids) {
  ContextPtr context = current_context();
  if (context == nullptr || !any_requires_grad(tensors)) return;
  const int64_t message_id = ContextContainer::instance().next_message_id();
  context->add_send(message_id, std::make_shared<SendBackward>(tensors));
  context->add_worker(to);
  ids = {static_cast<uint64_t>(context->id()), static_cast<uint64_t>(message_id)};
}

// Gives received tensors that required grad on the sender their history: a RecvBackward in
// the message's context, or, outside any context, leaves that require grad (as PyTorch does).
void attach_recv(int from, std::vector<Tensor>& tensors, const std::vector<bool>& requires_grad,
                 const ContextPtr& context, int64_t message_id) {
  std::vector<size_t> slots;
  for (size_t i = 0; i < tensors.size() && i < requires_grad.size(); ++i) {
    if (requires_grad[i] && tensors[i].defined() && is_floating(tensors[i].dtype())) slots.push_back(i);
  }
  if (slots.empty()) return;
  if (context == nullptr) {
    for (size_t slot : slots) tensors[slot].requires_grad_();
    return;
  }
  auto recv = std::make_shared<RecvBackward>(context->id(), message_id, from, slots, tensors.size());
  for (size_t slot : slots) set_history(tensors[slot], recv);
  context->add_recv(message_id, recv);
  context->add_worker(from);
}

rpc::CallHooks distributed_autograd_hooks() {
  rpc::CallHooks hooks;
  hooks.before_request = &record_send;
  hooks.before_reply = &record_send;
  hooks.on_request = [](int from, std::vector<Tensor>& tensors, const std::vector<bool>& requires_grad,
                        const rpc::AutogradIds& ids) -> std::shared_ptr<void> {
    if (ids.context_id == 0) {
      attach_recv(from, tensors, requires_grad, nullptr, 0);
      return nullptr;
    }
    ContextPtr context = ContextContainer::instance().get_or_create(static_cast<int64_t>(ids.context_id));
    context->add_worker(from);
    attach_recv(from, tensors, requires_grad, context, static_cast<int64_t>(ids.message_id));
    return std::make_shared<ContextScope>(context);  // calls made while the function runs join it
  };
  hooks.on_reply = [](int from, std::vector<Tensor>& tensors, const std::vector<bool>& requires_grad,
                      const rpc::AutogradIds& ids) {
    ContextPtr context =
        ids.context_id == 0 ? nullptr : ContextContainer::instance().find(static_cast<int64_t>(ids.context_id));
    attach_recv(from, tensors, requires_grad, context, static_cast<int64_t>(ids.message_id));
  };
  return hooks;
}

// Installed when distributed autograd is linked in (this file holds its whole API).
const bool kHooksInstalled = (rpc::install_call_hooks(distributed_autograd_hooks()), true);

// The local pass running on this thread (run_local_pass), or null.
struct LocalPass {
  int caller;                                        // gradients for this worker go back in the reply
  ReturnedGradients for_caller;                      // those gradients
  std::vector<rpc::Future<ReturnedGradients>> sent;  // messages to other workers, awaited at the end
};
thread_local LocalPass* current_pass = nullptr;

class LocalPassScope {
 public:
  explicit LocalPassScope(LocalPass* pass) : previous_(current_pass) { current_pass = pass; }
  ~LocalPassScope() { current_pass = previous_; }
  LocalPassScope(const LocalPassScope&) = delete;
  LocalPassScope& operator=(const LocalPassScope&) = delete;

 private:
  LocalPass* previous_;
};

// Runs the local engine from `roots` for `pass`; records its failure, if any, in `failure`.
void run_engine(DistAutogradContext& context, LocalPass& pass, const std::vector<Edge>& roots, TensorList grads,
                std::exception_ptr& failure) {
  ExecuteOptions options;
  options.keep_graph = true;  // Note [Graphs kept through a pass]
  options.accumulate_leaf = [&context](const Tensor& leaf, const Tensor& grad) { context.accumulate(leaf, grad); };
  LocalPassScope scope(&pass);
  try {
    NoGradGuard no_grad;
    Engine::execute(roots, std::move(grads), options);
  } catch (...) {
    if (!failure) failure = std::current_exception();
  }
}

// The driver's pass: runs the engine from the roots, then releases the graph everywhere unless
// retained. Returns this worker's leaf gradients of the pass.
std::vector<LeafGradient> run_pass(const ContextPtr& state, const TensorList& roots, bool retain_graph,
                                   const char* op) {
  DISTGRAD_CHECK(!roots.empty(), op, ": expected at least one root");
  std::vector<Edge> edges;
  TensorList grads;
  for (size_t i = 0; i < roots.size(); ++i) {
    roots[i].check_defined(op);
    DISTGRAD_CHECK(roots[i].numel() == 1, op, ": roots must be scalars (one element); root ", i, " is a ",
                   roots[i].describe());
    Edge edge = gradient_edge(roots[i]);
    DISTGRAD_CHECK(edge.is_valid(), op, ": root ", i, " (a ", roots[i].describe(), ") does not require grad");
    edges.push_back(std::move(edge));
    grads.push_back(ones_like(roots[i]));
  }
  DistAutogradContext& context = *state;
  for (const rpc::Future<void>& done : take_pending_releases(context.id())) done.wait();
  context.begin_pass();
  try {
    run_local_pass(context, edges, std::move(grads), retain_graph, /*caller=*/-1);
  } catch (...) {
    // The pass failed somewhere: every worker that took part drops the context's state.
    context.end_pass();
    release_context(context.id(), 0, -1);
    throw;
  }
  if (!retain_graph) {
    std::vector<std::shared_ptr<Node>> nodes = context.send_functions();
    for (const Edge& edge : edges) nodes.push_back(edge.function);
    release_graph_from(nodes);
    const int64_t pass_id = ContextContainer::instance().next_message_id();
    context.mark_pass_released(pass_id);
    std::vector<rpc::Future<void>> calls = forward_to_workers(state, -1, &release_pass_graph, pass_id);
    if (!calls.empty()) {
      PendingReleases& pending = pending_releases();
      std::lock_guard<std::mutex> lock(pending.mutex);
      pending.by_context[context.id()] = std::move(calls);
    }
  }
  return context.end_pass();
}

}  // namespace

ReturnedGradients run_local_pass(DistAutogradContext& context, const std::vector<Edge>& roots, TensorList grads,
                                 bool retain_graph, int caller) {
  RetainGraphScope retain(retain_graph);
  context.enter_gradient_call();
  LocalPass pass{caller, {}, {}};
  std::exception_ptr failure;
  run_engine(context, pass, roots, std::move(grads), failure);
  // Every message is awaited, even after a failure: none outlives the pass that sent it. Replies
  // that bring gradients back continue the pass here, which may send more messages.
  for (size_t i = 0; i < pass.sent.size(); ++i) {
    ReturnedGradients returned;
    try {
      returned = pass.sent[i].get();
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
    run_engine(context, pass, message_edges, std::move(message_grads), failure);
  }
  context.exit_gradient_call();
  if (failure) std::rethrow_exception(failure);
  return std::move(pass.for_caller);
}

void send_gradients(int worker, int64_t context_id, int64_t message_id, std::vector<Tensor> grads) {
  LocalPass* pass = current_pass;
  if (pass != nullptr && worker == pass->caller) {
    pass->for_caller.emplace_back(message_id, std::move(grads));
    return;
  }
  ContextScope outside(nullptr);  // the gradients themselves are not recorded
  // Outside a pass nothing would run gradients that came back in the reply: ask for none.
  const int reply_to = pass != nullptr ? rpc::world_info().rank : -1;
  rpc::Future<ReturnedGradients> message = rpc::rpc_async(worker, &propagate_gradients, context_id, message_id,
                                                          std::move(grads), pass_retains_graph, reply_to);
  if (pass != nullptr) {
    pass->sent.push_back(std::move(message));
  } else {
    message.get();  // a local backward() reached a RecvBackward: nothing else awaits it
  }
}

size_t num_live_contexts() { return ContextContainer::instance().size(); }

}  // namespace distributed

Context::Context() : state_(distributed::ContextContainer::instance().create()), scope_(state_) {}

Context::~Context() {
  distributed::take_pending_releases(state_->id());
  if (distributed::ContextContainer::instance().release(state_->id()) != nullptr) {
    distributed::forward_to_workers(state_, -1, &distributed::release_context, 0);
  }
}

void backward(const Context& context, const TensorList& roots, bool retain_graph, const TensorList& inputs) {
  distributed::ContextPtr state = distributed::ContextContainer::instance().find(context.id());
  DISTGRAD_CHECK(state != nullptr, "backward: context ", context.id(), " was released (a failed pass releases it)");
  std::vector<distributed::LeafGradient> pass = distributed::run_pass(state, roots, retain_graph, "backward");
  for (const distributed::LeafGradient& entry : pass) {
    const bool wanted = inputs.empty() || std::any_of(inputs.begin(), inputs.end(),
                                                      [&](const Tensor& input) { return input.is_same(entry.leaf); });
    NoGradGuard no_grad;
    if (wanted) accumulate_grad(entry.leaf, entry.grad);
  }
}

TensorList grad(const Context& context, const TensorList& outputs, const TensorList& inputs, bool retain_graph,
                bool allow_unused) {
  distributed::ContextPtr state = distributed::ContextContainer::instance().find(context.id());
  DISTGRAD_CHECK(state != nullptr, "grad: context ", context.id(), " was released (a failed pass releases it)");
  for (size_t i = 0; i < inputs.size(); ++i) {
    inputs[i].check_defined("grad");
    DISTGRAD_CHECK(inputs[i].requires_grad() && inputs[i].is_leaf(), "grad: input ", i, " (a ", inputs[i].describe(),
                   ") must be a leaf that requires grad: distributed gradients are collected at leaves");
  }
  const GradientMap pass(distributed::run_pass(state, outputs, retain_graph, "grad"));
  TensorList result;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const bool found = pass.contains(inputs[i]);
    DISTGRAD_CHECK(found || allow_unused, "grad: input ", i, " (a ", inputs[i].describe(),
                   ") was not used to compute the outputs; pass allow_unused=true if that is expected");
    result.push_back(found ? pass.at(inputs[i]) : Tensor());
  }
  return result;
}

const Tensor& GradientMap::at(const Tensor& leaf) const {
  for (const distributed::LeafGradient& entry : entries_) {
    if (entry.leaf.is_same(leaf)) return entry.grad;
  }
  DISTGRAD_FAIL("get_gradients: no gradient for the ", leaf.describe(), " in this context");
}

bool GradientMap::contains(const Tensor& leaf) const {
  return std::any_of(entries_.begin(), entries_.end(),
                     [&](const distributed::LeafGradient& entry) { return entry.leaf.is_same(leaf); });
}

GradientMap get_gradients(const Context& context) {
  distributed::ContextPtr state = distributed::ContextContainer::instance().find(context.id());
  DISTGRAD_CHECK(state != nullptr, "get_gradients: context ", context.id(), " was released");
  return GradientMap(state->gradients());
}

GradientMap get_gradients(int64_t context_id) {
  distributed::ContextPtr state = distributed::ContextContainer::instance().find(context_id);
  DISTGRAD_CHECK(state != nullptr, "get_gradients: context ", context_id, " is not known on ",
                 distributed::this_worker(), " (it was released, or no call inside it reached this worker)");
  return GradientMap(state->gradients());
}

}  // namespace distgrad::autograd
