#include "autograd/gradcheck.h"

#include <cmath>

#include "autograd/autograd.h"
#include "autograd/grad_mode.h"
#include "autograd/ops.h"
#include "core/ops.h"

namespace distgrad::autograd {
namespace {

void check_inputs(const char* op, const TensorList& inputs) {
  bool any = false;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const Tensor& input = inputs[i];
    if (!input.defined() || !input.requires_grad()) continue;
    any = true;
    DISTGRAD_CHECK(input.dtype() == kFloat64, op, ": expected float64 inputs (finite differences in float32 are ",
                   "too coarse), input ", i, " is a ", input.describe());
    for (int64_t d = 0; d < input.dim(); ++d) {
      DISTGRAD_CHECK(input.stride(d) != 0 || input.size(d) <= 1, op, ": input ", i, " stores elements more than once ",
                     "(an expanded tensor); perturbing one would perturb several");
    }
  }
  DISTGRAD_CHECK(any, op, ": no input requires grad, so there is nothing to check");
}

// Copies of the outputs of fn, flattened to float64 on the CPU. fn runs with grad mode on:
// it may take gradients itself (gradgradcheck's first derivative does).
std::vector<Tensor> evaluate(const DifferentiableFunction& fn, const TensorList& inputs) {
  std::vector<Tensor> outputs;
  for (const Tensor& output : fn(inputs)) {
    outputs.push_back(
        output.defined()
            ? untracked::to(untracked::to(untracked::clone(untracked::reshape(output.detach(), {-1})), Device::cpu()),
                            kFloat64)
            : Tensor());
  }
  return outputs;
}

// A view of element `index` (in row-major order) of `t`, to perturb it in place.
Tensor element(const Tensor& t, int64_t index) {
  int64_t offset = t.offset();
  for (int64_t d = t.dim() - 1; d >= 0; --d) {
    offset += index % t.size(d) * t.stride(d);
    index /= t.size(d);
  }
  return untracked::as_strided(t, {}, {}, offset);
}

bool close(double analytical, double numerical, const GradcheckOptions& options) {
  return std::abs(analytical - numerical) <= options.atol + options.rtol * std::abs(numerical);
}

}  // namespace

bool gradcheck(const DifferentiableFunction& fn, const TensorList& inputs, const GradcheckOptions& options) {
  check_inputs("gradcheck", inputs);
  const size_t num_outputs = fn(inputs).size();
  for (size_t i = 0; i < inputs.size(); ++i) {
    const Tensor& input = inputs[i];
    if (!input.defined() || !input.requires_grad()) continue;
    // numerical[o][j][k] = d output_o[k] / d input[j], by central differences. Perturbing
    // bumps the input's version, so the graph for the analytical side is recorded afterwards.
    std::vector<std::vector<std::vector<double>>> numerical(num_outputs,
                                                            std::vector<std::vector<double>>(input.numel()));
    for (int64_t j = 0; j < input.numel(); ++j) {
      const Tensor x = element(input, j);
      const double original = x.item<double>();
      untracked::fill_(x, original + options.eps);
      const std::vector<Tensor> plus = evaluate(fn, inputs);
      untracked::fill_(x, original - options.eps);
      const std::vector<Tensor> minus = evaluate(fn, inputs);
      untracked::fill_(x, original);
      for (size_t o = 0; o < num_outputs; ++o) {
        if (!plus[o].defined()) continue;
        const std::vector<double> up = plus[o].to_vector<double>(), down = minus[o].to_vector<double>();
        numerical[o][j].resize(up.size());
        for (size_t k = 0; k < up.size(); ++k) numerical[o][j][k] = (up[k] - down[k]) / (2 * options.eps);
      }
    }
    const TensorList outputs = fn(inputs);
    for (size_t o = 0; o < num_outputs; ++o) {
      const Tensor& output = outputs[o];
      if (!output.defined() || !is_floating(output.dtype())) continue;
      // Analytical row k: the gradient of output[k] with respect to the input.
      for (int64_t k = 0; k < output.numel(); ++k) {
        std::vector<double> row(input.numel(), 0.0);
        if (output.requires_grad()) {
          Tensor seed = zeros({output.numel()}, {.dtype = output.dtype(), .device = output.device()});
          untracked::fill_(element(seed, k), 1);
          const TensorList grads = grad(
              {output}, {input},
              {.grad_outputs = {untracked::reshape(seed, output.sizes())}, .retain_graph = true, .allow_unused = true});
          if (grads[0].defined()) row = grads[0].to_vector<double>();
        }
        for (int64_t j = 0; j < input.numel(); ++j) {
          DISTGRAD_CHECK(close(row[j], numerical[o][j][k], options), "gradcheck: the Jacobian of output ", o,
                         " with respect to input ", i, " (a ", input.describe(), ") differs at input element ", j,
                         ", output element ", k, ": backward gives ", row[j], ", finite differences give ",
                         numerical[o][j][k]);
        }
      }
    }
  }
  return true;
}

bool gradgradcheck(const DifferentiableFunction& fn, const TensorList& inputs, const GradcheckOptions& options) {
  check_inputs("gradgradcheck", inputs);
  // Random output gradients that require grad too: the second-order check covers them.
  TensorList grad_outputs;
  for (const Tensor& output : fn(inputs)) {
    grad_outputs.push_back(
        output.defined() && is_floating(output.dtype()) && output.requires_grad()
            ? randn(output.sizes(), {.dtype = kFloat64, .device = output.device(), .requires_grad = true})
            : Tensor());
  }
  TensorList differentiable_inputs;
  for (const Tensor& input : inputs) {
    if (input.defined() && input.requires_grad()) differentiable_inputs.push_back(input);
  }
  const size_t num_inputs = inputs.size();
  const DifferentiableFunction first_derivative = [&, num_inputs](const TensorList& all) {
    const TensorList forward_inputs(all.begin(), all.begin() + num_inputs);
    const TensorList outputs = fn(forward_inputs);
    TensorList used_outputs, used_grads;
    for (size_t k = 0; k < outputs.size(); ++k) {
      if (!all[num_inputs + k].defined()) continue;
      used_outputs.push_back(outputs[k]);
      used_grads.push_back(all[num_inputs + k]);
    }
    TensorList wrt;
    for (const Tensor& input : forward_inputs) {
      if (input.defined() && input.requires_grad()) wrt.push_back(input);
    }
    TensorList grads =
        grad(used_outputs, wrt,
             {.grad_outputs = used_grads, .retain_graph = true, .create_graph = true, .allow_unused = true});
    for (size_t j = 0; j < grads.size(); ++j) {
      if (!grads[j].defined()) grads[j] = zeros_like(wrt[j]);
    }
    return grads;
  };
  TensorList all = inputs;
  all.insert(all.end(), grad_outputs.begin(), grad_outputs.end());
  return gradcheck(first_derivative, all, options);
}

}  // namespace distgrad::autograd
