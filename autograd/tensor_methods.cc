// The Tensor methods that core declares and autograd defines (Note [Tensor methods defined by
// autograd] in core/tensor.h), and the requires_grad option of creation functions.
#include "autograd/autograd.h"
#include "autograd/autograd_meta.h"
#include "autograd/node.h"
#include "autograd/ops.h"
#include "core/ops.h"

namespace distgrad {

using autograd::AutogradMeta;
using autograd::materialize_meta;
using autograd::meta_of;

TensorOptions requires_grad(TensorOptions options) {
  options.requires_grad = true;
  return options;
}

bool Tensor::requires_grad() const { return defined() && autograd::requires_grad(*this); }

const Tensor& Tensor::requires_grad_(bool requires_grad) const {
  autograd::set_requires_grad(*this, requires_grad);
  return *this;
}

bool Tensor::is_leaf() const {
  const AutogradMeta* meta = meta_of(*this);
  return meta == nullptr || meta->grad_fn == nullptr;
}

Tensor Tensor::grad() const {
  const AutogradMeta* meta = meta_of(*this);
  return meta == nullptr ? Tensor() : meta->grad;
}

void Tensor::set_grad(const Tensor& grad) const {
  check_defined("set_grad");
  if (grad.defined()) {
    DISTGRAD_CHECK(grad.sizes() == sizes() && grad.dtype() == dtype() && grad.device() == device(),
                   "set_grad: expected a gradient matching the ", describe(), ", found a ", grad.describe());
  }
  materialize_meta(*this).grad = grad;
}

std::shared_ptr<autograd::Node> Tensor::grad_fn() const {
  const AutogradMeta* meta = meta_of(*this);
  return meta == nullptr ? nullptr : meta->grad_fn;
}

Tensor Tensor::detach() const { return distgrad::detach(*this); }

void Tensor::retain_grad() const {
  check_defined("retain_grad");
  AutogradMeta& meta = materialize_meta(*this);
  if (!meta.grad_fn) {
    DISTGRAD_CHECK(meta.requires_grad, "retain_grad: a ", describe(),
                   " that does not require grad has no gradient to retain");
    return;  // leaves keep their gradient anyway
  }
  if (meta.retains_grad) return;
  meta.retains_grad = true;
  std::weak_ptr<AutogradMeta> weak_meta = std::static_pointer_cast<AutogradMeta>(meta.shared_from_this());
  meta.grad_fn->add_gradient_hook(meta.output_nr, [weak_meta](const Tensor& grad) {
    if (auto retained = weak_meta.lock()) {
      retained->grad = retained->grad.defined() ? untracked::add(retained->grad, grad) : untracked::clone(grad);
    }
    return Tensor();
  });
}

void Tensor::backward(const Tensor& gradient, std::optional<bool> retain_graph, bool create_graph,
                      const std::vector<Tensor>& inputs) const {
  autograd::backward(
      {*this},
      {.grad_outputs = {gradient}, .retain_graph = retain_graph, .create_graph = create_graph, .inputs = inputs});
}

int64_t Tensor::register_hook(std::function<Tensor(const Tensor&)> hook) const {
  check_defined("register_hook");
  AutogradMeta& meta = materialize_meta(*this);
  if (meta.grad_fn) return meta.grad_fn->add_gradient_hook(meta.output_nr, std::move(hook));
  DISTGRAD_CHECK(meta.requires_grad, "register_hook: cannot register a hook on a ", describe(),
                 " that does not require grad");
  const int64_t id = autograd::next_hook_id();
  meta.leaf_hooks.push_back({id, std::move(hook)});
  return id;
}

int64_t Tensor::register_post_accumulate_grad_hook(std::function<void(const Tensor&)> hook) const {
  check_defined("register_post_accumulate_grad_hook");
  AutogradMeta& meta = materialize_meta(*this);
  DISTGRAD_CHECK(meta.requires_grad && !meta.grad_fn,
                 "register_post_accumulate_grad_hook: expected a leaf that "
                 "requires grad, found a ",
                 describe(), meta.grad_fn ? " computed by " + meta.grad_fn->name() : "");
  const int64_t id = autograd::next_hook_id();
  meta.post_accumulate_hooks.push_back({id, std::move(hook)});
  return id;
}

void Tensor::remove_hook(int64_t id) const {
  AutogradMeta* meta = meta_of(*this);
  bool removed = false;
  if (meta != nullptr) {
    removed = std::erase_if(meta->leaf_hooks, [id](const auto& entry) { return entry.id == id; }) > 0 ||
              std::erase_if(meta->post_accumulate_hooks, [id](const auto& entry) { return entry.id == id; }) > 0 ||
              (meta->grad_fn && meta->grad_fn->remove_gradient_hook(id));
  }
  DISTGRAD_CHECK(removed, "remove_hook: no hook with id ", id, " is registered on this ", describe());
}

Tensor Tensor::sum() const { return distgrad::sum(*this); }
Tensor Tensor::mean() const { return distgrad::mean(*this); }

}  // namespace distgrad
