// Differentiable batch normalisation, convolution and pooling (autograd/ops.h).
//
// Every backward formula here is made of differentiable ops, so it can be differentiated again:
// the second-order MAML of a conv net needs exactly that. conv2d's gradients are two ops of their
// own whose derivatives are conv2d and themselves (see conv2d_input_grad); avg_pool2d's go
// through im2col and its adjoint col2im, each the other's gradient. batch_norm's gradients are an
// op of their own too, whose derivatives are composed of differentiable ops.
#include <array>

#include "autograd/autocast.h"
#include "autograd/function.h"
#include "autograd/ops.h"
#include "core/ops.h"

namespace distgrad {

using autograd::BackwardContext;
using autograd::record;
using autograd::TensorList;

namespace {

// The dims batch normalisation's statistics reduce (all but the channels, dim 1), and the shape
// its per-channel tensors broadcast as ([1, C, 1, ...]), for input of `input`'s rank.
Shape statistics_dims(const Tensor& input) {
  Shape dims = {0};
  for (int64_t d = 2; d < input.dim(); ++d) dims.push_back(d);
  return dims;
}
Shape channel_shape(const Tensor& input) {
  Shape shape(input.dim(), 1);
  shape[1] = input.size(1);
  return shape;
}

// untracked::batch_norm_double_backward composed of differentiable ops (the formulas of Note [Fused
// batch normalisation] in core/batch_norm.cc), the statistics computed again from input, so that
// the result can be differentiated again: the third order and beyond.
TensorList batch_norm_double_backward(const Tensor& gg_input, const Tensor& gg_weight, const Tensor& gg_bias,
                                      const Tensor& grad_output, const Tensor& input, const Tensor& weight, double eps,
                                      const std::array<bool, 3>& needed) {
  const Shape dims = statistics_dims(input), per_channel = channel_shape(input);
  const double count = static_cast<double>(input.numel() / input.size(1));
  const auto channel_mean = [&dims](const Tensor& t) { return distgrad::mean(t, dims, /*keepdim=*/true); };
  const Tensor centered = input - channel_mean(input);
  const Tensor invstd = rsqrt(channel_mean(centered * centered) + eps);
  const Tensor xhat = centered * invstd;
  const Tensor scale = weight.defined() ? reshape(weight, per_channel) * invstd : invstd;
  const Tensor g_centered = grad_output - channel_mean(grad_output);
  const Tensor r = channel_mean(grad_output * xhat);
  Tensor d_grad_output, d_input, d_weight;
  const auto add_to = [](Tensor& total, const Tensor& part) { total = total.defined() ? total + part : part; };
  if (gg_input.defined()) {
    const Tensor gg_centered = gg_input - channel_mean(gg_input);
    const Tensor q = channel_mean(gg_input * xhat), p = channel_mean(gg_input * g_centered);
    if (needed[0]) add_to(d_grad_output, scale * (gg_centered - xhat * q));
    if (needed[1]) add_to(d_input, scale * invstd * (xhat * (3.0 * r * q - p) - q * g_centered - r * gg_centered));
    if (needed[2] && weight.defined()) d_weight = reshape(invstd * (p - r * q) * count, weight.sizes());
  }
  if (gg_weight.defined()) {
    const Tensor gg_scale = reshape(gg_weight, per_channel);
    if (needed[0]) add_to(d_grad_output, gg_scale * xhat);
    if (needed[1]) add_to(d_input, gg_scale * invstd * (g_centered - xhat * r));
  }
  if (gg_bias.defined() && needed[0]) add_to(d_grad_output, expand(reshape(gg_bias, per_channel), input.sizes()));
  return {d_grad_output, d_input, d_weight};
}

}  // namespace

BatchNormOutputs batch_norm(const Tensor& input, const Tensor& weight, const Tensor& bias, double eps) {
  if (autograd::casts_to_float32({&input, &weight, &bias}))
    return batch_norm(autograd::autocast_to_float32(input), autograd::autocast_to_float32(weight),
                      autograd::autocast_to_float32(bias), eps);
  BatchNormOutputs result = untracked::batch_norm(input, weight, bias, eps);  // checks every argument
  if (auto node =
          record("BatchNormBackward", {&input, &weight, &bias}, {&result.output}, [eps](const BackwardContext& ctx) {
            const Tensor &input = ctx.saved[0], &weight = ctx.saved[1], &mean = ctx.saved[2], &invstd = ctx.saved[3];
            const BatchNormGradsNeeded needed{.input = ctx.needs(0), .weight = ctx.needs(1), .bias = ctx.needs(2)};
            const Tensor reusable = ctx.take_reusable_grad(0);
            const BatchNormGrads grads =
                reusable.defined()
                    ? untracked::batch_norm_backward_(reusable, input, weight, mean, invstd, needed)
                    : distgrad::batch_norm_backward(ctx.grads[0], input, weight, mean, invstd, eps, needed);
            return TensorList{grads.input, grads.weight, grads.bias};
          })) {
    node->save(input);
    node->save(weight);
    node->save(result.mean);
    node->save(result.invstd);
  }
  return result;
}

BatchNormGrads batch_norm_backward(const Tensor& grad_output, const Tensor& input, const Tensor& weight,
                                   const Tensor& mean, const Tensor& invstd, double eps,
                                   const BatchNormGradsNeeded& needed) {
  BatchNormGrads grads = untracked::batch_norm_backward(grad_output, input, weight, mean, invstd, needed);
  const std::array<bool, 3> given = {grads.input.defined(), grads.weight.defined(), grads.bias.defined()};
  const auto formula = [eps, given](const BackwardContext& ctx) {
    const Tensor &g = ctx.saved[0], &input = ctx.saved[1], &weight = ctx.saved[2];
    // The outputs' gradients come in order for the outputs there are.
    Tensor gg[3];
    for (size_t output = 0, slot = 0; output < 3; ++output) {
      if (given[output]) gg[output] = ctx.grads[slot++];
    }
    if (autograd::should_record({&gg[0], &gg[1], &gg[2], &g, &input, &weight})) {
      return batch_norm_double_backward(gg[0], gg[1], gg[2], g, input, weight, eps,
                                        {ctx.needs(0), ctx.needs(1), ctx.needs(2)});
    }
    const BatchNormDoubleGrads second = untracked::batch_norm_double_backward(
        gg[0], gg[1], gg[2], g, input, weight, ctx.saved[3], ctx.saved[4],
        {.grad_output = ctx.needs(0), .input = ctx.needs(1), .weight = ctx.needs(2)});
    return TensorList{second.grad_output, second.input, second.weight};
  };
  if (auto node = record("BatchNormBackwardBackward", {&grad_output, &input, &weight},
                         {&grads.input, &grads.weight, &grads.bias}, formula)) {
    node->save(grad_output);
    node->save(input);
    node->save(weight);
    node->save(mean);
    node->save(invstd);
  }
  return grads;
}

Tensor im2col(const Tensor& input, const Im2colOptions& options) {
  Tensor result = untracked::im2col(input, options);
  record("Im2colBackward", {&input}, {&result}, [in = input.sizes(), options](const BackwardContext& ctx) {
    return TensorList{distgrad::col2im(ctx.grads[0], {in[in.size() - 2], in[in.size() - 1]}, options)};
  });
  return result;
}

Tensor col2im(const Tensor& columns, std::array<int64_t, 2> output_size, const Im2colOptions& options) {
  Tensor result = untracked::col2im(columns, output_size, options);
  record("Col2imBackward", {&columns}, {&result},
         [options](const BackwardContext& ctx) { return TensorList{distgrad::im2col(ctx.grads[0], options)}; });
  return result;
}

namespace {

// A convolution with options.groups > 1, composed of im2col and one batched product: the columns
// of each group's input channels times that group's filters.
Tensor grouped_conv2d(const Tensor& input, const Tensor& weight, const Tensor& bias, const Conv2dOptions& options) {
  input.check_defined("conv2d");
  weight.check_defined("conv2d");
  const int64_t groups = options.groups;
  DISTGRAD_CHECK(groups > 0, "conv2d: expected a positive groups, found ", groups);
  DISTGRAD_CHECK(input.dim() == 3 || input.dim() == 4, "conv2d: expected input of shape [N, C, H, W] or [C, H, W], ",
                 "found ", shape_str(input.sizes()));
  const bool unbatched = input.dim() == 3;
  const Tensor x = unbatched ? unsqueeze(input, 0) : input;
  const int64_t channels = x.size(1);
  DISTGRAD_CHECK(channels % groups == 0, "conv2d: expected groups to divide the input's ", channels,
                 " channels, found groups = ", groups);
  DISTGRAD_CHECK(weight.dim() == 4 && weight.size(0) % groups == 0 && weight.size(1) == channels / groups,
                 "conv2d: expected weight of shape [O, ", channels / groups,
                 ", kh, kw] with O divisible by groups = ", groups, " for input of shape ", shape_str(input.sizes()),
                 ", found ", shape_str(weight.sizes()));
  const int64_t out_channels = weight.size(0), batch = x.size(0);
  DISTGRAD_CHECK(!bias.defined() || bias.sizes() == Shape{out_channels}, "conv2d: expected a bias of shape [",
                 out_channels, "], found ", bias.defined() ? shape_str(bias.sizes()) : "");
  const Im2colOptions window{.kernel_size = {weight.size(2), weight.size(3)},
                             .stride = options.stride,
                             .padding = options.padding,
                             .dilation = options.dilation};
  const Tensor columns = im2col(x, window);  // [N, C kh kw, L]
  const int64_t patch = columns.size(1) / groups, windows = columns.size(2);
  // [groups, patch, N L]: each group's columns for every image side by side.
  const Tensor by_group = reshape(permute(reshape(columns, {batch, groups, patch, windows}), {1, 2, 0, 3}),
                                  {groups, patch, batch * windows});
  const Tensor products = matmul(reshape(weight, {groups, out_channels / groups, patch}), by_group);
  const int64_t out_h =
      (x.size(2) + 2 * options.padding[0] - options.dilation[0] * (weight.size(2) - 1) - 1) / options.stride[0] + 1;
  const int64_t out_w = windows / out_h;
  Tensor out =
      reshape(transpose(reshape(products, {out_channels, batch, windows}), 0, 1), {batch, out_channels, out_h, out_w});
  if (bias.defined()) out = add(out, reshape(bias, {out_channels, 1, 1}));
  return unbatched ? squeeze(out, 0) : out;
}

}  // namespace

Tensor conv2d(const Tensor& input, const Tensor& weight, const Tensor& bias, const Conv2dOptions& options) {
  if (autograd::casts_to_lower_precision({&input, &weight, &bias}))
    return conv2d(autograd::autocast_to_lower_precision(input), autograd::autocast_to_lower_precision(weight),
                  autograd::autocast_to_lower_precision(bias), options);
  if (options.groups != 1) return grouped_conv2d(input, weight, bias, options);
  Tensor result = untracked::conv2d(input, weight, bias, options);  // checks every argument
  if (auto node = record("Conv2dBackward", {&input, &weight, &bias}, {&result}, [options](const BackwardContext& ctx) {
        const Conv2dGrads grads =
            distgrad::conv2d_backward(ctx.grads[0], ctx.saved[0], ctx.saved[1],
                                      {.input = ctx.needs(0), .weight = ctx.needs(1), .bias = ctx.needs(2)}, options);
        return TensorList{grads.input, grads.weight, grads.bias};
      })) {
    node->save(input);
    node->save(weight);
  }
  return result;
}

// The three gradients are linear in g, the input's also in the weight and the weight's in the
// input; their derivatives are those of conv2d_input_grad and conv2d_weight_grad (below) and of
// the bias's sum of g over all but the channels (c broadcast back).
Conv2dGrads conv2d_backward(const Tensor& grad_output, const Tensor& input, const Tensor& weight,
                            const Conv2dGradsNeeded& needed, const Conv2dOptions& options) {
  Conv2dGrads grads = untracked::conv2d_backward(grad_output, input, weight, needed, options);
  if (auto node =
          record("Conv2dBackwardBackward", {&grad_output, &input, &weight}, {&grads.input, &grads.weight, &grads.bias},
                 [options, needed, in = input.sizes(), w = weight.sizes()](const BackwardContext& ctx) {
                   const Tensor &g = ctx.saved[0], &input = ctx.saved[1], &weight = ctx.saved[2];
                   // The outputs' gradients come in order for the outputs there are (those needed).
                   const int weight_slot = needed.input, bias_slot = needed.input + needed.weight;
                   const Tensor a = needed.input ? ctx.grads[0] : Tensor();
                   const Tensor b = needed.weight ? ctx.grads[weight_slot] : Tensor();
                   const Tensor c = needed.bias ? ctx.grads[bias_slot] : Tensor();
                   Tensor grad_g;
                   const auto add_to_grad_g = [&grad_g](const Tensor& part) {
                     grad_g = grad_g.defined() ? add(grad_g, part) : part;
                   };
                   if (ctx.needs(0) && a.defined()) add_to_grad_g(distgrad::conv2d(a, weight, {}, options));
                   if (ctx.needs(0) && b.defined()) add_to_grad_g(distgrad::conv2d(input, b, {}, options));
                   if (ctx.needs(0) && c.defined()) add_to_grad_g(expand(reshape(c, {c.size(0), 1, 1}), g.sizes()));
                   return TensorList{
                       grad_g, ctx.needs(1) && b.defined() ? distgrad::conv2d_input_grad(g, b, in, options) : Tensor(),
                       ctx.needs(2) && a.defined() ? distgrad::conv2d_weight_grad(g, a, w, options) : Tensor()};
                 })) {
    node->save(grad_output);
    node->save(input);
    node->save(weight);
  }
  return grads;
}

// Both gradients are bilinear in their two tensors, and their derivatives are the three
// convolution ops again: for an output `a` of conv2d_input_grad(g, W), d/dg <a, .> =
// conv2d(a, W) and d/dW = conv2d_weight_grad(g, a); for an output `b` of
// conv2d_weight_grad(g, x), d/dg <b, .> = conv2d(x, b) and d/dx = conv2d_input_grad(g, b).
Tensor conv2d_input_grad(const Tensor& grad_output, const Tensor& weight, const Shape& input_sizes,
                         const Conv2dOptions& options) {
  Tensor result = untracked::conv2d_input_grad(grad_output, weight, input_sizes, options);
  if (auto node = record("Conv2dInputGradBackward", {&grad_output, &weight}, {&result},
                         [options, w = weight.sizes()](const BackwardContext& ctx) {
                           const Tensor &g = ctx.saved[0], &weight = ctx.saved[1], &a = ctx.grads[0];
                           return TensorList{ctx.needs(0) ? distgrad::conv2d(a, weight, {}, options) : Tensor(),
                                             ctx.needs(1) ? distgrad::conv2d_weight_grad(g, a, w, options) : Tensor()};
                         })) {
    node->save(grad_output);
    node->save(weight);
  }
  return result;
}

Tensor conv2d_weight_grad(const Tensor& grad_output, const Tensor& input, const Shape& weight_sizes,
                          const Conv2dOptions& options) {
  Tensor result = untracked::conv2d_weight_grad(grad_output, input, weight_sizes, options);
  if (auto node = record("Conv2dWeightGradBackward", {&grad_output, &input}, {&result},
                         [options, in = input.sizes()](const BackwardContext& ctx) {
                           const Tensor &g = ctx.saved[0], &input = ctx.saved[1], &b = ctx.grads[0];
                           return TensorList{ctx.needs(0) ? distgrad::conv2d(input, b, {}, options) : Tensor(),
                                             ctx.needs(1) ? distgrad::conv2d_input_grad(g, b, in, options) : Tensor()};
                         })) {
    node->save(grad_output);
    node->save(input);
  }
  return result;
}

ValuesIndices max_pool2d(const Tensor& input, const Pool2dOptions& options) {
  ValuesIndices result = untracked::max_pool2d(input, options);
  if (auto node = record("MaxPool2dBackward", {&input}, {&result.values},
                         [in = input.sizes(), options](const BackwardContext& ctx) {
                           return TensorList{distgrad::max_pool2d_backward(ctx.grads[0], ctx.saved[0], in, options)};
                         })) {
    node->save(result.indices);
  }
  return result;
}

Tensor max_pool2d_backward(const Tensor& grad_output, const Tensor& indices, const Shape& input_sizes,
                           const Pool2dOptions& options) {
  Tensor result = untracked::max_pool2d_backward(grad_output, indices, input_sizes, options);
  if (auto node = record("MaxPool2dBackwardBackward", {&grad_output}, {&result}, [](const BackwardContext& ctx) {
        // Linear in grad_output: each output's gradient reads the input gradient where its
        // window took the maximum, the flat plane position `indices` names.
        const Tensor& indices = ctx.saved[0];
        const Tensor& g = ctx.grads[0];
        const int64_t planes = shape_numel(g.sizes()) / (g.size(-2) * g.size(-1));
        const Tensor picked = gather(reshape(g, {planes, -1}), 1, untracked::reshape(indices, {planes, -1}));
        return TensorList{reshape(picked, indices.sizes())};
      })) {
    node->save(indices);
  }
  return result;
}

Tensor avg_pool2d(const Tensor& input, const Pool2dOptions& options) {
  Tensor result = untracked::avg_pool2d(input, options);  // checks every argument
  if (!autograd::should_record({&input})) return result;
  if (input.dim() == 3) return squeeze(distgrad::avg_pool2d(unsqueeze(input, 0), options), 0);
  Im2colOptions window{.kernel_size = options.kernel_size, .padding = options.padding};
  for (int i = 0; i < 2; ++i) window.stride[i] = options.stride[i] == 0 ? options.kernel_size[i] : options.stride[i];
  // How many input elements each window averages: the whole kernel, or without the padding.
  const int64_t kernel_area = options.kernel_size[0] * options.kernel_size[1];
  Tensor divisor;
  if (options.count_include_pad) {
    divisor = full({1, 1, result.size(2) * result.size(3)}, static_cast<double>(kernel_area),
                   {.dtype = input.dtype(), .device = input.device()});
  } else {
    const Tensor ones =
        distgrad::ones({1, 1, input.size(2), input.size(3)}, {.dtype = input.dtype(), .device = input.device()});
    divisor = untracked::sum(untracked::im2col(ones, window), {1}, /*keepdim=*/true);  // [1, 1, L]
  }
  if (auto node = record("AvgPool2dBackward", {&input}, {&result},
                         [window, kernel_area, in = input.sizes()](const BackwardContext& ctx) {
                           const Tensor& divisor = ctx.saved[0];
                           const int64_t batch = in[0], channels = in[1];
                           const Tensor g = div(reshape(ctx.grads[0], {batch, channels, 1, -1}), divisor);
                           const int64_t windows = g.size(3);
                           const Tensor columns = reshape(expand(g, {batch, channels, kernel_area, windows}),
                                                          {batch, channels * kernel_area, windows});
                           return TensorList{distgrad::col2im(columns, {in[2], in[3]}, window)};
                         })) {
    node->save(untracked::unsqueeze(divisor, 0));
  }
  return result;
}

}  // namespace distgrad
