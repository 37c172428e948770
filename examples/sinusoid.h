// The sinusoid regression problem of MAML (Finn et al., 2017), shared by the MAML examples.
//
// A task is y = A sin(x + phase) with amplitude A ~ U[0.1, 5] and phase ~ U[0, pi]; its support
// and query sets are K points each with x ~ U[-5, 5]. The model is an MLP 1-40-40-1 with ReLU.
// MAML adapts a copy of its weights to a task's support set with differentiable SGD steps and
// scores the adapted model on the query set (adapted_query_loss).
#pragma once

#include <memory>
#include <numbers>
#include <string>

#include "autograd/ops.h"
#include "core/random.h"
#include "core/safetensors.h"
#include "nn/activation.h"
#include "nn/functional_call.h"
#include "nn/linear.h"
#include "nn/loss.h"
#include "nn/module.h"
#include "optim/meta_sgd.h"
#include "rpc/codec.h"

namespace sinusoid {

namespace dg = distgrad;

// A batch of T tasks: each tensor is [T, K, 1] (one task: [K, 1]).
struct Tasks {
  dg::Tensor x_support, y_support, x_query, y_query;
};
DISTGRAD_CODEC(Tasks, x_support, y_support, x_query, y_query);  // sent over RPC, split per task

// Task `index` of a batch: tensors [K, 1].
inline Tasks select_task(const Tasks& tasks, int64_t index) {
  return {dg::select(tasks.x_support, 0, index), dg::select(tasks.y_support, 0, index),
          dg::select(tasks.x_query, 0, index), dg::select(tasks.y_query, 0, index)};
}

inline Tasks sample_tasks(int64_t tasks, int64_t shots, dg::Generator& generator = dg::default_generator()) {
  const dg::Tensor amplitude = dg::add(dg::mul(dg::rand({tasks, 1, 1}, {}, generator), 4.9), 0.1);
  const dg::Tensor phase = dg::mul(dg::rand({tasks, 1, 1}, {}, generator), std::numbers::pi);
  auto points = [&] { return dg::sub(dg::mul(dg::rand({tasks, shots, 1}, {}, generator), 10.0), 5.0); };
  auto targets = [&](const dg::Tensor& x) { return dg::mul(dg::sin(dg::add(x, phase)), amplitude); };
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

// The network whose architecture functional_call runs on a worker: one for the process, shared
// by the threads that serve calls at once (each call brings all the weights).
inline Net& shared_net() {
  static Net net;
  return net;
}

// The weights after `inner_steps` differentiable SGD steps (MetaSGD) of `params` on one task's
// support set ([K, 1] tensors); `net` gives the architecture (functional_call).
inline dg::nn::ParamDict adapt(Net& net, dg::nn::ParamDict params, const Tasks& task, int inner_steps,
                               double inner_lr) {
  dg::optim::MetaSGD inner(params, inner_lr);
  for (int step = 0; step < inner_steps; ++step) {
    params = inner.step(dg::nn::mse_loss(dg::nn::functional_call(net, params, task.x_support), task.y_support));
  }
  return params;
}

// The adapted model's loss on the task's query set: MAML's per-task meta-loss.
inline dg::Tensor adapted_query_loss(Net& net, dg::nn::ParamDict params, const Tasks& task, int inner_steps,
                                     double inner_lr) {
  params = adapt(net, std::move(params), task, inner_steps, inner_lr);
  return dg::nn::mse_loss(dg::nn::functional_call(net, params, task.x_query), task.y_query);
}

// Writes the gradients of `net`'s parameters (safetensors, one entry per parameter).
inline void write_gradients(const Net& net, const std::string& path) {
  dg::NamedTensors gradients;
  for (const auto& [name, parameter] : net.named_parameters()) gradients.emplace_back(name, parameter.grad());
  dg::save_safetensors(path, gradients);
}

inline void write_parameters(const Net& net, const std::string& path) {
  dg::NamedTensors parameters;
  for (const auto& [name, parameter] : net.named_parameters()) parameters.emplace_back(name, parameter.detach());
  dg::save_safetensors(path, parameters);
}

}  // namespace sinusoid
