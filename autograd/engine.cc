#include "autograd/engine.h"

#include <queue>
#include <unordered_map>
#include <utility>

#include "autograd/grad_mode.h"
#include "autograd/ops.h"
#include "core/ops.h"

namespace distgrad::autograd {
namespace {

// The node every graph task starts from: it hands the root gradients to the roots.
class GraphRoot final : public Node {
 public:
  GraphRoot(std::vector<Edge> roots, TensorList grads) : Node(std::move(roots)), grads_(std::move(grads)) {}
  TensorList apply(TensorList&&) override { return std::move(grads_); }
  std::string name() const override { return "GraphRoot"; }

 private:
  TensorList grads_;
};

struct ByPriority {
  bool operator()(const Node* a, const Node* b) const { return a->priority() < b->priority(); }
};

// The state of one Engine::execute call.
class GraphTask {
 public:
  GraphTask(const ExecuteOptions& options, const std::vector<Edge>& capture_edges)
      : options_(options), captured_(capture_edges.size()) {
    for (size_t i = 0; i < capture_edges.size(); ++i) {
      const Edge& edge = capture_edges[i];
      if (edge.is_valid()) captures_[edge.function.get()].emplace_back(edge.input_nr, i);
    }
  }

  TensorList run(const std::shared_ptr<Node>& root) {
    count_dependencies(root.get());
    if (!captures_.empty()) mark_needed(root.get());
    std::priority_queue<Node*, std::vector<Node*>, ByPriority> ready;
    ready.push(root.get());
    while (!ready.empty()) {
      Node* node = ready.top();
      ready.pop();
      TensorList outputs = run_node(*node);
      for (size_t i = 0; i < outputs.size(); ++i) {
        const Edge& edge = node->next_edge(i);
        if (!edge.is_valid()) continue;
        Node* next = edge.function.get();
        if (outputs[i].defined()) add_to_buffer(*node, i, next, edge.input_nr, std::move(outputs[i]));
        if (--dependencies_[next] == 0 && is_needed(next)) ready.push(next);
      }
    }
    return std::move(captured_);
  }

 private:
  void count_dependencies(Node* root) {
    std::vector<Node*> stack{root};
    std::unordered_map<Node*, bool> seen{{root, true}};
    while (!stack.empty()) {
      Node* node = stack.back();
      stack.pop_back();
      for (const Edge& edge : node->next_edges()) {
        if (!edge.is_valid()) continue;
        Node* next = edge.function.get();
        ++dependencies_[next];
        if (seen.emplace(next, true).second) stack.push_back(next);
      }
    }
  }

  // With captures, a node is needed when a capture is at it or below it (post-order walk).
  void mark_needed(Node* root) {
    std::vector<std::pair<Node*, size_t>> stack{{root, 0}};
    needed_[root] = false;
    while (!stack.empty()) {
      auto& [node, next_child] = stack.back();
      if (next_child < node->num_outputs()) {
        const Edge& edge = node->next_edge(next_child++);
        if (edge.is_valid() && needed_.emplace(edge.function.get(), false).second) {
          stack.emplace_back(edge.function.get(), 0);
        }
        continue;
      }
      bool needed = captures_.count(node) > 0;
      for (const Edge& edge : node->next_edges()) needed = needed || (edge.is_valid() && needed_[edge.function.get()]);
      needed_[node] = needed;
      stack.pop_back();
    }
  }

  bool is_needed(Node* node) const { return captures_.empty() || needed_.at(node); }

  // True when `node` must apply: without captures always; with captures when a capture lies
  // strictly below it (a node whose own slot is captured only hands the gradient over).
  bool must_apply(Node* node) const {
    if (captures_.empty()) return true;
    for (const Edge& edge : node->next_edges()) {
      if (edge.is_valid() && needed_.at(edge.function.get())) return true;
    }
    return false;
  }

  TensorList run_node(Node& node) {
    TensorList inputs = take_buffer(node);
    if (node.has_gradient_hooks()) {
      for (size_t i = 0; i < inputs.size(); ++i) {
        if (inputs[i].defined()) inputs[i] = node.run_gradient_hooks(static_cast<uint32_t>(i), std::move(inputs[i]));
      }
    }
    if (auto capture = captures_.find(&node); capture != captures_.end()) {
      for (const auto& [input_nr, index] : capture->second) captured_[index] = inputs.at(input_nr);
    }
    if (!must_apply(&node)) return TensorList(node.num_outputs());
    const bool any_defined = std::any_of(inputs.begin(), inputs.end(), [](const Tensor& t) { return t.defined(); });
    if (!any_defined && node.num_inputs() > 0) return TensorList(node.num_outputs());
    TensorList outputs;
    {
      GradModeGuard grad_mode(options_.create_graph);
      outputs = node.apply(std::move(inputs));
    }
    if (!options_.keep_graph) node.release_variables();
    DISTGRAD_CHECK(outputs.size() == node.num_outputs() || outputs.empty(), node.name(), " returned ", outputs.size(),
                   " gradients, expected ", node.num_outputs());
    outputs.resize(node.num_outputs());
    return outputs;
  }

  TensorList take_buffer(const Node& node) {
    auto buffer = buffers_.find(&node);
    if (buffer == buffers_.end()) return TensorList(node.num_inputs());
    TensorList inputs = std::move(buffer->second);
    buffers_.erase(buffer);
    return inputs;
  }

  // Adds output `index` of `producer`, the gradient for input slot `input_nr` of `next`, to
  // that slot's buffer, after checking it against the slot's metadata.
  void add_to_buffer(const Node& producer, size_t index, Node* next, uint32_t input_nr, Tensor grad) {
    const InputMetadata& expected = next->input_metadata(input_nr);
    DISTGRAD_CHECK(grad.sizes() == expected.sizes && grad.device() == expected.device, producer.name(),
                   " returned an invalid gradient at index ", index, ": expected a ", expected.describe(), ", found a ",
                   grad.describe());
    if (grad.dtype() != expected.dtype) {
      GradModeGuard grad_mode(options_.create_graph);
      grad = to(grad, expected.dtype);
    }
    TensorList& buffer = buffers_[next];
    if (buffer.empty()) buffer.resize(next->num_inputs());
    Tensor& slot = buffer[input_nr];
    if (!slot.defined()) {
      slot = std::move(grad);
    } else {
      GradModeGuard grad_mode(options_.create_graph);
      slot = add(slot, grad);
    }
  }

  ExecuteOptions options_;
  std::unordered_map<Node*, int> dependencies_;
  std::unordered_map<const Node*, TensorList> buffers_;
  std::unordered_map<Node*, std::vector<std::pair<uint32_t, size_t>>> captures_;  // input slot -> capture index
  std::unordered_map<Node*, bool> needed_;
  TensorList captured_;
};

}  // namespace

TensorList Engine::execute(const std::vector<Edge>& roots, TensorList root_grads, const ExecuteOptions& options,
                           const std::vector<Edge>& capture_edges) {
  DISTGRAD_CHECK(roots.size() == root_grads.size(), "Engine::execute: ", roots.size(), " roots but ", root_grads.size(),
                 " gradients");
  auto graph_root = std::make_shared<GraphRoot>(roots, std::move(root_grads));
  return GraphTask(options, capture_edges).run(graph_root);
}

}  // namespace distgrad::autograd
