// Dropout (torch.nn.functional.dropout, torch.nn.Dropout): in training, each element is zeroed
// with probability p and the others scaled by 1 / (1 - p); in evaluation, the identity.
//
// The mask is drawn from a Generator, the default one unless given (core/random.h): a seed
// makes it reproducible, and seeding each rank differently (`dg::manual_seed(base +
// dg::get_rank())`, e.g. in auto_init_rpc's worker_init_fn) gives each rank its own masks.
// Draws from one generator by several threads at once come in whichever order they run.
//
//   dg::nn::Dropout drop(0.1);
//   dg::Tensor y = drop.forward(x);          // eval(): y is x
//   dg::Tensor z = dg::nn::dropout(x, 0.5);  // the functional form, training by default
#pragma once

#include <string>

#include "core/random.h"
#include "core/tensor.h"
#include "nn/module.h"

namespace distgrad::nn {

// p in [0, 1]; p = 1 gives zeros. Differentiable to any order: the gradient is the same mask.
Tensor dropout(const Tensor& input, double p = 0.5, bool training = true, Generator& generator = default_generator());

class Dropout : public Module {
 public:
  explicit Dropout(double p = 0.5);

  Tensor forward(const Tensor& input) override;
  std::string name() const override;

  double p() const { return p_; }

 private:
  double p_;
};

}  // namespace distgrad::nn
