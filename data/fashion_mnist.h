// Fashion-MNIST (Zalando's 28x28 grayscale clothing images, 10 classes) loaded into tensors.
//
// The dataset is four gzip-compressed IDX files; Debian's `dataset-fashion-mnist` package
// installs them in /usr/share/datasets/fashion-mnist, and $DISTGRAD_FASHION_MNIST_DIR points
// elsewhere. Images come out as PyTorch's ToTensor() makes them: float32 [N, 1, 28, 28] in
// [0, 1] (pixel / 255); labels as int64 [N] in 0..9.
//
//   FashionMnist train = distgrad::data::load_fashion_mnist(Split::kTrain);  // 60000 samples
//   std::string_view name = kFashionMnistClassNames[train.labels.at<int64_t>({0})];  // "Ankle boot"
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>

#include "core/tensor.h"

namespace distgrad::data {

// Which half of a dataset: Fashion-MNIST has 60000 training and 10000 test samples.
enum class Split { kTrain, kTest };

inline constexpr int64_t kFashionMnistImageSize = 28;
// Label i names class kFashionMnistClassNames[i].
inline constexpr std::array<std::string_view, 10> kFashionMnistClassNames = {
    "T-shirt/top", "Trouser", "Pullover", "Dress", "Coat", "Sandal", "Shirt", "Sneaker", "Bag", "Ankle boot"};

struct FashionMnist {
  Tensor images;  // float32 [N, 1, 28, 28], values in [0, 1]
  Tensor labels;  // int64 [N], values in 0..9
};

// $DISTGRAD_FASHION_MNIST_DIR when set and not empty, else /usr/share/datasets/fashion-mnist.
std::string fashion_mnist_default_dir();

// Reads `dir`/train-images-idx3-ubyte.gz and train-labels-idx1-ubyte.gz (kTrain) or the
// t10k-* pair (kTest) onto the CPU. Throws when the directory is missing (naming the package
// that installs it), when a file is not a valid IDX file (see data/idx.h), when images are
// not 28x28, when image and label counts differ, and on a label outside 0..9.
FashionMnist load_fashion_mnist(Split split, std::string dir = fashion_mnist_default_dir());

}  // namespace distgrad::data
