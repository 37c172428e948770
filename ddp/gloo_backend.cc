// The CPU backend between hosts: Gloo's collectives over its TCP transport, one context (a full
// mesh of TCP pairs) per group, connected through the job's Store. Its collectives run on the
// group's thread (Note [One thread per group] in ddp/collective_thread.h), each Gloo call
// bounded by the group's timeout.
#include <gloo/allgatherv.h>
#include <gloo/allreduce.h>
#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/math.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/store.h>
#include <gloo/transport/tcp/device.h>

#include <array>
#include <cstring>
#include <numeric>
#include <utility>

#include "core/copy.h"
#include "core/error.h"
#include "ddp/collective_backend.h"
#include "ddp/collective_thread.h"
#include "rendezvous/job_store.h"
#include "rendezvous/net_util.h"

namespace distgrad::ddp {
namespace {

// The job's Store as Gloo's rendezvous sees it: keys under the group's prefix, values as bytes.
class GlooStore final : public gloo::rendezvous::Store {
 public:
  GlooStore(rendezvous::StoreClient& client, std::string prefix, std::chrono::milliseconds timeout)
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
  rendezvous::StoreClient& client_;
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

// Calls f(T{}) with T the C++ type Gloo reduces `dtype` as (float32, float64 or int64; the
// reducing collectives widen float16 and bfloat16 to float32 first: see reducible).
template <typename F>
void with_type(DType dtype, F&& f) {
  switch (dtype) {
    case DType::kFloat32: f(float{}); return;
    case DType::kFloat64: f(double{}); return;
    case DType::kInt64: f(int64_t{}); return;
    case DType::kBool:
    case DType::kFloat16:
    case DType::kBFloat16: break;
  }
  DISTGRAD_FAIL("gloo: cannot reduce ", dtype_name(dtype), " tensors");
}

// Calls f(T{}) with a C++ type of `dtype`'s size, for the collectives that only move elements.
template <typename F>
void with_moved_type(DType dtype, F&& f) {
  if (is_half(dtype)) {
    f(uint16_t{});
  } else {
    with_type(dtype, std::forward<F>(f));
  }
}

// Gloo reduces float16 only on some builds and bfloat16 not at all: the reducing collectives run
// on a float32 copy of a half-precision tensor and round the result back (untracked::copy_).
Tensor reducible(const Tensor& tensor) { return is_half(tensor.dtype()) ? untracked::to(tensor, kFloat32) : tensor; }

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
  explicit GlooBackend(const GroupSetup& setup) : setup_(setup), thread_(explain) {
    const rendezvous::WorldInfo& world = setup.store->world();
    gloo::transport::tcp::attr attr(rendezvous::local_address_towards(world.master_addr, world.master_port).c_str());
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
  }

  const char* name() const override { return "gloo"; }

  void all_reduce(const Tensor& tensor, ReduceOp op, std::shared_ptr<Work> work, const Launch& launch) override {
    enqueue(std::move(work), launch, [this, tensor, op] {
      if (tensor.numel() == 0) return;
      const Tensor target = reducible(tensor);
      with_type(target.dtype(), [&](auto zero) {
        using T = decltype(zero);
        all_reduce_in_place(static_cast<T*>(target.data_ptr()), static_cast<size_t>(target.numel()), op);
        if (op == ReduceOp::kAvg) divide(static_cast<T*>(target.data_ptr()), target.numel(), setup_.size);
      });
      if (is_half(tensor.dtype())) untracked::copy_(tensor, target);
    });
  }

  void broadcast(const Tensor& tensor, int root, std::shared_ptr<Work> work, const Launch& launch) override {
    enqueue(std::move(work), launch, [this, tensor, root] {
      if (tensor.numel() == 0 || setup_.size == 1) return;
      with_moved_type(tensor.dtype(), [&](auto zero) {
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
                  const Launch& launch) override {
    enqueue(std::move(work), launch, [this, outputs, input] {
      std::vector<size_t> counts;
      for (const Tensor& output : outputs) counts.push_back(static_cast<size_t>(output.numel()));
      const size_t total = std::accumulate(counts.begin(), counts.end(), size_t{0});
      const size_t element = input.element_size();
      if (total == 0) return;
      with_moved_type(input.dtype(), [&](auto zero) {
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
                      const Launch& launch) override {
    enqueue(std::move(work), launch, [this, output, inputs, op] {
      if (is_half(output.dtype())) {  // on float32 copies (reducible), rounded back at the end
        std::vector<Tensor> wide_inputs;
        for (const Tensor& input : inputs) wide_inputs.push_back(reducible(input));
        const Tensor wide_output = reducible(output);
        reduce_scatter_in_place(wide_output, wide_inputs, op);
        untracked::copy_(output, wide_output);
        return;
      }
      reduce_scatter_in_place(output, inputs, op);
    });
  }

  void barrier(std::shared_ptr<Work> work, const Launch& launch) override {
    enqueue(std::move(work), launch, [this] {
      gloo::BarrierOptions options(context_);
      options.setTag(next_tag());
      options.setTimeout(setup_.timeout);
      gloo::barrier(options);
    });
  }

 private:
  // Reduce-scatter of float32, float64 or int64 tensors (Note [Reduce-scatter on Gloo]).
  void reduce_scatter_in_place(const Tensor& output, const std::vector<Tensor>& inputs, ReduceOp op) {
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
  }

  // Runs `collective` in call order (Note [One thread per group]) after checking the signature.
  void enqueue(std::shared_ptr<Work> work, const Launch& launch, std::function<void()> collective) {
    thread_.submit(std::move(work), launch.caller_waits, [this, launch, collective = std::move(collective)] {
      if (launch.check) check_signature(launch.signature);
      collective();
    });
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
    for (size_t i = 0; i < signature.size(); ++i) {
      if (extremes[i] != -extremes[i + 4]) throw signature_mismatch(i);
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

  const GroupSetup setup_;
  std::shared_ptr<gloo::transport::Device> device_;
  std::shared_ptr<gloo::Context> context_;
  uint32_t tag_ = 0;         // only the running collective (Note [One thread per group])
  CollectiveThread thread_;  // last: its thread stops first
};

}  // namespace

std::unique_ptr<CollectiveBackend> make_gloo_backend(const GroupSetup& setup) {
  return std::make_unique<GlooBackend>(setup);
}

}  // namespace distgrad::ddp
