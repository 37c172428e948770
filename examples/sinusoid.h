// The sinusoid regression problem of MAML (Finn et al., 2017), shared by the MAML examples.
//
// A task is y = A sin(x + phase) with amplitude A ~ U[0.1, 5] and phase ~ U[0, pi]; its support
// and query sets are K points each with x ~ U[-5, 5]. The model is an MLP 1-40-40-1 with ReLU.
#pragma once

#include <memory>
#include <numbers>

#include "autograd/ops.h"
#include "core/ops.h"
#include "nn/activation.h"
#include "nn/linear.h"
#include "nn/module.h"
#include "rpc/codec.h"

namespace sinusoid {

namespace dg = distgrad;

// A batch of T tasks: each tensor is [T, K, 1] (one task: [K, 1]).
struct Tasks {
  dg::Tensor x_support, y_support, x_query, y_query;
};
DISTGRAD_CODEC(Tasks, x_support, y_support, x_query, y_query);  // sent over RPC, split per task

inline Tasks sample_tasks(int64_t tasks, int64_t shots, dg::Generator& generator = dg::default_generator()) {
  namespace ops = dg::ops;
  const dg::Tensor amplitude = ops::add(ops::mul(dg::rand({tasks, 1, 1}, {}, generator), 4.9), 0.1);
  const dg::Tensor phase = ops::mul(dg::rand({tasks, 1, 1}, {}, generator), std::numbers::pi);
  auto points = [&] { return ops::sub(ops::mul(dg::rand({tasks, shots, 1}, {}, generator), 10.0), 5.0); };
  auto targets = [&](const dg::Tensor& x) { return ops::mul(ops::sin(ops::add(x, phase)), amplitude); };
  Tasks result;
  result.x_support = points();
  result.x_query = points();
  result.y_support = targets(result.x_support);
  result.y_query = targets(result.x_query);
  return result;
}

// The MLP 1-40-40-1 with ReLU of the paper.
struct Net : dg::nn::Module {
  Net() {
    fc1 = register_module("fc1", std::make_shared<dg::nn::Linear>(1, 40));
    fc2 = register_module("fc2", std::make_shared<dg::nn::Linear>(40, 40));
    fc3 = register_module("fc3", std::make_shared<dg::nn::Linear>(40, 1));
  }
  dg::Tensor forward(const dg::Tensor& x) override {
    return fc3->forward(dg::relu(fc2->forward(dg::relu(fc1->forward(x)))));
  }
  std::string name() const override { return "SinusoidNet"; }

  std::shared_ptr<dg::nn::Linear> fc1, fc2, fc3;
};

}  // namespace sinusoid
