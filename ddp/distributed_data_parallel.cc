#include "ddp/distributed_data_parallel.h"

#include <map>
#include <tuple>
#include <utility>

#include "autograd/engine.h"
#include "autograd/grad_mode.h"
#include "core/copy.h"
#include "core/creation.h"
#include "core/error.h"
#include "core/shape.h"
#include "core/views.h"
#include "trace/trace.h"

namespace distgrad::ddp {
namespace {

constexpr double kMiB = 1024.0 * 1024.0;

// Views of `flat`, one per tensor, of the tensors' shapes, laid out back to back.
std::vector<Tensor> unflatten(const Tensor& flat, const std::vector<Tensor>& like) {
  std::vector<Tensor> views;
  int64_t offset = 0;
  for (const Tensor& tensor : like) {
    views.push_back(untracked::view(untracked::narrow(flat, 0, offset, tensor.numel()), tensor.sizes()));
    offset += tensor.numel();
  }
  return views;
}

}  // namespace

DistributedDataParallel::DistributedDataParallel(nn::Module& module, std::shared_ptr<ProcessGroup> group,
                                                 DistributedDataParallelOptions options)
    : module_(module), group_(std::move(group)), options_(options) {
  DISTGRAD_CHECK(group_ != nullptr, "DistributedDataParallel: expected a process group, found none (this rank is ",
                 "not in the group new_group returned?)");
  DISTGRAD_CHECK(options_.bucket_cap_mb > 0 && options_.first_bucket_cap_mb > 0,
                 "DistributedDataParallel: bucket caps must be positive, found bucket_cap_mb ", options_.bucket_cap_mb,
                 " and first_bucket_cap_mb ", options_.first_bucket_cap_mb);
  for (const auto& [name, tensor] : module_.named_parameters()) {
    if (tensor.requires_grad()) parameters_.push_back({name, tensor});
  }
  check_same_model_everywhere();
  std::vector<Tensor> state;
  for (const Parameter& parameter : parameters_) state.push_back(parameter.tensor);
  for (const auto& [name, buffer] : module_.named_buffers()) state.push_back(buffer);
  broadcast_from_rank0(state);
  build_buckets();
  for (size_t i = 0; i < parameters_.size(); ++i) {
    parameters_[i].hook =
        parameters_[i].tensor.register_post_accumulate_grad_hook([this, i](const Tensor&) { on_gradient(i); });
  }
}

DistributedDataParallel::~DistributedDataParallel() {
  for (const Parameter& parameter : parameters_) parameter.tensor.remove_hook(parameter.hook);
}

// Every rank must wrap the same model: the ranks compare their parameter count and shapes.
void DistributedDataParallel::check_same_model_everywhere() {
  std::vector<int64_t> signature;
  for (const Parameter& parameter : parameters_) {
    signature.push_back(parameter.tensor.dim());
    for (int64_t size : parameter.tensor.sizes()) signature.push_back(size);
  }
  Tensor mine = from_vector(
      std::vector<int64_t>{static_cast<int64_t>(parameters_.size()), static_cast<int64_t>(signature.size())});
  std::vector<Tensor> counts(group_->size());
  for (Tensor& count : counts) count = zeros({2}, {.dtype = kInt64});
  group_->all_gather(counts, mine);
  std::vector<Tensor> signatures;
  for (const Tensor& count : counts) signatures.push_back(zeros({count.to_vector<int64_t>()[1]}, {.dtype = kInt64}));
  group_->all_gather(signatures, from_vector(signature));
  for (int r = 0; r < group_->size(); ++r) {
    DISTGRAD_CHECK(signatures[r].to_vector<int64_t>() == signature, "DistributedDataParallel: rank ", r,
                   "'s module has ", counts[r].to_vector<int64_t>()[0], " parameters of other shapes than rank ",
                   group_->rank(), "'s (", parameters_.size(), "); every rank must wrap the same model");
  }
}

// Rank 0's values into every rank's tensors: one broadcast per dtype and device.
void DistributedDataParallel::broadcast_from_rank0(const std::vector<Tensor>& tensors) {
  if (group_->size() == 1 || tensors.empty()) return;
  autograd::NoGradGuard no_grad;
  std::map<std::tuple<DType, std::string>, std::vector<Tensor>> groups;
  for (const Tensor& tensor : tensors) groups[{tensor.dtype(), tensor.device().str()}].push_back(tensor);
  for (const auto& [key, members] : groups) {
    int64_t total = 0;
    for (const Tensor& tensor : members) total += tensor.numel();
    Tensor flat = empty({total}, {.dtype = members[0].dtype(), .device = members[0].device()});
    std::vector<Tensor> views = unflatten(flat, members);
    for (size_t i = 0; i < members.size(); ++i) untracked::copy_(views[i], members[i]);
    group_->broadcast(flat, 0);
    for (size_t i = 0; i < members.size(); ++i) untracked::copy_(members[i], views[i]);
  }
}

void DistributedDataParallel::build_buckets() {
  std::map<std::tuple<DType, std::string>, size_t> open;  // the open bucket of each dtype and device
  std::vector<int64_t> bucket_bytes;
  for (size_t k = parameters_.size(); k-- > 0;) {
    Parameter& parameter = parameters_[k];
    const std::tuple<DType, std::string> key{parameter.tensor.dtype(), parameter.tensor.device().str()};
    auto found = open.find(key);
    if (found == open.end()) {
      found = open.emplace(key, buckets_.size()).first;
      buckets_.emplace_back();
      bucket_bytes.push_back(0);
    }
    const size_t b = found->second;
    Bucket& bucket = buckets_[b];
    parameter.bucket = b;
    parameter.offset = bucket_bytes[b] / static_cast<int64_t>(parameter.tensor.element_size());
    bucket.parameters.push_back(k);
    bucket_bytes[b] += static_cast<int64_t>(parameter.tensor.nbytes());
    const double cap = (b == 0 ? options_.first_bucket_cap_mb : options_.bucket_cap_mb) * kMiB;
    if (static_cast<double>(bucket_bytes[b]) >= cap) open.erase(found);
  }
  for (size_t b = 0; b < buckets_.size(); ++b) {
    const Tensor& first = parameters_[buckets_[b].parameters[0]].tensor;
    buckets_[b].buffer = zeros({bucket_bytes[b] / static_cast<int64_t>(first.element_size())},
                               {.dtype = first.dtype(), .device = first.device()});
  }
}

std::vector<std::vector<std::string>> DistributedDataParallel::bucket_parameter_names() const {
  std::vector<std::vector<std::string>> names;
  for (const Bucket& bucket : buckets_) {
    names.emplace_back();
    for (size_t index : bucket.parameters) names.back().push_back(parameters_[index].name);
  }
  return names;
}

Tensor DistributedDataParallel::forward(const Tensor& input) {
  if (options_.broadcast_buffers && group_->size() > 1) {
    std::vector<Tensor> buffers;
    for (const auto& [name, buffer] : module_.named_buffers()) buffers.push_back(buffer);
    broadcast_from_rank0(buffers);
  }
  // A new synchronized forward starts a new reduction; one interrupted by an error is dropped.
  expect_backward_ = sync_ && autograd::GradMode::is_enabled() && !parameters_.empty();
  backward_started_ = false;
  return module_.forward(input);
}

Tensor DistributedDataParallel::bucket_slot(const Parameter& parameter) const {
  return untracked::narrow(buckets_[parameter.bucket].buffer, 0, parameter.offset, parameter.tensor.numel());
}

void DistributedDataParallel::on_gradient(size_t index) {
  if (!expect_backward_) return;
  if (!backward_started_) {
    backward_started_ = true;
    for (Parameter& parameter : parameters_) parameter.ready = parameter.used = false;
    for (Bucket& bucket : buckets_) {
      bucket.pending = bucket.parameters.size();
      bucket.work.reset();
    }
    next_bucket_ = 0;
    timeline_ = {};
    autograd::Engine::queue_callback([this] { finish_backward(); });
  }
  Parameter& parameter = parameters_[index];
  DISTGRAD_CHECK(!parameter.ready, "DistributedDataParallel: parameter ", parameter.name,
                 " received a gradient twice in one backward pass (reentrant backward is not supported)");
  parameter.used = true;
  {
    autograd::NoGradGuard no_grad;
    untracked::copy_(bucket_slot(parameter), untracked::reshape(parameter.tensor.grad(), {parameter.tensor.numel()}));
  }
  timeline_.last_gradient = Clock::now();
  mark_ready(index);
}

void DistributedDataParallel::mark_ready(size_t index) {
  Parameter& parameter = parameters_[index];
  parameter.ready = true;
  --buckets_[parameter.bucket].pending;
  launch_ready_buckets();
}

void DistributedDataParallel::launch_ready_buckets() {
  while (next_bucket_ < buckets_.size() && buckets_[next_bucket_].pending == 0) {
    trace::Span span("ddp", "launch bucket");
    span.arg("bucket", static_cast<int64_t>(next_bucket_));
    Bucket& bucket = buckets_[next_bucket_++];
    span.arg("bytes", static_cast<int64_t>(bucket.buffer.nbytes()));
    // The ranks checked at construction that their buckets match (Note [Gradient buckets]).
    bucket.work = group_->all_reduce_async(bucket.buffer, ReduceOp::kAvg, CallCheck::kSkip);
    timeline_.bucket_launched.push_back(Clock::now());
  }
}

void DistributedDataParallel::finish_backward() {
  expect_backward_ = false;
  std::vector<std::string> missing;
  for (size_t i = 0; i < parameters_.size(); ++i) {
    if (parameters_[i].ready) continue;
    if (!options_.find_unused_parameters) {
      missing.push_back(parameters_[i].name);
      continue;
    }
    untracked::zero_(bucket_slot(parameters_[i]));
    mark_ready(i);
  }
  if (!missing.empty()) {
    std::string names;
    for (const std::string& name : missing) names += (names.empty() ? "" : ", ") + name;
    for (Bucket& bucket : buckets_) {
      if (bucket.work) bucket.work->wait();
    }
    DISTGRAD_FAIL("DistributedDataParallel: these parameters received no gradient in this backward pass on rank ",
                  group_->rank(), ": ", names, ". Pass find_unused_parameters = true when some parameters do not ",
                  "take part in the loss (the other ranks' all-reduces will time out)");
  }
  // With find_unused_parameters the ranks also count who used each parameter.
  Tensor used_counts;
  std::shared_ptr<Work> used_work;
  if (options_.find_unused_parameters) {
    std::vector<int64_t> used(parameters_.size());
    for (size_t i = 0; i < parameters_.size(); ++i) used[i] = parameters_[i].used ? 1 : 0;
    used_counts = from_vector(used);
    used_work = group_->all_reduce_async(used_counts, ReduceOp::kSum);
  }
  for (Bucket& bucket : buckets_) bucket.work->wait();
  std::vector<int64_t> used_anywhere;
  if (used_work) {
    used_work->wait();
    used_anywhere = used_counts.to_vector<int64_t>();
  }
  autograd::NoGradGuard no_grad;
  for (size_t i = 0; i < parameters_.size(); ++i) {
    const Parameter& parameter = parameters_[i];
    if (!used_anywhere.empty() && used_anywhere[i] == 0) continue;
    const Tensor averaged = untracked::view(bucket_slot(parameter), parameter.tensor.sizes());
    const Tensor grad = parameter.tensor.grad();
    if (grad.defined()) {
      untracked::copy_(grad, averaged);
    } else {
      Tensor fresh = empty_like(averaged);
      untracked::copy_(fresh, averaged);
      parameter.tensor.set_grad(fresh);
    }
  }
  timeline_.finished = Clock::now();
}

}  // namespace distgrad::ddp
