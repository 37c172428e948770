// Every differentiable op against finite differences, first and second order (gradcheck,
// gradgradcheck), on contiguous and non-contiguous inputs, on the CPU and, when a GPU is
// visible, on CUDA.
#include "autograd/gradcheck.h"

#include <functional>
#include <string>

#include "autograd/autograd.h"
#include "autograd/function.h"
#include "autograd/ops.h"
#include "core/cuda.h"
#include "core/ops.h"
#include "tests/core/test_util.h"

namespace distgrad {
namespace {

using autograd::TensorList;

struct OpCase {
  std::string name;
  std::vector<Shape> shapes;  // float64 inputs, all requiring grad
  std::function<TensorList(const TensorList&)> fn;
  // Inputs whose values must stay away from a kink or a pole (|x| >= 0.2, or positive).
  enum class Domain { kAny, kAwayFromZero, kPositive } domain = Domain::kAny;
};

std::ostream& operator<<(std::ostream& out, const OpCase& c) { return out << c.name; }

TensorList one(Tensor t) { return {std::move(t)}; }

std::vector<OpCase> all_cases() {
  using In = const TensorList&;
  using D = OpCase::Domain;
  const Im2colOptions window{.kernel_size = {2, 2}, .stride = {1, 2}, .padding = {1, 0}, .dilation = {1, 1}};
  return {
      {"add_broadcast", {{2, 3}, {3}}, [](In x) { return one(add(x[0], x[1])); }},
      {"add_scalar", {{3}}, [](In x) { return one(x[0] + 2.0); }},
      {"sub", {{2, 3}, {2, 1}}, [](In x) { return one(sub(x[0], x[1])); }},
      {"rsub", {{3}}, [](In x) { return one(1.5 - x[0]); }},
      {"mul_broadcast", {{2, 1, 3}, {4, 1}}, [](In x) { return one(mul(x[0], x[1])); }},
      {"mul_scalar", {{3}}, [](In x) { return one(x[0] * -3.0); }},
      // Followed by a product with a scalar, whose formula hands them a fresh gradient that they
      // may write into (Note [Reused gradients]): each side broadcast, neither, one tensor twice.
      {"mul_reusing_its_gradient", {{2, 3}, {3}}, [](In x) { return one(mul(x[0], x[1]) * 2.0); }},
      {"mul_reusing_its_gradient_for_b", {{3}, {2, 3}}, [](In x) { return one(mul(x[0], x[1]) * 2.0); }},
      {"mul_same_shapes_reusing_its_gradient", {{2, 3}, {2, 3}}, [](In x) { return one(mul(x[0], x[1]) * 2.0); }},
      {"square_reusing_its_gradient", {{4}}, [](In x) { return one(mul(x[0], x[0]) * 2.0); }},
      {"div", {{2, 3}, {3}}, [](In x) { return one(div(x[0], x[1])); }, D::kAwayFromZero},
      {"div_scalar", {{3}}, [](In x) { return one(x[0] / 4.0); }},
      {"rdiv", {{3}}, [](In x) { return one(2.0 / x[0]); }, D::kAwayFromZero},
      {"pow_tensor", {{2, 2}, {2, 2}}, [](In x) { return one(pow(x[0], x[1])); }, D::kPositive},
      {"pow_scalar", {{4}}, [](In x) { return one(pow(x[0], 3.0)); }},
      {"pow_fractional", {{4}}, [](In x) { return one(pow(x[0], 1.5)); }, D::kPositive},
      {"pow_base", {{4}}, [](In x) { return one(pow(2.5, x[0])); }},
      {"maximum", {{2, 3}, {3}}, [](In x) { return one(maximum(x[0], x[1])); }},
      {"minimum", {{2, 3}, {2, 3}}, [](In x) { return one(minimum(x[0], x[1])); }},
      {"neg", {{3}}, [](In x) { return one(-x[0]); }},
      {"neg_reusing_its_gradient", {{3}}, [](In x) { return one(-x[0] * 2.0); }},
      {"abs", {{5}}, [](In x) { return one(abs(x[0])); }, D::kAwayFromZero},
      {"exp", {{2, 3}}, [](In x) { return one(exp(x[0])); }},
      {"log", {{4}}, [](In x) { return one(log(x[0])); }, D::kPositive},
      {"log1p", {{4}}, [](In x) { return one(log1p(x[0])); }, D::kPositive},
      {"sqrt", {{4}}, [](In x) { return one(sqrt(x[0])); }, D::kPositive},
      {"rsqrt", {{4}}, [](In x) { return one(rsqrt(x[0])); }, D::kPositive},
      {"sin_cos",
       {{4}},
       [](In x) {
         return TensorList{sin(x[0]), cos(x[0])};
       }},
      {"tanh", {{4}}, [](In x) { return one(tanh(x[0])); }},
      {"sigmoid", {{4}}, [](In x) { return one(sigmoid(x[0])); }},
      {"relu", {{6}}, [](In x) { return one(relu(x[0])); }, D::kAwayFromZero},
      {"relu_reusing_its_gradient", {{6}}, [](In x) { return one(relu(x[0]) * 2.0); }, D::kAwayFromZero},
      // Batch normalisation with the batch's statistics, fused on the CPU (composed on CUDA).
      {"batch_norm", {{3, 2, 2, 3}, {2}, {2}}, [](In x) { return one(batch_norm(x[0], x[1], x[2], 1e-5).output); }},
      {"batch_norm_without_affine", {{5, 3}}, [](In x) { return one(batch_norm(x[0], {}, {}, 1e-5).output); }},
      {"batch_norm_weight_only", {{2, 3, 4}, {3}}, [](In x) { return one(batch_norm(x[0], x[1], {}, 1e-5).output); }},
      {"batch_norm_reusing_its_gradient",
       {{3, 2, 4}, {2}, {2}},
       [](In x) { return one(batch_norm(x[0], x[1], x[2], 1e-5).output * 2.0); }},
      {"gelu", {{6}}, [](In x) { return one(gelu(x[0])); }},
      {"expm1", {{6}}, [](In x) { return one(expm1(x[0])); }},
      // torch.nn.functional's activations (composed); kinks kept away from the inputs.
      {"silu", {{6}}, [](In x) { return one(silu(x[0])); }},
      {"leaky_relu", {{6}}, [](In x) { return one(leaky_relu(x[0], 0.2)); }, D::kAwayFromZero},
      {"elu",
       {{6}},
       [](In x) {
         return TensorList{elu(x[0]), elu(x[0], 0.5)};
       },
       D::kAwayFromZero},
      {"softplus",
       {{6}},
       [](In x) {
         return TensorList{softplus(x[0]), softplus(x[0], 2.0, 1.5), softplus(x[0] * 40.0)};
       },
       D::kAwayFromZero},
      {"logsigmoid",
       {{6}},
       [](In x) {
         return TensorList{logsigmoid(x[0]), logsigmoid(x[0] * 30.0)};
       }},
      {"hardtanh", {{6}}, [](In x) { return one(hardtanh(x[0], -0.5, 0.7)); }, D::kAwayFromZero},
      {"erf", {{6}}, [](In x) { return one(erf(x[0])); }},
      {"clamp", {{6}}, [](In x) { return one(clamp(x[0], -0.5, 0.7)); }, D::kAwayFromZero},
      {"clone_contiguous", {{2, 3}}, [](In x) { return one(contiguous(t(clone(x[0])))); }},
      {"view_reshape_flatten",
       {{2, 3, 2}},
       [](In x) {
         return TensorList{view(x[0], {3, 4}), reshape(transpose(x[0], 0, 2), {-1}), flatten(x[0], 1)};
       }},
      {"squeeze_unsqueeze",
       {{2, 1, 3}},
       [](In x) {
         return TensorList{squeeze(x[0]), squeeze(x[0], 1), unsqueeze(x[0], -1)};
       }},
      {"transpose_permute_t",
       {{2, 3, 4}},
       [](In x) {
         return TensorList{transpose(x[0], 0, 2), permute(x[0], {1, 2, 0}), t(select(x[0], 0, 1))};
       }},
      {"expand",
       {{3, 1}},
       [](In x) {
         return one(expand(x[0], {2, 3, 4}));
       }},
      {"slice_narrow_select",
       {{5, 4}},
       [](In x) {
         return TensorList{slice(x[0], 0, 1, 5, 2), narrow(x[0], 1, 1, 2), select(x[0], 1, -1)};
       }},
      {"unbind_split_chunk",
       {{4, 3}},
       [](In x) {
         const std::vector<Tensor> rows = unbind(x[0], 0);
         const std::vector<Tensor> parts = split(x[0], 3, 0);
         const std::vector<Tensor> chunks = chunk(x[0], 2, 1);
         return TensorList{rows[1], rows[3] * 2.0, parts[1], chunks[0]};
       }},
      {"split_with_sizes",
       {{5, 2}},
       [](In x) {
         const std::vector<Tensor> parts = split_with_sizes(x[0], {1, 4}, 0);
         return TensorList{parts[0], parts[1]};
       }},
      {"sum_mean",
       {{2, 3, 4}},
       [](In x) {
         return TensorList{sum(x[0]), sum(x[0], {0, 2}), sum(x[0], {-1}, true), mean(x[0], {1}), mean(x[0])};
       }},
      {"var_std",
       {{3, 4}},
       [](In x) {
         return TensorList{var(x[0], {1}), std(x[0]), var(x[0], {0}, 0, true)};
       }},
      {"max_min_all",
       {{3, 4}},
       [](In x) {
         return TensorList{max(x[0]), min(x[0])};
       }},
      {"max_min_dim",
       {{3, 4}},
       [](In x) {
         return TensorList{max(x[0], 1).values, min(x[0], 0, true).values};
       }},
      {"amax_amin",
       {{3, 4, 2}},
       [](In x) {
         return TensorList{amax(x[0]), amax(x[0], {0, 2}), amin(x[0], {-1}, true), amin(x[0], {0, 1})};
       }},
      // Ties split the gradient equally (a tensor with a repeated maximum along each row).
      {"amax_with_ties",
       {{3, 2}},
       [](In x) {
         return one(amax(cat({x[0], x[0]}, 1), {1}));
       }},
      {"prod",
       {{3, 4}},
       [](In x) {
         return TensorList{prod(x[0]), prod(x[0], 1), prod(x[0], 0, true)};
       }},
      // A zero factor in each product: the gradient of the others' product.
      {"prod_with_zeros",
       {{3, 4}},
       [](In x) {
         const Tensor with_zero = cat({x[0], zeros({3, 1}, {.dtype = kFloat64, .device = x[0].device()})}, 1);
         return TensorList{prod(with_zero, 1), prod(with_zero), prod(cat({x[0], x[0] * 0.0}, 0), 0)};
       }},
      {"cumsum",
       {{3, 4}},
       [](In x) {
         return TensorList{cumsum(x[0], 1), cumsum(x[0], 0), cumsum(x[0] * x[0], -1)};
       }},
      {"logsumexp",
       {{3, 4}},
       [](In x) {
         return TensorList{logsumexp(x[0], {1}), logsumexp(x[0], {0, 1}, true)};
       }},
      {"softmax",
       {{3, 4}},
       [](In x) {
         return TensorList{softmax(x[0], 1), softmax(x[0], 0)};
       }},
      {"log_softmax", {{3, 4}}, [](In x) { return TensorList{log_softmax(x[0], -1)}; }},
      {"norm",
       {{3, 4}},
       [](In x) {
         return TensorList{norm(x[0]), norm(x[0], 2, {1}), norm(x[0], 1, {0}, true), norm(x[0], 3, {1})};
       },
       D::kAwayFromZero},
      {"norm_inf",
       {{3, 4}},
       [](In x) {
         return TensorList{norm(x[0], INFINITY), norm(x[0], INFINITY, {1})};
       }},
      {"cat_stack",
       {{2, 3}, {1, 3}},
       [](In x) {
         return TensorList{cat({x[0], x[1]}, 0), stack({x[1], x[1]}, 2)};
       }},
      {"index_select",
       {{4, 3}},
       [](In x) {
         const Tensor rows = from_vector<int64_t>({3, 0, 3}, x[0].device());
         const Tensor columns = from_vector<int64_t>({2, 0, 2, 1}, x[0].device());
         return TensorList{index_select(x[0], 0, rows), index_select(x[0], 1, columns)};
       }},
      {"gather",
       {{3, 4}},
       [](In x) {
         const Tensor index = from_vector<int64_t>({0, 3, 3, 1, 2, 2}, {3, 2}, x[0].device());
         return one(gather(x[0], 1, index));
       }},
      {"scatter_add",
       {{3, 4}, {3, 2}},
       [](In x) {
         const Tensor index = from_vector<int64_t>({0, 3, 3, 3, 2, 0}, {3, 2}, x[0].device());
         return one(scatter_add(x[0], 1, index, x[1]));
       }},
      {"masked_fill_where",
       {{3, 4}, {4}},
       [](In x) {
         const Tensor mask = gt(x[0], 0.0);
         return TensorList{masked_fill(x[0], mask, 2.0), where(mask, x[0], x[1])};
       },
       D::kAwayFromZero},
      {"matmul_2d", {{3, 4}, {4, 2}}, [](In x) { return one(matmul(x[0], x[1])); }},
      {"matmul_dot", {{4}, {4}}, [](In x) { return one(matmul(x[0], x[1])); }},
      {"matmul_matrix_vector",
       {{3, 4}, {4}},
       [](In x) {
         return TensorList{matmul(x[0], x[1]), matmul(x[1], t(x[0]))};
       }},
      {"matmul_batched", {{2, 3, 4}, {2, 4, 2}}, [](In x) { return one(matmul(x[0], x[1])); }},
      {"matmul_broadcast_batch",
       {{2, 3, 4}, {4, 2}},
       [](In x) {
         return TensorList{matmul(x[0], x[1]), matmul(t(x[1]), transpose(x[0], 1, 2))};
       }},
      {"matmul_batch_vector", {{2, 3, 4}, {4}}, [](In x) { return one(matmul(x[0], x[1])); }},
      {"addmm_outer",
       {{2}, {3, 4}, {4, 2}},
       [](In x) {
         return TensorList{addmm(x[0], x[1], x[2], 0.5, 2.0), outer(x[0], select(x[1], 1, 0))};
       }},
      {"addmm_matmul_transposed_operands",  // gradients computed transposed (t(weight) in nn::Linear)
       {{3}, {4, 2}, {3, 4}},
       [](In x) {
         return TensorList{addmm(x[0], t(x[1]), t(x[2])), matmul(t(x[1]), t(x[2]))};
       }},
      {"conv2d",
       {{2, 2, 5, 4}, {3, 2, 3, 2}, {3}},
       [](In x) {
         return TensorList{conv2d(x[0], x[1], x[2], {.stride = {2, 1}, .padding = {1, 1}, .dilation = {1, 2}})};
       }},
      {"conv2d_grouped",
       {{2, 4, 5, 4}, {6, 2, 3, 2}, {6}},
       [](In x) {
         return one(conv2d(x[0], x[1], x[2], {.stride = {2, 1}, .padding = {1, 1}, .dilation = {1, 2}, .groups = 2}));
       }},
      {"conv2d_depthwise_unbatched",
       {{3, 4, 4}, {3, 1, 2, 2}},
       [](In x) {
         return one(conv2d(x[0], x[1], {}, {.padding = {1, 0}, .groups = 3}));
       }},
      {"max_pool2d_ceil_mode",
       {{2, 2, 5, 4}},
       [](In x) {
         return one(max_pool2d(x[0], {.kernel_size = {2, 3}, .stride = {2, 2}, .ceil_mode = true}).values);
       }},
      {"conv2d_unbatched_no_bias", {{2, 4, 4}, {2, 2, 2, 2}}, [](In x) { return one(conv2d(x[0], x[1])); }},
      // 3 x 3, stride 1, eight channels in and out, outputs 7 wide: the CPU's Winograd path, forward and gradients.
      {"conv2d_winograd",
       {{1, 8, 1, 7}, {8, 8, 3, 3}, {8}},
       [](In x) {
         return one(conv2d(x[0], x[1], x[2], {.padding = {1, 1}}));
       }},
      // conv2d's gradient ops (for input [2, 2, 5, 4] and weight [3, 2, 3, 2] as above), in both
      // of their tensors.
      {"conv2d_input_grad",
       {{2, 3, 3, 4}, {3, 2, 3, 2}},
       [](In x) {
         return one(
             conv2d_input_grad(x[0], x[1], {2, 2, 5, 4}, {.stride = {2, 1}, .padding = {1, 1}, .dilation = {1, 2}}));
       }},
      {"conv2d_weight_grad",
       {{2, 3, 3, 4}, {2, 2, 5, 4}},
       [](In x) {
         return one(
             conv2d_weight_grad(x[0], x[1], {3, 2, 3, 2}, {.stride = {2, 1}, .padding = {1, 1}, .dilation = {1, 2}}));
       }},
      {"conv2d_input_grad_unbatched",
       {{2, 3, 3}, {2, 2, 2, 2}},
       [](In x) {
         return one(conv2d_input_grad(x[0], x[1], {2, 4, 4}));
       }},
      {"max_pool2d",
       {{2, 2, 5, 4}},
       [](In x) {
         return one(max_pool2d(x[0], {.kernel_size = {3, 2}, .stride = {2, 1}, .padding = {1, 1}}).values);
       }},
      {"avg_pool2d",
       {{2, 2, 5, 4}},
       [](In x) {
         return TensorList{avg_pool2d(x[0], {.kernel_size = {3, 2}, .stride = {2, 1}, .padding = {1, 1}}),
                           avg_pool2d(x[0], {.kernel_size = {2, 3}, .padding = {1, 1}, .count_include_pad = false}),
                           avg_pool2d(select(x[0], 0, 1), {.kernel_size = {2, 2}})};
       }},
      {"im2col_col2im",
       {{1, 2, 3, 4}, {2, 8, 8}},
       [window](In x) {
         return TensorList{distgrad::im2col(x[0], window), distgrad::col2im(x[1], {3, 4}, window)};
       }},
  };
}

// Random float64 inputs of `c`'s shapes in its domain; non-contiguous (a transposed or strided
// view of a larger tensor) when asked.
TensorList make_inputs(const OpCase& c, bool non_contiguous, Device device) {
  TensorList inputs;
  for (const Shape& shape : c.shapes) {
    Tensor values = randn(shape, {.dtype = kFloat64});
    if (c.domain == OpCase::Domain::kPositive) values = untracked::add(untracked::abs(values), 0.3);
    if (c.domain == OpCase::Domain::kAwayFromZero) {
      values = untracked::add(values, untracked::mul(untracked::sign(values), 0.2));
    }
    if (non_contiguous && !shape.empty()) {
      // Interleave with padding along the last dim and take every other element: a strided view.
      Shape wide = shape;
      wide.back() *= 2;
      Tensor storage = zeros(wide, {.dtype = kFloat64});
      untracked::copy_(untracked::slice(storage, -1, 0, wide.back(), 2), values);
      values = untracked::slice(storage, -1, 0, wide.back(), 2);
    }
    values = untracked::to(values, device);
    values.requires_grad_();
    inputs.push_back(values);
  }
  return inputs;
}

class OpGradients : public ::testing::TestWithParam<OpCase> {};

TEST_P(OpGradients, FirstOrderMatchesFiniteDifferences) {
  manual_seed(7);
  EXPECT_TRUE(autograd::gradcheck(GetParam().fn, make_inputs(GetParam(), false, Device::cpu())));
}

TEST_P(OpGradients, FirstOrderOnNonContiguousInputs) {
  manual_seed(8);
  const TensorList inputs = make_inputs(GetParam(), true, Device::cpu());
  ASSERT_FALSE(inputs[0].dim() > 0 && inputs[0].numel() > 1 && inputs[0].is_contiguous());
  EXPECT_TRUE(autograd::gradcheck(GetParam().fn, inputs));
}

TEST_P(OpGradients, SecondOrderMatchesFiniteDifferences) {
  manual_seed(9);
  EXPECT_TRUE(autograd::gradgradcheck(GetParam().fn, make_inputs(GetParam(), false, Device::cpu())));
}

TEST_P(OpGradients, OnCudaBothOrders) {
  if (!cuda::is_available()) GTEST_SKIP() << "no CUDA device visible";
  manual_seed(10);
  const TensorList inputs = make_inputs(GetParam(), false, Device::cuda(0));
  EXPECT_TRUE(autograd::gradcheck(GetParam().fn, inputs));
  EXPECT_TRUE(autograd::gradgradcheck(GetParam().fn, inputs));
}

INSTANTIATE_TEST_SUITE_P(EveryOp, OpGradients, ::testing::ValuesIn(all_cases()),
                         [](const ::testing::TestParamInfo<OpCase>& info) { return info.param.name; });

TEST(Gradcheck, CatchesAWrongFormula) {
  // A deliberately wrong backward (2x instead of 3x^2) must be reported with both values.
  auto wrong_cube = [](const TensorList& x) {
    Tensor result = untracked::pow(x[0], 3.0);
    if (auto node = autograd::record("WrongCubeBackward", {&x[0]}, {&result}, [](const autograd::BackwardContext& ctx) {
          return TensorList{mul(ctx.grads[0], mul(ctx.saved[0], 2.0))};
        })) {
      node->save(x[0]);
    }
    return TensorList{result};
  };
  const Tensor x = from_vector<double>({1.5, -2.0});
  x.requires_grad_();
  EXPECT_ERROR_CONTAINS(autograd::gradcheck(wrong_cube, {x}), "gradcheck: the Jacobian of output 0", "backward gives 3",
                        "finite differences give 6.75");
}

TEST(Gradcheck, GradgradcheckCatchesAFormulaThatIsOnlyFirstOrder) {
  // Right values, but computed with core kernels: the gradient does not record its dependence
  // on x, so the second derivative comes out wrong and gradgradcheck must say so.
  auto cube = [](const TensorList& x) {
    Tensor result = untracked::pow(x[0], 3.0);
    if (auto node =
            autograd::record("UnrecordedCubeBackward", {&x[0]}, {&result}, [](const autograd::BackwardContext& ctx) {
              return TensorList{mul(ctx.grads[0], untracked::mul(untracked::pow(ctx.saved[0], 2.0), 3.0))};
            })) {
      node->save(x[0]);
    }
    return TensorList{result};
  };
  const Tensor x = from_vector<double>({1.5, -2.0});
  x.requires_grad_();
  EXPECT_TRUE(autograd::gradcheck(cube, {x}));
  EXPECT_ERROR_CONTAINS(autograd::gradgradcheck(cube, {x}),
                        "gradcheck: the Jacobian of output 0 with respect to input 0");
}

TEST(Gradcheck, RejectsFloat32AndExpandedInputs) {
  const Tensor f32 = zeros({2}, requires_grad());
  EXPECT_ERROR_CONTAINS(autograd::gradcheck([](const TensorList& x) { return x; }, {f32}), "expected float64");
  const Tensor expanded = untracked::expand(zeros({1}, {.dtype = kFloat64}), {3});
  expanded.requires_grad_();
  EXPECT_ERROR_CONTAINS(autograd::gradcheck([](const TensorList& x) { return x; }, {expanded}), "more than once");
  EXPECT_ERROR_CONTAINS(autograd::gradcheck([](const TensorList& x) { return x; }, {zeros({2}, {.dtype = kFloat64})}),
                        "no input requires grad");
}

}  // namespace
}  // namespace distgrad
