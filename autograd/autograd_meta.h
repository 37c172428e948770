// AutogradMeta: the autograd state of one tensor, kept in core's opaque `autograd_meta` slot.
//
// Tensors that autograd never touched carry no meta at all. A leaf that requires grad has
// `requires_grad` set, accumulates into `grad`, and reaches the graph through a lazily made
// AccumulateGrad node (held weakly: the graph owns it). A tensor computed by a recorded op
// has `grad_fn` (the op's node) and `output_nr` (which output of it this tensor is).
//
// The functions below are the only way the rest of autograd reads or changes this state.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "autograd/node.h"
#include "core/tensor.h"

namespace distgrad::autograd {

struct AutogradMeta : AutogradMetaInterface, std::enable_shared_from_this<AutogradMeta> {
  struct LeafHook {
    int64_t id;
    GradientHook hook;
  };
  struct PostAccumulateHook {
    int64_t id;
    std::function<void(const Tensor&)> hook;
  };

  bool requires_grad = false;  // leaves only; other tensors require grad through grad_fn
  Tensor grad;
  std::shared_ptr<Node> grad_fn;
  uint32_t output_nr = 0;
  std::weak_ptr<Node> grad_accumulator;  // leaves: the AccumulateGrad node, owned by the graph
  bool retains_grad = false;
  // A differentiable view of a tensor that requires grad: in-place ops on it are refused.
  bool is_view = false;
  std::vector<LeafHook> leaf_hooks;  // leaves: run on each gradient before accumulation
  std::vector<PostAccumulateHook> post_accumulate_hooks;
};

// The tensor's meta, or null when it has none.
AutogradMeta* meta_of(const Tensor& tensor);
// The tensor's meta, created empty when missing.
AutogradMeta& materialize_meta(const Tensor& tensor);

bool requires_grad(const Tensor& tensor);
// Marks a leaf as requiring grad or not (Tensor::requires_grad_).
void set_requires_grad(const Tensor& tensor, bool requires_grad);
inline bool any_requires_grad(std::initializer_list<const Tensor*> tensors) {
  for (const Tensor* tensor : tensors) {
    if (tensor->defined() && requires_grad(*tensor)) return true;
  }
  return false;
}
bool any_requires_grad(const std::vector<Tensor>& tensors);

// Where the gradient of `tensor` goes: its grad_fn's slot, its AccumulateGrad node for a leaf
// that requires grad, or an invalid edge.
Edge gradient_edge(const Tensor& tensor);
// The AccumulateGrad node of a leaf that requires grad, made on first use.
std::shared_ptr<Node> grad_accumulator(const Tensor& tensor);

// Makes `output` the next output of `node`: sets its grad_fn and output_nr and records its
// metadata as the node's next input slot. `output` must not have a history yet.
void set_history(const Tensor& output, const std::shared_ptr<Node>& node);

// A tensor that shares `tensor`'s storage and view, without autograd state.
Tensor alias_without_history(const Tensor& tensor);

}  // namespace distgrad::autograd
