// AccumulateGrad: the node at the end of every path to a leaf that requires grad.
//
// It runs the leaf's tensor hooks on the incoming gradient, adds the result into the leaf's
// grad() (accumulate_grad below), then runs the leaf's post-accumulate-grad hooks (which DDP
// uses to start all-reducing a bucket as soon as its gradients are ready).
#pragma once

#include <cstdint>

#include "autograd/node.h"

namespace distgrad::autograd {

class AccumulateGrad final : public Node {
 public:
  explicit AccumulateGrad(Tensor variable);

  TensorList apply(TensorList&& grads) override;
  std::string name() const override { return "AccumulateGrad"; }
  // Runs as soon as it is ready: the leaf's gradient is then complete (see Engine).
  uint64_t priority() const override { return UINT64_MAX; }

  const Tensor& variable() const { return variable_; }

 private:
  Tensor variable_;
};

// Runs the leaf hooks of `variable` on `grad` (a leaf's tensor hooks).
Tensor run_leaf_hooks(const Tensor& variable, Tensor grad);

// Adds `grad` into variable.grad() as a backward pass does, then runs the post-accumulate-grad
// hooks. With grad mode on (create_graph) the sum is recorded, so grad() can be differentiated;
// otherwise grad() is a plain tensor updated in place once it exists. The first gradient is
// stored without a copy when nothing else holds it.
void accumulate_grad(const Tensor& variable, Tensor grad);

// True when nothing but `grad` itself can see its memory (the tensor and its storage are each
// held once), and it is contiguous with no history: a backward pass without create_graph may then
// keep it as a leaf's grad() or add another gradient into it in place.
bool reusable_in_place(const Tensor& grad);

}  // namespace distgrad::autograd
