// Recording differentiable ops: FunctionNode and record().
//
// Every differentiable op runs its core kernel, then, when grad mode is on and an input
// requires grad, records a FunctionNode: a name, the edges to its inputs' gradients, the
// tensors its backward formula needs (saved with version checks, see SavedVariable) and the
// formula itself. Formulas are written with differentiable ops (autograd/ops.h), so a
// backward pass run with create_graph records a graph of its own (Note [Higher order]).
//
//   Tensor exp(const Tensor& t) {
//     Tensor result = ops::exp(t);
//     if (auto node = record("ExpBackward", {&t}, {&result}, [](const BackwardContext& ctx) {
//           return TensorList{mul(ctx.grads[0], ctx.saved[0])};
//         })) {
//       node->save_output(result);
//     }
//     return result;
//   }
//
// Formulas must not capture tensors in the lambda: save them, so that they are version
// checked and freed with the graph. Sizes, dims and scalars are captured by value.
//
// Note [Higher order]
// The engine runs formulas with grad mode equal to create_graph. With it on, each op inside a
// formula records its own node, and the gradients it returns have a history leading back to
// the forward inputs and to the incoming gradients, so they can be differentiated again (the
// second-order MAML gradient, gradgradcheck, third-order tests).
#pragma once

#include <functional>
#include <initializer_list>
#include <memory>
#include <vector>

#include "autograd/node.h"
#include "autograd/saved_variable.h"

namespace distgrad::autograd {

// What a backward formula sees.
struct BackwardContext {
  const TensorList& grads;  // one per forward output; undefined where no gradient arrived
  const TensorList& saved;  // the saved tensors, unpacked, in the order they were saved
  const Node& node;

  // True when the gradient of forward input `i` is wanted (skip computing the others).
  bool needs(size_t input) const { return node.needs_input_grad(input); }
  // grads[output], or zeros of that output's shape when no gradient arrived.
  Tensor grad_or_zeros(size_t output) const {
    return grads[output].defined() ? grads[output] : node.zeros_for_input(output);
  }
};

// Returns one gradient per forward input (undefined where not needed or zero).
using BackwardFunction = std::function<TensorList(const BackwardContext&)>;

class FunctionNode final : public Node {
 public:
  FunctionNode(const char* name, std::vector<Edge> next_edges, BackwardFunction backward);

  TensorList apply(TensorList&& grads) override;
  std::string name() const override { return name_; }
  void release_variables() override;

  // Saves a forward input (or any tensor that is not an output of this node).
  void save(const Tensor& tensor) { saved_.emplace_back(tensor, false); }
  // Saves an output of this node, after record() set its history (Note [Saved outputs]).
  void save_output(const Tensor& output) { saved_.emplace_back(output, true); }

 private:
  const char* name_;
  std::vector<SavedVariable> saved_;
  BackwardFunction backward_;
};

// True when an op of `inputs` must be recorded: grad mode is on and one of them requires grad.
bool should_record(std::initializer_list<const Tensor*> inputs);
bool should_record(const std::vector<Tensor>& inputs);

// Makes the FunctionNode of an op whose inputs should be recorded: its next edges are the
// inputs' gradient edges, and every defined output gets it as history. An output that is the
// very same tensor as an input (a kernel returning its argument unchanged) is first replaced
// by an alias of it.
std::shared_ptr<FunctionNode> make_function_node(const char* name, const std::vector<const Tensor*>& inputs,
                                                 const std::vector<Tensor*>& outputs, BackwardFunction backward);

// When should_record(inputs), records the op (make_function_node) and returns its node; else
// returns null and changes nothing. The formula becomes a std::function only when recorded.
template <typename Backward>
std::shared_ptr<FunctionNode> record(const char* name, std::initializer_list<const Tensor*> inputs,
                                     std::initializer_list<Tensor*> outputs, Backward&& backward) {
  if (!should_record(inputs)) return nullptr;
  return make_function_node(name, std::vector<const Tensor*>(inputs), std::vector<Tensor*>(outputs),
                            BackwardFunction(std::forward<Backward>(backward)));
}

// The same for ops of a list of tensors (cat, stack, ...) or with a list of outputs (split, ...).
template <typename Backward>
std::shared_ptr<FunctionNode> record(const char* name, const std::vector<Tensor>& inputs,
                                     const std::vector<Tensor*>& outputs, Backward&& backward) {
  if (!should_record(inputs)) return nullptr;
  std::vector<const Tensor*> input_pointers;
  input_pointers.reserve(inputs.size());
  for (const Tensor& input : inputs) input_pointers.push_back(&input);
  return make_function_node(name, input_pointers, outputs, BackwardFunction(std::forward<Backward>(backward)));
}

// Marks outputs of a view op as views of a tensor that requires grad (in-place ops on them are refused).
void mark_views(std::initializer_list<const Tensor*> outputs);

}  // namespace distgrad::autograd
