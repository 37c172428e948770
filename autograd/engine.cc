#include "autograd/engine.h"

#include <algorithm>
#include <queue>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "autograd/accumulate_grad.h"
#include "autograd/autocast.h"
#include "autograd/grad_mode.h"
#include "autograd/ops.h"
#include "core/ops.h"

namespace distgrad::autograd {
namespace {

// The node every graph task starts from: it hands the root gradients to the roots.
class GraphRoot final : public Node {
 public:
  GraphRoot(const std::vector<Edge>& roots, TensorList grads)
      : Node(EdgeList(roots.begin(), roots.end())), grads_(std::move(grads)) {}
  TensorList apply(TensorList&&) override { return std::move(grads_); }
  std::string name() const override { return "GraphRoot"; }

 private:
  TensorList grads_;
};

// A ready node and the priority it runs at (the highest first).
using ReadyNode = std::pair<uint64_t, Node*>;
struct ByPriority {
  bool operator()(const ReadyNode& a, const ReadyNode& b) const { return a.first < b.first; }
};

// The state of one Engine::execute call.
class GraphTask {
 public:
  GraphTask(const ExecuteOptions& options, const std::vector<Edge>& roots, const std::vector<Edge>& capture_edges)
      : options_(options), captured_(capture_edges.size()) {
    if (options_.roots_in_order) {
      for (size_t i = 0; i < roots.size(); ++i) {
        if (roots[i].is_valid()) root_ranks_.try_emplace(roots[i].function.get(), i);
      }
    }
    for (size_t i = 0; i < capture_edges.size(); ++i) {
      const Edge& edge = capture_edges[i];
      if (!edge.is_valid()) continue;
      captures_[edge.function.get()].emplace_back(edge.input_nr, i);
      lowest_capture_ = std::min(lowest_capture_, edge.function->topological_nr());
    }
  }

  TensorList run(const std::shared_ptr<Node>& root) {
    count_dependencies(root.get());
    if (!captures_.empty() && !options_.run_nodes_made_since) mark_needed(root.get());
    std::priority_queue<ReadyNode, std::vector<ReadyNode>, ByPriority> ready;
    ready.emplace(priority(*root), root.get());
    while (!ready.empty()) {
      Node* node = ready.top().second;
      ready.pop();
      TensorList outputs = run_node(*node);
      for (size_t i = 0; i < outputs.size(); ++i) {
        const Edge& edge = node->next_edge(i);
        if (!edge.is_valid()) continue;
        NodeState& next = nodes_.at(edge.function.get());
        if (outputs[i].defined()) add_to_buffer(*node, i, *edge.function, edge.input_nr, next, std::move(outputs[i]));
        if (--next.dependencies == 0 && next.needed) ready.emplace(priority(*edge.function), edge.function.get());
      }
    }
    return std::move(captured_);
  }

 private:
  // What the task knows of one reachable node.
  struct NodeState {
    int dependencies = 0;    // edges into the node from nodes that have not run yet
    bool needed = true;      // with captures: a capture is at the node or below it
    bool must_apply = true;  // with captures: a capture is strictly below it
    bool visited = false;    // seen by mark_needed
    TensorList buffer;       // gradients summed per input slot
  };

  // The node's own priority, or with roots_in_order, above every other for a root's node.
  uint64_t priority(const Node& node) const {
    if (root_ranks_.empty()) return node.priority();  // the local engine's hot path: no lookup
    const auto root = root_ranks_.find(&node);
    return root != root_ranks_.end() ? UINT64_MAX - 1 - root->second : node.priority();
  }

  // With captures, a node below every capture cannot lead to one (nor, with
  // run_nodes_made_since, a node made before that): the walks stop there (it stays in nodes_, not
  // needed, so it never runs).
  bool below_every_capture(const Node* node) const {
    if (captures_.empty()) return false;
    if (options_.run_nodes_made_since) return node->sequence_nr() < *options_.run_nodes_made_since;
    return node->topological_nr() < lowest_capture_;
  }

  void count_dependencies(Node* root) {
    std::vector<Node*> stack{root};
    nodes_[root];
    while (!stack.empty()) {
      Node* node = stack.back();
      stack.pop_back();
      if (below_every_capture(node)) {
        nodes_.at(node).needed = false;
        continue;
      }
      for (const Edge& edge : node->next_edges()) {
        if (!edge.is_valid()) continue;
        auto [state, first_visit] = nodes_.try_emplace(edge.function.get());
        ++state->second.dependencies;
        if (first_visit) stack.push_back(edge.function.get());
      }
    }
  }

  // With captures, only nodes at or above a capture run: a post-order walk marks them.
  void mark_needed(Node* root) {
    for (auto& [node, state] : nodes_) state.needed = false;
    std::vector<std::pair<Node*, size_t>> stack{{root, 0}};
    nodes_.at(root).visited = true;
    while (!stack.empty()) {
      auto& [node, next_child] = stack.back();
      if (next_child < node->num_outputs() && !below_every_capture(node)) {
        const Edge& edge = node->next_edge(next_child++);
        if (!edge.is_valid()) continue;
        NodeState& child = nodes_.at(edge.function.get());
        if (!child.visited) {
          child.visited = true;
          stack.emplace_back(edge.function.get(), 0);
        }
        continue;
      }
      NodeState& state = nodes_.at(node);
      bool below = false;
      if (!below_every_capture(node)) {
        for (const Edge& edge : node->next_edges()) {
          below = below || (edge.is_valid() && nodes_.at(edge.function.get()).needed);
        }
      }
      state.must_apply = below;
      state.needed = below || captures_.contains(node);
      stack.pop_back();
    }
  }

  TensorList run_node(Node& node) {
    NodeState& state = nodes_.at(&node);
    TensorList inputs = std::move(state.buffer);
    inputs.resize(node.num_inputs());
    if (node.has_gradient_hooks()) {
      for (size_t i = 0; i < inputs.size(); ++i) {
        if (inputs[i].defined()) inputs[i] = node.run_gradient_hooks(static_cast<uint32_t>(i), std::move(inputs[i]));
      }
    }
    if (auto capture = captures_.find(&node); capture != captures_.end()) {
      for (const auto& [input_nr, index] : capture->second) captured_[index] = inputs.at(input_nr);
    }
    if (!state.must_apply) return TensorList(node.num_outputs());
    const bool any_defined = std::any_of(inputs.begin(), inputs.end(), [](const Tensor& t) { return t.defined(); });
    if (!any_defined && node.num_inputs() > 0) return TensorList(node.num_outputs());
    if (options_.accumulate_leaf) {
      if (const auto* accumulate = dynamic_cast<const AccumulateGrad*>(&node)) {
        const Tensor& leaf = accumulate->variable();
        options_.accumulate_leaf(leaf, run_leaf_hooks(leaf, std::move(inputs[0])));
        return {};
      }
    }
    TensorList outputs;
    {
      GradModeGuard grad_mode(options_.create_graph);
      AutocastDisabledGuard no_autocast;  // each backward op in its forward op's dtype, as PyTorch's
      outputs = node.apply(std::move(inputs));
    }
    if (!options_.keep_graph) node.release_variables();
    DISTGRAD_CHECK(outputs.size() == node.num_outputs() || outputs.empty(), node.name(), " returned ", outputs.size(),
                   " gradients, expected ", node.num_outputs());
    outputs.resize(node.num_outputs());
    return outputs;
  }

  // Adds output `index` of `producer`, the gradient for input slot `input_nr` of `next`, to
  // that slot's buffer, after checking it against the slot's metadata.
  void add_to_buffer(const Node& producer, size_t index, const Node& next, uint32_t input_nr, NodeState& state,
                     Tensor grad) {
    const InputMetadata& expected = next.input_metadata(input_nr);
    DISTGRAD_CHECK(grad.sizes() == expected.sizes && grad.device() == expected.device, producer.name(),
                   " returned an invalid gradient at index ", index, ": expected a ", expected.describe(), ", found a ",
                   grad.describe());
    if (grad.dtype() != expected.dtype) {
      GradModeGuard grad_mode(options_.create_graph);
      grad = to(grad, expected.dtype);
    }
    if (state.buffer.empty()) state.buffer.resize(next.num_inputs());
    Tensor& slot = state.buffer[input_nr];
    if (!slot.defined()) {
      slot = std::move(grad);
    } else if (!options_.create_graph && reusable_in_place(slot)) {
      untracked::add_(slot, grad);  // as PyTorch's InputBuffer: no new tensor, one pass fewer over memory
    } else if (!options_.create_graph && reusable_in_place(grad)) {
      untracked::add_(grad, slot);  // the same sum, into the newcomer
      slot = std::move(grad);
    } else {
      GradModeGuard grad_mode(options_.create_graph);
      slot = add(slot, grad);
    }
  }

  ExecuteOptions options_;
  absl::flat_hash_map<Node*, NodeState> nodes_;                                    // every node reachable from the root
  absl::flat_hash_map<Node*, std::vector<std::pair<uint32_t, size_t>>> captures_;  // input slot -> capture index
  uint64_t lowest_capture_ = UINT64_MAX;                 // the smallest topological number of a capture's node
  absl::flat_hash_map<const Node*, size_t> root_ranks_;  // with roots_in_order: a root's node -> its first index
  TensorList captured_;
};

// The final callbacks of the backward pass running on this thread (Engine::queue_callback).
thread_local std::vector<std::function<void()>>* current_callbacks = nullptr;

}  // namespace

TensorList Engine::execute(const std::vector<Edge>& roots, TensorList root_grads, const ExecuteOptions& options,
                           const std::vector<Edge>& capture_edges) {
  DISTGRAD_CHECK(roots.size() == root_grads.size(), "Engine::execute: ", roots.size(), " roots but ", root_grads.size(),
                 " gradients");
  auto graph_root = std::make_shared<GraphRoot>(roots, std::move(root_grads));
  std::vector<std::function<void()>> callbacks;
  std::vector<std::function<void()>>* const outer_callbacks = std::exchange(current_callbacks, &callbacks);
  struct RestoreCallbacks {
    std::vector<std::function<void()>>* outer;
    ~RestoreCallbacks() { current_callbacks = outer; }
  } restore{outer_callbacks};
  TensorList captured = GraphTask(options, roots, capture_edges).run(graph_root);
  for (size_t i = 0; i < callbacks.size(); ++i) {  // by index: a callback may queue more
    std::function<void()> callback = std::move(callbacks[i]);
    callback();
  }
  return captured;
}

void Engine::queue_callback(std::function<void()> callback) {
  DISTGRAD_CHECK(current_callbacks != nullptr,
                 "Engine::queue_callback: no backward pass is running on this thread (call it from a hook)");
  current_callbacks->push_back(std::move(callback));
}

}  // namespace distgrad::autograd
