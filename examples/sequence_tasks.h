// The few-shot sequence regression of examples/maml_transformer, shared with bench/.
//
// A task is a causal filter y_t = a x_t + b x_{t-1} + c over sequences x_1..x_L (x ~ U[-1, 1],
// x_0 = 0), with its own a, b ~ U[-2, 2] and c ~ U[-1, 1]; its support and query sets are K
// sequences each. SequenceNet embeds each x_t, adds a learned position embedding, runs one
// TransformerEncoderLayer (width 16, 2 heads, feed-forward 32, dropout 0.1) with a causal mask
// and reads y_t out with a linear head.
#pragma once

#include <memory>
#include <string>

#include "autograd/ops.h"
#include "core/creation.h"
#include "core/random.h"
#include "nn/embedding.h"
#include "nn/functional_call.h"
#include "nn/linear.h"
#include "nn/loss.h"
#include "nn/module.h"
#include "nn/padding.h"
#include "nn/transformer.h"
#include "optim/meta_sgd.h"
#include "rpc/codec.h"

namespace sequence_tasks {

namespace dg = distgrad;

// A batch of T tasks: each tensor is [T, K, L, 1] (one task: [K, L, 1]).
struct Tasks {
  dg::Tensor x_support, y_support, x_query, y_query;
};
DISTGRAD_CODEC(Tasks, x_support, y_support, x_query, y_query);  // sent over RPC, split per task

constexpr int64_t kModelWidth = 16;

inline Tasks sample_tasks(int64_t tasks, int64_t shots, int64_t length, dg::Generator& generator) {
  const auto uniform = [&](const dg::Shape& sizes, double low, double high) {
    return dg::rand(sizes, {}, generator) * (high - low) + low;
  };
  const dg::Tensor a = uniform({tasks, 1, 1, 1}, -2, 2), b = uniform({tasks, 1, 1, 1}, -2, 2);
  const dg::Tensor c = uniform({tasks, 1, 1, 1}, -1, 1);
  const auto targets = [&](const dg::Tensor& x) {
    const dg::Tensor previous = dg::nn::pad(dg::narrow(x, 2, 0, length - 1), {0, 0, 1, 0});  // x_{t-1}, x_0 = 0
    return a * x + b * previous + c;
  };
  Tasks result;
  result.x_support = uniform({tasks, shots, length, 1}, -1, 1);
  result.x_query = uniform({tasks, shots, length, 1}, -1, 1);
  result.y_support = targets(result.x_support);
  result.y_query = targets(result.x_query);
  return result;
}

// x [K, L, 1] -> y [K, L, 1]: embedding + positions, one causal encoder layer, a linear head.
struct SequenceNet : dg::nn::Module {
  explicit SequenceNet(int64_t length, bool training = true) {
    embed = register_module("embed", std::make_shared<dg::nn::Linear>(1, kModelWidth));
    positions = register_module("positions", std::make_shared<dg::nn::Embedding>(length, kModelWidth));
    encoder = register_module(
        "encoder",
        std::make_shared<dg::nn::TransformerEncoderLayer>(
            kModelWidth, 2, dg::nn::TransformerEncoderLayerOptions{.dim_feedforward = 32, .batch_first = true}));
    head = register_module("head", std::make_shared<dg::nn::Linear>(kModelWidth, 1));
    train(training);
  }
  dg::Tensor forward(const dg::Tensor& x) override {
    const dg::Tensor steps = dg::arange(x.size(1));
    const dg::Tensor h = embed->forward(x) + positions->forward(steps);
    return head->forward(encoder->forward(h, {.is_causal = true}));
  }
  std::string name() const override { return "SequenceNet"; }

  std::shared_ptr<dg::nn::Linear> embed;
  std::shared_ptr<dg::nn::Embedding> positions;
  std::shared_ptr<dg::nn::TransformerEncoderLayer> encoder;
  std::shared_ptr<dg::nn::Linear> head;
};

// The weights after `inner_steps` differentiable SGD steps (MetaSGD) of `params` on one task's
// support set ([K, L, 1] tensors); `net` gives the architecture (functional_call).
inline dg::nn::ParamDict adapt(SequenceNet& net, dg::nn::ParamDict params, const Tasks& task, int inner_steps,
                               double inner_lr) {
  dg::optim::MetaSGD inner(params, inner_lr);
  for (int step = 0; step < inner_steps; ++step) {
    params = inner.step(dg::nn::mse_loss(dg::nn::functional_call(net, params, task.x_support), task.y_support));
  }
  return params;
}

}  // namespace sequence_tasks
