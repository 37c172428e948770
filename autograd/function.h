// Recording differentiable ops: FunctionNode and record().
//
// Every differentiable op runs its core kernel, then, when grad mode is on and an input
// requires grad, records a FunctionNode: a name, the edges to its inputs' gradients, the
// tensors its backward formula needs (saved with version checks, see SavedVariable) and the
// formula itself. Formulas are written with differentiable ops (autograd/ops.h), so a
// backward pass run with create_graph records a graph of its own (Note [Higher order]).
//
//   Tensor exp(const Tensor& t) {
//     Tensor result = untracked::exp(t);
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
// Note [Reused gradients]
// Without create_graph, a formula whose input gradient has the shape and dtype of an incoming one
// may write it into that one's memory (ctx.take_reusable_grad, then an in-place op) when the
// engine alone holds it: the engine moves gradients into the node, so one that nothing else
// kept (a hook, a capture, another input slot, a saved tensor, a view) has a single owner. The
// engine itself adds a second gradient arriving at a slot into the first on the same terms, as
// PyTorch's InputBuffer does (or the first into the second, when only that one is free). A
// backward pass so skips a fresh buffer per elementwise op and the memory traffic of writing one
// (ReLU's mask, BatchNorm's input gradient): in place, ReLU's backward on the CNN's first
// activation takes half the time (bench/core_ops_bench, BM_ReluBackwardInPlace). With
// create_graph nothing is reused: the in-place kernels record no history.
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
#include <span>
#include <vector>

#include "absl/container/inlined_vector.h"
#include "autograd/node.h"
#include "autograd/saved_variable.h"

namespace distgrad::autograd {

// What a backward formula sees.
struct BackwardContext {
  const TensorList& grads;  // one per forward output; undefined where no gradient arrived
  const TensorList& saved;  // the saved tensors, unpacked, in the order they were saved
  const Node& node;
  TensorList& owned_grads;  // grads itself, which the node owns while its formula runs

  // True when the gradient of forward input `i` is wanted (skip computing the others).
  bool needs(size_t input) const { return node.needs_input_grad(input); }
  // grads[output], or zeros of that output's shape when no gradient arrived.
  Tensor grad_or_zeros(size_t output) const {
    return grads[output].defined() ? grads[output] : node.zeros_for_input(output);
  }
  // grads[output] moved out of the node, for a formula to write a gradient of the same shape and
  // dtype into (Note [Reused gradients]) when no graph is being recorded (create_graph is off)
  // and nothing else holds it; otherwise undefined, and grads[output] stays.
  Tensor take_reusable_grad(size_t output) const;
};

// The part of a recorded op's node that does not depend on its formula: name, edges and
// saved tensors. record() makes a FormulaNode<F>, which adds the formula F.
class FunctionNode : public Node {
 public:
  FunctionNode(const char* name, EdgeList next_edges) : Node(std::move(next_edges)), name_(name) {}

  std::string name() const override { return name_; }
  void release_variables() override;

  // Saves a forward input (or any tensor that is not an output of this node).
  void save(const Tensor& tensor) { saved_.emplace_back(tensor, false); }
  // Saves an output of this node, after record() set its history (Note [Saved outputs]).
  void save_output(const Tensor& output) { saved_.emplace_back(output, true); }

 protected:
  // The saved tensors, checked against in-place changes and a released graph.
  TensorList unpack_saved();

 private:
  const char* name_;
  absl::InlinedVector<SavedVariable, 2> saved_;
};

// A FunctionNode whose backward formula is F, a callable from BackwardContext to one gradient
// per forward input (undefined where not needed or zero). The formula lives inside the node:
// recording an op costs one allocation for both.
template <typename F>
class FormulaNode final : public FunctionNode {
 public:
  FormulaNode(const char* name, EdgeList next_edges, F formula)
      : FunctionNode(name, std::move(next_edges)), formula_(std::move(formula)) {}

  TensorList apply(TensorList&& grads) override {
    const TensorList saved = unpack_saved();
    return formula_(BackwardContext{grads, saved, *this, grads});
  }

 private:
  F formula_;
};

// True when an op of `inputs` must be recorded: grad mode is on and one of them requires grad.
bool should_record(std::initializer_list<const Tensor*> inputs);
bool should_record(const std::vector<Tensor>& inputs);

// The gradient edges of an op's inputs (invalid for undefined inputs).
EdgeList gradient_edges(std::span<const Tensor* const> inputs);
// Makes `node` the history of every defined output. An output that is the very same tensor as
// an input (a kernel returning its argument unchanged) is first replaced by an alias of it.
void set_outputs_history(const std::shared_ptr<Node>& node, std::span<const Tensor* const> inputs,
                         std::span<Tensor* const> outputs);

// When should_record(inputs), records the op: a node with `formula` whose next edges are the
// inputs' gradient edges, as the history of `outputs`. Returns it (to save tensors on), or
// null, changing nothing, when the op is not recorded.
template <typename F>
std::shared_ptr<FunctionNode> record(const char* name, std::initializer_list<const Tensor*> inputs,
                                     std::initializer_list<Tensor*> outputs, F&& formula) {
  if (!should_record(inputs)) return nullptr;
  const std::span<const Tensor* const> input_span(inputs.begin(), inputs.size());
  auto node =
      std::make_shared<FormulaNode<std::decay_t<F>>>(name, gradient_edges(input_span), std::forward<F>(formula));
  set_outputs_history(node, input_span, std::span<Tensor* const>(outputs.begin(), outputs.size()));
  return node;
}

// The same for ops of a list of tensors (cat, stack, ...) or with a list of outputs (split, ...).
template <typename F>
std::shared_ptr<FunctionNode> record(const char* name, const std::vector<Tensor>& inputs,
                                     const std::vector<Tensor*>& outputs, F&& formula) {
  if (!should_record(inputs)) return nullptr;
  std::vector<const Tensor*> input_pointers;
  input_pointers.reserve(inputs.size());
  for (const Tensor& input : inputs) input_pointers.push_back(&input);
  auto node =
      std::make_shared<FormulaNode<std::decay_t<F>>>(name, gradient_edges(input_pointers), std::forward<F>(formula));
  set_outputs_history(node, input_pointers, outputs);
  return node;
}

// Marks outputs of a view op as views of a tensor that requires grad (in-place ops on them are refused).
void mark_views(std::initializer_list<const Tensor*> outputs);

}  // namespace distgrad::autograd
