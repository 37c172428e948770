// Every core op, in `distgrad::untracked`: the kernels that never record a graph.
//
// They are for library code that must not record or cannot see autograd (core itself, the
// in-place optimizers, data loading, codecs). Users have one op surface, the differentiable ops
// of autograd/ops.h in `namespace distgrad` (with the operators), which run these kernels and
// record nothing under autograd::NoGradGuard or when no input requires grad. The untracked
// namespace has no operators, so bringing both namespaces into scope never makes `a * b`
// ambiguous. Creation and random functions (core/creation.h, core/random.h) are in `distgrad`.
#pragma once

#include "core/batch_norm.h"
#include "core/copy.h"
#include "core/creation.h"
#include "core/elementwise.h"
#include "core/indexing.h"
#include "core/linalg.h"
#include "core/nn_ops.h"
#include "core/random.h"
#include "core/reduction.h"
#include "core/views.h"
