#include "autograd/accumulate_grad.h"

#include <mutex>

#include "autograd/autograd_meta.h"
#include "autograd/grad_mode.h"
#include "autograd/ops.h"
#include "core/ops.h"

namespace distgrad::autograd {
namespace {

// Guards every tensor's grad against two backward passes accumulating at once.
std::mutex grad_accumulation_mutex;

}  // namespace

bool reusable_in_place(const Tensor& grad) {
  return grad.use_count() == 1 && grad.storage().use_count() == 1 && grad.is_contiguous() && !requires_grad(grad);
}

AccumulateGrad::AccumulateGrad(Tensor variable) : variable_(std::move(variable)) { add_input_metadata(variable_); }

TensorList AccumulateGrad::apply(TensorList&& grads) {
  accumulate_grad(variable_, run_leaf_hooks(variable_, std::move(grads.at(0))));
  return {};
}

Tensor run_leaf_hooks(const Tensor& variable, Tensor grad) {
  const AutogradMeta* meta = meta_of(variable);
  if (meta == nullptr || !grad.defined()) return grad;
  for (const AutogradMeta::LeafHook& entry : meta->leaf_hooks) {
    Tensor replaced = entry.hook(grad);
    if (replaced.defined()) grad = std::move(replaced);
  }
  return grad;
}

void accumulate_grad(const Tensor& variable, Tensor grad) {
  if (!grad.defined()) return;
  AutogradMeta& meta = materialize_meta(variable);
  {
    std::lock_guard<std::mutex> lock(grad_accumulation_mutex);
    if (!meta.grad.defined()) {
      if (GradMode::is_enabled()) {
        meta.grad = std::move(grad);
      } else if (reusable_in_place(grad)) {
        meta.grad = std::move(grad);
      } else {
        meta.grad = untracked::clone(grad);
      }
    } else if (GradMode::is_enabled()) {
      meta.grad = add(meta.grad, grad);
    } else if (requires_grad(meta.grad)) {
      meta.grad = untracked::add(meta.grad, grad);  // keep the recorded old grad() intact
    } else {
      untracked::add_(meta.grad, grad);
    }
  }
  for (const AutogradMeta::PostAccumulateHook& entry : meta.post_accumulate_hooks) entry.hook(variable);
}

}  // namespace distgrad::autograd
