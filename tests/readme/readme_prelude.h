// What README.md's C++ blocks assume is declared around them: the main example's model and task
// batch (examples/sinusoid.h) and one task's support and query tensors. Included first by every
// block that tests/readme/CMakeLists.txt compiles.
#pragma once

#include <cstdint>

#include "distgrad.h"
#include "examples/sinusoid.h"

namespace dg = distgrad;

using sinusoid::Net;
using sinusoid::Tasks;

inline Tasks sample_tasks(int64_t count) { return sinusoid::sample_tasks(count, 10); }

inline const distgrad::Tensor x_support = distgrad::randn({10, 1}), y_support = distgrad::randn({10, 1});
inline const distgrad::Tensor x_query = distgrad::randn({10, 1}), y_query = distgrad::randn({10, 1});
