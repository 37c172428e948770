// Helpers shared by the nn tests.
#pragma once

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "autograd/gradcheck.h"
#include "core/ops.h"
#include "nn/functional_call.h"
#include "nn/module.h"
#include "tests/core/test_util.h"

namespace distgrad::testing {

// Expects `t` to hold `expected` (row-major), each within `tolerance`.
inline void expect_values_near(const Tensor& t, const std::vector<double>& expected, double tolerance = 1e-12) {
  const std::vector<double> actual = values(t);
  ASSERT_EQ(actual.size(), expected.size());
  for (size_t i = 0; i < expected.size(); ++i) EXPECT_NEAR(actual[i], expected[i], tolerance) << "element " << i;
}

// A float64 leaf that requires grad, holding `data` in `sizes`.
inline Tensor leaf(const std::vector<double>& data, const Shape& sizes) {
  Tensor t = from_vector(data, sizes);
  t.requires_grad_();
  return t;
}

// A float64 leaf that requires grad, with N(0, 1) values.
inline Tensor random_leaf(const Shape& sizes) {
  Tensor t = randn(sizes, {.dtype = kFloat64});
  t.requires_grad_();
  return t;
}

// gradcheck and gradgradcheck of module.forward (a float64 module) with respect to `input`
// and every parameter of the module: the parameters go in through functional_call, so that
// they are inputs of the checked function.
inline void expect_module_gradients_match(nn::Module& module, const Tensor& input) {
  const nn::ParamDict own = module.named_parameters();
  autograd::TensorList inputs{input};
  for (const auto& [name, parameter] : own) {
    Tensor copy = untracked::clone(parameter.detach());
    copy.requires_grad_();
    inputs.push_back(copy);
  }
  const std::vector<std::string> names = own.keys();
  const auto fn = [&module, &names](const autograd::TensorList& x) {
    nn::ParamDict params;
    for (size_t i = 0; i < names.size(); ++i) params.insert(names[i], x[i + 1]);
    return autograd::TensorList{nn::functional_call(module, params, x[0])};
  };
  EXPECT_TRUE(autograd::gradcheck(fn, inputs)) << module.name();
  EXPECT_TRUE(autograd::gradgradcheck(fn, inputs)) << module.name();
}

}  // namespace distgrad::testing
