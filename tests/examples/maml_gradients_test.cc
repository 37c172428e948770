// The main example's promise: with the same seed, distributed MAML over 1, 2, 3 and 4 worker
// processes gives the meta-gradients of the single-process example within 1e-5 relative. Each
// run writes the first iteration's meta-gradients (--dump_gradients) and stops.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdlib>
#include <string>

#include "core/ops.h"
#include "core/safetensors.h"
#include "tests/core/test_util.h"
#include "tests/rpc/multiprocess.h"

#ifndef DISTGRAD_MAML_SINUSOID
#error "DISTGRAD_MAML_SINUSOID and DISTGRAD_MAML_SINUSOID_LOCAL must name the example binaries"
#endif

namespace distgrad {
namespace {

// The largest |a - b| over max |b| of one parameter's gradients.
double relative_difference(const Tensor& actual, const Tensor& expected) {
  const Tensor a = ops::to(actual, kFloat64), b = ops::to(expected, kFloat64);
  return ops::max(ops::abs(ops::sub(a, b))).item<double>() / ops::max(ops::abs(b)).item<double>();
}

TEST(MamlSinusoid, EveryWorldSizeGivesTheSingleProcessMetaGradients) {
  testing::ScratchDir scratch;
  const std::string local_path = scratch.file("local.safetensors");
  const std::string local_command = std::string(DISTGRAD_MAML_SINUSOID_LOCAL) + " --dump_gradients " + local_path;
  ASSERT_EQ(std::system(local_command.c_str()), 0) << local_command;
  const SafetensorsContents local = load_safetensors(local_path);
  ASSERT_EQ(local.tensors.size(), 6u) << "three Linear layers: a weight and a bias each";

  for (int world_size = 1; world_size <= 4; ++world_size) {
    SCOPED_TRACE("world size " + std::to_string(world_size));
    const std::string path = scratch.file("world" + std::to_string(world_size) + ".safetensors");
    const auto results = rpc::testing::run_world(DISTGRAD_MAML_SINUSOID, {"--dump_gradients", path}, world_size,
                                                 rpc::testing::Environment{{"OMP_NUM_THREADS", "1"}});
    bool all_succeeded = true;
    for (const auto& result : results) all_succeeded = all_succeeded && result.succeeded();
    ASSERT_TRUE(all_succeeded) << rpc::testing::describe(results);
    const SafetensorsContents distributed = load_safetensors(path);
    ASSERT_EQ(distributed.tensors.size(), local.tensors.size());
    for (size_t i = 0; i < local.tensors.size(); ++i) {
      const auto& [name, expected] = local.tensors[i];
      EXPECT_EQ(distributed.tensors[i].first, name);
      EXPECT_LT(relative_difference(distributed.tensors[i].second, expected), 1e-5) << name;
    }
  }
}

}  // namespace
}  // namespace distgrad
