// Partitioners: how a call's arguments are split into calls on several workers (TorchOpt's
// dim_partitioner / batch_partitioner).
//
// A partitioner maps the arguments of a call to a list of (worker, arguments) pairs. The
// DimPartitioner splits every tensor nested in the arguments (partition/tree.h: inside structs,
// vectors, maps, tuples, optionals and Split ParamDicts) along one dim, into views that keep
// their gradient link, and passes every other value to each call unchanged. Partitioners are
// plain values: copy them, keep them, pass them anywhere. Any callable from the arguments (as a
// tuple, or one by one) to std::vector<std::pair<int, std::tuple<...>>> is a partitioner too.
//
//   auto calls = dg::dim_partitioner(0, {.exclusive = true, .keepdim = false})(dg::args(params, tasks));
//   auto mine = dg::dim_partitioner(0, {.workers = {1, "worker2"}})(dg::args(params, batch));
//
// The rules (docs/map-reduce.md has the table), with B the size of the dim and n the workers:
//   exclusive:            B calls of one sample each, round-robin over the workers; keepdim=false
//                         selects the sample (the dim is dropped);
//   not exclusive, B > n: n calls, chunks of B / n, the last takes the remainder (10 over 4:
//                         2, 2, 2, 4);
//   not exclusive, B <= n: B calls of one sample each (dim kept); B = 0 makes no call;
//   no tensor at all:     one call, on the caller's own rank.
// Every tensor must have size B on the dim ("Batch size mismatch on dim=D. Expected B, got b
// (shape: [...])."); keepdim=false without exclusive is an error at construction.
#pragma once

#include <cstdint>
#include <tuple>
#include <utility>
#include <vector>

#include "autograd/ops.h"
#include "partition/tree.h"
#include "rpc/rpc.h"

namespace distgrad {

// The arguments of a call as a tuple: dg::args(params, batch).
template <typename... Ts>
auto args(Ts&&... values) {
  return std::tuple<std::decay_t<Ts>...>(std::forward<Ts>(values)...);
}

// The calls a partitioned call becomes: the worker of each and its arguments.
template <typename... Args>
using Partitions = std::vector<std::pair<int, std::tuple<Args...>>>;

struct DimPartitionerOptions {
  bool exclusive = false;
  bool keepdim = true;
  // The workers to use, in order, by rank or name ({1, "worker2"}), resolved at each call;
  // empty: every worker, by rank.
  std::vector<rpc::WorkerRef> workers = {};
};

class DimPartitioner {
 public:
  explicit DimPartitioner(int64_t dim = 0, DimPartitionerOptions options = {});

  template <typename... Args>
  Partitions<Args...> operator()(const std::tuple<Args...>& arguments) const {
    const int64_t batch = batch_size(arguments);
    if (batch < 0) return {{rpc::get_rank(), arguments}};  // nothing to split: run here
    const std::vector<int> workers = worker_list();
    Partitions<Args...> partitions;
    const std::vector<Range> ranges = split(batch, static_cast<int64_t>(workers.size()));
    partitions.reserve(ranges.size());
    for (size_t i = 0; i < ranges.size(); ++i) {
      const Range range = ranges[i];
      auto part = partition_detail::map_tensors(arguments, [&](const Tensor& tensor) { return slice(tensor, range); });
      partitions.emplace_back(workers[i % workers.size()], std::move(part));
    }
    return partitions;
  }

  int64_t dim() const { return dim_; }
  const DimPartitionerOptions& options() const { return options_; }

 private:
  struct Range {
    int64_t begin, end;  // [begin, end) along the dim
  };

  // B, or -1 when the arguments hold no tensor; throws on a mismatch.
  template <typename T>
  int64_t batch_size(const T& arguments) const {
    int64_t batch = -1;
    partition_detail::for_each_tensor(arguments, [&](const Tensor& tensor) { check_batch(tensor, batch); });
    return batch;
  }
  void check_batch(const Tensor& tensor, int64_t& batch) const;
  std::vector<int> worker_list() const;
  std::vector<Range> split(int64_t batch, int64_t num_workers) const;
  Tensor slice(const Tensor& tensor, Range range) const;

  int64_t dim_;
  DimPartitionerOptions options_;
};

DimPartitioner dim_partitioner(int64_t dim = 0, DimPartitionerOptions options = {});

// dim_partitioner(0): chunks of the batch over the workers.
inline const DimPartitioner batch_partitioner{0};
// dim_partitioner(0, exclusive, keepdim=true), as TorchOpt's: one call per sample, each a batch of
// one (the dim kept, size 1). To drop the dim: dim_partitioner(0, {.exclusive = true, .keepdim = false}).
inline const DimPartitioner exclusive_batch_partitioner{0, {.exclusive = true, .keepdim = true}};

}  // namespace distgrad
