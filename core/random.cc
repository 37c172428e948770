#include "core/random.h"

#include <cmath>
#include <vector>

#include "core/copy.h"
#include "core/creation.h"

namespace distgrad {
namespace {

// Writes `count` values from `next()` into host memory of `dtype`.
template <typename Next>
void store(void* out, DType dtype, int64_t count, Next next) {
  dispatch_dtype(dtype, "random", [&](auto tag) {
    using T = typename decltype(tag)::type;
    T* data = static_cast<T*>(out);
    for (int64_t i = 0; i < count; ++i) data[i] = static_cast<T>(next());
  });
}

// Draws `count` values on the host with `fill(buffer)` and moves them to `options.device`.
template <typename Fill>
Tensor draw(const Shape& sizes, TensorOptions options, Fill fill) {
  Tensor host = empty(sizes, {.dtype = options.dtype, .device = Device::cpu()});
  fill(host.data_ptr(), host.numel());
  return detail::apply_requires_grad(untracked::to(host, options.device), options);
}

// Half tensors are drawn in float32 (with these options) and rounded (rounded_draw), as Note
// [Half precision compute] in core/op_checks.h.
TensorOptions as_float32(TensorOptions options) {
  options.dtype = kFloat32;
  options.requires_grad = false;
  return options;
}
Tensor rounded_draw(const Tensor& drawn, TensorOptions options) {
  return detail::apply_requires_grad(untracked::to(drawn, options.dtype), options);
}

}  // namespace

void Generator::manual_seed(uint64_t seed) {
  absl::MutexLock lock(&engine_mutex_);
  engine_.seed(seed);
  seed_ = seed;
}

uint64_t Generator::seed() const {
  absl::MutexLock lock(&engine_mutex_);
  return seed_;
}

double Generator::next_uniform() { return static_cast<double>(engine_() >> 11) * 0x1.0p-53; }

void Generator::fill_uniform(void* out, DType dtype, int64_t count, double low, double high) {
  absl::MutexLock lock(&engine_mutex_);
  if (dtype == kFloat32) {
    // 24 random bits: every value is exactly representable, so the result stays below `high`.
    store(out, dtype, count, [&] {
      const double u = static_cast<double>(engine_() >> 40) * 0x1.0p-24;
      return static_cast<float>(low + (high - low) * u);
    });
    return;
  }
  store(out, dtype, count, [&] { return low + (high - low) * next_uniform(); });
}

void Generator::fill_normal(void* out, DType dtype, int64_t count, double mean, double std) {
  absl::MutexLock lock(&engine_mutex_);
  bool have_spare = false;
  double spare = 0;
  store(out, dtype, count, [&] {
    if (have_spare) {
      have_spare = false;
      return mean + std * spare;
    }
    // Box-Muller: two uniforms give two independent standard normals.
    const double u1 = 1.0 - next_uniform();  // (0, 1], so the log is finite
    const double u2 = next_uniform();
    const double radius = std::sqrt(-2.0 * std::log(u1));
    spare = radius * std::sin(2.0 * M_PI * u2);
    have_spare = true;
    return mean + std * radius * std::cos(2.0 * M_PI * u2);
  });
}

void Generator::fill_integers(void* out, DType dtype, int64_t count, int64_t low, int64_t high) {
  absl::MutexLock lock(&engine_mutex_);
  // Unsigned arithmetic: high - low may exceed INT64_MAX, and values stay exact (no double).
  const uint64_t range = static_cast<uint64_t>(high) - static_cast<uint64_t>(low);
  const uint64_t limit = UINT64_MAX - UINT64_MAX % range;  // rejection keeps the draw unbiased
  store(out, dtype, count, [&] {
    uint64_t value;
    do value = engine_();
    while (value >= limit);
    return static_cast<int64_t>(static_cast<uint64_t>(low) + value % range);
  });
}

void Generator::fill_bernoulli(void* out, DType dtype, const double* probabilities, int64_t count) {
  absl::MutexLock lock(&engine_mutex_);
  int64_t i = 0;
  store(out, dtype, count, [&] { return next_uniform() < probabilities[i++] ? 1.0 : 0.0; });
}

Generator& default_generator() {
  static Generator generator;
  return generator;
}

void manual_seed(uint64_t seed) { default_generator().manual_seed(seed); }

Tensor rand(const Shape& sizes, TensorOptions options, Generator& generator) {
  DISTGRAD_CHECK(is_floating(options.dtype), "rand: expected a floating dtype, found ", options.dtype);
  if (is_half(options.dtype)) return rounded_draw(rand(sizes, as_float32(options), generator), options);
  return draw(sizes, options, [&](void* out, int64_t n) { generator.fill_uniform(out, options.dtype, n, 0, 1); });
}

Tensor randn(const Shape& sizes, TensorOptions options, Generator& generator) {
  return normal(0, 1, sizes, options, generator);
}

Tensor normal(double mean, double std, const Shape& sizes, TensorOptions options, Generator& generator) {
  DISTGRAD_CHECK(is_floating(options.dtype), "normal: expected a floating dtype, found ", options.dtype);
  DISTGRAD_CHECK(std >= 0, "normal: expected std >= 0, found ", std);
  if (is_half(options.dtype)) return rounded_draw(normal(mean, std, sizes, as_float32(options), generator), options);
  return draw(sizes, options, [&](void* out, int64_t n) { generator.fill_normal(out, options.dtype, n, mean, std); });
}

Tensor randint(int64_t low, int64_t high, const Shape& sizes, TensorOptions options, Generator& generator) {
  DISTGRAD_CHECK(low < high, "randint: expected low < high, found low=", low, " and high=", high);
  DISTGRAD_CHECK(options.dtype != kBool, "randint: expected a numeric dtype, found bool");
  return draw(sizes, options, [&](void* out, int64_t n) { generator.fill_integers(out, options.dtype, n, low, high); });
}

Tensor bernoulli(const Tensor& probabilities, Generator& generator) {
  probabilities.check_defined("bernoulli");
  DISTGRAD_CHECK(is_floating(probabilities.dtype()), "bernoulli: expected floating probabilities, found a ",
                 probabilities.describe());
  if (is_half(probabilities.dtype())) {
    return untracked::to(bernoulli(untracked::to(probabilities, kFloat32), generator), probabilities.dtype());
  }
  const std::vector<double> p = probabilities.to_vector<double>();
  for (double value : p) {
    DISTGRAD_CHECK(value >= 0 && value <= 1, "bernoulli: expected probabilities in [0, 1], found ", value);
  }
  return draw(probabilities.sizes(), {.dtype = probabilities.dtype(), .device = probabilities.device()},
              [&](void* out, int64_t n) { generator.fill_bernoulli(out, probabilities.dtype(), p.data(), n); });
}

Tensor bernoulli(double p, const Shape& sizes, TensorOptions options, Generator& generator) {
  DISTGRAD_CHECK(p >= 0 && p <= 1, "bernoulli: expected a probability in [0, 1], found ", p);
  if (is_half(options.dtype)) return rounded_draw(bernoulli(p, sizes, as_float32(options), generator), options);
  const std::vector<double> probabilities(shape_numel(sizes), p);
  return draw(sizes, options,
              [&](void* out, int64_t n) { generator.fill_bernoulli(out, options.dtype, probabilities.data(), n); });
}

}  // namespace distgrad
