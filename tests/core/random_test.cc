// Tests of seeded random generation: reproducibility, ranges and the moments of each
// distribution (on 100k samples, with tolerances of several standard errors).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <numeric>

#include "tests/core/test_util.h"

namespace distgrad {
namespace {

using ::testing::Each;
using testing::values;

constexpr int64_t kSamples = 100000;

double mean_of(const std::vector<double>& v) { return std::accumulate(v.begin(), v.end(), 0.0) / v.size(); }

double variance_of(const std::vector<double>& v) {
  const double m = mean_of(v);
  double total = 0;
  for (double x : v) total += (x - m) * (x - m);
  return total / v.size();
}

TEST(Random, ManualSeedReproducesTheSameDraws) {
  manual_seed(123);
  const std::vector<double> first_normal = values(randn({100}));
  const std::vector<double> first_uniform = values(rand({10}, {.dtype = kFloat64}));
  const std::vector<double> first_integers = values(randint(0, 1000, {10}));
  manual_seed(123);
  EXPECT_EQ(values(randn({100})), first_normal);
  EXPECT_EQ(values(rand({10}, {.dtype = kFloat64})), first_uniform);
  EXPECT_EQ(values(randint(0, 1000, {10})), first_integers);
  EXPECT_EQ(default_generator().seed(), 123u);
}

TEST(Random, DifferentSeedsGiveDifferentDraws) {
  manual_seed(1);
  const std::vector<double> a = values(rand({1000}, {.dtype = kFloat64}));
  manual_seed(2);
  const std::vector<double> b = values(rand({1000}, {.dtype = kFloat64}));
  int64_t same = 0;
  for (size_t i = 0; i < a.size(); ++i) same += a[i] == b[i];
  EXPECT_EQ(same, 0);
}

TEST(Random, SuccessiveDrawsDiffer) {
  manual_seed(5);
  EXPECT_NE(values(randn({50}, {.dtype = kFloat64})), values(randn({50}, {.dtype = kFloat64})));
}

TEST(Random, RandIsUniformOnTheUnitInterval) {
  manual_seed(0);
  Tensor t = rand({kSamples}, {.dtype = kFloat64});
  EXPECT_EQ(t.dtype(), kFloat64);
  const std::vector<double> v = values(t);
  EXPECT_GE(*std::min_element(v.begin(), v.end()), 0.0);
  EXPECT_LT(*std::max_element(v.begin(), v.end()), 1.0);
  // Standard errors: 0.0009 for the mean, 0.0003 for the variance.
  EXPECT_NEAR(mean_of(v), 0.5, 0.005);
  EXPECT_NEAR(variance_of(v), 1.0 / 12, 0.0015);
  // Each tenth of the interval holds about a tenth of the samples (standard error 0.001).
  std::vector<int64_t> deciles(10, 0);
  for (double x : v) ++deciles[static_cast<int>(x * 10)];
  for (int64_t count : deciles) EXPECT_NEAR(static_cast<double>(count) / kSamples, 0.1, 0.006);
}

TEST(Random, Float32RandStaysBelowOne) {
  manual_seed(3);
  Tensor t = rand({kSamples});
  EXPECT_EQ(t.dtype(), kFloat32);
  for (float x : t.to_vector<float>()) {
    ASSERT_GE(x, 0.0f);
    ASSERT_LT(x, 1.0f);
  }
  EXPECT_NEAR(mean_of(values(t)), 0.5, 0.005);
}

TEST(Random, RandRejectsNonFloatingDtypes) {
  EXPECT_ERROR_CONTAINS(rand({2}, {.dtype = kInt64}), "rand: expected a floating dtype, found int64");
}

TEST(Random, RandnIsStandardNormal) {
  manual_seed(0);
  const std::vector<double> v = values(randn({kSamples}, {.dtype = kFloat64}));
  EXPECT_NEAR(mean_of(v), 0.0, 0.015);
  EXPECT_NEAR(std::sqrt(variance_of(v)), 1.0, 0.01);
  // 68.27% of a normal lies within one standard deviation (standard error 0.0015).
  const auto within = std::count_if(v.begin(), v.end(), [](double x) { return std::abs(x) < 1; });
  EXPECT_NEAR(static_cast<double>(within) / kSamples, 0.6827, 0.008);
  EXPECT_EQ(randn({2}).dtype(), kFloat32);
}

TEST(Random, NormalHasTheGivenMeanAndStd) {
  manual_seed(0);
  const std::vector<double> v = values(normal(3.0, 2.0, {kSamples}, {.dtype = kFloat64}));
  EXPECT_NEAR(mean_of(v), 3.0, 0.03);
  EXPECT_NEAR(std::sqrt(variance_of(v)), 2.0, 0.02);
  EXPECT_THAT(values(normal(-1.5, 0.0, {4}, {.dtype = kFloat64})), Each(-1.5));
}

TEST(Random, NormalRejectsANegativeStd) {
  EXPECT_ERROR_CONTAINS(normal(0, -1, {2}), "normal: expected std >= 0, found -1");
  EXPECT_ERROR_CONTAINS(normal(0, 1, {2}, {.dtype = kBool}), "normal: expected a floating dtype, found bool");
}

TEST(Random, RandintCoversTheHalfOpenRangeUniformly) {
  manual_seed(0);
  Tensor t = randint(-3, 4, {kSamples});
  EXPECT_EQ(t.dtype(), kInt64);
  std::map<int64_t, int64_t> counts;
  for (int64_t x : t.to_vector<int64_t>()) ++counts[x];
  ASSERT_EQ(counts.size(), 7u);
  EXPECT_EQ(counts.begin()->first, -3);
  EXPECT_EQ(counts.rbegin()->first, 3);
  for (const auto& [value, count] : counts) {
    EXPECT_NEAR(static_cast<double>(count) / kSamples, 1.0 / 7, 0.006) << value;
  }
}

TEST(Random, RandintIntoAFloatingDtypeGivesWholeNumbers) {
  manual_seed(0);
  for (double x : values(randint(0, 5, {100}, {.dtype = kFloat64}))) {
    EXPECT_EQ(x, std::floor(x));
    EXPECT_GE(x, 0);
    EXPECT_LT(x, 5);
  }
}

TEST(Random, RandintIsExactForLargeInt64Values) {
  // Values above 2^53 have no exact double: they must not pass through one.
  const int64_t low = int64_t{1} << 60;
  manual_seed(0);
  std::map<int64_t, int64_t> counts;
  for (int64_t x : randint(low, low + 4, {1000}).to_vector<int64_t>()) ++counts[x];
  ASSERT_EQ(counts.size(), 4u);
  EXPECT_EQ(counts.begin()->first, low);
  EXPECT_EQ(counts.rbegin()->first, low + 3);
}

TEST(Random, RandintRejectsAnEmptyRange) {
  EXPECT_ERROR_CONTAINS(randint(5, 5, {2}), "randint: expected low < high, found low=5 and high=5");
  EXPECT_ERROR_CONTAINS(randint(5, 2, {2}), "low=5 and high=2");
  EXPECT_ERROR_CONTAINS(randint(0, 2, {2}, {.dtype = kBool}), "randint: expected a numeric dtype, found bool");
}

TEST(Random, BernoulliWithProbabilityZeroOrOneIsExact) {
  std::vector<double> p(1000);
  for (size_t i = 0; i < p.size(); ++i) p[i] = i % 3 == 0 ? 1.0 : 0.0;
  manual_seed(0);
  Tensor samples = bernoulli(from_vector(p));
  EXPECT_EQ(samples.dtype(), kFloat64);
  EXPECT_EQ(samples.sizes(), Shape{1000});
  EXPECT_EQ(values(samples), p);
}

TEST(Random, BernoulliFrequencyMatchesTheProbability) {
  manual_seed(0);
  Tensor p = full({kSamples}, 0.3, {.dtype = kFloat32});
  Tensor samples = bernoulli(p);
  EXPECT_EQ(samples.dtype(), kFloat32);
  const std::vector<double> v = values(samples);
  EXPECT_TRUE(std::all_of(v.begin(), v.end(), [](double x) { return x == 0 || x == 1; }));
  EXPECT_NEAR(mean_of(v), 0.3, 0.007);  // standard error 0.0015
}

TEST(Random, BernoulliFollowsEachElementsProbability) {
  manual_seed(0);
  Tensor p = untracked::expand(from_vector<double>({0.1, 0.9}, {1, 2}), {kSamples / 2, 2});
  const std::vector<double> v = values(bernoulli(p));
  double first = 0, second = 0;
  for (size_t i = 0; i < v.size(); i += 2) {
    first += v[i];
    second += v[i + 1];
  }
  EXPECT_NEAR(first / (kSamples / 2), 0.1, 0.008);
  EXPECT_NEAR(second / (kSamples / 2), 0.9, 0.008);
}

TEST(Random, BernoulliWithAScalarProbability) {
  manual_seed(0);
  Tensor samples = bernoulli(0.25, {kSamples}, {.dtype = kFloat64});
  EXPECT_NEAR(mean_of(values(samples)), 0.25, 0.007);
  EXPECT_THAT(bernoulli(1.0, {3}, {.dtype = kBool}).to_vector<bool>(), Each(true));
  EXPECT_THAT(values(bernoulli(0.0, {3}, {.dtype = kInt64})), Each(0));
}

TEST(Random, BernoulliRejectsProbabilitiesOutsideTheUnitInterval) {
  EXPECT_ERROR_CONTAINS(bernoulli(from_vector<double>({0.5, 1.5})),
                        "bernoulli: expected probabilities in [0, 1], found 1.5");
  EXPECT_ERROR_CONTAINS(bernoulli(from_vector<float>({-0.25f})), "found -0.25");
  EXPECT_ERROR_CONTAINS(bernoulli(from_vector<double>({std::nan("")})), "expected probabilities in [0, 1]");
  EXPECT_ERROR_CONTAINS(bernoulli(1.5, {2}), "bernoulli: expected a probability in [0, 1], found 1.5");
  EXPECT_ERROR_CONTAINS(bernoulli(from_vector<int64_t>({0, 1})), "bernoulli: expected floating probabilities",
                        "int64 tensor of shape [2]");
}

TEST(Random, GeneratorsAreIndependentOfTheDefaultOne) {
  manual_seed(7);
  const std::vector<double> expected = values(rand({50}, {.dtype = kFloat64}));
  manual_seed(7);
  Generator own(99);
  const std::vector<double> from_own = values(rand({50}, {.dtype = kFloat64}, own));
  // Drawing from `own` did not advance the default generator.
  EXPECT_EQ(values(rand({50}, {.dtype = kFloat64})), expected);
  EXPECT_NE(from_own, expected);
  EXPECT_EQ(own.seed(), 99u);
}

TEST(Random, GeneratorsWithOneSeedAgree) {
  Generator a(42), b(42);
  const std::vector<double> first = values(randn({20}, {.dtype = kFloat64}, a));
  EXPECT_EQ(values(randn({20}, {.dtype = kFloat64}, b)), first);
  EXPECT_NE(values(randn({20}, {.dtype = kFloat64}, a)), first);
  a.manual_seed(42);
  EXPECT_EQ(a.seed(), 42u);
  EXPECT_EQ(values(randn({20}, {.dtype = kFloat64}, a)), first);
}

TEST(Random, DefaultSeedIsPyTorchs) { EXPECT_EQ(Generator().seed(), 67280421310721ULL); }

}  // namespace
}  // namespace distgrad
