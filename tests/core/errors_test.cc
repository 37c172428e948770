// Cross-cutting tests of error messages: each names the op and says what it expected and what
// it found (dtypes, shapes, devices, dims).
#include <stdexcept>

#include "core/cuda.h"
#include "tests/core/test_util.h"

namespace distgrad {
namespace {

TEST(Errors, AreDistgradErrorsDerivedFromRuntimeError) {
  EXPECT_THROW(untracked::add(zeros({2}), zeros({3})), Error);
  EXPECT_THROW(untracked::add(zeros({2}), zeros({3})), std::runtime_error);
}

TEST(Errors, DtypeMismatchNamesTheOpAndBothOperands) {
  EXPECT_ERROR_CONTAINS(untracked::mul(zeros({2, 2}, {.dtype = kInt64}), zeros({2, 2})),
                        "mul: expected tensors of one dtype (or two floating ones), found a int64 tensor of shape "
                        "[2, 2] on cpu and a float32 tensor of shape [2, 2] on cpu",
                        "distgrad::to(t, dtype)");
  EXPECT_ERROR_CONTAINS(untracked::eq(zeros({1}, {.dtype = kBool}), zeros({1})), "eq: expected tensors of one dtype",
                        "bool tensor of shape [1]");
  EXPECT_ERROR_CONTAINS(untracked::add_(zeros({2}, {.dtype = kInt64}), zeros({2}, {.dtype = kFloat64})),
                        "add_: expected tensors of one dtype");
}

TEST(Errors, BroadcastFailureNamesBothShapes) {
  EXPECT_ERROR_CONTAINS(untracked::add(zeros({2, 3}), zeros({4})),
                        "add: shapes [2, 3] and [4] cannot be broadcast together (dimension 1: 3 vs 4)");
  EXPECT_ERROR_CONTAINS(untracked::maximum(zeros({5, 1, 3}), zeros({2, 4, 1})),
                        "maximum: shapes [5, 1, 3] and [2, 4, 1] cannot be broadcast together (dimension 0: 5 vs 2)");
  EXPECT_ERROR_CONTAINS(untracked::lt(zeros({2}), zeros({3})), "lt: shapes [2] and [3] cannot be broadcast together");
}

TEST(Errors, DeviceMismatchIsReported) {
  if (!cuda::is_available()) {
    // Without a device, creating a CUDA tensor is itself the error, and it says why.
    EXPECT_ERROR_CONTAINS(zeros({2}, {.device = Device::cuda()}), "cuda:0", "CUDA");
    EXPECT_ERROR_CONTAINS(untracked::to(zeros({2}), Device::cuda()), "CUDA");
    return;
  }
  const Tensor on_cpu = zeros({2});
  const Tensor on_gpu = zeros({2}, {.device = Device::cuda()});
  EXPECT_ERROR_CONTAINS(untracked::add(on_cpu, on_gpu),
                        "add: expected both tensors on one device, found a float32 tensor of shape [2] on cpu and a "
                        "float32 tensor of shape [2] on cuda:0");
  EXPECT_ERROR_CONTAINS(untracked::matmul(on_gpu, on_cpu), "matmul: expected both tensors on one device", "on cuda:0",
                        "on cpu");
  EXPECT_ERROR_CONTAINS(untracked::cat({on_cpu, on_gpu}), "cat: expected both tensors on one device");
}

TEST(Errors, IntegerDivisionIsRejected) {
  const Tensor a = from_vector<int64_t>({4, 6});
  EXPECT_ERROR_CONTAINS(untracked::div(a, a),
                        "div: expected a floating tensor, found a int64 tensor of shape [2] on cpu",
                        "integer division is not supported");
  EXPECT_ERROR_CONTAINS(untracked::div(a, 2.0), "div:", "integer division");
  EXPECT_ERROR_CONTAINS(untracked::div_(a, a), "div_:", "integer division");
  EXPECT_ERROR_CONTAINS(untracked::div(1.0, a), "div:", "integer division");
}

TEST(Errors, FloatingOnlyOpsRejectInt64) {
  const Tensor a = from_vector<int64_t>({1, 2});
  const char* found = "expected a floating tensor, found a int64 tensor of shape [2] on cpu";
  EXPECT_ERROR_CONTAINS(untracked::exp(a), "exp: ", found);
  EXPECT_ERROR_CONTAINS(untracked::log(a), "log: ", found);
  EXPECT_ERROR_CONTAINS(untracked::sqrt(a), "sqrt: ", found);
  EXPECT_ERROR_CONTAINS(untracked::tanh(a), "tanh: ", found);
  EXPECT_ERROR_CONTAINS(untracked::sigmoid(a), "sigmoid: ", found);
  EXPECT_ERROR_CONTAINS(untracked::gelu(a), "gelu: ", found);
  EXPECT_ERROR_CONTAINS(untracked::erf(a), "erf: ", found);
  EXPECT_ERROR_CONTAINS(untracked::mean(a), "mean: ", found);
  EXPECT_ERROR_CONTAINS(untracked::var(a), "var: ", found);
  EXPECT_ERROR_CONTAINS(untracked::softmax(a, 0), "softmax: ", found);
  EXPECT_ERROR_CONTAINS(untracked::logsumexp(a, {0}), "logsumexp: ", found);
  EXPECT_ERROR_CONTAINS(untracked::norm(a), "norm: ", found);
  EXPECT_ERROR_CONTAINS(untracked::matmul(a, a), "matmul: ", found);
}

TEST(Errors, OnlyDivisionMentionsIntegerDivision) {
  try {
    untracked::exp(from_vector<int64_t>({1}));
    ADD_FAILURE() << "expected distgrad::Error from exp of an int64 tensor";
  } catch (const Error& error) {
    EXPECT_THAT(error.what(), ::testing::Not(::testing::HasSubstr("division")));
  }
}

TEST(Errors, NumericOpsRejectBool) {
  const Tensor b = from_vector<bool>({true, false});
  const char* found = "expected a numeric tensor, found a bool tensor of shape [2] on cpu";
  EXPECT_ERROR_CONTAINS(untracked::add(b, b), "add: ", found);
  EXPECT_ERROR_CONTAINS(untracked::sub(b, 1.0), "sub: ", found);
  EXPECT_ERROR_CONTAINS(untracked::neg(b), "neg: ", found);
  EXPECT_ERROR_CONTAINS(untracked::abs(b), "abs: ", found);
  EXPECT_ERROR_CONTAINS(untracked::lt(b, b), "lt: ", found);
  EXPECT_ERROR_CONTAINS(untracked::maximum(b, b), "maximum: ", found);
  EXPECT_ERROR_CONTAINS(untracked::max(b), "max: ", found);
  EXPECT_ERROR_CONTAINS(untracked::clamp_(b, 0.0, 1.0), "clamp_: ", found);
}

TEST(Errors, LogicalOpsRejectNonBool) {
  const Tensor f = zeros({2});
  EXPECT_ERROR_CONTAINS(untracked::logical_and(f, f),
                        "logical_and: expected a bool tensor, found a float32 tensor of shape [2]");
  EXPECT_ERROR_CONTAINS(untracked::logical_or(f, f), "logical_or: expected a bool tensor, found a float32 tensor");
  EXPECT_ERROR_CONTAINS(untracked::logical_not(zeros({3}, {.dtype = kInt64})),
                        "logical_not: expected a bool tensor, found a int64 tensor of shape [3]");
  EXPECT_ERROR_CONTAINS(untracked::all(f), "all: expected a bool tensor");
}

TEST(Errors, OutOfRangeDimsNameTheValidRange) {
  const Tensor m = zeros({2, 3});
  EXPECT_ERROR_CONTAINS(untracked::sum(m, {2}),
                        "sum: dimension 2 is out of range for a 2-D tensor (expected a value in [-2, 1])");
  EXPECT_ERROR_CONTAINS(untracked::sum(m, {-3}),
                        "sum: dimension -3 is out of range for a 2-D tensor (expected a value in [-2, 1])");
  EXPECT_ERROR_CONTAINS(untracked::transpose(m, 0, 5), "transpose: dimension 5 is out of range", "[-2, 1]");
  EXPECT_ERROR_CONTAINS(untracked::softmax(m, 2), "dimension 2 is out of range", "[-2, 1]");
  EXPECT_ERROR_CONTAINS(untracked::cat({m, m}, -3), "cat: dimension -3 is out of range", "[-2, 1]");
  EXPECT_ERROR_CONTAINS(untracked::unsqueeze(m, 4), "unsqueeze: dimension 4 is out of range for a 3-D tensor",
                        "[-3, 2]");
  EXPECT_ERROR_CONTAINS(untracked::index_select(m, 2, from_vector<int64_t>({0})),
                        "index_select: dimension 2 is out of range");
  EXPECT_ERROR_CONTAINS(m.size(2), "size: dimension 2 is out of range");
  EXPECT_ERROR_CONTAINS(untracked::sum(scalar_tensor(1), {1}), "sum: dimension 1 is out of range for a 0-D tensor",
                        "[-1, 0]");
}

TEST(Errors, UndefinedTensorsAreNamed) {
  const Tensor undefined;
  EXPECT_ERROR_CONTAINS(untracked::add(undefined, zeros({1})), "add: expected a defined tensor", "undefined");
  EXPECT_ERROR_CONTAINS(untracked::exp(undefined), "exp: expected a defined tensor");
  EXPECT_ERROR_CONTAINS(untracked::sum(undefined), "sum: expected a defined tensor");
  EXPECT_ERROR_CONTAINS(untracked::view(undefined, {1}), "view: expected a defined tensor");
  EXPECT_ERROR_CONTAINS(untracked::matmul(zeros({1}), undefined), "matmul: expected a defined tensor");
}

}  // namespace
}  // namespace distgrad
