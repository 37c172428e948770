#include "core/linalg.h"

#include <optional>

#include "core/copy.h"
#include "core/creation.h"
#include "core/elementwise.h"
#include "core/kernels.h"
#include "core/op_checks.h"
#include "core/views.h"

namespace distgrad::untracked {
namespace {

// A batch of matrices [batch, rows, cols] as gemm reads them: row-major, or stored
// transposed, with a leading dimension and a batch stride (0 when broadcast).
struct GemmOperand {
  Tensor tensor;  // keeps the memory alive
  bool transposed = false;
  int64_t ld = 0, batch_stride = 0;
};

// Uses `m` ([batch, rows, cols]) in place when its strides suit BLAS, else a contiguous copy.
GemmOperand gemm_operand(const Tensor& m) {
  const int64_t rows = m.size(1), cols = m.size(2);
  const int64_t row_stride = m.stride(1), col_stride = m.stride(2);
  const int64_t batch_stride = m.size(0) == 1 ? 0 : m.stride(0);
  if ((cols == 1 || col_stride == 1) && (rows == 1 || row_stride >= std::max<int64_t>(cols, 1))) {
    return {m, false, rows == 1 ? std::max<int64_t>(cols, 1) : row_stride, batch_stride};
  }
  if ((rows == 1 || row_stride == 1) && (cols == 1 || col_stride >= std::max<int64_t>(rows, 1))) {
    return {m, true, cols == 1 ? std::max<int64_t>(rows, 1) : col_stride, batch_stride};
  }
  const Tensor copy = contiguous(m);
  return {copy, false, std::max<int64_t>(cols, 1), m.size(0) == 1 ? 0 : rows * cols};
}

// Batched product of [Ba, m, k] and [Bb, k, n] (each batch 1 or equal) into [B, m, n], with
// out = alpha * a @ b + beta * out when `out` is given (beta = 0 ignores its contents).
Tensor batched_gemm(const Tensor& a, const Tensor& b, std::optional<Tensor> out = std::nullopt, double beta = 0,
                    double alpha = 1) {
  const int64_t batch = std::max(a.size(0), b.size(0));
  const int64_t m = a.size(1), k = a.size(2), n = b.size(2);
  Tensor c = out ? *out : empty({batch, m, n}, {.dtype = a.dtype(), .device = a.device()});
  if (batch == 0 || m == 0 || n == 0) return c;
  if (k == 0) return beta == 0 ? zero_(c) : mul_(c, beta);
  const GemmOperand lhs = gemm_operand(a), rhs = gemm_operand(b);
  kernels::GemmArgs args;
  args.device = a.device();
  args.dtype = a.dtype();
  args.batch = batch;
  args.m = m;
  args.n = n;
  args.k = k;
  args.transpose_a = lhs.transposed;
  args.transpose_b = rhs.transposed;
  args.alpha = alpha;
  args.beta = beta;
  args.a = lhs.tensor.data_ptr();
  args.lda = lhs.ld;
  args.stride_a = lhs.batch_stride;
  args.b = rhs.tensor.data_ptr();
  args.ldb = rhs.ld;
  args.stride_b = rhs.batch_stride;
  args.c = c.data_ptr();
  args.ldc = n;
  args.stride_c = m * n;
  kernels::kernels_for(a.device()).gemm(args);
  return c;
}

void check_matmul_operands(const char* op, const Tensor& a, const Tensor& b) {
  detail::check_same_dtype_and_device(op, a, b);
  detail::check_floating(op, a);
}

}  // namespace

Tensor matmul(const Tensor& a, const Tensor& b) {
  check_matmul_operands("matmul", a, b);
  DISTGRAD_CHECK(a.dim() >= 1 && b.dim() >= 1, "matmul: expected operands of at least 1 dim, found shapes ",
                 shape_str(a.sizes()), " and ", shape_str(b.sizes()));
  // Vectors become a row (left) or a column (right), removed again from the result.
  const Tensor lhs = a.dim() == 1 ? unsqueeze(a, 0) : a;
  const Tensor rhs = b.dim() == 1 ? unsqueeze(b, 1) : b;
  const int64_t m = lhs.size(-2), k = lhs.size(-1), n = rhs.size(-1);
  DISTGRAD_CHECK(rhs.size(-2) == k, "matmul: shapes ", shape_str(a.sizes()), " and ", shape_str(b.sizes()),
                 " cannot be multiplied (", k, " != ", rhs.size(-2), ")");
  const Shape lhs_batch(lhs.sizes().begin(), lhs.sizes().end() - 2);
  const Shape rhs_batch(rhs.sizes().begin(), rhs.sizes().end() - 2);
  const Shape batch = broadcast_shapes(lhs_batch, rhs_batch, "matmul");
  const int64_t batch_numel = shape_numel(batch);
  auto as_batched = [&](const Tensor& t, const Shape& own_batch, int64_t rows, int64_t cols) {
    if (own_batch.empty()) return unsqueeze(t, 0);  // broadcast through a batch stride of 0
    Shape full = batch;
    full.push_back(rows);
    full.push_back(cols);
    return reshape(expand(t, full), {batch_numel, rows, cols});
  };
  const Tensor product = batched_gemm(as_batched(lhs, lhs_batch, m, k), as_batched(rhs, rhs_batch, k, n));
  Shape sizes = batch;
  if (a.dim() > 1) sizes.push_back(m);
  if (b.dim() > 1) sizes.push_back(n);
  return reshape(product, sizes);
}

Tensor addmm(const Tensor& bias, const Tensor& a, const Tensor& b, double beta, double alpha) {
  check_matmul_operands("addmm", a, b);
  detail::check_same_dtype_and_device("addmm", bias, a);
  DISTGRAD_CHECK(a.dim() == 2 && b.dim() == 2, "addmm: expected 2-D matrices, found shapes ", shape_str(a.sizes()),
                 " and ", shape_str(b.sizes()));
  DISTGRAD_CHECK(a.size(1) == b.size(0), "addmm: shapes ", shape_str(a.sizes()), " and ", shape_str(b.sizes()),
                 " cannot be multiplied (", a.size(1), " != ", b.size(0), ")");
  const Shape sizes{a.size(0), b.size(1)};
  Tensor out = empty({1, a.size(0), b.size(1)}, {.dtype = a.dtype(), .device = a.device()});
  if (beta != 0) copy_(out, expand(bias, sizes));
  batched_gemm(unsqueeze(a, 0), unsqueeze(b, 0), out, beta, alpha);
  return reshape(out, sizes);
}

Tensor outer(const Tensor& a, const Tensor& b) {
  detail::check_same_dtype_and_device("outer", a, b);
  DISTGRAD_CHECK(a.dim() == 1 && b.dim() == 1, "outer: expected two 1-D tensors, found shapes ", shape_str(a.sizes()),
                 " and ", shape_str(b.sizes()));
  return mul(unsqueeze(a, 1), unsqueeze(b, 0));
}

}  // namespace distgrad::untracked
