// MetaOptimizer: the base of the differentiable optimizers (torchopt.MetaOptimizer).
//
// A meta-optimizer updates "fast" parameters held in an nn::ParamDict without modifying any
// tensor: step(loss) takes the gradients of the loss with respect to the current parameters
// with create_graph, builds the new parameters from them with recorded ops, and keeps those as
// the current ones. Every inner step is therefore part of the graph, and an outer loss
// computed from the adapted parameters differentiates through all of them, down to whatever
// the initial parameters were computed from (MAML's second-order meta-gradient). The
// optimizer's state (momentum buffers, moment estimates) is built from the same recorded ops
// and is part of that graph too.
//
// Entries that do not require grad when the optimizer is made (buffers, frozen tensors) pass
// through every step unchanged. A parameter the loss does not depend on keeps its value and
// its state (gradients are taken with allow_unused).
//
// The learning rate may be a schedule (optim/schedule.h, TorchOpt's lr=schedule): step() calls
// it once with the count of steps taken before it (0 at the first step, TorchOpt's count) and
// checks that it gives an lr >= 0. The count is the optimizer's, one per step() call (TorchOpt
// keeps one per parameter, which a step without a gradient for it does not advance).
//
//   dg::nn::ParamDict params = dg::nn::module_clone(net, dg::nn::CloneBy::kClone);
//   dg::optim::MetaSGD inner(params, 0.01);
//   for (int i = 0; i < inner_steps; ++i)
//     params = inner.step(dg::nn::mse_loss(dg::nn::functional_call(net, params, x), y));
//   dg::nn::mse_loss(dg::nn::functional_call(net, params, x_query), y_query).backward();
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/param_dict.h"
#include "core/tensor.h"
#include "optim/schedule.h"

namespace distgrad::optim {

class MetaOptimizer {
 public:
  virtual ~MetaOptimizer() = default;

  // One differentiable update from the gradients of `loss` (a one-element tensor); returns
  // the new parameters, which are also the current ones from now on.
  nn::ParamDict step(const Tensor& loss);
  // The current parameters: those given at construction, then the result of the last step().
  const nn::ParamDict& params() const { return params_; }
  // "MetaSGD", "MetaAdam": used in errors.
  const std::string& name() const { return name_; }
  // How many times step() has run: the count the next step's learning rate is scheduled for.
  int64_t step_count() const { return step_count_; }

 protected:
  // Every entry of `params` must be defined; errors name the entry. `lr` gives each step's
  // learning rate from step_count().
  MetaOptimizer(std::string name, nn::ParamDict params, Schedule lr);

  // How many entries are optimized (required grad at construction); update()'s `index`
  // counts among those only, in the ParamDict's order.
  size_t num_optimized() const { return optimized_.size(); }
  // The new value of optimized entry `index` from its current value and the gradient of the
  // loss (defined: unused parameters are not updated), with learning rate `lr` (this step's).
  // Runs with grad mode as the caller has it; must use recorded ops only.
  virtual Tensor update(size_t index, const Tensor& parameter, const Tensor& grad, double lr) = 0;

 private:
  std::string name_;
  nn::ParamDict params_;
  Schedule lr_;
  int64_t step_count_ = 0;
  std::vector<size_t> optimized_;  // positions in params_ of the entries that required grad
};

}  // namespace distgrad::optim
