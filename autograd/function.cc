#include "autograd/function.h"

#include "autograd/autograd_meta.h"
#include "autograd/grad_mode.h"

namespace distgrad::autograd {

FunctionNode::FunctionNode(const char* name, std::vector<Edge> next_edges, BackwardFunction backward)
    : Node(std::move(next_edges)), name_(name), backward_(std::move(backward)) {}

TensorList FunctionNode::apply(TensorList&& grads) {
  TensorList saved;
  saved.reserve(saved_.size());
  const std::shared_ptr<Node> self = shared_from_this();
  for (const SavedVariable& variable : saved_) saved.push_back(variable.unpack(self));
  return backward_(BackwardContext{grads, saved, *this});
}

void FunctionNode::release_variables() {
  for (SavedVariable& variable : saved_) variable.reset();
}

bool should_record(std::initializer_list<const Tensor*> inputs) {
  return GradMode::is_enabled() && any_requires_grad(inputs);
}

bool should_record(const std::vector<Tensor>& inputs) { return GradMode::is_enabled() && any_requires_grad(inputs); }

std::shared_ptr<FunctionNode> make_function_node(const char* name, const std::vector<const Tensor*>& inputs,
                                                 const std::vector<Tensor*>& outputs, BackwardFunction backward) {
  std::vector<Edge> edges;
  edges.reserve(inputs.size());
  for (const Tensor* input : inputs) edges.push_back(input->defined() ? gradient_edge(*input) : Edge{});
  auto node = std::make_shared<FunctionNode>(name, std::move(edges), std::move(backward));
  for (Tensor* output : outputs) {
    if (!output->defined()) continue;
    for (const Tensor* input : inputs) {
      if (input->defined() && output->is_same(*input)) {
        *output = alias_without_history(*output);
        break;
      }
    }
    set_history(*output, node);
  }
  return node;
}

void mark_views(std::initializer_list<const Tensor*> outputs) {
  for (const Tensor* output : outputs) {
    if (output->defined()) materialize_meta(*output).is_view = true;
  }
}

}  // namespace distgrad::autograd
