#include "data/fashion_mnist.h"

#include <cstdlib>
#include <filesystem>

#include "core/creation.h"
#include "core/error.h"
#include "data/idx.h"

namespace distgrad::data {
namespace {

constexpr const char* kDefaultDir = "/usr/share/datasets/fashion-mnist";
constexpr const char* kDirVariable = "DISTGRAD_FASHION_MNIST_DIR";

}  // namespace

std::string fashion_mnist_default_dir() {
  const char* dir = std::getenv(kDirVariable);
  return dir != nullptr && *dir != '\0' ? dir : kDefaultDir;
}

FashionMnist load_fashion_mnist(Split split, std::string dir) {
  DISTGRAD_CHECK(std::filesystem::is_directory(dir), "load_fashion_mnist: expected the Fashion-MNIST files in '", dir,
                 "', found no such directory; install them with `apt-get install dataset-fashion-mnist` (into ",
                 kDefaultDir, ") or set ", kDirVariable, " to a directory holding them");
  const std::string prefix = (std::filesystem::path(dir) / (split == Split::kTrain ? "train" : "t10k")).string();
  const std::string images_path = prefix + "-images-idx3-ubyte.gz";
  const std::string labels_path = prefix + "-labels-idx1-ubyte.gz";

  const IdxBytes images = read_idx_bytes(images_path);
  const Shape image_shape = {images.sizes[0], kFashionMnistImageSize, kFashionMnistImageSize};
  DISTGRAD_CHECK(images.sizes == image_shape, "load_fashion_mnist: expected images of shape [N, ",
                 kFashionMnistImageSize, ", ", kFashionMnistImageSize, "] in '", images_path, "', found shape ",
                 shape_str(images.sizes));
  const IdxBytes labels = read_idx_bytes(labels_path);
  DISTGRAD_CHECK(labels.sizes.size() == 1, "load_fashion_mnist: expected labels of shape [N] in '", labels_path,
                 "', found shape ", shape_str(labels.sizes));
  const int64_t count = images.sizes[0];
  DISTGRAD_CHECK(labels.sizes[0] == count, "load_fashion_mnist: expected as many labels as images, found ",
                 labels.sizes[0], " labels in '", labels_path, "' and ", count, " images in '", images_path, "'");

  FashionMnist result{.images = empty({count, 1, kFashionMnistImageSize, kFashionMnistImageSize}),
                      .labels = empty({count}, {.dtype = kInt64})};
  float* pixels = result.images.data<float>();
  for (size_t i = 0; i < images.bytes.size(); ++i) pixels[i] = static_cast<float>(images.bytes[i]) / 255.0f;
  int64_t* label_values = result.labels.data<int64_t>();
  const auto num_classes = static_cast<uint8_t>(kFashionMnistClassNames.size());
  for (int64_t i = 0; i < count; ++i) {
    DISTGRAD_CHECK(labels.bytes[i] < num_classes, "load_fashion_mnist: expected labels in 0..", num_classes - 1,
                   " in '", labels_path, "', found ", int{labels.bytes[i]}, " at index ", i);
    label_values[i] = labels.bytes[i];
  }
  return result;
}

}  // namespace distgrad::data
