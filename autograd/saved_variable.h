// SavedVariable: a tensor an op keeps for its backward formula.
//
// It remembers the storage's version counter when saved, and unpacking checks it: a saved
// tensor that an in-place op changed afterwards would give a wrong gradient, so that is an
// error naming the op and both versions. Releasing the graph (backward without retain_graph)
// empties it; unpacking it then is the "backward through the graph a second time" error.
//
// Note [Saved outputs]
// An op that saves its own output (exp, tanh, sigmoid, softmax, ...) must not keep the output
// tensor itself: its meta owns the op's node, which owns the saved variable, a cycle that would
// never be freed. So an output is saved without its autograd state and gets it back on unpack:
// grad_fn is the node doing the unpacking, which the caller passes in.
#pragma once

#include <cstdint>
#include <memory>

#include "core/tensor.h"

namespace distgrad::autograd {

class Node;

class SavedVariable {
 public:
  SavedVariable() = default;
  // `is_output`: `tensor` is an output of the node that saves it (Note [Saved outputs]).
  SavedVariable(const Tensor& tensor, bool is_output);

  // The saved tensor, checked against in-place changes; `owner` is the node that saved it.
  Tensor unpack(const std::shared_ptr<Node>& owner) const;
  void reset();
  bool was_released() const { return released_; }

 private:
  Tensor data_;
  uint64_t saved_version_ = 0;
  uint32_t output_nr_ = 0;
  bool is_output_ = false;
  bool released_ = false;
};

}  // namespace distgrad::autograd
