// The layers: forward against hand-computed or PyTorch-computed values, default
// initialisation, names, errors, and gradients of first and second order with respect to the
// input and every parameter (gradcheck, gradgradcheck in float64).
#include <cmath>
#include <memory>

#include "autograd/ops.h"
#include "nn/activation.h"
#include "nn/batch_norm.h"
#include "nn/conv2d.h"
#include "nn/flatten.h"
#include "nn/linear.h"
#include "nn/pooling.h"
#include "nn/sequential.h"
#include "tests/nn/nn_test_util.h"

namespace distgrad {
namespace {

using ::testing::ElementsAre;
using testing::expect_module_gradients_match;
using testing::expect_values_near;
using testing::random_leaf;
using testing::values;

constexpr TensorOptions kDouble{.dtype = kFloat64};

// Every value of `t` lies in [-bound, bound], and they are not all equal.
void expect_uniform_within(const Tensor& t, double bound) {
  const std::vector<double> v = values(t);
  for (double x : v) {
    EXPECT_GE(x, -bound);
    EXPECT_LE(x, bound);
  }
  EXPECT_NE(*std::min_element(v.begin(), v.end()), *std::max_element(v.begin(), v.end()));
}

TEST(Linear, ForwardMatchesHandComputedValues) {
  nn::Linear linear(3, 2, true, kDouble);
  linear.load_state_dict(
      {{"weight", from_vector<double>({1, 2, 3, -1, 0.5, 2}, {2, 3})}, {"bias", from_vector<double>({0.5, -1})}});
  const Tensor x = from_vector<double>({1, 0, -1, 2, 1, 0.5}, {2, 3});
  // [1, 0, -1]·[1, 2, 3] + 0.5, [1, 0, -1]·[-1, 0.5, 2] - 1; [2, 1, 0.5]·... likewise.
  const std::vector<double> expected{-1.5, -4, 6, -1.5};
  EXPECT_EQ(values(linear.forward(x)), expected);
  const Tensor batched = linear.forward(untracked::reshape(x, {2, 1, 1, 3}));  // any leading dims
  EXPECT_THAT(batched.sizes(), ElementsAre(2, 1, 1, 2));
  EXPECT_EQ(values(batched), expected);
  const Tensor single = linear.forward(untracked::select(x, 0, 1));  // one sample, no batch dim
  EXPECT_THAT(single.sizes(), ElementsAre(2));
  EXPECT_EQ(values(single), (std::vector<double>{6, -1.5}));
}

TEST(Linear, WithoutBias) {
  nn::Linear linear(2, 1, /*with_bias=*/false, kDouble);
  EXPECT_FALSE(linear.bias.defined());
  EXPECT_THAT(linear.named_parameters().keys(), ElementsAre("weight"));
  linear.load_state_dict({{"weight", from_vector<double>({2, -1}, {1, 2})}});
  EXPECT_EQ(values(linear.forward(from_vector<double>({3, 4}, {1, 2}))), (std::vector<double>{2}));
  EXPECT_EQ(linear.name(), "Linear(in_features=2, out_features=1, bias=false)");
}

TEST(Linear, DefaultInitIsSeededUniformOverFanIn) {
  manual_seed(0);
  nn::Linear a(4, 30);
  manual_seed(0);
  nn::Linear b(4, 30);
  EXPECT_EQ(values(a.weight), values(b.weight));
  EXPECT_EQ(values(a.bias), values(b.bias));
  EXPECT_EQ(a.weight.dtype(), kFloat32);
  EXPECT_THAT(a.weight.sizes(), ElementsAre(30, 4));
  expect_uniform_within(a.weight, 0.5);  // 1 / sqrt(4)
  expect_uniform_within(a.bias, 0.5);
  nn::Linear c(4, 30);  // the generator moved on
  EXPECT_NE(values(a.weight), values(c.weight));
  EXPECT_EQ(nn::Linear(2, 2, true, kDouble).weight.dtype(), kFloat64);
}

TEST(Linear, WrongInputNamesTheLayerAndBothShapes) {
  nn::Linear linear(3, 2);
  EXPECT_EQ(linear.name(), "Linear(in_features=3, out_features=2, bias=true)");
  EXPECT_ERROR_CONTAINS(linear.forward(zeros({4, 5})),
                        "Linear(in_features=3, out_features=2, bias=true): expected input of shape [..., 3], found "
                        "[4, 5]");
  EXPECT_ERROR_CONTAINS(linear.forward(zeros({})), "expected input of shape [..., 3], found []");
}

TEST(Linear, GradientsOfFirstAndSecondOrder) {
  manual_seed(5);
  nn::Linear linear(3, 2, true, kDouble);
  expect_module_gradients_match(linear, random_leaf({4, 3}));
  expect_module_gradients_match(linear, random_leaf({2, 2, 3}));
  expect_module_gradients_match(linear, random_leaf({3}));
  nn::Linear no_bias(3, 2, false, kDouble);
  expect_module_gradients_match(no_bias, random_leaf({4, 3}));
}

// Input [1, 2, 4, 4] = arange / 10 - 1 and weight [3, 2, 3, 3] = arange / 20 - 0.8, in float64.
Tensor conv_input() { return untracked::sub(untracked::div(arange(0.0, 32.0, 1.0, kDouble), 10.0), 1.0); }
Tensor conv_weight() { return untracked::sub(untracked::div(arange(0.0, 54.0, 1.0, kDouble), 20.0), 0.8); }

TEST(Conv2d, ForwardMatchesPyTorch) {
  nn::Conv2d conv(2, 3, 3, {.stride = 2, .padding = 1}, true, kDouble);
  conv.load_state_dict(
      {{"weight", untracked::reshape(conv_weight(), {3, 2, 3, 3})}, {"bias", from_vector<double>({0.1, -0.2, 0.3})}});
  // torch.nn.functional.conv2d(x, w, b, stride=2, padding=1), computed with PyTorch 2.
  const std::vector<double> expected{1.56, 1.76, 0.025, -1.28, 1.62, 3.62, 6.745, 11.38, 2.48, 6.28, 14.265, 24.84};
  const Tensor y = conv.forward(untracked::reshape(conv_input(), {1, 2, 4, 4}));
  EXPECT_THAT(y.sizes(), ElementsAre(1, 3, 2, 2));
  expect_values_near(y, expected);
  const Tensor unbatched = conv.forward(untracked::reshape(conv_input(), {2, 4, 4}));
  EXPECT_THAT(unbatched.sizes(), ElementsAre(3, 2, 2));
  expect_values_near(unbatched, expected);
}

TEST(Conv2d, DilationAndRectangularStrideMatchPyTorch) {
  nn::Conv2d conv(1, 1, 2, {.stride = {1, 2}, .dilation = 2}, /*with_bias=*/false, kDouble);
  conv.load_state_dict({{"weight", from_vector<double>({1, -1, 0.5, 2}, {1, 1, 2, 2})}});
  const Tensor x = untracked::div(untracked::sub(arange(0.0, 25.0, 1.0, kDouble), 12.0), 5.0);
  // torch.nn.functional.conv2d(x, w, stride=(1, 2), dilation=2), computed with PyTorch 2.
  expect_values_near(conv.forward(untracked::reshape(x, {1, 1, 5, 5})), {-0.6, 0.4, 1.9, 2.9, 4.4, 5.4});
  EXPECT_EQ(conv.name(), "Conv2d(1, 1, kernel_size=2, stride=(1, 2), padding=0, dilation=2, bias=false)");
}

TEST(Conv2d, DefaultInitIsSeededUniformOverFanIn) {
  manual_seed(0);
  nn::Conv2d a(2, 8, {3, 2});
  manual_seed(0);
  nn::Conv2d b(2, 8, {3, 2});
  EXPECT_THAT(a.weight.sizes(), ElementsAre(8, 2, 3, 2));
  EXPECT_EQ(values(a.weight), values(b.weight));
  expect_uniform_within(a.weight, 1 / std::sqrt(12.0));  // fan_in = 2 * 3 * 2
  expect_uniform_within(a.bias, 1 / std::sqrt(12.0));
  EXPECT_EQ(a.name(), "Conv2d(2, 8, kernel_size=(3, 2), stride=1, padding=0, dilation=1, bias=true)");
}

TEST(Conv2d, WrongInputNamesTheLayerAndTheShape) {
  nn::Conv2d conv(3, 4, 3);
  EXPECT_ERROR_CONTAINS(conv.forward(zeros({1, 2, 5, 5})), "Conv2d(3, 4, kernel_size=3",
                        "expected input of shape [N, 3, H, W] or [3, H, W], found [1, 2, 5, 5]");
  EXPECT_ERROR_CONTAINS(conv.forward(zeros({3, 5})), "found [3, 5]");
  EXPECT_ERROR_CONTAINS(nn::Conv2d(0, 4, 3), "Conv2d: expected positive channels and kernel size");
}

TEST(Conv2d, GradientsOfFirstAndSecondOrder) {
  manual_seed(6);
  nn::Conv2d conv(2, 3, {3, 2}, {.stride = {2, 1}, .padding = 1, .dilation = {1, 2}}, true, kDouble);
  expect_module_gradients_match(conv, random_leaf({2, 2, 5, 5}));
  expect_module_gradients_match(conv, random_leaf({2, 4, 4}));
}

// Distinct values, so that no window has a tie.
Tensor pool_input() {
  return from_vector<double>({3, -1, 4, 1, -5, 9, 2, -6, 5, 3, -5, 8, 9.5, -7, 7, 3}, {1, 1, 4, 4});
}

TEST(MaxPool2d, ForwardTakesTheLargestOfEachWindow) {
  nn::MaxPool2d pool(2);
  EXPECT_EQ(pool.name(), "MaxPool2d(kernel_size=2, stride=2, padding=0)");
  EXPECT_EQ(values(pool.forward(pool_input())), (std::vector<double>{9, 4, 9.5, 8}));
  nn::MaxPool2d overlapping({2, 3}, 1);
  EXPECT_EQ(values(overlapping.forward(pool_input())), (std::vector<double>{9, 9, 9, 9, 9.5, 8}));
  // torch.nn.functional.max_pool2d(x, 3, 1, 1), computed with PyTorch 2.
  nn::MaxPool2d padded(3, 1, 1);
  EXPECT_EQ(values(padded.forward(untracked::squeeze(pool_input(), 0))),
            (std::vector<double>{9, 9, 9, 4, 9, 9, 9, 8, 9.5, 9.5, 9, 8, 9.5, 9.5, 8, 8}));
}

TEST(MaxPool2d, GradientsOfFirstAndSecondOrder) {
  nn::MaxPool2d pool(2, 1);
  Tensor x = pool_input();
  x.requires_grad_();
  expect_module_gradients_match(pool, x);
  EXPECT_ERROR_CONTAINS(pool.forward(zeros({4, 4})), "MaxPool2d(kernel_size=2, stride=1, padding=0): expected input",
                        "found [4, 4]");
}

TEST(Flatten, MergesTheGivenDims) {
  nn::Flatten flatten;
  EXPECT_EQ(flatten.name(), "Flatten(start_dim=1, end_dim=-1)");
  EXPECT_THAT(flatten.forward(zeros({2, 3, 4, 5})).sizes(), ElementsAre(2, 60));
  EXPECT_THAT(nn::Flatten(0, 1).forward(zeros({2, 3, 4})).sizes(), ElementsAre(6, 4));
  expect_module_gradients_match(flatten, random_leaf({2, 3, 2}));
}

TEST(Activations, ForwardAndGradients) {
  const Tensor x = from_vector<double>({-2, -0.5, 0.5, 3});
  nn::ReLU relu;
  nn::Tanh tanh_layer;
  nn::Sigmoid sigmoid_layer;
  EXPECT_EQ(values(relu.forward(x)), (std::vector<double>{0, 0, 0.5, 3}));
  expect_values_near(tanh_layer.forward(x), {std::tanh(-2), std::tanh(-0.5), std::tanh(0.5), std::tanh(3)});
  expect_values_near(sigmoid_layer.forward(x), {1 / (1 + std::exp(2)), 1 / (1 + std::exp(0.5)),
                                                1 / (1 + std::exp(-0.5)), 1 / (1 + std::exp(-3))});
  EXPECT_EQ(relu.name(), "ReLU()");
  EXPECT_EQ(tanh_layer.name(), "Tanh()");
  EXPECT_EQ(sigmoid_layer.name(), "Sigmoid()");
  Tensor input = untracked::clone(x);
  input.requires_grad_();
  for (nn::Module* layer : std::initializer_list<nn::Module*>{&relu, &tanh_layer, &sigmoid_layer}) {
    expect_module_gradients_match(*layer, input);
  }
}

TEST(Sequential, ChainsItsChildrenNamedByPosition) {
  nn::Sequential net{std::make_shared<nn::Linear>(2, 3, true, kDouble), std::make_shared<nn::ReLU>()};
  net.push_back(std::make_shared<nn::Linear>(3, 1, true, kDouble));
  ASSERT_EQ(net.size(), 3u);
  EXPECT_EQ(net.name(), "Sequential(3 modules)");
  EXPECT_THAT(net.named_parameters().keys(), ElementsAre("0.weight", "0.bias", "2.weight", "2.bias"));
  const Tensor x = randn({4, 2}, kDouble);
  const Tensor expected = net[2]->forward(relu(net[0]->forward(x)));
  EXPECT_EQ(values(net.forward(x)), values(expected));
  EXPECT_ERROR_CONTAINS(net[3], "Sequential: index 3 is out of range for 3 modules");
  EXPECT_EQ(values(nn::Sequential().forward(x)), values(x));  // empty: the identity
}

TEST(Sequential, GradientsOfFirstAndSecondOrder) {
  manual_seed(7);
  nn::Sequential net{std::make_shared<nn::Linear>(2, 4, true, kDouble), std::make_shared<nn::Tanh>(),
                     std::make_shared<nn::Linear>(4, 1, true, kDouble)};
  expect_module_gradients_match(net, random_leaf({3, 2}));
}

TEST(Sequential, OmniglotStyleConvNetIsTwiceDifferentiable) {
  // TorchOpt's MAML-Omniglot block (conv, batch norm with momentum 1 in training mode, ReLU,
  // max pool), then a linear head, at a small size.
  manual_seed(8);
  nn::Sequential net{std::make_shared<nn::Conv2d>(1, 2, 3, nn::Conv2dOptions{.padding = 1}, true, kDouble),
                     std::make_shared<nn::BatchNorm2d>(2, nn::BatchNormOptions{.momentum = 1.0}, kDouble),
                     std::make_shared<nn::ReLU>(),
                     std::make_shared<nn::MaxPool2d>(2),
                     std::make_shared<nn::Flatten>(),
                     std::make_shared<nn::Linear>(8, 3, true, kDouble)};
  EXPECT_THAT(net.named_parameters().keys(),
              ElementsAre("0.weight", "0.bias", "1.weight", "1.bias", "5.weight", "5.bias"));
  expect_module_gradients_match(net, random_leaf({3, 1, 4, 4}));
}

}  // namespace
}  // namespace distgrad
