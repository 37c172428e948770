// SendBackward and RecvBackward: the ends of a graph edge that crosses workers.
//
// Note [Send/Recv pairing]
// When a call inside a distributed autograd context carries tensors that require grad, the
// sender records a SendBackward whose next edges are those tensors' gradient edges (one input
// slot per tensor of the message, leaves included: they keep their link), under a fresh
// message id. The receiver attaches a RecvBackward, named by the same message id, as the
// grad_fn of the received tensors that required grad. In the backward pass, RecvBackward's
// gradients travel back to that SendBackward (through the pass running in its context,
// dist_autograd/backward_pass.h), from which the sender runs its local engine. Replies work the
// same way in the other direction. Both ends know the message's place in the context's order of
// calls (Note [Call order], dist_autograd/call_order.h).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "autograd/node.h"
#include "dist_autograd/call_order.h"

namespace distgrad::dist_autograd {

class DistAutogradContext;

// The sender's end: hands the gradients it receives to the tensors that were sent.
class SendBackward final : public autograd::Node {
 public:
  // `tensors` are the message's tensors, in order; undefined edges for those without grad.
  SendBackward(const std::vector<Tensor>& tensors, MessageOrder order);

  autograd::TensorList apply(autograd::TensorList&& grads) override { return std::move(grads); }
  std::string name() const override { return "SendBackward"; }

  const MessageOrder& order() const { return order_; }

 private:
  const MessageOrder order_;
};

// The receiver's end: sends the gradients of the received tensors to the sender.
class RecvBackward final : public autograd::Node {
 public:
  // `slots[i]` is the index in the message of this node's input slot i; `message_size` the
  // number of tensors of the message.
  RecvBackward(std::weak_ptr<DistAutogradContext> context, int64_t message_id, MessageOrder order, int from_worker,
               std::vector<size_t> slots, size_t message_size);

  autograd::TensorList apply(autograd::TensorList&& grads) override;
  std::string name() const override { return "RecvBackward"; }

  int from_worker() const { return from_worker_; }

 private:
  const std::weak_ptr<DistAutogradContext> context_;  // the context owns this node
  const int64_t message_id_;
  const MessageOrder order_;
  const int from_worker_;
  const std::vector<size_t> slots_;
  const size_t message_size_;
};

}  // namespace distgrad::dist_autograd
