#include "autograd/autograd_meta.h"

#include <mutex>

#include "autograd/accumulate_grad.h"

namespace distgrad::autograd {
namespace {

// Lets creation functions honour TensorOptions::requires_grad; installed when this file is
// linked in, which every use of autograd does.
const bool kRequiresGradSetterInstalled =
    (detail::install_requires_grad_setter([](const Tensor& tensor) { set_requires_grad(tensor, true); }), true);

}  // namespace

AutogradMeta* meta_of(const Tensor& tensor) { return static_cast<AutogradMeta*>(tensor.autograd_meta()); }

AutogradMeta& materialize_meta(const Tensor& tensor) {
  if (AutogradMeta* meta = meta_of(tensor)) return *meta;
  auto meta = std::make_shared<AutogradMeta>();
  tensor.set_autograd_meta(meta);
  return *meta;
}

bool requires_grad(const Tensor& tensor) {
  const AutogradMeta* meta = meta_of(tensor);
  return meta != nullptr && (meta->requires_grad || meta->grad_fn != nullptr);
}

bool any_requires_grad(const std::vector<Tensor>& tensors) {
  for (const Tensor& tensor : tensors) {
    if (tensor.defined() && requires_grad(tensor)) return true;
  }
  return false;
}

void set_requires_grad(const Tensor& tensor, bool requires_grad) {
  tensor.check_defined("requires_grad_");
  AutogradMeta& meta = materialize_meta(tensor);
  DISTGRAD_CHECK(!meta.grad_fn, "requires_grad_: can only change requires_grad of leaf tensors; this ",
                 tensor.describe(), " was computed by ", meta.grad_fn->name(), " (use detach() to get a leaf)");
  DISTGRAD_CHECK(!requires_grad || is_floating(tensor.dtype()),
                 "requires_grad_: only floating-point tensors can require gradients, found a ", tensor.describe());
  meta.requires_grad = requires_grad;
}

Edge gradient_edge(const Tensor& tensor) {
  const AutogradMeta* meta = meta_of(tensor);
  if (meta == nullptr) return {};
  if (meta->grad_fn) return {meta->grad_fn, meta->output_nr};
  if (meta->requires_grad) return {grad_accumulator(tensor), 0};
  return {};
}

std::shared_ptr<Node> grad_accumulator(const Tensor& tensor) {
  AutogradMeta& meta = materialize_meta(tensor);
  DISTGRAD_CHECK(meta.requires_grad && !meta.grad_fn, "grad_accumulator: expected a leaf that requires grad, found a ",
                 tensor.describe());
  // Threads that record graphs on one leaf at once (requests served in parallel) share one
  // accumulator: the weak_ptr is read and replaced under a lock, as PyTorch does.
  static std::mutex accumulator_mutex;
  std::lock_guard<std::mutex> lock(accumulator_mutex);
  if (std::shared_ptr<Node> existing = meta.grad_accumulator.lock()) return existing;
  auto accumulator = std::make_shared<AccumulateGrad>(tensor);
  meta.grad_accumulator = accumulator;
  return accumulator;
}

void set_history(const Tensor& output, const std::shared_ptr<Node>& node) {
  AutogradMeta& meta = materialize_meta(output);
  DISTGRAD_CHECK(!meta.grad_fn && !meta.requires_grad, node->name(),
                 ": internal error, the output already has autograd history");
  meta.grad_fn = node;
  meta.output_nr = node->add_input_metadata(output);
}

Tensor alias_without_history(const Tensor& tensor) {
  return Tensor(tensor.storage(), tensor.sizes(), tensor.strides(), tensor.offset(), tensor.dtype());
}

}  // namespace distgrad::autograd
