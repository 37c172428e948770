// What the few-shot MAML programs share (examples/maml_fewshot, bench/maml_fewshot_bench): the
// workload's flags (TorchOpt's benchmark settings by default), the remote function that adapts
// one task, the meta-batch call over the workers or in one process, and where each rank
// computes. Defines flags and registers a remote function: include it from one source file of
// a program.
#pragma once

#include <cstdint>
#include <cstdio>
#include <exception>
#include <functional>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "absl/flags/flag.h"
#include "distgrad.h"
#include "examples/fewshot.h"
#include "examples/precision.h"

ABSL_FLAG(int64_t, ways, 5, "classes per task");
ABSL_FLAG(int64_t, shots, 5, "support images per class");
ABSL_FLAG(int64_t, queries, 15, "query images per class");
ABSL_FLAG(int, meta_batch, 32, "tasks per meta-iteration (one call each)");
ABSL_FLAG(int, inner_steps, 5, "SGD steps on each task's support set");
ABSL_FLAG(double, inner_lr, 0.1, "learning rate of the inner SGD steps");
ABSL_FLAG(double, outer_lr, 1e-3, "learning rate of the outer Adam optimizer");
ABSL_FLAG(std::string, device, "cpu", "cpu, or cuda: every rank computes on the GPU of its local rank");
ABSL_FLAG(std::string, dtype, "float32", "float32, or float64 for the weights and images");
ABSL_FLAG(std::string, precision, "fp32", examples::kPrecisionHelp);
ABSL_FLAG(bool, local, false, "one process, no RPC: the tasks adapted in turn");
ABSL_FLAG(bool, local_loader, false,
          "each worker loads its own shard of the training images (a remote object) and draws the tasks the driver "
          "names by index; only the indices and the weights travel");
ABSL_FLAG(uint64_t, seed, 0, "random seed");

// Runs on a worker: the query loss and accuracy of one task after adapting `params` to it.
inline std::tuple<distgrad::Tensor, double> adapt_and_evaluate(distgrad::nn::ParamDict params, fewshot::Episodes task,
                                                               fewshot::InnerLoop inner) {
  return fewshot::adapted_query_loss_and_accuracy(fewshot::shared_net(inner.ways), std::move(params), task, inner);
}
DISTGRAD_REMOTE(adapt_and_evaluate);

namespace fewshot {

inline EpisodeShape episode_shape_flags() {
  return {absl::GetFlag(FLAGS_ways), absl::GetFlag(FLAGS_shots), absl::GetFlag(FLAGS_queries)};
}

inline InnerLoop inner_loop_flags() {
  return {absl::GetFlag(FLAGS_ways), absl::GetFlag(FLAGS_inner_steps), absl::GetFlag(FLAGS_inner_lr),
          absl::GetFlag(FLAGS_precision)};
}

// The mean query loss and accuracy of a batch of tasks: one call per task, round-robin over the
// workers (rank 0 included), or with --local the same calls in turn in this process.
inline std::tuple<dg::Tensor, double> meta_loss_and_accuracy(const dg::nn::ParamDict& params, const Episodes& tasks,
                                                             const InnerLoop& inner) {
  static const dg::DimPartitioner one_task_per_call = dg::dim_partitioner(0, {.exclusive = true, .keepdim = false});
  static const auto distributed = dg::parallelize(adapt_and_evaluate, one_task_per_call, dg::mean_reducer);
  if (!absl::GetFlag(FLAGS_local)) return distributed(params, tasks, inner);
  std::vector<std::tuple<dg::Tensor, double>> results;
  for (const auto& [rank, arguments] : one_task_per_call(dg::args(params, tasks, inner))) {
    results.push_back(std::apply(adapt_and_evaluate, arguments));
  }
  return dg::mean_reducer(results);
}

// Where this rank computes: the GPU of its local rank with --device cuda, else the CPU.
inline dg::Device compute_device() {
  const std::string device = absl::GetFlag(FLAGS_device);
  if (device == "cpu") return dg::Device::cpu();
  DISTGRAD_CHECK(device == "cuda", "--device must be cpu or cuda, found '", device, "'");
  DISTGRAD_CHECK(dg::cuda::is_available(), "--device cuda, but no CUDA device is available (this build ",
                 dg::cuda::is_built() ? "has" : "lacks", " CUDA support)");
  return dg::Device::cuda(dg::rendezvous::world_info().local_rank % dg::cuda::device_count());
}

// The weights' and images' dtype: --dtype.
inline dg::DType compute_dtype() {
  const std::string dtype = absl::GetFlag(FLAGS_dtype);
  DISTGRAD_CHECK(dtype == "float32" || dtype == "float64", "--dtype must be float32 or float64, found '", dtype, "'");
  return dtype == "float32" ? dg::kFloat32 : dg::kFloat64;
}

// The network of the flags, on `device` in --dtype.
inline std::shared_ptr<dg::nn::Sequential> conv_net_for(dg::Device device) {
  const std::shared_ptr<dg::nn::Sequential> net = conv_net(absl::GetFlag(FLAGS_ways));
  net->to(compute_dtype());
  net->to(device);
  return net;
}

// `tasks` on `device`, the images in --dtype.
inline Episodes to_device(Episodes tasks, dg::Device device) {
  for (dg::Tensor* images : {&tasks.x_support, &tasks.x_query}) *images = dg::to(*images, compute_dtype());
  for (dg::Tensor* tensor : {&tasks.x_support, &tasks.y_support, &tasks.x_query, &tasks.y_query}) {
    *tensor = dg::to(*tensor, device);
  }
  return tasks;
}

// --local_loader: one worker's shard of the training images (rows i with i % shards == shard),
// read from its own disk, and the tasks drawn from it by index.
class TaskShard {
 public:
  TaskShard(int64_t shard, int64_t shards, std::vector<int64_t> classes, EpisodeShape shape)
      : sampler_(shard_of(dg::data::load_fashion_mnist(dg::data::Split::kTrain), shard, shards), std::move(classes),
                 shape) {}

  // The query loss and accuracy of the task drawn with seed `task` after adapting `params` to it.
  std::tuple<dg::Tensor, double> adapt_and_evaluate(dg::nn::ParamDict params, uint64_t task, InnerLoop inner) const {
    std::mt19937_64 random(task);
    Episodes drawn = sampler_.sample(1, random);
    for (dg::Tensor* tensor : {&drawn.x_support, &drawn.y_support, &drawn.x_query, &drawn.y_query}) {
      *tensor = dg::select(*tensor, 0, 0);
    }
    const dg::Device device = params.empty() ? dg::Device::cpu() : params.begin()->second.device();
    drawn = to_device(std::move(drawn), device);
    return adapted_query_loss_and_accuracy(shared_net(inner.ways), std::move(params), drawn, inner);
  }

 private:
  static dg::data::FashionMnist shard_of(const dg::data::FashionMnist& data, int64_t shard, int64_t shards) {
    DISTGRAD_CHECK(shards >= 1 && shard >= 0 && shard < shards, "TaskShard: expected a shard in 0..", shards - 1,
                   ", found ", shard);
    const dg::Tensor rows = dg::arange(shard, data.labels.size(0), shards);
    return {dg::index_select(data.images, 0, rows), dg::index_select(data.labels, 0, rows)};
  }
  TaskSampler sampler_;
};
DISTGRAD_REMOTE_CLASS(TaskShard, int64_t, int64_t, std::vector<int64_t>, EpisodeShape);
DISTGRAD_REMOTE_METHOD(TaskShard, adapt_and_evaluate);

// --local_loader: a TaskShard on every worker (rank 0 included), shard i on worker i.
inline std::vector<dg::rpc::RRef<TaskShard>> task_shards(const std::vector<int64_t>& classes, EpisodeShape shape) {
  std::vector<dg::rpc::RRef<TaskShard>> shards;
  const int world = dg::get_world_size();
  for (int rank = 0; rank < world; ++rank) {
    shards.push_back(dg::rpc::remote_object<TaskShard>(rank, int64_t{rank}, int64_t{world}, classes, shape));
  }
  return shards;
}

// --local_loader: the mean query loss and accuracy of the tasks drawn with the seeds `tasks`,
// one call per task round-robin over the shards; only the seeds and the weights travel.
inline std::tuple<dg::Tensor, double> meta_loss_and_accuracy_on_shards(
    const std::vector<dg::rpc::RRef<TaskShard>>& shards, const dg::nn::ParamDict& params,
    const std::vector<uint64_t>& tasks, const InnerLoop& inner) {
  std::vector<dg::rpc::Future<std::tuple<dg::Tensor, double>>> results;
  for (size_t i = 0; i < tasks.size(); ++i) {
    results.push_back(shards[i % shards.size()].rpc_async(&TaskShard::adapt_and_evaluate, params, tasks[i], inner));
  }
  return dg::mean_reducer(dg::rpc::wait_all(results));
}

// With --device cuda, this rank's CUDA tensors travel to the GPU of the receiving worker's local
// rank (ranks fill the hosts in order, LOCAL_WORLD_SIZE per host); results come back alike.
inline dg::rpc::RpcOptions rpc_options() {
  dg::rpc::RpcOptions options;
  if (absl::GetFlag(FLAGS_device) != "cuda" || !dg::cuda::is_available()) return options;
  const dg::rendezvous::WorldInfo& world = dg::rendezvous::world_info();
  const int gpus = dg::cuda::device_count();
  const dg::Device mine = dg::Device::cuda(world.local_rank % gpus);
  for (int rank = 0; rank < world.world_size; ++rank) {
    if (rank == world.rank) continue;  // calls to itself pass tensors as they are
    const dg::Device theirs = dg::Device::cuda(rank % world.local_world_size % gpus);
    options.device_maps[dg::rendezvous::worker_name(rank, world.world_size)] = {{mine, theirs}};
  }
  return options;
}

// Runs `driver` on rank 0 while the other ranks serve calls (or alone with --local), and
// returns the exit code: 1 with the error on stderr when it throws.
inline int run_program(const char* program, const std::function<void()>& driver) {
  try {
    if (absl::GetFlag(FLAGS_local)) {
      driver();
      return 0;
    }
    return dg::auto_init_rpc([] { dg::manual_seed(absl::GetFlag(FLAGS_seed) + dg::get_rank()); },
                             [&] { dg::rank_zero_only(driver)(); }, rpc_options());
  } catch (const std::exception& error) {
    std::fprintf(stderr, "%s: %s\n", program, error.what());
    return 1;
  }
}

}  // namespace fewshot
