// The autograd entry points: backward() and grad().
//
//   dg::Tensor loss = dg::mean(dg::pow(model(x) - y, 2.0));
//   dg::autograd::backward({loss});                                   // accumulates into .grad()
//   auto [dw] = dg::autograd::grad({loss}, {w}, {}, {}, true);         // returns d loss / d w, recorded
//
// Both follow torch.autograd: outputs without a gradient must have one element; retain_graph
// defaults to create_graph; grad() leaves .grad() untouched.
#pragma once

#include <optional>
#include <vector>

#include "autograd/node.h"
#include "core/tensor.h"

namespace distgrad::autograd {

// Computes the gradients of `outputs` (weighted by `grad_outputs`, one per output; an
// undefined or missing one means ones for a one-element output) with respect to the graph's
// leaves and accumulates them into their grad(). With `inputs`, only into those tensors
// (leaves or not).
void backward(const TensorList& outputs, const TensorList& grad_outputs = {},
              std::optional<bool> retain_graph = std::nullopt, bool create_graph = false,
              const TensorList& inputs = {});

// Returns the gradients of `outputs` with respect to each of `inputs` (which must require
// grad), without touching grad(). An input the outputs do not depend on is an error unless
// `allow_unused`, which returns an undefined tensor for it. With create_graph the results
// have a history and can be differentiated again.
TensorList grad(const TensorList& outputs, const TensorList& inputs, const TensorList& grad_outputs = {},
                std::optional<bool> retain_graph = std::nullopt, bool create_graph = false, bool allow_unused = false);

}  // namespace distgrad::autograd
