// Few-shot image classification for MAML (Finn et al., 2017, section 5.2) on Fashion-MNIST,
// shared by examples/maml_fewshot and bench/maml_fewshot_bench.
//
// A task is N-way K-shot: N classes in a random order (the i-th gets label i), K support images
// and Q query images of each. The network is the one of MAML's Omniglot experiments, as in
// TorchOpt's distributed example (maml_omniglot.py): three blocks of a 3x3 convolution with 64
// filters, BatchNorm, ReLU and 2x2 max-pooling take a 28x28 image to 64 features, then
// Linear(64, N). MAML adapts a copy of its weights to a task's support set with differentiable
// SGD steps (MetaSGD) and scores the adapted network on the query set.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <numeric>
#include <random>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "autograd/ops.h"
#include "core/creation.h"
#include "core/error.h"
#include "data/fashion_mnist.h"
#include "examples/precision.h"
#include "nn/activation.h"
#include "nn/batch_norm.h"
#include "nn/conv2d.h"
#include "nn/flatten.h"
#include "nn/functional_call.h"
#include "nn/linear.h"
#include "nn/loss.h"
#include "nn/pooling.h"
#include "nn/sequential.h"
#include "optim/meta_sgd.h"
#include "rpc/codec.h"

namespace fewshot {

namespace dg = distgrad;

// A batch of T tasks of N ways, K shots and Q queries: images [T, N*K, 1, 28, 28] and labels
// [T, N*K] (int64, in 0..N-1) for the support sets, [T, N*Q, ...] for the query sets. One task
// drops the leading dim.
struct Episodes {
  dg::Tensor x_support, y_support, x_query, y_query;
};
DISTGRAD_CODEC(Episodes, x_support, y_support, x_query, y_query);  // sent over RPC, split per task

struct EpisodeShape {
  int64_t ways = 5, shots = 5, queries = 15;
};
DISTGRAD_CODEC(EpisodeShape, ways, shots, queries);

// The inner loop of one task: `steps` MetaSGD steps at `lr` on a network of `ways` outputs.
struct InnerLoop {
  int64_t ways = 5;
  int steps = 5;
  double lr = 0.1;
  std::string precision = "fp32";  // examples/precision.h: the forward passes under autocast
};
DISTGRAD_CODEC(InnerLoop, ways, steps, lr, precision);

// MAML's Omniglot network for `ways` classes (75,205 parameters at 5 ways). BatchNorm has
// momentum 1 and is always in training mode, as in TorchOpt's example: each task is
// normalized with its own batch's statistics.
inline std::shared_ptr<dg::nn::Sequential> conv_net(int64_t ways) {
  namespace nn = dg::nn;
  auto net = std::make_shared<nn::Sequential>();
  for (int64_t in_channels : {1, 64, 64}) {
    net->push_back(std::make_shared<nn::Conv2d>(in_channels, 64, 3));
    net->push_back(std::make_shared<nn::BatchNorm2d>(64, nn::BatchNormOptions{.momentum = 1.0}));
    net->push_back(std::make_shared<nn::ReLU>());
    net->push_back(std::make_shared<nn::MaxPool2d>(2));
  }
  net->push_back(std::make_shared<nn::Flatten>());
  net->push_back(std::make_shared<nn::Linear>(64, ways));
  return net;
}

// One network per number of ways, whose architecture functional_call runs, shared by the threads
// that serve calls at once. The caller's parameters and buffers replace all of its own, so it never
// needs to move to their device.
inline dg::nn::Sequential& shared_net(int64_t ways) {
  static std::mutex nets_mutex;
  static std::map<int64_t, std::shared_ptr<dg::nn::Sequential>> nets ABSL_GUARDED_BY(nets_mutex);
  const std::lock_guard<std::mutex> lock(nets_mutex);
  std::shared_ptr<dg::nn::Sequential>& net = nets[ways];
  if (net == nullptr) net = conv_net(ways);
  return *net;
}

// The query loss and accuracy of one task (tensors without the leading task dim) after
// `inner.steps` differentiable SGD steps of `params` on its support set. The loss stays
// differentiable back to `params` (second order); `net` gives the architecture.
inline std::tuple<dg::Tensor, double> adapted_query_loss_and_accuracy(dg::nn::Module& net, dg::nn::ParamDict params,
                                                                      const Episodes& task, const InnerLoop& inner) {
  const examples::MixedPrecisionScope autocast(inner.precision, task.x_support.device());
  dg::optim::MetaSGD optimizer(params, inner.lr);
  for (int step = 0; step < inner.steps; ++step) {
    params =
        optimizer.step(dg::nn::cross_entropy(dg::nn::functional_call(net, params, task.x_support), task.y_support));
  }
  const dg::Tensor logits = dg::nn::functional_call(net, params, task.x_query);
  const dg::Tensor loss = dg::nn::cross_entropy(logits, task.y_query);
  const dg::Tensor correct = dg::eq(dg::argmax(logits.detach(), 1), task.y_query);
  return {loss, dg::mean(dg::to(correct, dg::kFloat64)).item<double>()};
}

// Draws tasks from some classes of a dataset.
class TaskSampler {
 public:
  // Tasks over `classes` of `dataset` (each class needs shots + queries images).
  TaskSampler(const dg::data::FashionMnist& dataset, std::vector<int64_t> classes, EpisodeShape shape)
      : images_(dataset.images), classes_(std::move(classes)), shape_(shape), images_of_class_(classes_.size()) {
    DISTGRAD_CHECK(shape_.ways >= 2 && shape_.ways <= static_cast<int64_t>(classes_.size()),
                   "TaskSampler: expected between 2 and ", classes_.size(), " ways (the number of classes), found ",
                   shape_.ways);
    DISTGRAD_CHECK(shape_.shots >= 1 && shape_.queries >= 1,
                   "TaskSampler: expected at least one shot and query, found ", shape_.shots, " shots and ",
                   shape_.queries, " queries");
    const dg::Tensor labels = dg::contiguous(dataset.labels);
    const int64_t* label = labels.data<int64_t>();
    for (int64_t image = 0; image < labels.numel(); ++image) {
      for (size_t slot = 0; slot < classes_.size(); ++slot) {
        if (label[image] == classes_[slot]) images_of_class_[slot].push_back(image);
      }
    }
    for (size_t slot = 0; slot < classes_.size(); ++slot) {
      DISTGRAD_CHECK(static_cast<int64_t>(images_of_class_[slot].size()) >= shape_.shots + shape_.queries,
                     "TaskSampler: class ", classes_[slot], " has ", images_of_class_[slot].size(),
                     " images, fewer than the ", shape_.shots + shape_.queries, " shots and queries of a task");
    }
  }

  // `count` tasks drawn with `random`: each takes `ways` of the classes in a random order, then
  // shots + queries distinct images of each.
  Episodes sample(int64_t count, std::mt19937_64& random) const {
    const int64_t ways = shape_.ways, shots = shape_.shots, queries = shape_.queries;
    std::vector<int64_t> support_images, query_images, support_labels, query_labels;
    for (int64_t task = 0; task < count; ++task) {
      const std::vector<size_t> slots = first_of_shuffle(classes_.size(), ways, random);
      for (int64_t way = 0; way < ways; ++way) {
        const std::vector<int64_t>& pool = images_of_class_[slots[static_cast<size_t>(way)]];
        const std::vector<size_t> picked = first_of_shuffle(pool.size(), shots + queries, random);
        for (int64_t i = 0; i < shots + queries; ++i) {
          const int64_t image = pool[picked[static_cast<size_t>(i)]];
          (i < shots ? support_images : query_images).push_back(image);
          (i < shots ? support_labels : query_labels).push_back(way);
        }
      }
    }
    auto gather = [&](const std::vector<int64_t>& images, int64_t per_task) {
      return dg::reshape(dg::index_select(images_, 0, dg::from_vector(images)),
                         {count, per_task, 1, dg::data::kFashionMnistImageSize, dg::data::kFashionMnistImageSize});
    };
    return {gather(support_images, ways * shots), dg::from_vector(support_labels, {count, ways * shots}),
            gather(query_images, ways * queries), dg::from_vector(query_labels, {count, ways * queries})};
  }

 private:
  // The first `k` of a random permutation of 0..n-1 (a partial Fisher-Yates shuffle).
  static std::vector<size_t> first_of_shuffle(size_t n, int64_t k, std::mt19937_64& random) {
    std::vector<size_t> values(n);
    std::iota(values.begin(), values.end(), size_t{0});
    for (size_t i = 0; i < static_cast<size_t>(k); ++i) std::swap(values[i], values[i + random() % (n - i)]);
    values.resize(static_cast<size_t>(k));
    return values;
  }

  dg::Tensor images_;
  std::vector<int64_t> classes_;
  EpisodeShape shape_;
  std::vector<std::vector<int64_t>> images_of_class_;  // dataset rows of each of classes_
};

}  // namespace fewshot
