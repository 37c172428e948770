#include "dist_autograd/interceptor.h"

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
// u64 message id (0 and 0 outside a context), then one bit per tensor, set when it required grad
// on the sender. No bytes at all when no tensor required grad.
struct MessageRecord {
  uint64_t context_id = 0;
  uint64_t message_id = 0;
  std::vector<bool> requires_grad;
};

constexpr size_t kIdBytes = 16;

void put_u64(std::string& out, uint64_t value) {
  for (int shift = 0; shift < 64; shift += 8) out.push_back(static_cast<char>((value >> shift) & 0xff));
}

uint64_t get_u64(std::string_view in, size_t offset) {
  uint64_t value = 0;
  for (int byte = 0; byte < 8; ++byte) value |= uint64_t{static_cast<unsigned char>(in[offset + byte])} << (8 * byte);
  return value;
}

std::string encode(const MessageRecord& record) {
  std::string out;
  out.reserve(kIdBytes + (record.requires_grad.size() + 7) / 8);
  put_u64(out, record.context_id);
  put_u64(out, record.message_id);
  out.resize(kIdBytes + (record.requires_grad.size() + 7) / 8, '\0');
  for (size_t i = 0; i < record.requires_grad.size(); ++i) {
    if (record.requires_grad[i]) out[kIdBytes + i / 8] = static_cast<char>(out[kIdBytes + i / 8] | (1 << (i % 8)));
  }
  return out;
}

// Throws StatusError (INVALID_ARGUMENT) when `bytes` do not describe `num_tensors` tensors.
MessageRecord decode(std::string_view bytes, size_t num_tensors, const rpc::CallSite& call) {
  MessageRecord record;
  record.requires_grad.assign(num_tensors, false);
  if (bytes.empty()) return record;
  const size_t expected = kIdBytes + (num_tensors + 7) / 8;
  if (bytes.size() != expected) {
    throw rpc::StatusError(rpc::StatusCode::kInvalidArgument,
                           "distributed autograd: a message of " + std::string(call.function) + " with " +
                               std::to_string(num_tensors) + " tensors carries " + std::to_string(bytes.size()) +
                               " bytes of autograd record, expected " + std::to_string(expected));
  }
  record.context_id = get_u64(bytes, 0);
  record.message_id = get_u64(bytes, 8);
  for (size_t i = 0; i < num_tensors; ++i) {
    record.requires_grad[i] = (static_cast<unsigned char>(bytes[kIdBytes + i / 8]) >> (i % 8)) & 1;
  }
  return record;
}

// Records a SendBackward for a message to `to` when a tensor of it requires grad inside the
// current context (Note [Send/Recv pairing]); returns the message's bytes.
std::string record_send(int to, const std::vector<Tensor>& tensors) {
  MessageRecord record;
  bool any = false;
  for (const Tensor& tensor : tensors) {
    record.requires_grad.push_back(tensor.defined() && tensor.requires_grad());
    any = any || record.requires_grad.back();
  }
  if (!any) return {};
  ContextPtr context = current_context();
  if (context != nullptr && autograd::GradMode::is_enabled()) {
    const int64_t message_id = ContextContainer::instance().next_message_id();
    context->add_send(message_id, std::make_shared<SendBackward>(tensors));
    context->add_worker(to);
    record.context_id = static_cast<uint64_t>(context->id());
    record.message_id = static_cast<uint64_t>(message_id);
  }
  return encode(record);
}

// Gives received tensors that required grad on the sender their history: a RecvBackward in the
// message's context, or, outside any context, leaves that require grad (as PyTorch does).
void attach_recv(int from, std::vector<Tensor>& tensors, const MessageRecord& record, const ContextPtr& context) {
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
  auto recv = std::make_shared<RecvBackward>(context, message_id, from, slots, tensors.size());
  for (size_t slot : slots) autograd::set_history(tensors[slot], recv);
  context->add_recv(message_id, recv);
  context->add_worker(from);
}

class AutogradInterceptor final : public rpc::CallInterceptor {
 public:
  std::string_view name() const override { return kInterceptorName; }

  std::string before_request(const rpc::CallSite& call, const std::vector<Tensor>& tensors) override {
    return record_send(call.peer, tensors);
  }

  std::shared_ptr<void> on_request(const rpc::CallSite& call, std::vector<Tensor>& tensors,
                                   std::string_view bytes) override {
    const MessageRecord record = decode(bytes, tensors.size(), call);
    if (record.context_id == 0) {
      attach_recv(call.peer, tensors, record, nullptr);
      return nullptr;
    }
    ContextPtr context = ContextContainer::instance().get_or_create(static_cast<int64_t>(record.context_id));
    context->add_worker(call.peer);
    attach_recv(call.peer, tensors, record, context);
    return std::make_shared<ContextScope>(context);  // calls made while the function runs join it
  }

  std::string before_reply(const rpc::CallSite& call, const std::vector<Tensor>& tensors) override {
    return record_send(call.peer, tensors);
  }

  void on_reply(const rpc::CallSite& call, std::vector<Tensor>& tensors, std::string_view bytes) override {
    const MessageRecord record = decode(bytes, tensors.size(), call);
    const ContextPtr context =
        record.context_id == 0 ? nullptr : ContextContainer::instance().find(static_cast<int64_t>(record.context_id));
    attach_recv(call.peer, tensors, record, context);
  }
};

}  // namespace

std::shared_ptr<rpc::CallInterceptor> make_interceptor() { return std::make_shared<AutogradInterceptor>(); }

}  // namespace distgrad::dist_autograd
