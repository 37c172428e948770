// The autograd entry points: backward() and grad().
//
//   dg::Tensor loss = dg::mean(dg::pow(model(x) - y, 2.0));
//   dg::autograd::backward({loss});                                   // accumulates into .grad()
//   auto dw = dg::autograd::grad({loss}, {w}, {.create_graph = true});  // d loss / d w, recorded
//   dg::autograd::backward({y}, {.grad_outputs = {v}, .inputs = {w}});  // v^T dy/dw into w.grad() only
//
// Both follow torch.autograd: outputs without a gradient must have one element; retain_graph
// defaults to create_graph; grad() leaves .grad() untouched. The optional arguments are named,
// in BackwardOptions and GradOptions (designated initializers for torch's keywords, in torch's
// order). There is no positional tail: `grad(y, x, {}, {}, true)` read as nothing, and an
// overload taking grad_outputs beside the options made `{.create_graph = true}` ambiguous on
// GCC 12, which reads it as a list of one element.
#pragma once

#include <optional>
#include <vector>

#include "autograd/node.h"
#include "core/tensor.h"

namespace distgrad::autograd {

// backward()'s optional arguments (torch.autograd.backward's keywords).
struct BackwardOptions {
  // The outputs' gradients, one per output; empty, or an undefined one, means ones for a
  // one-element output.
  TensorList grad_outputs = {};
  // Keep the graph's saved tensors for another pass (default: create_graph).
  std::optional<bool> retain_graph = std::nullopt;
  // Record the gradients' own computation, so that they can be differentiated again.
  bool create_graph = false;
  // Accumulate into these tensors only (leaves or not); empty: every leaf.
  TensorList inputs = {};
};

// grad()'s optional arguments (torch.autograd.grad's keywords).
struct GradOptions {
  // The outputs' gradients, one per output; empty, or an undefined one, means ones for a
  // one-element output.
  TensorList grad_outputs = {};
  // Keep the graph's saved tensors for another pass (default: create_graph).
  std::optional<bool> retain_graph = std::nullopt;
  // Record the gradients' own computation, so that they can be differentiated again.
  bool create_graph = false;
  // An input the outputs do not depend on gets an undefined tensor instead of an error.
  bool allow_unused = false;
};

// Computes the gradients of `outputs` (weighted by `grad_outputs`) with respect to the graph's
// leaves and accumulates them into their grad(). With `inputs`, only into those tensors
// (leaves or not).
void backward(const TensorList& outputs, const BackwardOptions& options = {});

// Returns the gradients of `outputs` (weighted by `grad_outputs`) with respect to each of
// `inputs` (which must require grad), without touching grad(). An input the outputs do not
// depend on is an error unless `allow_unused`, which returns an undefined tensor for it. With
// create_graph the results have a history and can be differentiated again.
TensorList grad(const TensorList& outputs, const TensorList& inputs, const GradOptions& options = {});

}  // namespace distgrad::autograd
