// Every core op: the kernels that never record a graph (see core/tensor.h for the layering).
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
