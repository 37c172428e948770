#include "autograd/autograd.h"

#include "autograd/accumulate_grad.h"
#include "autograd/autograd_meta.h"
#include "autograd/engine.h"
#include "autograd/grad_mode.h"
#include "core/ops.h"

namespace distgrad::autograd {
namespace {

// The root edges and the gradients they start from, checked as torch.autograd checks them.
struct Roots {
  std::vector<Edge> edges;
  TensorList grads;
};

Roots make_roots(const char* op, const TensorList& outputs, const TensorList& grad_outputs) {
  DISTGRAD_CHECK(!outputs.empty(), op, ": expected at least one output to differentiate");
  DISTGRAD_CHECK(grad_outputs.empty() || grad_outputs.size() == outputs.size(), op, ": got ", grad_outputs.size(),
                 " gradients for ", outputs.size(), " outputs");
  Roots roots;
  for (size_t i = 0; i < outputs.size(); ++i) {
    const Tensor& output = outputs[i];
    output.check_defined(op);
    Edge edge = gradient_edge(output);
    DISTGRAD_CHECK(edge.is_valid(), op, ": output ", i, " (a ", output.describe(),
                   ") does not require grad and has no grad_fn");
    Tensor grad = grad_outputs.empty() ? Tensor() : grad_outputs[i];
    if (grad.defined()) {
      DISTGRAD_CHECK(
          grad.sizes() == output.sizes() && grad.dtype() == output.dtype() && grad.device() == output.device(), op,
          ": expected the gradient of output ", i, " to be a ", output.describe(), ", found a ", grad.describe());
    } else {
      DISTGRAD_CHECK(output.numel() == 1, op,
                     ": a gradient can be created implicitly only for outputs with one "
                     "element; output ",
                     i, " is a ", output.describe(), " (pass a gradient of its shape)");
      grad = ones_like(output);
    }
    roots.edges.push_back(std::move(edge));
    roots.grads.push_back(std::move(grad));
  }
  return roots;
}

std::vector<Edge> input_edges(const char* op, const TensorList& inputs) {
  std::vector<Edge> edges;
  for (size_t i = 0; i < inputs.size(); ++i) {
    inputs[i].check_defined(op);
    Edge edge = gradient_edge(inputs[i]);
    DISTGRAD_CHECK(edge.is_valid(), op, ": input ", i, " (a ", inputs[i].describe(), ") does not require grad");
    edges.push_back(std::move(edge));
  }
  return edges;
}

}  // namespace

void backward(const TensorList& outputs, const BackwardOptions& options) {
  Roots roots = make_roots("backward", outputs, options.grad_outputs);
  ExecuteOptions execute;
  execute.keep_graph = options.retain_graph.value_or(options.create_graph);
  execute.create_graph = options.create_graph;
  const TensorList& inputs = options.inputs;
  if (inputs.empty()) {
    Engine::execute(roots.edges, std::move(roots.grads), execute);
    return;
  }
  const TensorList captured =
      Engine::execute(roots.edges, std::move(roots.grads), execute, input_edges("backward", inputs));
  for (size_t i = 0; i < inputs.size(); ++i) {
    const bool leaf = meta_of(inputs[i])->grad_fn == nullptr;
    GradModeGuard grad_mode(options.create_graph);
    accumulate_grad(inputs[i], leaf ? run_leaf_hooks(inputs[i], captured[i]) : captured[i]);
  }
}

TensorList grad(const TensorList& outputs, const TensorList& inputs, const GradOptions& options) {
  Roots roots = make_roots("grad", outputs, options.grad_outputs);
  DISTGRAD_CHECK(!inputs.empty(), "grad: expected at least one input to differentiate with respect to");
  const std::vector<Edge> edges = input_edges("grad", inputs);
  ExecuteOptions execute;
  execute.keep_graph = options.retain_graph.value_or(options.create_graph);
  execute.create_graph = options.create_graph;
  TensorList captured = Engine::execute(roots.edges, std::move(roots.grads), execute, edges);
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (meta_of(inputs[i])->grad_fn == nullptr) captured[i] = run_leaf_hooks(inputs[i], captured[i]);
    DISTGRAD_CHECK(captured[i].defined() || options.allow_unused, "grad: input ", i, " (a ", inputs[i].describe(),
                   ") was not used to compute the outputs; pass allow_unused=true if that is expected");
  }
  return captured;
}

}  // namespace distgrad::autograd
