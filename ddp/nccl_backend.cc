// The CUDA backend: NCCL, one communicator per group on one device per rank, on a stream of
// its own.
//
// Note [NCCL streams and the watchdog]
// A collective first makes the group's stream wait for everything already queued on the
// device's current stream (Note [One stream per device] in core/cuda/runtime.h), so it reads
// finished inputs; it then runs on the group's stream, and an event recorded after it marks its
// end. A watchdog thread polls those events: a finished one finishes its Work (and lets go of
// the tensors the Work kept alive, so the caching allocator cannot hand their memory out while
// NCCL still uses it). It also polls the communicator for asynchronous errors, and when a
// collective is still running after the group's timeout (a rank died or went elsewhere) it
// aborts the communicator, which stops NCCL's kernels, and fails that Work and every later one:
// a dead peer never hangs the others. Work::wait returns once the event completed, so the
// result is ready for any stream.
//
// Rendezvous: rank 0 makes the unique id and puts it in the Store; every rank waits there
// (bounded by the timeout) for the id and for every other rank's arrival before it calls
// ncclCommInitRank, so that the blocking init cannot wait on a rank that never comes.
#include <cuda_runtime.h>
#include <nccl.h>

#include <condition_variable>
#include <cstring>
#include <deque>
#include <mutex>
#include <thread>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "core/cuda/cuda_check.h"
#include "core/cuda/runtime.h"
#include "core/error.h"
#include "ddp/collective_backend.h"
#include "rendezvous/job_store.h"

#define DISTGRAD_NCCL_CHECK(expr)                                                                         \
  do {                                                                                                    \
    const ncclResult_t distgrad_nccl_result = (expr);                                                     \
    if (distgrad_nccl_result != ncclSuccess) [[unlikely]] {                                               \
      DISTGRAD_FAIL("NCCL call ", #expr, " failed with ", ncclGetErrorString(distgrad_nccl_result), " (", \
                    ncclGetLastError(nullptr), ")");                                                      \
    }                                                                                                     \
  } while (0)

namespace distgrad::ddp {
namespace {

using Clock = std::chrono::steady_clock;

ncclDataType_t nccl_type(DType dtype) {
  switch (dtype) {
    case DType::kFloat32: return ncclFloat32;
    case DType::kFloat64: return ncclFloat64;
    case DType::kInt64: return ncclInt64;
    case DType::kFloat16: return ncclFloat16;
    case DType::kBFloat16: return ncclBfloat16;
    case DType::kBool: break;
  }
  DISTGRAD_FAIL("nccl: unsupported dtype ", dtype_name(dtype));
}

ncclRedOp_t nccl_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum: return ncclSum;
    case ReduceOp::kAvg: return ncclAvg;
    case ReduceOp::kMax: return ncclMax;
    case ReduceOp::kMin: return ncclMin;
    case ReduceOp::kProduct: return ncclProd;
  }
  DISTGRAD_FAIL("nccl: unknown reduce op");
}

class NcclBackend final : public CollectiveBackend {
 public:
  NcclBackend(const GroupSetup& setup, int device) : setup_(setup), device_(device) {
    cuda::detail::check_device(device);
    cuda::detail::DeviceGuard guard(device);
    rendezvous::StoreClient& store = setup.store->client();
    ncclUniqueId id;
    if (setup.rank == 0) {
      DISTGRAD_NCCL_CHECK(ncclGetUniqueId(&id));
      store.set(setup.key_prefix + "unique_id", std::string(id.internal, sizeof id.internal));
    }
    std::vector<std::string> arrivals;
    for (int rank = 0; rank < setup.size; ++rank)
      arrivals.push_back(setup.key_prefix + "arrived/" + std::to_string(rank));
    store.set(arrivals[setup.rank], "1");
    const std::vector<std::string> missing = store.wait_for(arrivals, setup.timeout);
    DISTGRAD_CHECK(missing.empty(), "process group '", setup.group_name, "': rank ", setup.rank, " of ", setup.size,
                   " waited ", setup.timeout.count(), " ms for the other ranks' first CUDA collective; ",
                   missing.size(), " rank(s) did not arrive");
    const std::string id_bytes = store.get(setup.key_prefix + "unique_id", setup.timeout);
    DISTGRAD_CHECK(id_bytes.size() == sizeof id.internal, "process group '", setup.group_name,
                   "': the NCCL unique id in the Store has ", id_bytes.size(), " bytes, expected ", sizeof id.internal);
    std::memcpy(id.internal, id_bytes.data(), sizeof id.internal);
    DISTGRAD_NCCL_CHECK(ncclCommInitRank(&comm_, setup.size, id, setup.rank));
    DISTGRAD_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    DISTGRAD_CUDA_CHECK(cudaMalloc(&barrier_value_, sizeof(float)));
    watchdog_ = std::thread([this] { watch(); });
  }

  ~NcclBackend() override {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stopping_ = true;
      changed_.notify_all();
    }
    watchdog_.join();
    cuda::detail::DeviceGuard guard(device_);
    if (aborted_) {
      ncclCommAbort(comm_);
    } else {
      ncclCommDestroy(comm_);
    }
    cudaFree(barrier_value_);
    cudaStreamDestroy(stream_);
  }

  const char* name() const override { return "nccl"; }

  void all_reduce(const Tensor& tensor, ReduceOp op, std::shared_ptr<Work> work, const Launch&) override {
    launch(std::move(work), {tensor}, [&] {
      DISTGRAD_NCCL_CHECK(ncclAllReduce(tensor.data_ptr(), tensor.data_ptr(), tensor.numel(), nccl_type(tensor.dtype()),
                                        nccl_op(op), comm_, stream_));
    });
  }

  void broadcast(const Tensor& tensor, int root, std::shared_ptr<Work> work, const Launch&) override {
    launch(std::move(work), {tensor}, [&] {
      DISTGRAD_NCCL_CHECK(ncclBroadcast(tensor.data_ptr(), tensor.data_ptr(), tensor.numel(), nccl_type(tensor.dtype()),
                                        root, comm_, stream_));
    });
  }

  // One broadcast per rank in a group call: uneven sizes need no staging buffer.
  void all_gather(const std::vector<Tensor>& outputs, const Tensor& input, std::shared_ptr<Work> work,
                  const Launch&) override {
    std::vector<Tensor> keep(outputs);
    keep.push_back(input);
    launch(std::move(work), std::move(keep), [&] {
      DISTGRAD_NCCL_CHECK(ncclGroupStart());
      for (int r = 0; r < setup_.size; ++r) {
        const void* send = r == setup_.rank ? input.data_ptr() : outputs[r].data_ptr();
        DISTGRAD_NCCL_CHECK(ncclBroadcast(send, outputs[r].data_ptr(), outputs[r].numel(), nccl_type(input.dtype()), r,
                                          comm_, stream_));
      }
      DISTGRAD_NCCL_CHECK(ncclGroupEnd());
    });
  }

  // One reduce per rank in a group call, each to its rank: uneven shares need no staging.
  void reduce_scatter(const Tensor& output, const std::vector<Tensor>& inputs, ReduceOp op, std::shared_ptr<Work> work,
                      const Launch&) override {
    std::vector<Tensor> keep(inputs);
    keep.push_back(output);
    launch(std::move(work), std::move(keep), [&] {
      DISTGRAD_NCCL_CHECK(ncclGroupStart());
      for (int r = 0; r < setup_.size; ++r) {
        void* receive = r == setup_.rank ? output.data_ptr() : nullptr;
        DISTGRAD_NCCL_CHECK(ncclReduce(inputs[r].data_ptr(), receive, inputs[r].numel(), nccl_type(output.dtype()),
                                       nccl_op(op), r, comm_, stream_));
      }
      DISTGRAD_NCCL_CHECK(ncclGroupEnd());
    });
  }

  void barrier(std::shared_ptr<Work> work, const Launch&) override {
    launch(std::move(work), {}, [&] {
      DISTGRAD_NCCL_CHECK(ncclAllReduce(barrier_value_, barrier_value_, 1, ncclFloat32, ncclSum, comm_, stream_));
    });
  }

 private:
  struct Pending {
    std::shared_ptr<Work> work;
    std::vector<Tensor> tensors;  // kept alive until the collective finished
    cudaEvent_t done = nullptr;
    Clock::time_point deadline;
  };

  // Orders the collective after the device's queued work, issues it, and hands it to the
  // watchdog (Note [NCCL streams and the watchdog]).
  template <typename Issue>
  void launch(std::shared_ptr<Work> work, std::vector<Tensor> tensors, Issue&& issue) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (!first_failure_.empty()) {
        work->finish(std::make_exception_ptr(Error(
            work->description() + " did not run: the group is unusable after an earlier failure: " + first_failure_)));
        return;
      }
    }
    Pending pending{std::move(work), std::move(tensors), nullptr, Clock::now() + setup_.timeout};
    try {
      cuda::detail::DeviceGuard guard(device_);
      cudaEvent_t inputs_ready;
      DISTGRAD_CUDA_CHECK(cudaEventCreateWithFlags(&inputs_ready, cudaEventDisableTiming));
      DISTGRAD_CUDA_CHECK(cudaEventRecord(inputs_ready, cuda::detail::current_stream(device_)));
      DISTGRAD_CUDA_CHECK(cudaStreamWaitEvent(stream_, inputs_ready, 0));
      DISTGRAD_CUDA_CHECK(cudaEventDestroy(inputs_ready));
      issue();
      DISTGRAD_CUDA_CHECK(cudaEventCreateWithFlags(&pending.done, cudaEventDisableTiming));
      DISTGRAD_CUDA_CHECK(cudaEventRecord(pending.done, stream_));
    } catch (const std::exception& error) {
      fail(pending, error.what());
      return;
    }
    std::lock_guard<std::mutex> lock(mutex_);
    pending_.push_back(std::move(pending));
    changed_.notify_all();
  }

  void fail(Pending& pending, const std::string& why) {
    std::string message;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      message = pending.work->description() + " failed: " + why;
      if (first_failure_.empty()) first_failure_ = message;
    }
    pending.work->finish(std::make_exception_ptr(Error(message)));
  }

  // The watchdog thread (Note [NCCL streams and the watchdog]).
  void watch() {
    cuda::detail::DeviceGuard guard(device_);
    std::unique_lock<std::mutex> lock(mutex_);
    for (;;) {
      changed_.wait_for(lock, std::chrono::milliseconds(1), [this] { return stopping_ || !pending_.empty(); });
      if (pending_.empty()) {
        if (stopping_) return;
        continue;
      }
      Pending& oldest = pending_.front();
      const cudaError_t state = cudaEventQuery(oldest.done);
      if (state == cudaSuccess) {
        Pending finished = std::move(oldest);
        pending_.pop_front();
        lock.unlock();
        cudaEventDestroy(finished.done);
        finished.work->finish();
        finished.tensors.clear();
        lock.lock();
        continue;
      }
      std::string why;
      ncclResult_t async_error = ncclSuccess;
      ncclCommGetAsyncError(comm_, &async_error);
      if (async_error != ncclSuccess && async_error != ncclInProgress) {
        why = std::string("NCCL reported ") + ncclGetErrorString(async_error);
      } else if (state != cudaErrorNotReady) {
        why = std::string("CUDA reported ") + cudaGetErrorName(state);
      } else if (Clock::now() > oldest.deadline) {
        why = "timed out after " + std::to_string(setup_.timeout.count()) +
              " ms (a rank may have died, or not called the same collective); the communicator was aborted";
      } else {
        continue;
      }
      // Abort, and fail this collective and every one queued after it.
      if (!aborted_) {
        ncclCommAbort(comm_);
        aborted_ = true;
        comm_ = nullptr;
      }
      std::deque<Pending> failed = std::move(pending_);
      pending_.clear();
      const std::string message = failed.front().work->description() + " failed: " + why;
      if (first_failure_.empty()) first_failure_ = message;
      lock.unlock();
      for (Pending& pending : failed) {
        pending.work->finish(std::make_exception_ptr(
            Error(pending.work == failed.front().work ? message
                                                      : pending.work->description() + " did not finish: " + message)));
      }
      lock.lock();
    }
  }

  const GroupSetup setup_;
  const int device_;
  ncclComm_t comm_ = nullptr;
  cudaStream_t stream_ = nullptr;
  float* barrier_value_ = nullptr;
  std::mutex mutex_;  // guards pending_, first_failure_, stopping_ and aborted_
  std::condition_variable changed_;
  std::deque<Pending> pending_ ABSL_GUARDED_BY(mutex_);
  std::string first_failure_ ABSL_GUARDED_BY(mutex_);
  bool stopping_ ABSL_GUARDED_BY(mutex_) = false;
  bool aborted_ = false;  // written by the watchdog under mutex_, read after it stopped
  std::thread watchdog_;
};

}  // namespace

std::unique_ptr<CollectiveBackend> make_nccl_backend(const GroupSetup& setup, int device) {
  return std::make_unique<NcclBackend>(setup, device);
}

}  // namespace distgrad::ddp
