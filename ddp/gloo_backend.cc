// The CPU backend: Gloo's collectives over its TCP transport, one context (a full mesh of TCP
// pairs) per group, connected through the job's Store.
//
// Note [One Gloo thread per group]
// Gloo's collectives block the calling thread, and a context runs one at a time correctly only
// if every rank runs them in the same order. Each group therefore has one thread that runs its
// collectives in the order they were called (as PyTorch's ProcessGroupGloo does with one
// thread), and the _async calls only queue them: DDP's bucket all-reduces run while backward
// goes on. Every Gloo call carries the group's timeout, so the thread never blocks longer than
// that; after a failure the context is in an unknown state, and the thread fails every later
// collective at once with the first failure's message.
#include <gloo/allgatherv.h>
#include <gloo/allreduce.h>
#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/math.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/store.h>
#include <gloo/transport/tcp/device.h>

#include <array>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <functional>
#include <mutex>
#include <numeric>
#include <thread>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "core/error.h"
#include "ddp/collective_backend.h"
#include "rpc/job_store.h"
#include "rpc/net_util.h"

namespace distgrad::ddp {
namespace {

// The job's Store as Gloo's rendezvous sees it: keys under the group's prefix, values as bytes.
class GlooStore final : public gloo::rendezvous::Store {
 public:
  GlooStore(rpc::StoreClient& client, std::string prefix, std::chrono::milliseconds timeout)
      : client_(client), prefix_(std::move(prefix)), timeout_(timeout) {}

  void set(const std::string& key, const std::vector<char>& data) override {
    client_.set(prefix_ + key, std::string(data.begin(), data.end()));
  }
  std::vector<char> get(const std::string& key) override {
    const std::string value = client_.get(prefix_ + key, timeout_);
    return {value.begin(), value.end()};
  }
  void wait(const std::vector<std::string>& keys) override { wait(keys, timeout_); }
  void wait(const std::vector<std::string>& keys, const std::chrono::milliseconds& timeout) override {
    std::vector<std::string> prefixed;
    for (const std::string& key : keys) prefixed.push_back(prefix_ + key);
    client_.wait(prefixed, timeout);
  }

 private:
  rpc::StoreClient& client_;
  const std::string prefix_;
  const std::chrono::milliseconds timeout_;
};

using ReduceFunction = void (*)(void*, const void*, const void*, size_t);

template <typename T>
ReduceFunction reduce_function(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAvg: return &gloo::sum<T>;
    case ReduceOp::kProduct: return &gloo::product<T>;
    case ReduceOp::kMax: return &gloo::max<T>;
    case ReduceOp::kMin: return &gloo::min<T>;
  }
  DISTGRAD_FAIL("gloo: unknown reduce op");
}

// Calls f(T{}) with T the C++ type of `dtype` (float32, float64 or int64: the group checked).
template <typename F>
void with_type(DType dtype, F&& f) {
  switch (dtype) {
    case DType::kFloat32: f(float{}); return;
    case DType::kFloat64: f(double{}); return;
    case DType::kInt64: f(int64_t{}); return;
    case DType::kBool: break;
  }
  DISTGRAD_FAIL("gloo: unsupported dtype ", dtype_name(dtype));
}

// Divides `count` elements at `data` by `divisor` (kAvg after a sum).
template <typename T>
void divide(T* data, size_t count, int divisor) {
  for (size_t i = 0; i < count; ++i) data[i] /= static_cast<T>(divisor);
}

// Gloo's messages name a source file and a socket; say what they mean for the user first.
std::string explain(const std::string& gloo_message) {
  if (gloo_message.find("Timed out") != std::string::npos) {
    return "timed out (a rank may have died, or not called the same collective): " + gloo_message;
  }
  if (gloo_message.find("Connection reset") != std::string::npos ||
      gloo_message.find("Connection closed") != std::string::npos ||
      gloo_message.find("Broken pipe") != std::string::npos) {
    return "a rank closed its connection (it probably died): " + gloo_message;
  }
  return gloo_message;
}

class GlooBackend final : public CollectiveBackend {
 public:
  explicit GlooBackend(const GroupSetup& setup) : setup_(setup) {
    const rpc::WorldInfo& world = setup.store->world();
    gloo::transport::tcp::attr attr(rpc::local_address_towards(world.master_addr, world.master_port).c_str());
    device_ = gloo::transport::tcp::CreateDevice(attr);
    auto context = std::make_shared<gloo::rendezvous::Context>(setup.rank, setup.size);
    context->setTimeout(setup.timeout);
    GlooStore store(setup.store->client(), setup.key_prefix, setup.timeout);
    try {
      context->connectFullMesh(store, device_);
    } catch (const std::exception& error) {
      DISTGRAD_FAIL("process group '", setup.group_name, "': rank ", setup.rank, " of ", setup.size,
                    " could not connect Gloo to the other ranks within ", setup.timeout.count(),
                    " ms: ", explain(error.what()));
    }
    context_ = std::move(context);
    thread_ = std::thread([this] { run(); });
  }

  ~GlooBackend() override {
    {
      std::lock_guard<std::mutex> lock(queue_mutex_);
      stopping_ = true;
      queue_changed_.notify_all();
    }
    thread_.join();
  }

  const char* name() const override { return "gloo"; }

  void all_reduce(const Tensor& tensor, ReduceOp op, std::shared_ptr<Work> work, Verify verify) override {
    enqueue(std::move(work), verify, [this, tensor, op] {
      if (tensor.numel() == 0) return;
      with_type(tensor.dtype(), [&](auto zero) {
        using T = decltype(zero);
        all_reduce_in_place(static_cast<T*>(tensor.data_ptr()), static_cast<size_t>(tensor.numel()), op);
        if (op == ReduceOp::kAvg) divide(static_cast<T*>(tensor.data_ptr()), tensor.numel(), setup_.size);
      });
    });
  }

  void broadcast(const Tensor& tensor, int root, std::shared_ptr<Work> work, Verify verify) override {
    enqueue(std::move(work), verify, [this, tensor, root] {
      if (tensor.numel() == 0 || setup_.size == 1) return;
      with_type(tensor.dtype(), [&](auto zero) {
        using T = decltype(zero);
        gloo::BroadcastOptions options(context_);
        options.setOutput(static_cast<T*>(tensor.data_ptr()), static_cast<size_t>(tensor.numel()));
        options.setRoot(root);
        options.setTag(next_tag());
        options.setTimeout(setup_.timeout);
        gloo::broadcast(options);
      });
    });
  }

  void all_gather(const std::vector<Tensor>& outputs, const Tensor& input, std::shared_ptr<Work> work,
                  Verify verify) override {
    enqueue(std::move(work), verify, [this, outputs, input] {
      std::vector<size_t> counts;
      for (const Tensor& output : outputs) counts.push_back(static_cast<size_t>(output.numel()));
      const size_t total = std::accumulate(counts.begin(), counts.end(), size_t{0});
      const size_t element = input.element_size();
      if (total == 0) return;
      with_type(input.dtype(), [&](auto zero) {
        using T = decltype(zero);
        std::vector<T> gathered(total);
        gloo::AllgathervOptions options(context_);
        options.setInput(static_cast<T*>(input.data_ptr()), static_cast<size_t>(input.numel()));
        options.setOutput(gathered.data(), counts);
        options.setTag(next_tag());
        options.setTimeout(setup_.timeout);
        gloo::allgatherv(options);
        size_t offset = 0;
        for (size_t r = 0; r < outputs.size(); ++r) {
          if (counts[r] > 0) std::memcpy(outputs[r].data_ptr(), gathered.data() + offset, counts[r] * element);
          offset += counts[r];
        }
      });
    });
  }

  // Note [Reduce-scatter on Gloo]: Gloo's reduce-scatter algorithm takes float only and equal
  // shares, so this all-reduces the concatenated inputs and keeps this rank's share: twice the
  // bytes of a ring reduce-scatter, but any dtype and uneven shares.
  void reduce_scatter(const Tensor& output, const std::vector<Tensor>& inputs, ReduceOp op, std::shared_ptr<Work> work,
                      Verify verify) override {
    enqueue(std::move(work), verify, [this, output, inputs, op] {
      const size_t element = output.element_size();
      size_t total = 0, offset_of_mine = 0;
      for (size_t r = 0; r < inputs.size(); ++r) {
        if (static_cast<int>(r) == setup_.rank) offset_of_mine = total;
        total += static_cast<size_t>(inputs[r].numel());
      }
      if (total == 0) return;
      with_type(output.dtype(), [&](auto zero) {
        using T = decltype(zero);
        std::vector<T> packed(total);
        size_t offset = 0;
        for (const Tensor& input : inputs) {
          std::memcpy(packed.data() + offset, input.data_ptr(), input.numel() * element);
          offset += input.numel();
        }
        all_reduce_in_place(packed.data(), total, op);
        T* mine = packed.data() + offset_of_mine;
        if (op == ReduceOp::kAvg) divide(mine, output.numel(), setup_.size);
        std::memcpy(output.data_ptr(), mine, output.numel() * element);
      });
    });
  }

  void barrier(std::shared_ptr<Work> work) override {
    enqueue(std::move(work), std::nullopt, [this] {
      gloo::BarrierOptions options(context_);
      options.setTag(next_tag());
      options.setTimeout(setup_.timeout);
      gloo::barrier(options);
    });
  }

 private:
  struct Task {
    std::shared_ptr<Work> work;
    Verify verify;
    std::function<void()> collective;
  };

  // A mismatch the ranks agree on: the collective did not run, and the group stays usable.
  struct Mismatch : Error {
    using Error::Error;
  };

  void enqueue(std::shared_ptr<Work> work, Verify verify, std::function<void()> collective) {
    std::lock_guard<std::mutex> lock(queue_mutex_);
    queue_.push_back({std::move(work), verify, std::move(collective)});
    queue_changed_.notify_all();
  }

  // Note [Checking that the ranks agree]: one all-reduce (max) of the signature and its
  // negation gives every rank the largest and smallest value of each field, so every rank sees
  // a mismatch alike, before Gloo would receive a message larger than the buffer it posted
  // (which aborts the process from Gloo's own thread).
  void check_signature(const CallSignature& signature) {
    std::array<int64_t, 8> extremes{};
    for (size_t i = 0; i < signature.size(); ++i) {
      extremes[i] = signature[i];
      extremes[i + 4] = -signature[i];
    }
    all_reduce_in_place(extremes.data(), extremes.size(), ReduceOp::kMax);
    static constexpr const char* kFields[] = {"collective", "dtype", "op or root", "element counts"};
    for (size_t i = 0; i < signature.size(); ++i) {
      if (extremes[i] != -extremes[i + 4]) {
        throw Mismatch(std::string("the ranks did not pass the same ") + kFields[i] +
                       (i == 3 ? " (tensor sizes differ between ranks)" : "") + "; nothing was sent");
      }
    }
  }

  uint32_t next_tag() { return tag_++; }

  // Gloo's all-reduce of `count` elements at `data`, in place (kAvg sums: the caller divides).
  template <typename T>
  void all_reduce_in_place(T* data, size_t count, ReduceOp op) {
    gloo::AllreduceOptions options(context_);
    options.setOutput(data, count);
    options.setReduceFunction(reduce_function<T>(op));
    options.setTag(next_tag());
    options.setTimeout(setup_.timeout);
    gloo::allreduce(options);
  }

  // The group's thread (Note [One Gloo thread per group]).
  void run() {
    for (;;) {
      Task task;
      {
        std::unique_lock<std::mutex> lock(queue_mutex_);
        queue_changed_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
        if (queue_.empty()) return;
        task = std::move(queue_.front());
        queue_.pop_front();
        if (stopping_) {
          task.work->finish(std::make_exception_ptr(
              Error(task.work->description() + " did not run: the process group was destroyed first")));
          continue;
        }
      }
      if (!first_failure_.empty()) {
        task.work->finish(std::make_exception_ptr(
            Error(task.work->description() +
                  " did not run: the group is unusable after an earlier failure: " + first_failure_)));
        continue;
      }
      try {
        if (task.verify) check_signature(*task.verify);
        task.collective();
        task.work->finish();
      } catch (const Mismatch& error) {
        task.work->finish(std::make_exception_ptr(Error(task.work->description() + " failed: " + error.what())));
      } catch (const std::exception& error) {
        first_failure_ = task.work->description() + " failed: " + explain(error.what());
        task.work->finish(std::make_exception_ptr(Error(first_failure_)));
      }
    }
  }

  const GroupSetup setup_;
  std::shared_ptr<gloo::transport::Device> device_;
  std::shared_ptr<gloo::Context> context_;
  uint32_t tag_ = 0;           // only the group's thread reads and writes it
  std::string first_failure_;  // only the group's thread reads and writes it
  std::mutex queue_mutex_;     // guards queue_ and stopping_
  std::condition_variable queue_changed_;
  std::deque<Task> queue_ ABSL_GUARDED_BY(queue_mutex_);
  bool stopping_ ABSL_GUARDED_BY(queue_mutex_) = false;
  std::thread thread_;
};

}  // namespace

std::unique_ptr<CollectiveBackend> make_gloo_backend(const GroupSetup& setup) {
  return std::make_unique<GlooBackend>(setup);
}

}  // namespace distgrad::ddp
