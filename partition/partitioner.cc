#include "partition/partitioner.h"

#include <algorithm>
#include <optional>
#include <string>

#include "rendezvous/world.h"

namespace distgrad {

DimPartitioner::DimPartitioner(int64_t dim, DimPartitionerOptions options) : dim_(dim), options_(std::move(options)) {
  DISTGRAD_CHECK(options_.keepdim || options_.exclusive,
                 "dim_partitioner: keepdim=false should be used with exclusive=true (a chunk of several samples "
                 "cannot drop the dim)");
}

DimPartitioner dim_partitioner(int64_t dim, DimPartitionerOptions options) {
  return DimPartitioner(dim, std::move(options));
}

void DimPartitioner::check_batch(const Tensor& tensor, int64_t& batch) const {
  DISTGRAD_CHECK(tensor.dim() > 0, "dim_partitioner: cannot split a 0-dim tensor on dim=", dim_,
                 " (wrap scalars in a non-tensor type to broadcast them)");
  const int64_t size = tensor.size(wrap_dim(dim_, tensor.dim(), "dim_partitioner"));
  if (batch < 0) {
    batch = size;
    return;
  }
  DISTGRAD_CHECK(size == batch, "Batch size mismatch on dim=", dim_, ". Expected ", batch, ", got ", size,
                 " (shape: ", shape_str(tensor.sizes()), ").");
}

std::vector<int> DimPartitioner::worker_list() const {
  const int world_size = rpc::get_world_size();
  std::vector<int> workers;
  if (options_.workers.empty()) {
    for (int rank = 0; rank < world_size; ++rank) workers.push_back(rank);
  }
  for (const rpc::WorkerRef& worker : options_.workers) {
    const std::optional<int> rank = worker.find_rank();
    if (!rank) {
      DISTGRAD_FAIL("dim_partitioner: worker ", worker.str(), " is not a rank of this world of ", world_size,
                    " (expected 0..", world_size - 1, " or a name ", rendezvous::worker_name(0, world_size), "..",
                    rendezvous::worker_name(world_size - 1, world_size), ")");
    }
    workers.push_back(*rank);
  }
  // Lost workers leave the list for the rest of the job (Note [Reissued partitions] in
  // partition/reissue.h).
  const std::vector<int> lost = rpc::lost_workers();
  if (lost.empty()) return workers;
  std::vector<int> live;
  for (int rank : workers) {
    if (!std::binary_search(lost.begin(), lost.end(), rank)) live.push_back(rank);
  }
  if (live.empty()) {
    std::string names;
    for (int rank : workers) names += (names.empty() ? "" : ", ") + rpc::get_worker_name(rank);
    DISTGRAD_FAIL("dim_partitioner: every worker it may use is lost (", names, ")");
  }
  return live;
}

std::vector<DimPartitioner::Range> DimPartitioner::split(int64_t batch, int64_t num_workers) const {
  std::vector<Range> ranges;
  if (options_.exclusive || batch <= num_workers) {
    for (int64_t i = 0; i < batch; ++i) ranges.push_back({i, i + 1});
    return ranges;
  }
  const int64_t chunk = batch / num_workers;
  for (int64_t i = 0; i < num_workers; ++i) ranges.push_back({i * chunk, (i + 1) * chunk});
  ranges.back().end = batch;
  return ranges;
}

Tensor DimPartitioner::slice(const Tensor& tensor, Range range) const {
  const int64_t dim = wrap_dim(dim_, tensor.dim(), "dim_partitioner");
  if (!options_.keepdim) return distgrad::select(tensor, dim, range.begin);
  return distgrad::narrow(tensor, dim, range.begin, range.end - range.begin);
}

}  // namespace distgrad
