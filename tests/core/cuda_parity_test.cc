// Every core op on CUDA against its CPU twin (in the spirit of ggml's test-backend-ops).
//
// Each case builds its inputs on the CPU, runs the op on them and on copies on cuda:0, and
// compares the results. Without a visible CUDA device every case is skipped.
#include <cmath>
#include <functional>
#include <string>

#include "core/cuda.h"
#include "tests/core/test_util.h"

namespace distgrad {
namespace {

using namespace untracked;

// Results of one op, flattened and joined so that multi-output ops compare in one go.
using OpFn = std::function<std::vector<Tensor>(const std::vector<Tensor>&)>;

struct ParityCase {
  std::string name;
  std::vector<Shape> input_shapes;
  DType dtype;
  OpFn op;
};

std::ostream& operator<<(std::ostream& out, const ParityCase& c) { return out << c.name; }

// An int64 tensor with `values` on the device of `like`.
Tensor indices_like(const Tensor& like, std::vector<int64_t> values, Shape sizes) {
  return to(from_vector(values, sizes), like.device());
}

std::vector<Tensor> one(Tensor t) { return {std::move(t)}; }

std::vector<ParityCase> all_cases() {
  using In = const std::vector<Tensor>&;
  std::vector<ParityCase> cases;
  auto add_case = [&](std::string name, std::vector<Shape> shapes, OpFn op, DType dtype = kFloat64) {
    cases.push_back({std::move(name), std::move(shapes), dtype, std::move(op)});
  };
  for (DType dtype : {kFloat32, kFloat64}) {
    const std::string suffix = dtype == kFloat32 ? "_f32" : "_f64";
    add_case(
        "add_broadcast" + suffix, {{3, 1, 4}, {5, 1}}, [](In x) { return one(add(x[0], x[1])); }, dtype);
    add_case(
        "matmul_2d" + suffix, {{17, 33}, {33, 9}}, [](In x) { return one(matmul(x[0], x[1])); }, dtype);
    add_case(
        "sum_all" + suffix, {{1000, 37}}, [](In x) { return one(sum(x[0])); }, dtype);
    add_case(
        "im2col" + suffix, {{2, 3, 7, 8}},
        [](In x) {
          return std::vector{
              im2col(x[0], {.kernel_size = {3, 3}, .padding = {1, 1}}),
              im2col(x[0], {.kernel_size = {2, 3}, .stride = {2, 1}, .padding = {1, 1}, .dilation = {1, 2}})};
        },
        dtype);
    // Columns for a 7 x 8 output: 7 x 8 windows of kernel [3, 3] with padding [1, 1], and 4 x 6
    // windows of kernel [2, 3] with stride [2, 1], padding [1, 1] and dilation [1, 2].
    add_case(
        "col2im" + suffix, {{2, 3 * 9, 7 * 8}, {3 * 6, 4 * 6}},
        [](In x) {
          return std::vector{
              col2im(x[0], {7, 8}, {.kernel_size = {3, 3}, .padding = {1, 1}}),
              col2im(x[1], {7, 8}, {.kernel_size = {2, 3}, .stride = {2, 1}, .padding = {1, 1}, .dilation = {1, 2}})};
        },
        dtype);
  }
  add_case("sub", {{4, 5}, {4, 5}}, [](In x) { return one(sub(x[0], x[1])); });
  add_case("mul_transposed", {{4, 5}, {5, 4}}, [](In x) { return one(mul(x[0], t(x[1]))); });
  add_case("div", {{6}, {6}}, [](In x) { return one(div(x[0], add(abs(x[1]), 0.5))); });
  add_case("scalar_ops", {{7}}, [](In x) { return one(add(mul(sub(2.0, x[0]), 3.0), div(1.0, add(abs(x[0]), 1.0)))); });
  add_case("pow", {{5}, {5}}, [](In x) { return one(pow(add(abs(x[0]), 0.1), x[1])); });
  add_case("pow_scalar", {{5}}, [](In x) { return std::vector{pow(x[0], 3.0), pow(2.0, x[0])}; });
  add_case("maximum_minimum", {{3, 4}, {4}}, [](In x) {
    return std::vector{maximum(x[0], x[1]), minimum(x[0], x[1])};
  });
  add_case("unary", {{2, 50}}, [](In x) {
    const Tensor positive = add(abs(x[0]), 0.1);
    return std::vector{neg(x[0]),
                       abs(x[0]),
                       sign(x[0]),
                       exp(x[0]),
                       expm1(x[0]),
                       log(positive),
                       log1p(positive),
                       sqrt(positive),
                       rsqrt(positive),
                       sin(x[0]),
                       cos(x[0]),
                       tanh(x[0]),
                       sigmoid(x[0]),
                       relu(x[0]),
                       relu_backward(cos(x[0]), relu(x[0])),
                       gelu(x[0]),
                       erf(x[0]),
                       clamp(x[0], -0.5, 0.5),
                       clamp(x[0], std::nullopt, 0.2)};
  });
  add_case("comparisons", {{3, 4}, {3, 4}}, [](In x) {
    return std::vector{to(lt(x[0], x[1]), kFloat64),
                       to(le(x[0], 0.0), kFloat64),
                       to(gt(x[0], x[1]), kFloat64),
                       to(ge(x[0], x[1]), kFloat64),
                       to(eq(x[0], x[0]), kFloat64),
                       to(ne(x[0], x[1]), kFloat64),
                       to(logical_and(gt(x[0], 0.0), gt(x[1], 0.0)), kFloat64),
                       to(logical_or(gt(x[0], 0.0), logical_not(gt(x[1], 0.0))), kFloat64)};
  });
  add_case("int64_arithmetic", {{6}}, [](In x) {
    const Tensor i = to(mul(x[0], 10.0), kInt64);
    return one(to(sub(add(mul(i, 3), pow(i, 2.0)), abs(i)), kFloat64));
  });
  add_case("in_place", {{4, 3}, {3}}, [](In x) {
    Tensor y = clone(x[0]);
    add_(y, x[1]);
    mul_(y, 2.0);
    clamp_(y, -1.0, 1.0);
    return one(y);
  });
  add_case("copy_and_convert", {{3, 4}}, [](In x) {
    Tensor y = zeros({4, 3}, {.dtype = kFloat32, .device = x[0].device()});
    copy_(y, t(x[0]));
    return std::vector{to(y, kFloat64), contiguous(t(x[0]))};
  });
  add_case("half_conversions", {{5, 7}}, [](In x) {
    const Tensor big = mul(x[0], 3e4);  // past float16's range in places
    return std::vector{to(to(big, kFloat16), kFloat64), to(to(big, kBFloat16), kFloat64),
                       to(contiguous(t(to(x[0], kFloat16))), kFloat32), to(to(to(x[0], kBFloat16), kFloat16), kFloat64),
                       to(full({3}, 0.1, {.dtype = kFloat16, .device = x[0].device()}), kFloat32)};
  });
  add_case("views", {{4, 6}}, [](In x) {
    return std::vector{contiguous(slice(x[0], 1, 1, 6, 2)), contiguous(expand(narrow(x[0], 0, 1, 1), {3, 6})),
                       reshape(t(x[0]), {-1}), contiguous(permute(reshape(x[0], {2, 2, 6}), {2, 0, 1}))};
  });
  add_case("reductions_dims", {{3, 4, 5}}, [](In x) {
    return std::vector{sum(x[0], {1}), sum(x[0], {0, 2}, true), mean(x[0], {-1}),
                       var(x[0], {1}), std(x[0], {}, 0),        max(x[0]),
                       min(x[0])};
  });
  add_case("amax_prod_cumsum", {{3, 4, 5}}, [](In x) {
    const Tensor integers = to(mul(x[0], 10.0), kInt64);
    return std::vector{amax(x[0], {0, 2}),
                       amin(x[0], {1}, true),
                       prod(x[0]),
                       prod(x[0], 1),
                       cumsum(x[0], 2),
                       cumsum(x[0], 0, /*reverse=*/true),
                       to(cumsum(integers, 1), kFloat64)};
  });
  add_case("sum_of_product", {{3, 4, 5}, {3, 4, 5}}, [](In x) {
    return std::vector{sum_of_product(x[0], x[1], {0, 2}, true), sum_of_product(x[0], x[1])};
  });
  add_case("max_min_indices", {{4, 7}}, [](In x) {
    auto [max_values, max_indices] = max(x[0], 1);
    auto [min_values, min_indices] = min(x[0], 0, true);
    return std::vector{max_values,
                       to(max_indices, kFloat64),
                       min_values,
                       to(min_indices, kFloat64),
                       to(argmax(x[0]), kFloat64),
                       to(argmin(x[0], 1), kFloat64)};
  });
  add_case("softmax_family", {{5, 9}}, [](In x) {
    return std::vector{softmax(x[0], 1), log_softmax(x[0], 0), logsumexp(mul(x[0], 100.0), {1})};
  });
  add_case("norms", {{4, 6}}, [](In x) {
    return std::vector{norm(x[0]), norm(x[0], 1, {1}), norm(x[0], 3, {0}),
                       norm(x[0], std::numeric_limits<double>::infinity(), {1})};
  });
  add_case("matmul_forms", {{3}, {3, 4}, {2, 4, 3}, {4}}, [](In x) {
    return std::vector{matmul(x[0], x[0]),
                       matmul(x[0], x[1]),
                       matmul(x[2], x[1]),
                       matmul(x[1], x[3]),
                       matmul(x[2], t(select(x[2], 0, 0))),
                       matmul(t(x[1]), x[0])};
  });
  add_case("addmm_outer", {{4}, {3, 5}, {5, 4}}, [](In x) {
    return std::vector{addmm(x[0], x[1], x[2], 0.5, 2.0), outer(x[0], select(x[1], 1, 0))};
  });
  add_case("cat_stack_split", {{2, 3}, {4, 3}}, [](In x) {
    std::vector<Tensor> pieces = chunk(cat({x[0], x[1]}), 3);
    return std::vector{cat({x[0], x[1]}, 0), stack({x[0], x[0]}, 1), contiguous(pieces[1]), cat(unbind(x[1], 1), 0)};
  });
  add_case("index_ops", {{5, 4}, {2, 4}}, [](In x) {
    const Tensor rows = indices_like(x[0], {4, 0, 0, 2}, {4});
    const Tensor columns = indices_like(x[0], {3, 0, 0, 2}, {4});
    const Tensor picks = indices_like(x[0], {0, 3, 3, 1, 2, 2, 0, 0}, {2, 4});
    return std::vector{index_select(x[0], 0, rows), index_select(x[0], 1, columns), gather(x[0], 1, picks),
                       scatter_add(x[0], 1, picks, x[1]), scatter_add(x[0], 0, picks, x[1])};
  });
  add_case("masks", {{3, 4}, {3, 4}}, [](In x) {
    const Tensor mask = gt(x[0], x[1]);
    return std::vector{masked_fill(x[0], mask, -7.0), where(mask, x[0], x[1]),
                       to(one_hot(indices_like(x[0], {2, 0, 1}, {3}), 4), kFloat64)};
  });
  add_case("conv2d", {{2, 3, 9, 8}, {4, 3, 3, 2}, {4}}, [](In x) {
    return std::vector{conv2d(x[0], x[1], x[2]),
                       conv2d(x[0], x[1], {}, {.stride = {2, 1}, .padding = {1, 2}, .dilation = {2, 1}})};
  });
  add_case("conv2d_backward", {{2, 3, 9, 8}, {4, 3, 3, 2}, {2, 4, 7, 7}}, [](In x) {
    const Conv2dGrads all = conv2d_backward(x[2], x[0], x[1], {});
    const Conv2dGrads weight_and_bias = conv2d_backward(x[2], x[0], x[1], {.input = false});
    return std::vector{all.input, all.weight, all.bias, weight_and_bias.weight, weight_and_bias.bias};
  });
  add_case("pooling", {{2, 3, 7, 8}}, [](In x) {
    auto [pooled, indices] = max_pool2d(x[0], {.kernel_size = {3, 2}, .stride = {2, 2}, .padding = {1, 1}});
    auto [ceil_pooled, ceil_indices] = max_pool2d(x[0], {.kernel_size = {2, 3}, .stride = {2, 2}, .ceil_mode = true});
    return std::vector{pooled,
                       to(indices, kFloat64),
                       ceil_pooled,
                       to(ceil_indices, kFloat64),
                       avg_pool2d(x[0], {.kernel_size = {3, 3}, .padding = {1, 1}}),
                       avg_pool2d(x[0], {.kernel_size = {2, 3}, .padding = {1, 1}, .count_include_pad = false})};
  });
  // Overlapping windows with ties (signs), so that inputs gather several gradients. The second
  // input holds the outputs' gradients, cut to each pooling's output shape (at most 8x9).
  add_case("max_pool2d_backward", {{2, 3, 7, 8}, {2, 3, 8, 9}}, [](In x) {
    const Pool2dOptions overlapping{.kernel_size = {3, 2}, .stride = {1, 1}, .padding = {1, 1}};
    const Pool2dOptions halving{.kernel_size = {2, 2}};
    const auto backward = [&](const Pool2dOptions& options) {
      auto [pooled, indices] = max_pool2d(sign(x[0]), options);
      return max_pool2d_backward(narrow(narrow(x[1], 2, 0, pooled.size(2)), 3, 0, pooled.size(3)), indices,
                                 x[0].sizes(), options);
    };
    return std::vector{backward(overlapping), backward(halving)};
  });
  // Batch normalisation's fused kernels: channels of 540 elements (more than a block's threads,
  // in runs of 90) with an offset mean, and [N, C] input (runs of one element). Inputs: x, weight,
  // bias, the output's gradient, and the gradients of the backward's results (gg_*).
  for (DType dtype : {kFloat32, kFloat64}) {
    const std::string suffix = dtype == kFloat32 ? "_f32" : "_f64";
    const Shape image{6, 4, 10, 9}, channels{4};
    add_case(
        "batch_norm" + suffix, {image, channels, channels, image, image, channels, channels, {300, 4}},
        [](In x) {
          const Tensor input = add(x[0], 3.0), flat = mul(x[7], 2.0);
          const BatchNormOutputs affine = batch_norm(input, x[1], x[2], 1e-5);
          const BatchNormOutputs plain = batch_norm(flat, {}, {}, 1e-3);
          const BatchNormGrads grads = batch_norm_backward(x[3], input, x[1], affine.mean, affine.invstd);
          const BatchNormGrads bias_only =
              batch_norm_backward(x[3], input, {}, affine.mean, affine.invstd, {.input = false, .weight = false});
          const Tensor in_place = mul(contiguous(x[3]), 1.0);
          batch_norm_backward_(in_place, input, x[1], affine.mean, affine.invstd, {.weight = false, .bias = false});
          const BatchNormDoubleGrads second =
              batch_norm_double_backward(x[4], x[5], x[6], x[3], input, x[1], affine.mean, affine.invstd);
          const BatchNormDoubleGrads without_gg_input =
              batch_norm_double_backward({}, x[5], {}, x[3], input, {}, affine.mean, affine.invstd);
          return std::vector{affine.output,
                             affine.mean,
                             affine.var,
                             affine.invstd,
                             plain.output,
                             plain.mean,
                             plain.var,
                             plain.invstd,
                             grads.input,
                             grads.weight,
                             grads.bias,
                             bias_only.bias,
                             in_place,
                             second.grad_output,
                             second.input,
                             second.weight,
                             without_gg_input.grad_output,
                             without_gg_input.input};
        },
        dtype);
  }
  add_case("large_elementwise", {{1 << 18}, {1 << 18}}, [](In x) { return one(add(mul(x[0], x[1]), x[0])); });
  // Contiguous views at odd offsets and lengths: the vectorized path must fall back or finish the tail.
  add_case(
      "unaligned_contiguous", {{1003}},
      [](In x) {
        const Tensor shifted = narrow(x[0], 0, 1, 1001), unshifted = narrow(x[0], 0, 0, 1001);
        return std::vector{mul(shifted, unshifted), exp(shifted), add(unshifted, 1.0), to(gt(shifted, 0.0), kFloat32)};
      },
      kFloat32);
  add_case("large_reduction_inner", {{300, 1000}}, [](In x) {
    return std::vector{sum(x[0], {0}), max(x[0], 0).values};
  });
  // Few outputs over a long reduced dim take the two-pass path (Note [Split reductions]):
  // clamping makes ties across chunks, where the earliest position must still win, and NaN
  // must win wherever it sits.
  add_case(
      "split_reductions", {{4, 50000}, {20000, 3, 2}},
      [](In x) {
        const Tensor ties = clamp(x[0], -1.0, 1.0);
        auto [max_values, max_indices] = max(ties, 1);
        auto [nan_values, nan_indices] = max(masked_fill(x[0], gt(x[0], 3.0), std::nan("")), 1);
        return std::vector{sum(x[0], {1}),
                           sum(x[0]),
                           max_values,
                           to(max_indices, kFloat32),
                           to(argmin(ties), kFloat32),
                           nan_values,
                           to(nan_indices, kFloat32),
                           sum(x[1], {0}),
                           to(argmax(x[1], 0), kFloat32)};
      },
      kFloat32);
  // Half precision: CUDA's mixed-precision GEMM (cublasGemmStridedBatchedEx, float32
  // accumulation) and the widened ops against the CPU's float32 arithmetic rounded once.
  for (DType dtype : {kFloat16, kBFloat16}) {
    const std::string suffix = dtype == kFloat16 ? "_f16" : "_bf16";
    add_case(
        "half_matmul" + suffix, {{17, 33}, {33, 9}, {4, 9, 33}},
        [](In x) {
          return std::vector{matmul(x[0], x[1]), matmul(x[2], t(x[0])), matmul(t(x[1]), t(x[0])),
                             addmm(select(x[1], 0, 0), x[0], x[1], 0.5, 2.0)};
        },
        dtype);
    add_case(
        "half_ops" + suffix, {{6, 40}, {3, 2, 9, 9}, {4, 2, 3, 3}},
        [](In x) {
          return std::vector{add(x[0], mul(x[0], 0.5)),
                             exp(x[0]),
                             softmax(x[0], 1),
                             sum(x[0], {1}),
                             conv2d(x[1], x[2], {}, {.padding = {1, 1}}),
                             max_pool2d(x[1], {.kernel_size = {2, 2}}).values};
        },
        dtype);
  }
  return cases;
}

class CudaParity : public ::testing::TestWithParam<ParityCase> {};

TEST_P(CudaParity, MatchesCpu) {
  if (!cuda::is_available()) GTEST_SKIP() << "no CUDA device visible";
  const ParityCase& c = GetParam();
  manual_seed(1234);
  std::vector<Tensor> cpu_inputs, cuda_inputs;
  for (const Shape& shape : c.input_shapes) {
    cpu_inputs.push_back(randn(shape, {.dtype = c.dtype}));
    cuda_inputs.push_back(to(cpu_inputs.back(), Device::cuda(0)));
  }
  const std::vector<Tensor> expected = c.op(cpu_inputs);
  const std::vector<Tensor> actual = c.op(cuda_inputs);
  ASSERT_EQ(expected.size(), actual.size());
  // Half results: within two units in the last place (the sums may add in another order).
  const double tolerance = c.dtype == kFloat32    ? 1e-4
                           : c.dtype == kFloat16  ? std::ldexp(1.0, -9)
                           : c.dtype == kBFloat16 ? std::ldexp(1.0, -6)
                                                  : 1e-10;
  for (size_t i = 0; i < expected.size(); ++i) {
    EXPECT_EQ(actual[i].device(), Device::cuda(0)) << "output " << i;
    EXPECT_EQ(actual[i].sizes(), expected[i].sizes()) << "output " << i;
    EXPECT_EQ(actual[i].dtype(), expected[i].dtype()) << "output " << i;
    const Tensor back = to(actual[i], Device::cpu());
    EXPECT_TRUE(allclose(back, expected[i], tolerance, tolerance, /*equal_nan=*/true))
        << c.name << " output " << i << "\ncpu:  " << expected[i] << "\ncuda: " << back;
  }
}

INSTANTIATE_TEST_SUITE_P(EveryOp, CudaParity, ::testing::ValuesIn(all_cases()),
                         [](const ::testing::TestParamInfo<ParityCase>& info) { return info.param.name; });

TEST(CudaDevice, CreationAndRandomMatchTheCpu) {
  if (!cuda::is_available()) GTEST_SKIP() << "no CUDA device visible";
  const Device gpu = Device::cuda(0);
  EXPECT_TRUE(allclose(to(arange(0.0, 1.0, 0.125, {.device = gpu}), Device::cpu()), arange(0.0, 1.0, 0.125)));
  EXPECT_TRUE(equal(to(eye(3, 4, {.device = gpu}), Device::cpu()), eye(3, 4)));
  manual_seed(7);
  const Tensor on_cpu = randn({100});
  manual_seed(7);
  const Tensor on_gpu = randn({100}, {.device = gpu});
  EXPECT_TRUE(equal(to(on_gpu, Device::cpu()), on_cpu));
}

TEST(CudaDevice, CopiesRoundTripAndPrintTheDevice) {
  if (!cuda::is_available()) GTEST_SKIP() << "no CUDA device visible";
  const Tensor host = from_vector<double>({1, 2, 3, 4}, {2, 2});
  const Tensor device = to(host, Device::cuda(0));
  EXPECT_EQ(device.at<double>({1, 0}), 3.0);
  EXPECT_TRUE(equal(to(device, Device::cpu()), host));
  std::ostringstream out;
  out << device;
  EXPECT_THAT(out.str(), ::testing::HasSubstr("device=cuda:0"));
  EXPECT_ERROR_CONTAINS(add(host, device), "add", "one device", "cpu", "cuda:0");
  EXPECT_ERROR_CONTAINS(to(host, Device::cuda(cuda::device_count())), "cuda");
}

TEST(CudaDevice, WithoutCudaCreatingADeviceTensorFailsClearly) {
  if (cuda::is_available()) GTEST_SKIP() << "a CUDA device is visible";
  EXPECT_ERROR_CONTAINS(zeros({2}, {.device = Device::cuda(0)}), "CUDA");
}

}  // namespace
}  // namespace distgrad
