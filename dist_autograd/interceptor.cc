#include "dist_autograd/interceptor.h"

#include <algorithm>
#include <string>
#include <vector>

#include "autograd/autograd_meta.h"
#include "autograd/grad_mode.h"
#include "dist_autograd/context.h"
#include "dist_autograd/send_recv_backward.h"
#include "rpc/errors.h"

namespace distgrad::dist_autograd {
namespace {

// What a message says about autograd (its interceptor bytes): little-endian u64 context id and
// u64 message id (0 when no SendBackward was recorded for it; both 0 outside a context), a u8 of
// flags, the message's CallPath (u32 length, then u32 indices; Note [Call order]), then one bit
// per tensor, set when it required grad on the sender. No bytes at all when there is nothing to
// say: outside a context, grad mode on, no tensor requiring grad.
struct MessageRecord {
  uint64_t context_id = 0;
  uint64_t message_id = 0;
  bool without_grad = false;  // a request made with grad mode off: its reply says nothing of grad
  CallPath call;
  std::vector<bool> requires_grad;
};

constexpr size_t kHeaderBytes = 8 + 8 + 1 + 4;
constexpr uint8_t kWithoutGrad = 1;

template <typename T>
void put(std::string& out, T value) {
  for (size_t byte = 0; byte < sizeof(T); ++byte) out.push_back(static_cast<char>((value >> (8 * byte)) & 0xff));
}

template <typename T>
T get(std::string_view in, size_t offset) {
  T value = 0;
  for (size_t byte = 0; byte < sizeof(T); ++byte) {
    value |= static_cast<T>(T{static_cast<unsigned char>(in[offset + byte])} << (8 * byte));
  }
  return value;
}

size_t bitmask_bytes(size_t num_tensors) { return (num_tensors + 7) / 8; }

std::string encode(const MessageRecord& record) {
  std::string out;
  out.reserve(kHeaderBytes + 4 * record.call.size() + bitmask_bytes(record.requires_grad.size()));
  put<uint64_t>(out, record.context_id);
  put<uint64_t>(out, record.message_id);
  put<uint8_t>(out, record.without_grad ? kWithoutGrad : 0);
  put<uint32_t>(out, static_cast<uint32_t>(record.call.size()));
  for (uint32_t index : record.call) put<uint32_t>(out, index);
  const size_t bits = out.size();
  out.resize(bits + bitmask_bytes(record.requires_grad.size()), '\0');
  for (size_t i = 0; i < record.requires_grad.size(); ++i) {
    if (record.requires_grad[i]) out[bits + i / 8] = static_cast<char>(out[bits + i / 8] | (1 << (i % 8)));
  }
  return out;
}

// Throws StatusError (INVALID_ARGUMENT) when `bytes` do not describe `num_tensors` tensors.
MessageRecord decode(std::string_view bytes, size_t num_tensors, const rpc::CallSite& call) {
  MessageRecord record;
  record.requires_grad.assign(num_tensors, false);
  if (bytes.empty()) return record;
  const auto malformed = [&](size_t expected) {
    return rpc::StatusError(rpc::StatusCode::kInvalidArgument,
                            "distributed autograd: a message of " + std::string(call.function) + " with " +
                                std::to_string(num_tensors) + " tensors carries " + std::to_string(bytes.size()) +
                                " bytes of autograd record, expected " + std::to_string(expected));
  };
  const size_t fixed = kHeaderBytes + bitmask_bytes(num_tensors);
  if (bytes.size() < fixed) throw malformed(fixed);
  const uint32_t depth = get<uint32_t>(bytes, kHeaderBytes - 4);
  const size_t expected = fixed + 4 * size_t{depth};
  if (bytes.size() != expected) throw malformed(expected);
  record.context_id = get<uint64_t>(bytes, 0);
  record.message_id = get<uint64_t>(bytes, 8);
  record.without_grad = (get<uint8_t>(bytes, 16) & kWithoutGrad) != 0;
  for (uint32_t level = 0; level < depth; ++level)
    record.call.push_back(get<uint32_t>(bytes, kHeaderBytes + 4 * level));
  const size_t bits = kHeaderBytes + 4 * size_t{depth};
  for (size_t i = 0; i < num_tensors; ++i) {
    record.requires_grad[i] = (static_cast<unsigned char>(bytes[bits + i / 8]) >> (i % 8)) & 1;
  }
  return record;
}

std::vector<bool> requires_grad_of(const std::vector<Tensor>& tensors) {
  std::vector<bool> requires_grad;
  requires_grad.reserve(tensors.size());
  for (const Tensor& tensor : tensors) requires_grad.push_back(tensor.defined() && tensor.requires_grad());
  return requires_grad;
}

bool any_of(const std::vector<bool>& bits) { return std::find(bits.begin(), bits.end(), true) != bits.end(); }

// A message to `to` inside `context`, at `order`, whose tensors require grad as `requires_grad`
// says: records a SendBackward for it when one does (Note [Send/Recv pairing]), and `to` among
// the context's workers.
std::string record_send(DistAutogradContext& context, int to, const std::vector<Tensor>& tensors,
                        std::vector<bool> requires_grad, MessageOrder order) {
  MessageRecord record{static_cast<uint64_t>(context.id()), 0, false, order.call, std::move(requires_grad)};
  if (any_of(record.requires_grad)) {
    const int64_t message_id = ContextContainer::instance().next_message_id();
    context.add_send(message_id, std::make_shared<SendBackward>(tensors, std::move(order)));
    record.message_id = static_cast<uint64_t>(message_id);
  }
  context.add_worker(to);
  return encode(record);
}

// A message outside any context: which tensors require grad, if any does.
std::string record_outside_context(const std::vector<Tensor>& tensors) {
  MessageRecord record;
  record.requires_grad = requires_grad_of(tensors);
  return any_of(record.requires_grad) ? encode(record) : std::string();
}

// Gives received tensors that required grad on the sender their history: a RecvBackward of the
// message at `order` in `context`, or, outside any context, leaves that require grad (as PyTorch
// does).
void attach_recv(int from, std::vector<Tensor>& tensors, const MessageRecord& record, const ContextPtr& context,
                 MessageOrder order) {
  std::vector<size_t> slots;
  for (size_t i = 0; i < tensors.size(); ++i) {
    if (record.requires_grad[i] && tensors[i].defined() && is_floating(tensors[i].dtype())) slots.push_back(i);
  }
  if (slots.empty()) return;
  if (context == nullptr) {
    for (size_t slot : slots) tensors[slot].requires_grad_();
    return;
  }
  const auto message_id = static_cast<int64_t>(record.message_id);
  auto recv = std::make_shared<RecvBackward>(context, message_id, std::move(order), from, slots, tensors.size());
  for (size_t slot : slots) autograd::set_history(tensors[slot], recv);
  context->add_recv(message_id, recv);
  context->add_worker(from);
}

// Set while a function called with grad mode off runs: its reply says nothing of grad.
thread_local bool serving_without_grad = false;

// What a call's function runs in on the callee: the caller's context (its calls join it, Note
// [Call order]), and whether the caller had grad mode off.
class CallScope {
 public:
  CallScope(ContextPtr context, CallPath call, bool without_grad)
      : context_(std::move(context), std::move(call)), previous_without_grad_(serving_without_grad) {
    serving_without_grad = without_grad;
  }
  ~CallScope() { serving_without_grad = previous_without_grad_; }
  CallScope(const CallScope&) = delete;
  CallScope& operator=(const CallScope&) = delete;

 private:
  ContextScope context_;
  const bool previous_without_grad_;
};

class AutogradInterceptor final : public rpc::CallInterceptor {
 public:
  std::string_view name() const override { return kInterceptorName; }

  // Inside a context, every call carries it, whatever its tensors (a worker's own parameters may
  // make its result require grad); with grad mode off, none does, and the reply will not
  // require grad either.
  std::string before_request(const rpc::CallSite& call, const std::vector<Tensor>& tensors) override {
    if (!autograd::GradMode::is_enabled()) {
      MessageRecord record;
      record.without_grad = true;
      record.requires_grad.assign(tensors.size(), false);
      return encode(record);
    }
    const ContextPtr context = current_context();
    if (context == nullptr) return record_outside_context(tensors);
    return record_send(*context, call.peer, tensors, requires_grad_of(tensors),
                       MessageOrder{next_call(), /*reply=*/false});
  }

  std::shared_ptr<void> on_request(const rpc::CallSite& call, std::vector<Tensor>& tensors,
                                   std::string_view bytes) override {
    MessageRecord record = decode(bytes, tensors.size(), call);
    if (record.without_grad) return std::make_shared<CallScope>(nullptr, CallPath{}, /*without_grad=*/true);
    if (record.context_id == 0) {
      attach_recv(call.peer, tensors, record, nullptr, {});
      return nullptr;
    }
    ContextPtr context = ContextContainer::instance().get_or_create(static_cast<int64_t>(record.context_id));
    context->add_worker(call.peer);
    attach_recv(call.peer, tensors, record, context, MessageOrder{record.call, /*reply=*/false});
    return std::make_shared<CallScope>(std::move(context), std::move(record.call), /*without_grad=*/false);
  }

  std::string before_reply(const rpc::CallSite& call, const std::vector<Tensor>& tensors) override {
    if (serving_without_grad) return {};
    const ContextPtr context = current_context();
    if (context == nullptr || !autograd::GradMode::is_enabled()) return record_outside_context(tensors);
    std::vector<bool> requires_grad = requires_grad_of(tensors);
    if (!any_of(requires_grad)) return {};
    return record_send(*context, call.peer, tensors, std::move(requires_grad),
                       MessageOrder{current_call(), /*reply=*/true});
  }

  void on_reply(const rpc::CallSite& call, std::vector<Tensor>& tensors, std::string_view bytes) override {
    MessageRecord record = decode(bytes, tensors.size(), call);
    const ContextPtr context =
        record.context_id == 0 ? nullptr : ContextContainer::instance().find(static_cast<int64_t>(record.context_id));
    attach_recv(call.peer, tensors, record, context, MessageOrder{std::move(record.call), /*reply=*/true});
  }
};

}  // namespace

std::shared_ptr<rpc::CallInterceptor> make_interceptor() { return std::make_shared<AutogradInterceptor>(); }

}  // namespace distgrad::dist_autograd
