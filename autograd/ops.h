// The differentiable ops: the user-facing tensor API.
//
// Each function runs the core kernel of the same name (core/ops.h, namespace distgrad::untracked)
// and, when grad mode is on and an input requires grad, records its backward formula
// (autograd/function.h). Formulas are built from these same functions, so gradients can be
// differentiated again (Note [Higher order]). Semantics, shapes and errors are core's: see the
// core headers for each op; what autograd adds is noted here.
//
//   namespace dg = distgrad;
//   dg::Tensor w = dg::randn({3, 1}, {.dtype = dg::kFloat64, .requires_grad = true});
//   dg::Tensor loss = dg::mean(dg::pow(dg::matmul(x, w) - y, 2.0));
//   loss.backward();                      // w.grad() now holds d loss / d w
//
// Ops that return integer or bool tensors (comparisons, argmax, one_hot, ...) are not
// differentiable and record nothing. In-place ops refuse (with an error) to overwrite a leaf
// that requires grad or a view of a tensor that requires grad while grad mode is on; on other
// tensors that require grad they are recorded like the out-of-place op.
#pragma once

#include <optional>
#include <vector>

#include "core/batch_norm.h"
#include "core/nn_ops.h"
#include "core/reduction.h"
#include "core/tensor.h"

namespace distgrad {

// Options for a creation function that make the new tensor a leaf that requires grad:
// `dg::rand({3, 3}, dg::requires_grad())`, or `{.dtype = kFloat64, .requires_grad = true}`.
TensorOptions requires_grad(TensorOptions options = {});

// --- elementwise (NumPy broadcasting; a scalar is converted to the tensor's dtype)
Tensor add(const Tensor& a, const Tensor& b);
Tensor add(const Tensor& a, double b);
Tensor sub(const Tensor& a, const Tensor& b);
Tensor sub(const Tensor& a, double b);
Tensor sub(double a, const Tensor& b);
Tensor mul(const Tensor& a, const Tensor& b);
Tensor mul(const Tensor& a, double b);
Tensor div(const Tensor& a, const Tensor& b);
Tensor div(const Tensor& a, double b);
Tensor div(double a, const Tensor& b);
Tensor pow(const Tensor& a, const Tensor& b);
Tensor pow(const Tensor& a, double exponent);
Tensor pow(double base, const Tensor& exponent);
// Where a == b the gradient is split equally between them (as in PyTorch).
Tensor maximum(const Tensor& a, const Tensor& b);
Tensor minimum(const Tensor& a, const Tensor& b);
Tensor neg(const Tensor& t);
Tensor abs(const Tensor& t);
Tensor sign(const Tensor& t);
Tensor exp(const Tensor& t);
Tensor expm1(const Tensor& t);
Tensor log(const Tensor& t);
Tensor log1p(const Tensor& t);
Tensor sqrt(const Tensor& t);
Tensor rsqrt(const Tensor& t);
Tensor sin(const Tensor& t);
Tensor cos(const Tensor& t);
Tensor tanh(const Tensor& t);
Tensor sigmoid(const Tensor& t);
Tensor relu(const Tensor& t);
// ReLU's backward from its output (differentiable in grad, for double backward).
Tensor relu_backward(const Tensor& grad, const Tensor& result);
Tensor gelu(const Tensor& t);
// torch.nn.functional's activations with PyTorch's formulas and derivatives of every order
// (autograd/ops/activation.cc; floating tensors only):
//   silu(x) = x * sigmoid(x)
//   leaky_relu(x) = x where x > 0, else negative_slope * x
//   elu(x) = x where x > 0, else alpha * expm1(x)
//   softplus(x) = log1p(exp(beta * x)) / beta, or x where beta * x > threshold
//   logsigmoid(x) = min(x, 0) - log1p(exp(-|x|))  (log(sigmoid(x)), stable for any x)
//   hardtanh(x) = clamp(x, min_val, max_val), gradient 0 at the bounds; min_val < max_val
Tensor silu(const Tensor& t);
Tensor leaky_relu(const Tensor& t, double negative_slope = 0.01);
Tensor elu(const Tensor& t, double alpha = 1.0);
Tensor softplus(const Tensor& t, double beta = 1.0, double threshold = 20.0);
Tensor logsigmoid(const Tensor& t);
Tensor hardtanh(const Tensor& t, double min_val = -1.0, double max_val = 1.0);
Tensor erf(const Tensor& t);
// The gradient is passed where min <= t <= max, zero elsewhere.
Tensor clamp(const Tensor& t, std::optional<double> min, std::optional<double> max);

// --- comparisons and logical ops (bool results, not differentiable)
Tensor eq(const Tensor& a, const Tensor& b);
Tensor eq(const Tensor& a, double b);
Tensor ne(const Tensor& a, const Tensor& b);
Tensor ne(const Tensor& a, double b);
Tensor lt(const Tensor& a, const Tensor& b);
Tensor lt(const Tensor& a, double b);
Tensor le(const Tensor& a, const Tensor& b);
Tensor le(const Tensor& a, double b);
Tensor gt(const Tensor& a, const Tensor& b);
Tensor gt(const Tensor& a, double b);
Tensor ge(const Tensor& a, const Tensor& b);
Tensor ge(const Tensor& a, double b);
Tensor logical_not(const Tensor& t);
Tensor logical_and(const Tensor& a, const Tensor& b);
Tensor logical_or(const Tensor& a, const Tensor& b);

// --- in-place forms; each returns self
const Tensor& add_(const Tensor& self, const Tensor& other);
const Tensor& add_(const Tensor& self, double other);
const Tensor& sub_(const Tensor& self, const Tensor& other);
const Tensor& sub_(const Tensor& self, double other);
const Tensor& mul_(const Tensor& self, const Tensor& other);
const Tensor& mul_(const Tensor& self, double other);
const Tensor& div_(const Tensor& self, const Tensor& other);
const Tensor& div_(const Tensor& self, double other);
const Tensor& neg_(const Tensor& self);
const Tensor& clamp_(const Tensor& self, std::optional<double> min, std::optional<double> max);
// Writes `src` (broadcast, converted to self's dtype) into self; differentiable in src.
const Tensor& copy_(const Tensor& self, const Tensor& src);
const Tensor& fill_(const Tensor& self, double value);
const Tensor& zero_(const Tensor& self);

// --- operators (found by argument-dependent lookup on distgrad::Tensor)
Tensor operator+(const Tensor& a, const Tensor& b);
Tensor operator+(const Tensor& a, double b);
Tensor operator+(double a, const Tensor& b);
Tensor operator-(const Tensor& a, const Tensor& b);
Tensor operator-(const Tensor& a, double b);
Tensor operator-(double a, const Tensor& b);
Tensor operator*(const Tensor& a, const Tensor& b);
Tensor operator*(const Tensor& a, double b);
Tensor operator*(double a, const Tensor& b);
Tensor operator/(const Tensor& a, const Tensor& b);
Tensor operator/(const Tensor& a, double b);
Tensor operator/(double a, const Tensor& b);
Tensor operator-(const Tensor& t);
Tensor operator<(const Tensor& a, const Tensor& b);
Tensor operator<(const Tensor& a, double b);
Tensor operator<=(const Tensor& a, const Tensor& b);
Tensor operator<=(const Tensor& a, double b);
Tensor operator>(const Tensor& a, const Tensor& b);
Tensor operator>(const Tensor& a, double b);
Tensor operator>=(const Tensor& a, const Tensor& b);
Tensor operator>=(const Tensor& a, double b);
const Tensor& operator+=(const Tensor& self, const Tensor& other);
const Tensor& operator+=(const Tensor& self, double other);
const Tensor& operator-=(const Tensor& self, const Tensor& other);
const Tensor& operator-=(const Tensor& self, double other);
const Tensor& operator*=(const Tensor& self, const Tensor& other);
const Tensor& operator*=(const Tensor& self, double other);
const Tensor& operator/=(const Tensor& self, const Tensor& other);
const Tensor& operator/=(const Tensor& self, double other);

// --- copies and conversions
Tensor clone(const Tensor& t);
Tensor contiguous(const Tensor& t);
Tensor to(const Tensor& t, Device device);
Tensor to(const Tensor& t, DType dtype);
// A tensor sharing t's data without autograd history (t.detach()).
Tensor detach(const Tensor& t);

// --- views (share storage; gradients flow back into the viewed tensor)
Tensor view(const Tensor& t, const Shape& sizes);
Tensor reshape(const Tensor& t, const Shape& sizes);
Tensor flatten(const Tensor& t, int64_t start_dim = 0, int64_t end_dim = -1);
Tensor squeeze(const Tensor& t);
Tensor squeeze(const Tensor& t, int64_t dim);
Tensor unsqueeze(const Tensor& t, int64_t dim);
Tensor transpose(const Tensor& t, int64_t dim0, int64_t dim1);
Tensor permute(const Tensor& t, const Shape& dims);
Tensor t(const Tensor& t);
Tensor expand(const Tensor& t, const Shape& sizes);
Tensor slice(const Tensor& t, int64_t dim, int64_t start, int64_t end, int64_t step = 1);
Tensor narrow(const Tensor& t, int64_t dim, int64_t start, int64_t length);
Tensor select(const Tensor& t, int64_t dim, int64_t index);
std::vector<Tensor> unbind(const Tensor& t, int64_t dim = 0);
std::vector<Tensor> split(const Tensor& t, int64_t split_size, int64_t dim = 0);
std::vector<Tensor> split_with_sizes(const Tensor& t, const Shape& split_sizes, int64_t dim = 0);
std::vector<Tensor> chunk(const Tensor& t, int64_t chunks, int64_t dim = 0);
// Sums `t` over the dims it was broadcast along so that it has shape `sizes` (the gradient
// of expand; `t` must be expandable from `sizes`).
Tensor sum_to(const Tensor& t, const Shape& sizes);

// --- reductions
Tensor sum(const Tensor& t, const Shape& dims = {}, bool keepdim = false);
Tensor mean(const Tensor& t, const Shape& dims = {}, bool keepdim = false);
Tensor var(const Tensor& t, const Shape& dims = {}, int64_t correction = 1, bool keepdim = false);
Tensor std(const Tensor& t, const Shape& dims = {}, int64_t correction = 1, bool keepdim = false);
// The gradient of the whole-tensor max/min is split equally among the elements equal to it;
// along a dim it goes to the position in `indices`.
Tensor max(const Tensor& t);
ValuesIndices max(const Tensor& t, int64_t dim, bool keepdim = false);
Tensor min(const Tensor& t);
ValuesIndices min(const Tensor& t, int64_t dim, bool keepdim = false);
// The largest / smallest value over dims (all when empty), torch.amax / amin: the gradient is
// split equally among the elements equal to it.
Tensor amax(const Tensor& t, const Shape& dims = {}, bool keepdim = false);
Tensor amin(const Tensor& t, const Shape& dims = {}, bool keepdim = false);
// The product of every element, or along one dim (torch.prod); exact gradients with zeros too.
Tensor prod(const Tensor& t);
Tensor prod(const Tensor& t, int64_t dim, bool keepdim = false);
// Running sums along dim (torch.cumsum); bool and int64 give int64.
Tensor cumsum(const Tensor& t, int64_t dim);
Tensor argmax(const Tensor& t);
Tensor argmax(const Tensor& t, int64_t dim, bool keepdim = false);
Tensor argmin(const Tensor& t);
Tensor argmin(const Tensor& t, int64_t dim, bool keepdim = false);
Tensor logsumexp(const Tensor& t, const Shape& dims, bool keepdim = false);
Tensor softmax(const Tensor& t, int64_t dim);
Tensor log_softmax(const Tensor& t, int64_t dim);
// The gradient at a zero norm is zero (not NaN), as in PyTorch.
Tensor norm(const Tensor& t, double p = 2, const Shape& dims = {}, bool keepdim = false);

// --- indexing and joining
Tensor cat(const std::vector<Tensor>& tensors, int64_t dim = 0);
Tensor stack(const std::vector<Tensor>& tensors, int64_t dim = 0);
Tensor index_select(const Tensor& t, int64_t dim, const Tensor& index);
Tensor gather(const Tensor& t, int64_t dim, const Tensor& index);
Tensor scatter_add(const Tensor& self, int64_t dim, const Tensor& index, const Tensor& src);
Tensor masked_fill(const Tensor& t, const Tensor& mask, double value);
Tensor where(const Tensor& condition, const Tensor& a, const Tensor& b);
Tensor one_hot(const Tensor& indices, int64_t num_classes = -1, DType dtype = kInt64);

// --- linear algebra
Tensor matmul(const Tensor& a, const Tensor& b);
Tensor addmm(const Tensor& bias, const Tensor& a, const Tensor& b, double beta = 1, double alpha = 1);
Tensor outer(const Tensor& a, const Tensor& b);

// --- batch normalisation with the batch's statistics (training mode), differentiable to any order
// in input, weight and bias: the fused untracked::batch_norm where the device has it, else composed of
// differentiable ops. mean, var and invstd ([C]) are returned without history.
BatchNormOutputs batch_norm(const Tensor& input, const Tensor& weight, const Tensor& bias, double eps);
// batch_norm's gradients (untracked::batch_norm_backward), differentiable in grad_output, input and
// weight: batch_norm's own backward. mean and invstd are those batch_norm returned for input.
BatchNormGrads batch_norm_backward(const Tensor& grad_output, const Tensor& input, const Tensor& weight,
                                   const Tensor& mean, const Tensor& invstd, double eps,
                                   const BatchNormGradsNeeded& needed);

// --- convolution and pooling (NCHW or unbatched CHW)
Tensor conv2d(const Tensor& input, const Tensor& weight, const Tensor& bias = {}, const Conv2dOptions& options = {});
// conv2d's input and weight gradients (untracked::conv2d_input_grad / conv2d_weight_grad),
// differentiable in both of their tensors.
Tensor conv2d_input_grad(const Tensor& grad_output, const Tensor& weight, const Shape& input_sizes,
                         const Conv2dOptions& options = {});
Tensor conv2d_weight_grad(const Tensor& grad_output, const Tensor& input, const Shape& weight_sizes,
                          const Conv2dOptions& options = {});
// conv2d's input, weight and bias gradients, those `needed`, at once (untracked::conv2d_backward: the
// work they share done once), differentiable in its three tensors: conv2d's own backward.
Conv2dGrads conv2d_backward(const Tensor& grad_output, const Tensor& input, const Tensor& weight,
                            const Conv2dGradsNeeded& needed, const Conv2dOptions& options = {});
ValuesIndices max_pool2d(const Tensor& input, const Pool2dOptions& options);
// max_pool2d's backward (differentiable in grad_output, for double backward).
Tensor max_pool2d_backward(const Tensor& grad_output, const Tensor& indices, const Shape& input_sizes,
                           const Pool2dOptions& options);
Tensor avg_pool2d(const Tensor& input, const Pool2dOptions& options);
Tensor im2col(const Tensor& input, const Im2colOptions& options);
Tensor col2im(const Tensor& columns, std::array<int64_t, 2> output_size, const Im2colOptions& options);

}  // namespace distgrad
