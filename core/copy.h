// Copies between tensors: clone, contiguous, conversions across dtypes and devices, and the
// in-place writes copy_, fill_ and zero_. These are core kernels: they never record a graph.
#pragma once

#include "core/tensor.h"

namespace distgrad::untracked {

// A new tensor with the same values, contiguous, on the same device.
Tensor clone(const Tensor& t);
// `t` itself when already contiguous, else a contiguous copy.
Tensor contiguous(const Tensor& t);
// `t` itself when already on `device` / of `dtype`, else a converted contiguous copy.
Tensor to(const Tensor& t, Device device);
Tensor to(const Tensor& t, DType dtype);

// Writes `src` (broadcast to self's shape, converted to self's dtype) into `self`; both on one device.
// Returns self. Like every in-place op, bumps the storage's version counter.
const Tensor& copy_(const Tensor& self, const Tensor& src);
const Tensor& fill_(const Tensor& self, double value);
const Tensor& zero_(const Tensor& self);

}  // namespace distgrad::untracked
