#include "ddp/process_group.h"

#include <algorithm>
#include <numeric>
#include <utility>

#include "core/error.h"
#include "core/shape.h"
#include "ddp/collective_backend.h"
#include "rendezvous/job_store.h"
#include "rendezvous/world.h"
#include "trace/trace.h"

namespace distgrad::ddp {
namespace {

// Work::wait gives up this long after the group's timeout: a backend fails a collective at the
// timeout itself, so the margin only covers the failure's way back.
constexpr std::chrono::seconds kWaitMargin{10};

std::string shape_of(const Tensor& tensor) {
  return std::string(dtype_name(tensor.dtype())) + shape_str(tensor.sizes());
}

// The checks every tensor argument of a collective passes.
void check_tensor(const Tensor& tensor, const char* op, const std::string& what) {
  DISTGRAD_CHECK(tensor.defined(), op, ": ", what, " is an undefined tensor");
  DISTGRAD_CHECK(tensor.dtype() != DType::kBool, op, ": ", what, " is a bool tensor; collectives take float32, ",
                 "float64, int64, float16 or bfloat16 tensors");
  DISTGRAD_CHECK(tensor.is_contiguous(), op, ": ", what, " (", tensor.describe(), " with strides ",
                 shape_str(tensor.strides()), ") is not contiguous; pass untracked::contiguous(tensor) and copy back");
}

void check_like(const Tensor& tensor, const Tensor& reference, const char* op, const std::string& what,
                const std::string& reference_name) {
  check_tensor(tensor, op, what);
  DISTGRAD_CHECK(tensor.dtype() == reference.dtype() && tensor.device() == reference.device(), op, ": ", what, " is a ",
                 tensor.describe(), ", expected ", dtype_name(reference.dtype()), " on ", reference.device().str(),
                 " like ", reference_name);
}

void check_reduce_op(const Tensor& tensor, ReduceOp op, const char* name) {
  DISTGRAD_CHECK(op != ReduceOp::kAvg || tensor.dtype() != DType::kInt64, name,
                 ": avg needs a floating-point tensor, found int64 (use sum and divide)");
}

// A hash of element counts, for CallSignature (Note [Checking that the ranks agree]).
int64_t counts_hash(const std::vector<Tensor>& tensors) {
  uint64_t hash = 1469598103934665603ULL;  // FNV-1a over the counts
  for (const Tensor& tensor : tensors) {
    hash ^= static_cast<uint64_t>(tensor.numel());
    hash *= 1099511628211ULL;
  }
  return static_cast<int64_t>(hash >> 1);
}

// Whether a 0/1 switch of the environment is set to 0.
bool switched_off(const char* name) {
  const std::optional<bool> on = rendezvous::getenv_switch(name, "process group");
  return on.has_value() && !*on;
}

std::mutex default_group_mutex;
std::shared_ptr<ProcessGroup> default_group;  // guarded by default_group_mutex

}  // namespace

CallMismatch signature_mismatch(size_t field) {
  static constexpr const char* kFields[] = {"collective", "dtype", "op or root", "element counts"};
  return CallMismatch(std::string("the ranks did not pass the same ") + kFields[field] +
                      (field == 3 ? " (tensor sizes differ between ranks)" : "") + "; nothing was sent");
}

std::string_view to_string(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum: return "sum";
    case ReduceOp::kAvg: return "avg";
    case ReduceOp::kMax: return "max";
    case ReduceOp::kMin: return "min";
    case ReduceOp::kProduct: return "product";
  }
  return "unknown";
}

ProcessGroup::ProcessGroup(std::string name, int rank, std::vector<int> global_ranks, ProcessGroupOptions options,
                           std::shared_ptr<rendezvous::JobStore> store)
    : name_(std::move(name)),
      rank_(rank),
      global_ranks_(std::move(global_ranks)),
      options_(options),
      store_(std::move(store)) {
  DISTGRAD_CHECK(options_.timeout.count() > 0, "process group '", name_, "': the timeout must be positive, found ",
                 options_.timeout.count(), " ms");
  if (options_.backend != Backend::kNccl) {
    GroupSetup setup{.group_name = name_,
                     .rank = rank_,
                     .size = size(),
                     .timeout = options_.timeout,
                     .store = store_.get(),
                     .key_prefix = store_->key("ddp", name_ + "/shm/"),
                     .shared_memory = options_.shared_memory && !switched_off("DISTGRAD_SHM") &&
                                      !switched_off("DISTGRAD_SAME_HOST")};
    cpu_ = make_shared_memory_backend(setup);
    if (!cpu_) {
      setup.key_prefix = store_->key("ddp", name_ + "/gloo/");
      cpu_ = make_gloo_backend(setup);
    }
  }
}

ProcessGroup::~ProcessGroup() = default;

std::string ProcessGroup::backend_name() const {
  std::lock_guard<std::mutex> lock(cuda_mutex_);
  if (cpu_ && cuda_) return std::string(cpu_->name()) + "+nccl";
  return cpu_ ? cpu_->name() : "nccl";
}

CollectiveBackend& ProcessGroup::backend_for(Device device, const char* op) {
  if (device.is_cpu()) {
    DISTGRAD_CHECK(cpu_ != nullptr, op, ": process group '", name_,
                   "' uses the NCCL backend, which takes CUDA tensors; found a CPU tensor (use backend kAuto or kCpu "
                   "for CPU tensors)");
    return *cpu_;
  }
  DISTGRAD_CHECK(options_.backend != Backend::kCpu, op, ": process group '", name_,
                 "' uses the CPU backend (Gloo), which takes CPU tensors; found a tensor on ", device.str(),
                 " (use backend kAuto or kNccl)");
  std::lock_guard<std::mutex> lock(cuda_mutex_);
  if (!cuda_) {
    cuda_ = make_nccl_backend({.group_name = name_,
                               .rank = rank_,
                               .size = size(),
                               .timeout = options_.timeout,
                               .store = store_.get(),
                               .key_prefix = store_->key("ddp", name_ + "/nccl/")},
                              device.index);
    cuda_device_ = device.index;
  }
  DISTGRAD_CHECK(device.index == cuda_device_, op, ": process group '", name_, "' runs NCCL on cuda:", cuda_device_,
                 ", found a tensor on ", device.str(), " (one device per rank)");
  return *cuda_;
}

std::shared_ptr<Work> ProcessGroup::new_work(std::string what) const {
  return std::make_shared<Work>(
      what + " in group '" + name_ + "' (rank " + std::to_string(rank_) + " of " + std::to_string(size()) + ")",
      Work::Clock::now() + options_.timeout + kWaitMargin);
}

Launch ProcessGroup::launch(CallSignature signature, CallCheck check, bool caller_waits) const {
  return {signature, options_.check_calls && check != CallCheck::kSkip && size() > 1, caller_waits};
}

// The blocking forms wait at once, so a CPU backend may run them on this thread.
void ProcessGroup::all_reduce(const Tensor& tensor, ReduceOp op) {
  start_all_reduce(tensor, op, CallCheck::kAsConfigured, true)->wait();
}
std::shared_ptr<Work> ProcessGroup::all_reduce_async(const Tensor& tensor, ReduceOp op, CallCheck check) {
  return start_all_reduce(tensor, op, check, false);
}
void ProcessGroup::broadcast(const Tensor& tensor, int root) { start_broadcast(tensor, root, true)->wait(); }
std::shared_ptr<Work> ProcessGroup::broadcast_async(const Tensor& tensor, int root) {
  return start_broadcast(tensor, root, false);
}
void ProcessGroup::all_gather(const std::vector<Tensor>& outputs, const Tensor& input) {
  start_all_gather(outputs, input, true)->wait();
}
std::shared_ptr<Work> ProcessGroup::all_gather_async(const std::vector<Tensor>& outputs, const Tensor& input) {
  return start_all_gather(outputs, input, false);
}
void ProcessGroup::reduce_scatter(const Tensor& output, const std::vector<Tensor>& inputs, ReduceOp op) {
  start_reduce_scatter(output, inputs, op, true)->wait();
}
std::shared_ptr<Work> ProcessGroup::reduce_scatter_async(const Tensor& output, const std::vector<Tensor>& inputs,
                                                         ReduceOp op) {
  return start_reduce_scatter(output, inputs, op, false);
}
void ProcessGroup::barrier() { start_barrier(true)->wait(); }
std::shared_ptr<Work> ProcessGroup::barrier_async() { return start_barrier(false); }

std::shared_ptr<Work> ProcessGroup::start_all_reduce(const Tensor& tensor, ReduceOp op, CallCheck check,
                                                     bool caller_waits) {
  check_tensor(tensor, "all_reduce", "the tensor");
  check_reduce_op(tensor, op, "all_reduce");
  CollectiveBackend& backend = backend_for(tensor.device(), "all_reduce");
  auto work = new_work("all_reduce(" + std::string(to_string(op)) + ") of " + shape_of(tensor));
  backend.all_reduce(
      tensor, op, work,
      launch({1, static_cast<int64_t>(tensor.dtype()), static_cast<int64_t>(op), tensor.numel()}, check, caller_waits));
  return work;
}

std::shared_ptr<Work> ProcessGroup::start_broadcast(const Tensor& tensor, int root, bool caller_waits) {
  check_tensor(tensor, "broadcast", "the tensor");
  DISTGRAD_CHECK(root >= 0 && root < size(), "broadcast: root ", root, " is not a rank of group '", name_, "' (size ",
                 size(), ")");
  CollectiveBackend& backend = backend_for(tensor.device(), "broadcast");
  auto work = new_work("broadcast from rank " + std::to_string(root) + " of " + shape_of(tensor));
  backend.broadcast(
      tensor, root, work,
      launch({2, static_cast<int64_t>(tensor.dtype()), root, tensor.numel()}, CallCheck::kAsConfigured, caller_waits));
  return work;
}

std::shared_ptr<Work> ProcessGroup::start_all_gather(const std::vector<Tensor>& outputs, const Tensor& input,
                                                     bool caller_waits) {
  check_tensor(input, "all_gather", "the input");
  DISTGRAD_CHECK(static_cast<int>(outputs.size()) == size(), "all_gather: expected one output per rank (", size(),
                 " in group '", name_, "'), found ", outputs.size());
  for (size_t r = 0; r < outputs.size(); ++r) {
    check_like(outputs[r], input, "all_gather", "outputs[" + std::to_string(r) + "]", "the input");
  }
  DISTGRAD_CHECK(outputs[rank_].numel() == input.numel(), "all_gather: outputs[", rank_, "] (this rank's) has ",
                 outputs[rank_].numel(), " elements, the input ", input.numel());
  CollectiveBackend& backend = backend_for(input.device(), "all_gather");
  auto work = new_work("all_gather of " + shape_of(input));
  backend.all_gather(outputs, input, work,
                     launch({3, static_cast<int64_t>(input.dtype()), 0, counts_hash(outputs)}, CallCheck::kAsConfigured,
                            caller_waits));
  return work;
}

std::shared_ptr<Work> ProcessGroup::start_reduce_scatter(const Tensor& output, const std::vector<Tensor>& inputs,
                                                         ReduceOp op, bool caller_waits) {
  check_tensor(output, "reduce_scatter", "the output");
  check_reduce_op(output, op, "reduce_scatter");
  DISTGRAD_CHECK(static_cast<int>(inputs.size()) == size(), "reduce_scatter: expected one input per rank (", size(),
                 " in group '", name_, "'), found ", inputs.size());
  for (size_t r = 0; r < inputs.size(); ++r) {
    check_like(inputs[r], output, "reduce_scatter", "inputs[" + std::to_string(r) + "]", "the output");
  }
  DISTGRAD_CHECK(inputs[rank_].numel() == output.numel(), "reduce_scatter: the output has ", output.numel(),
                 " elements, inputs[", rank_, "] (this rank's share) ", inputs[rank_].numel());
  CollectiveBackend& backend = backend_for(output.device(), "reduce_scatter");
  auto work = new_work("reduce_scatter(" + std::string(to_string(op)) + ") into " + shape_of(output));
  backend.reduce_scatter(
      output, inputs, op, work,
      launch({4, static_cast<int64_t>(output.dtype()), static_cast<int64_t>(op), counts_hash(inputs)},
             CallCheck::kAsConfigured, caller_waits));
  return work;
}

std::shared_ptr<Work> ProcessGroup::start_barrier(bool caller_waits) {
  auto work = new_work("barrier");
  const Launch barrier_launch = launch({5, 0, 0, 0}, CallCheck::kSkip, caller_waits);
  if (cpu_) {
    cpu_->barrier(work, barrier_launch);
  } else {
    // An NCCL-only group: a one-element all-reduce on its device, as PyTorch's NCCL barrier.
    std::lock_guard<std::mutex> lock(cuda_mutex_);
    DISTGRAD_CHECK(cuda_ != nullptr, "barrier: process group '", name_,
                   "' uses NCCL only and has not run a collective yet, so it does not know its device; run one first "
                   "or use backend kAuto");
    cuda_->barrier(work, barrier_launch);
  }
  return work;
}

std::shared_ptr<ProcessGroup> init_process_group(ProcessGroupOptions options) {
  std::lock_guard<std::mutex> lock(default_group_mutex);
  DISTGRAD_CHECK(default_group == nullptr,
                 "init_process_group: the default process group exists already (call destroy_process_group first)");
  std::shared_ptr<rendezvous::JobStore> store = rendezvous::JobStore::connect("init_process_group", options.timeout);
  const rendezvous::WorldInfo& world = store->world();
  // A job without RPC records too; its clocks are not measured (one host shares one clock).
  if (trace::start_from_environment()) trace::set_process(world.rank, "rank " + std::to_string(world.rank));
  std::vector<int> ranks(world.world_size);
  std::iota(ranks.begin(), ranks.end(), 0);
  default_group = std::make_shared<ProcessGroup>("world", world.rank, std::move(ranks), options, std::move(store));
  return default_group;
}

std::shared_ptr<ProcessGroup> default_process_group() {
  std::lock_guard<std::mutex> lock(default_group_mutex);
  DISTGRAD_CHECK(default_group != nullptr,
                 "ddp: no default process group; call ddp::init_process_group() first (on every rank)");
  return default_group;
}

bool is_initialized() {
  std::lock_guard<std::mutex> lock(default_group_mutex);
  return default_group != nullptr;
}

void destroy_process_group() {
  std::shared_ptr<ProcessGroup> group;
  {
    std::lock_guard<std::mutex> lock(default_group_mutex);
    group = std::move(default_group);
  }
  if (group) group->store()->leave("ddp", std::chrono::seconds(30));
}

std::shared_ptr<ProcessGroup> new_group(const std::vector<int>& ranks) {
  return new_group(ranks, default_process_group()->options());
}

std::shared_ptr<ProcessGroup> new_group(const std::vector<int>& ranks, ProcessGroupOptions options) {
  std::shared_ptr<ProcessGroup> world = default_process_group();
  DISTGRAD_CHECK(!ranks.empty(), "new_group: expected at least one rank, found none");
  for (size_t i = 0; i < ranks.size(); ++i) {
    DISTGRAD_CHECK(ranks[i] >= 0 && ranks[i] < world->size(), "new_group: rank ", ranks[i],
                   " is not in the job (world size ", world->size(), ")");
    DISTGRAD_CHECK(i == 0 || ranks[i] > ranks[i - 1], "new_group: expected distinct ranks in increasing order, found ",
                   shape_str(Shape(ranks.begin(), ranks.end())));
  }
  const std::string name = "group" + std::to_string(world->next_group_number());
  const auto me = std::find(ranks.begin(), ranks.end(), world->rank());
  if (me == ranks.end()) return nullptr;
  return std::make_shared<ProcessGroup>(name, static_cast<int>(me - ranks.begin()), ranks, options, world->store());
}

}  // namespace distgrad::ddp
