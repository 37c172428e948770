// Helpers shared by the core tests.
#pragma once

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <vector>

#include "core/ops.h"

namespace distgrad::testing {

// Asserts that `statement` throws distgrad::Error whose message contains every fragment.
#define EXPECT_ERROR_CONTAINS(statement, ...)                                    \
  do {                                                                           \
    try {                                                                        \
      statement;                                                                 \
      ADD_FAILURE() << "expected distgrad::Error from: " #statement;             \
    } catch (const ::distgrad::Error& error) {                                   \
      for (const char* fragment : {__VA_ARGS__}) {                               \
        EXPECT_THAT(error.what(), ::testing::HasSubstr(fragment)) << #statement; \
      }                                                                          \
    }                                                                            \
  } while (0)

// Values of `t` as doubles, row-major.
inline std::vector<double> values(const Tensor& t) { return t.to_vector<double>(); }

// A non-contiguous float64 tensor with the given values and shape: the transpose of a
// contiguous tensor holding the transposed data (2-D shapes only).
inline Tensor transposed_copy_of(const std::vector<double>& data, int64_t rows, int64_t cols) {
  std::vector<double> transposed(data.size());
  for (int64_t i = 0; i < rows; ++i) {
    for (int64_t j = 0; j < cols; ++j) transposed[j * rows + i] = data[i * cols + j];
  }
  return ops::t(from_vector(transposed, {cols, rows}));
}

}  // namespace distgrad::testing
