// Fashion-MNIST loading: the installed dataset (skipped when absent) against facts decoded
// independently with Python's gzip module, and synthetic directories for every error.
#include "data/fashion_mnist.h"

#include <cstdlib>
#include <filesystem>
#include <string>

#include "tests/core/test_util.h"
#include "tests/data/test_files.h"

namespace distgrad::data {
namespace {

using ::distgrad::testing::Bytes;
using ::distgrad::testing::idx_file;
using ::distgrad::testing::ScratchDir;
using ::distgrad::testing::write_gzip;

constexpr const char* kInstalledDir = "/usr/share/datasets/fashion-mnist";

// Sets an environment variable for one scope and restores the previous value.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    const char* previous = std::getenv(name);
    if (previous != nullptr) previous_ = previous;
    had_value_ = previous != nullptr;
    if (value != nullptr) ::setenv(name, value, 1);
    else ::unsetenv(name);
  }
  ~ScopedEnv() {
    if (had_value_) ::setenv(name_, previous_.c_str(), 1);
    else ::unsetenv(name_);
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  const char* name_;
  std::string previous_;
  bool had_value_ = false;
};

// Per-class counts of int64 labels in 0..9.
std::vector<int64_t> class_counts(const Tensor& labels) {
  std::vector<int64_t> counts(10);
  for (int64_t label : labels.to_vector<int64_t>()) ++counts.at(label);
  return counts;
}

// Writes a train split of `count` images of `side` x `side` pixels (pixel value = image index
// * 51) and the given labels into `dir`.
void write_train_split(ScratchDir& dir, uint32_t count, uint32_t side, const Bytes& labels) {
  Bytes pixels;
  for (uint32_t i = 0; i < count; ++i) pixels.insert(pixels.end(), side * side, static_cast<uint8_t>(i * 51));
  write_gzip(dir.file("train-images-idx3-ubyte.gz"), idx_file({count, side, side}, pixels));
  write_gzip(dir.file("train-labels-idx1-ubyte.gz"), idx_file({static_cast<uint32_t>(labels.size())}, labels));
}

TEST(FashionMnist, ClassNamesFollowTheLabelOrder) {
  ASSERT_EQ(kFashionMnistClassNames.size(), 10u);
  EXPECT_EQ(kFashionMnistClassNames[0], "T-shirt/top");
  EXPECT_EQ(kFashionMnistClassNames[6], "Shirt");
  EXPECT_EQ(kFashionMnistClassNames[9], "Ankle boot");
}

TEST(FashionMnist, DefaultDirIsTheEnvironmentVariableOrTheDebianPath) {
  {
    ScopedEnv env("DISTGRAD_FASHION_MNIST_DIR", nullptr);
    EXPECT_EQ(fashion_mnist_default_dir(), kInstalledDir);
  }
  {
    ScopedEnv env("DISTGRAD_FASHION_MNIST_DIR", "");
    EXPECT_EQ(fashion_mnist_default_dir(), kInstalledDir);
  }
  ScopedEnv env("DISTGRAD_FASHION_MNIST_DIR", "/data/fmnist");
  EXPECT_EQ(fashion_mnist_default_dir(), "/data/fmnist");
}

TEST(FashionMnist, InstalledTrainSplit) {
  if (!std::filesystem::is_directory(kInstalledDir)) GTEST_SKIP() << kInstalledDir << " is absent";
  const FashionMnist train = load_fashion_mnist(Split::kTrain, kInstalledDir);
  EXPECT_EQ(train.images.dtype(), kFloat32);
  EXPECT_EQ(train.images.sizes(), Shape({60000, 1, 28, 28}));
  EXPECT_EQ(train.labels.dtype(), kInt64);
  EXPECT_EQ(train.labels.sizes(), Shape({60000}));
  EXPECT_EQ(untracked::min(train.images).item<float>(), 0.0f);
  EXPECT_EQ(untracked::max(train.images).item<float>(), 1.0f);
  // Decoded by hand with Python's gzip module: the first labels, 6000 samples of each class,
  // 76247 as the pixel sum of the first image and 193 at its row 10, column 13.
  const std::vector<int64_t> first_labels = untracked::slice(train.labels, 0, 0, 10).to_vector<int64_t>();
  EXPECT_EQ(first_labels, std::vector<int64_t>({9, 0, 0, 3, 0, 2, 7, 2, 5, 5}));
  EXPECT_EQ(kFashionMnistClassNames[first_labels[0]], "Ankle boot");
  EXPECT_EQ(class_counts(train.labels), std::vector<int64_t>(10, 6000));
  EXPECT_NEAR(untracked::sum(untracked::select(train.images, 0, 0)).item<double>(), 76247.0 / 255.0, 1e-3);
  EXPECT_EQ(train.images.at<float>({0, 0, 10, 13}), 193.0f / 255.0f);
  EXPECT_EQ(train.images.at<float>({0, 0, 10, 12}), 0.0f);
}

TEST(FashionMnist, InstalledTestSplit) {
  if (!std::filesystem::is_directory(kInstalledDir)) GTEST_SKIP() << kInstalledDir << " is absent";
  const FashionMnist test = load_fashion_mnist(Split::kTest, kInstalledDir);
  EXPECT_EQ(test.images.sizes(), Shape({10000, 1, 28, 28}));
  EXPECT_EQ(test.labels.sizes(), Shape({10000}));
  EXPECT_EQ(untracked::min(test.images).item<float>(), 0.0f);
  EXPECT_EQ(untracked::max(test.images).item<float>(), 1.0f);
  // Decoded by hand with Python's gzip module, as above.
  EXPECT_EQ(untracked::slice(test.labels, 0, 0, 10).to_vector<int64_t>(),
            std::vector<int64_t>({9, 2, 1, 1, 6, 1, 4, 6, 5, 7}));
  EXPECT_EQ(class_counts(test.labels), std::vector<int64_t>(10, 1000));
  EXPECT_NEAR(untracked::sum(untracked::select(test.images, 0, 0)).item<double>(), 33456.0 / 255.0, 1e-3);
}

TEST(FashionMnist, ScalesPixelsToTheUnitInterval) {
  ScratchDir dir;
  write_train_split(dir, 6, 28, {0, 1, 2, 7, 8, 9});
  const FashionMnist data = load_fashion_mnist(Split::kTrain, dir.path());
  EXPECT_EQ(data.images.sizes(), Shape({6, 1, 28, 28}));
  EXPECT_EQ(data.labels.to_vector<int64_t>(), std::vector<int64_t>({0, 1, 2, 7, 8, 9}));
  EXPECT_EQ(data.images.at<float>({0, 0, 5, 5}), 0.0f);
  EXPECT_EQ(data.images.at<float>({1, 0, 0, 27}), 51.0f / 255.0f);
  EXPECT_EQ(data.images.at<float>({5, 0, 27, 0}), 1.0f);
}

TEST(FashionMnist, MissingDirectorySaysWhichPackageToInstall) {
  ScratchDir dir;
  const std::string absent = dir.file("nowhere");
  EXPECT_ERROR_CONTAINS(
      load_fashion_mnist(Split::kTrain, absent), "load_fashion_mnist: expected the Fashion-MNIST files in '",
      absent.c_str(), "found no such directory", "apt-get install dataset-fashion-mnist", "DISTGRAD_FASHION_MNIST_DIR");
}

TEST(FashionMnist, MissingFileIsNamed) {
  ScratchDir dir;
  write_train_split(dir, 2, 28, {1, 2});
  EXPECT_ERROR_CONTAINS(load_fashion_mnist(Split::kTest, dir.path()), "read_idx: cannot open '",
                        dir.file("t10k-images-idx3-ubyte.gz").c_str(), "No such file or directory");
}

TEST(FashionMnist, ImageLabelCountMismatchIsAnError) {
  ScratchDir dir;
  write_train_split(dir, 3, 28, {1, 2});
  EXPECT_ERROR_CONTAINS(load_fashion_mnist(Split::kTrain, dir.path()),
                        "load_fashion_mnist: expected as many labels as images, found 2 labels in '",
                        dir.file("train-labels-idx1-ubyte.gz").c_str(), "and 3 images in '");
}

TEST(FashionMnist, WrongImageSizeIsAnError) {
  ScratchDir dir;
  write_train_split(dir, 2, 32, {1, 2});
  EXPECT_ERROR_CONTAINS(load_fashion_mnist(Split::kTrain, dir.path()),
                        "load_fashion_mnist: expected images of shape [N, 28, 28] in '",
                        dir.file("train-images-idx3-ubyte.gz").c_str(), "found shape [2, 32, 32]");
}

TEST(FashionMnist, LabelsOfWrongShapeAreAnError) {
  ScratchDir dir;
  write_train_split(dir, 2, 28, {1, 2});
  write_gzip(dir.file("train-labels-idx1-ubyte.gz"), idx_file({2, 1}, {1, 2}));
  EXPECT_ERROR_CONTAINS(load_fashion_mnist(Split::kTrain, dir.path()), "expected labels of shape [N] in '",
                        "found shape [2, 1]");
}

TEST(FashionMnist, LabelOutsideTheClassesIsAnError) {
  ScratchDir dir;
  write_train_split(dir, 3, 28, {1, 10, 2});
  EXPECT_ERROR_CONTAINS(load_fashion_mnist(Split::kTrain, dir.path()),
                        "load_fashion_mnist: expected labels in 0..9 in '",
                        dir.file("train-labels-idx1-ubyte.gz").c_str(), "found 10 at index 1");
}

}  // namespace
}  // namespace distgrad::data
