// MAML on sinusoids with a data-parallel inner loop: the meta-loss of examples/maml_data_parallel
// and of its benchmark (bench/higher_order_bench). Each inner step's support loss is split across
// every worker (batch_partitioner: a chunk of the points per rank, rank 0 included; sum_reducer),
// and its gradient is a distributed autograd::grad with create_graph = true at the adapted
// weights; without a context, the same arithmetic in one process with the local engine.
//
// It registers squared_error_sum: include it from one source file of a program.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "distgrad.h"
#include "examples/sinusoid.h"

namespace sinusoid::data_parallel {

// Runs on a worker: the sum of squared errors of the model `params` on its chunk of a set.
inline dg::Tensor squared_error_sum(dg::nn::ParamDict params, dg::Tensor x, dg::Tensor y) {
  const dg::Tensor error = dg::nn::functional_call(shared_net(), params, x) - y;
  return (error * error).sum();
}
DISTGRAD_REMOTE(squared_error_sum);

// The points of a set split across the workers, their squared errors summed.
inline const auto distributed_squared_error =
    dg::parallelize(squared_error_sum, dg::batch_partitioner, dg::sum_reducer);

// The query loss of `task` ([K, 1] tensors) after `inner_steps` SGD steps at `inner_lr` from
// `params`; each step's gradient is a grad with create_graph of the support loss: distributed in
// `context` (the support set split across the workers), or local without one.
inline dg::Tensor adapted_query_loss(const dg::autograd::Context* context, dg::nn::ParamDict params, const Tasks& task,
                                     int inner_steps, double inner_lr) {
  const double points = static_cast<double>(task.x_support.size(0));
  for (int step = 0; step < inner_steps; ++step) {
    const std::vector<dg::Tensor> weights = params.values();
    dg::autograd::TensorList gradients;
    if (context != nullptr) {
      const dg::Tensor loss = distributed_squared_error(params, task.x_support, task.y_support) / points;
      gradients = dg::autograd::grad(*context, {loss}, weights, {.create_graph = true});
    } else {
      const dg::Tensor loss = squared_error_sum(params, task.x_support, task.y_support) / points;
      gradients = dg::autograd::grad({loss}, weights, {.create_graph = true});
    }
    dg::nn::ParamDict adapted;
    const std::vector<std::string> names = params.keys();
    for (size_t i = 0; i < names.size(); ++i) adapted.insert(names[i], weights[i] - inner_lr * gradients[i]);
    params = std::move(adapted);
  }
  return squared_error_sum(params, task.x_query, task.y_query) / static_cast<double>(task.x_query.size(0));
}

// The mean query loss of `tasks` after adaptation.
inline dg::Tensor meta_loss(const dg::autograd::Context* context, const dg::nn::ParamDict& params, const Tasks& tasks,
                            int inner_steps, double inner_lr) {
  dg::Tensor total;
  for (int64_t i = 0; i < tasks.x_support.size(0); ++i) {
    const dg::Tensor loss = adapted_query_loss(context, params, select_task(tasks, i), inner_steps, inner_lr);
    total = total.defined() ? total + loss : loss;
  }
  return total / static_cast<double>(tasks.x_support.size(0));
}

}  // namespace sinusoid::data_parallel
