// Seeded random number generation and the random creation functions.
//
// A Generator is a 64-bit Mersenne Twister behind a mutex (one draw call holds it throughout). Values are always drawn
// on the host and copied to the tensor's device, so the same seed gives the same numbers on the CPU and on CUDA.
// `manual_seed(s)` reseeds the process-wide default generator.
//
//   distgrad::manual_seed(0);
//   Tensor x = distgrad::randn({4, 3});                          // N(0, 1), float32
//   Tensor k = distgrad::randint(0, 10, {5});                    // int64 in [0, 10)
#pragma once

#include <cstdint>
#include <random>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "core/tensor.h"

namespace distgrad {

class Generator {
 public:
  static constexpr uint64_t kDefaultSeed = 67280421310721ULL;  // PyTorch's default seed

  explicit Generator(uint64_t seed = kDefaultSeed) : engine_(seed), seed_(seed) {}

  void manual_seed(uint64_t seed);
  uint64_t seed() const;

  // Fills `count` values of the given distribution into host memory of `dtype`.
  void fill_uniform(void* out, DType dtype, int64_t count, double low, double high);
  void fill_normal(void* out, DType dtype, int64_t count, double mean, double std);
  void fill_integers(void* out, DType dtype, int64_t count, int64_t low, int64_t high);
  // out[i] = 1 with probability probabilities[i] (doubles in [0, 1]), else 0.
  void fill_bernoulli(void* out, DType dtype, const double* probabilities, int64_t count);

 private:
  double next_uniform() ABSL_EXCLUSIVE_LOCKS_REQUIRED(engine_mutex_);  // [0, 1) with 53 random bits

  mutable absl::Mutex engine_mutex_;
  std::mt19937_64 engine_ ABSL_GUARDED_BY(engine_mutex_);
  uint64_t seed_ ABSL_GUARDED_BY(engine_mutex_);
};

// The process-wide generator used when none is given.
Generator& default_generator();
// Reseeds the default generator.
void manual_seed(uint64_t seed);

// Uniform on [0, 1).
Tensor rand(const Shape& sizes, TensorOptions options = {}, Generator& generator = default_generator());
// Standard normal.
Tensor randn(const Shape& sizes, TensorOptions options = {}, Generator& generator = default_generator());
// Integers uniform on [low, high).
Tensor randint(int64_t low, int64_t high, const Shape& sizes, TensorOptions options = {.dtype = kInt64},
               Generator& generator = default_generator());
// N(mean, std^2).
Tensor normal(double mean, double std, const Shape& sizes, TensorOptions options = {},
              Generator& generator = default_generator());
// 0/1 samples with P(1) = probabilities (a floating tensor with values in [0, 1]); same dtype and device.
Tensor bernoulli(const Tensor& probabilities, Generator& generator = default_generator());
// 0/1 samples with P(1) = p.
Tensor bernoulli(double p, const Shape& sizes, TensorOptions options = {}, Generator& generator = default_generator());

}  // namespace distgrad
