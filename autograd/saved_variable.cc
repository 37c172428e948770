#include "autograd/saved_variable.h"

#include "autograd/autograd_meta.h"
#include "autograd/node.h"

namespace distgrad::autograd {

SavedVariable::SavedVariable(const Tensor& tensor, bool is_output) : is_output_(is_output) {
  if (!tensor.defined()) return;
  saved_version_ = tensor.storage().version();
  if (is_output) {
    data_ = alias_without_history(tensor);
    output_nr_ = meta_of(tensor) ? meta_of(tensor)->output_nr : 0;
  } else {
    data_ = tensor;
  }
}

Tensor SavedVariable::unpack(const std::shared_ptr<Node>& owner) const {
  DISTGRAD_CHECK(!released_, owner->name(),
                 ": trying to backward through the graph a second time (or to use saved tensors after they were "
                 "freed); the saved tensors are freed after a backward pass unless it is called with "
                 "retain_graph=true");
  if (!data_.defined()) return data_;
  const uint64_t version = data_.storage().version();
  DISTGRAD_CHECK(version == saved_version_, owner->name(), ": a ", data_.describe(),
                 " saved for backward was modified by an in-place operation (it is at version ", version,
                 ", expected version ", saved_version_, "); use an out-of-place op, or clone() the tensor first");
  if (!is_output_) return data_;
  Tensor output = alias_without_history(data_);
  AutogradMeta& meta = materialize_meta(output);
  meta.grad_fn = owner;
  meta.output_nr = output_nr_;
  return output;
}

void SavedVariable::reset() {
  data_ = Tensor();
  released_ = true;
}

}  // namespace distgrad::autograd
