// The MAML examples' promise: with the same seed, distributed MAML over 1 to 4 worker processes
// gives the meta-gradients of the single-process run within 1e-5 relative. Each run writes its
// first iterations' meta-gradients (--dump_gradients) and stops.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "core/cuda.h"
#include "core/ops.h"
#include "core/safetensors.h"
#include "tests/core/test_util.h"
#include "tests/rpc/multiprocess.h"

#ifndef DISTGRAD_MAML_SINUSOID
#error "DISTGRAD_MAML_SINUSOID, DISTGRAD_MAML_SINUSOID_LOCAL and DISTGRAD_MAML_FEWSHOT must name the example binaries"
#endif

namespace distgrad {
namespace {

double largest_magnitude(const Tensor& tensor) {
  return untracked::max(untracked::abs(untracked::to(tensor, kFloat64))).item<double>();
}

// The largest |a - b| of one parameter's gradients over the largest |b|, or over the largest
// gradient of all parameters, `scale`, when this one's is below 1e-9 of that: a convolution's
// bias before BatchNorm has no gradient (the normalization subtracts the mean), so its values
// are rounding noise, and both runs must only agree that they are nothing beside the others.
double relative_difference(const Tensor& actual, const Tensor& expected, double scale) {
  const double difference =
      largest_magnitude(untracked::sub(untracked::to(actual, kFloat64), untracked::to(expected, kFloat64)));
  const double magnitude = largest_magnitude(expected);
  return difference / (magnitude < 1e-9 * scale ? scale : magnitude);
}

std::string joined(const std::vector<std::string>& words) {
  std::string text;
  for (const std::string& word : words) text += " " + word;
  return text;
}

// Runs `local_command` + flags + "--dump_gradients FILE" once, then `distributed` with the same
// flags and `distributed_flags` over each world size, and compares every gradient they wrote
// (`expected_count` of them) within `tolerance` relative.
void expect_same_meta_gradients(const std::string& local_command, const std::string& distributed,
                                const std::vector<std::string>& flags, size_t expected_count,
                                const std::vector<std::string>& distributed_flags = {}, double tolerance = 1e-5) {
  testing::ScratchDir scratch;
  const std::string local_path = scratch.file("local.safetensors");
  const std::string command = local_command + joined(flags) + " --dump_gradients " + local_path;
  ASSERT_EQ(std::system(command.c_str()), 0) << command;
  const SafetensorsContents local = load_safetensors(local_path);
  ASSERT_EQ(local.tensors.size(), expected_count);
  double scale = 0;
  for (const auto& [name, gradient] : local.tensors) scale = std::max(scale, largest_magnitude(gradient));

  for (int world_size = 1; world_size <= 4; ++world_size) {
    SCOPED_TRACE("world size " + std::to_string(world_size));
    const std::string path = scratch.file("world" + std::to_string(world_size) + ".safetensors");
    std::vector<std::string> args = flags;
    args.insert(args.end(), distributed_flags.begin(), distributed_flags.end());
    args.insert(args.end(), {"--dump_gradients", path});
    const auto results =
        rpc::testing::run_world(distributed, args, world_size, rpc::testing::Environment{{"OMP_NUM_THREADS", "1"}});
    bool all_succeeded = true;
    for (const auto& result : results) all_succeeded = all_succeeded && result.succeeded();
    ASSERT_TRUE(all_succeeded) << rpc::testing::describe(results);
    const SafetensorsContents gradients = load_safetensors(path);
    ASSERT_EQ(gradients.tensors.size(), local.tensors.size());
    for (size_t i = 0; i < local.tensors.size(); ++i) {
      const auto& [name, expected] = local.tensors[i];
      EXPECT_EQ(gradients.tensors[i].first, name);
      EXPECT_LT(relative_difference(gradients.tensors[i].second, expected, scale), tolerance) << name;
    }
  }
}

TEST(MamlSinusoid, EveryWorldSizeGivesTheSingleProcessMetaGradients) {
  // Three Linear layers: a weight and a bias each, for the first iteration.
  expect_same_meta_gradients(DISTGRAD_MAML_SINUSOID_LOCAL, DISTGRAD_MAML_SINUSOID, {}, 6);
}

// Distributed MAML is reproducible: one seed and world size give bitwise-identical trained
// parameters run after run, with the fast paths on (shared memory, socket calls) and off (gRPC
// only), whatever order the workers' answers arrive in: every sum across workers follows the order
// of the calls (Note [Call order], dist_autograd/call_order.h).
TEST(MamlSinusoid, TrainingTwiceWithOneSeedGivesBitwiseIdenticalParameters) {
  testing::ScratchDir scratch;
  std::vector<std::pair<std::string, SafetensorsContents>> runs;
  for (const std::string grpc_only : {"0", "1"}) {
    for (int repeat = 0; repeat < 2; ++repeat) {
      const std::string name = "grpc_only=" + grpc_only + " run " + std::to_string(repeat + 1);
      const std::string path = scratch.file("run" + std::to_string(runs.size()) + ".safetensors");
      const auto results = rpc::testing::run_world(
          DISTGRAD_MAML_SINUSOID,
          {"--iterations", "30", "--eval_tasks", "8", "--seed", "5", "--plot", "", "--save_parameters", path}, 4,
          rpc::testing::Environment{{"OMP_NUM_THREADS", "1"}, {"DISTGRAD_GRPC_ONLY", grpc_only}});
      bool all_succeeded = true;
      for (const auto& result : results) all_succeeded = all_succeeded && result.succeeded();
      ASSERT_TRUE(all_succeeded) << name << "\n" << rpc::testing::describe(results);
      runs.emplace_back(name, load_safetensors(path));
    }
  }
  const auto& [first_name, first] = runs.front();
  ASSERT_EQ(first.tensors.size(), 6u);
  for (const auto& [name, run] : runs) {
    ASSERT_EQ(run.tensors.size(), first.tensors.size()) << name;
    for (size_t i = 0; i < first.tensors.size(); ++i) {
      const Tensor& expected = first.tensors[i].second;
      const Tensor& actual = run.tensors[i].second;
      ASSERT_EQ(actual.numel(), expected.numel()) << name << ", " << first.tensors[i].first;
      EXPECT_EQ(std::memcmp(actual.data_ptr(), expected.data_ptr(), expected.nbytes()), 0)
          << first.tensors[i].first << " of " << name << " differs from " << first_name << " by up to "
          << largest_magnitude(untracked::sub(actual, expected));
    }
  }
}

// MAML whose inner gradients are distributed grads with create_graph (each support set split
// over the workers): the meta-gradients of world sizes 1-4 equal the single process's within
// 1e-10 in float64 and 1e-5 in float32. 13 points per task leave the workers uneven chunks.
TEST(MamlDataParallel, EveryWorldSizeGivesTheSingleProcessMetaGradientsInFloat64) {
  const std::vector<std::string> flags = {"--meta_batch", "2",       "--inner_steps", "2",      "--shots",
                                          "13",           "--dtype", "float64",       "--plot="};
  expect_same_meta_gradients(std::string(DISTGRAD_MAML_DATA_PARALLEL) + " --local", DISTGRAD_MAML_DATA_PARALLEL, flags,
                             6, {}, 1e-10);
}

TEST(MamlDataParallel, EveryWorldSizeGivesTheSingleProcessMetaGradientsInFloat32) {
  const std::vector<std::string> flags = {"--meta_batch", "2", "--inner_steps", "2", "--shots", "13", "--plot="};
  expect_same_meta_gradients(std::string(DISTGRAD_MAML_DATA_PARALLEL) + " --local", DISTGRAD_MAML_DATA_PARALLEL, flags,
                             6, {}, 1e-5);
}

TEST(MamlFewshot, EveryWorldSizeGivesTheSingleProcessMetaGradients) {
  // Three convolutions and BatchNorms and a Linear layer, two parameters each, for two
  // iterations (the second after an Adam step on the first's gradients). Five tasks: the
  // round-robin leaves the workers uneven shares at world sizes 2, 3 and 4. In float64: in
  // float32 the runs differed by up to about 1e-4 of some parameters' gradients (seen with the
  // local run on 2 OpenMP threads), as five second-order steps through BatchNorm amplify
  // rounding differences.
  const std::vector<std::string> flags = {"--meta_batch", "5", "--dump_iterations", "2", "--dtype", "float64"};
  expect_same_meta_gradients(std::string(DISTGRAD_MAML_FEWSHOT) + " --local", DISTGRAD_MAML_FEWSHOT, flags, 28);
}

// The same on the GPU: every rank computes on CUDA (all on the machine's one GPU when it has
// one), against the single-process run on the CPU, so the CUDA kernels, the device maps and
// distributed autograd on CUDA tensors all stand behind the meta-gradients.
TEST(MamlFewshot, OnCudaEveryWorldSizeGivesTheCpuMetaGradients) {
  if (!cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  const std::vector<std::string> flags = {"--meta_batch", "5", "--dump_iterations", "2", "--dtype", "float64"};
  expect_same_meta_gradients(std::string(DISTGRAD_MAML_FEWSHOT) + " --local", DISTGRAD_MAML_FEWSHOT, flags, 28,
                             {"--device", "cuda"});
}

}  // namespace
}  // namespace distgrad
