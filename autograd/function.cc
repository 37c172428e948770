#include "autograd/function.h"

#include "autograd/accumulate_grad.h"
#include "autograd/autograd_meta.h"
#include "autograd/grad_mode.h"

namespace distgrad::autograd {

Tensor BackwardContext::take_reusable_grad(size_t output) const {
  Tensor& grad = owned_grads[output];
  if (GradMode::is_enabled() || !grad.defined() || !reusable_in_place(grad)) return Tensor();
  return std::move(grad);
}

TensorList FunctionNode::unpack_saved() {
  TensorList saved;
  saved.reserve(saved_.size());
  const std::shared_ptr<Node> self = shared_from_this();
  for (const SavedVariable& variable : saved_) saved.push_back(variable.unpack(self));
  return saved;
}

void FunctionNode::release_variables() {
  for (SavedVariable& variable : saved_) variable.reset();
}

bool should_record(std::initializer_list<const Tensor*> inputs) {
  return GradMode::is_enabled() && any_requires_grad(inputs);
}

bool should_record(const std::vector<Tensor>& inputs) { return GradMode::is_enabled() && any_requires_grad(inputs); }

EdgeList gradient_edges(std::span<const Tensor* const> inputs) {
  EdgeList edges;
  edges.reserve(inputs.size());
  for (const Tensor* input : inputs) edges.push_back(input->defined() ? gradient_edge(*input) : Edge{});
  return edges;
}

void set_outputs_history(const std::shared_ptr<Node>& node, std::span<const Tensor* const> inputs,
                         std::span<Tensor* const> outputs) {
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
}

void mark_views(std::initializer_list<const Tensor*> outputs) {
  for (const Tensor* output : outputs) {
    if (output->defined()) materialize_meta(*output).is_view = true;
  }
}

}  // namespace distgrad::autograd
