// The networks the Fashion-MNIST programs train (examples/fashion_mnist_train,
// examples/ddp_fashion_mnist, bench/ddp_bench): an MLP 784-hidden1-hidden2-10 and a small CNN
// (two 3x3 convolutions with ReLU and 2x2 max-pooling, then 3136-128-10), both on [N, 1, 28, 28]
// images, returning the logits of the 10 classes.
#pragma once

#include <cstdint>
#include <memory>

#include "nn/activation.h"
#include "nn/conv2d.h"
#include "nn/flatten.h"
#include "nn/linear.h"
#include "nn/pooling.h"
#include "nn/sequential.h"

namespace examples {

inline std::shared_ptr<distgrad::nn::Sequential> fashion_mnist_mlp(int64_t hidden1 = 256, int64_t hidden2 = 128) {
  namespace nn = distgrad::nn;
  return std::make_shared<nn::Sequential>(std::initializer_list<std::shared_ptr<nn::Module>>{
      std::make_shared<nn::Flatten>(), std::make_shared<nn::Linear>(784, hidden1), std::make_shared<nn::ReLU>(),
      std::make_shared<nn::Linear>(hidden1, hidden2), std::make_shared<nn::ReLU>(),
      std::make_shared<nn::Linear>(hidden2, 10)});
}

inline std::shared_ptr<distgrad::nn::Sequential> fashion_mnist_cnn() {
  namespace nn = distgrad::nn;
  return std::make_shared<nn::Sequential>(std::initializer_list<std::shared_ptr<nn::Module>>{
      std::make_shared<nn::Conv2d>(1, 32, 3, nn::Conv2dOptions{.padding = 1}), std::make_shared<nn::ReLU>(),
      std::make_shared<nn::MaxPool2d>(2), std::make_shared<nn::Conv2d>(32, 64, 3, nn::Conv2dOptions{.padding = 1}),
      std::make_shared<nn::ReLU>(), std::make_shared<nn::MaxPool2d>(2), std::make_shared<nn::Flatten>(),
      std::make_shared<nn::Linear>(64 * 7 * 7, 128), std::make_shared<nn::ReLU>(),
      std::make_shared<nn::Linear>(128, 10)});
}

}  // namespace examples
