// SendBackward and RecvBackward: the ends of a graph edge that crosses workers.
//
// Note [Send/Recv pairing]
// When a call inside a distributed autograd context carries tensors that require grad, the
// sender records a SendBackward whose next edges are those tensors' gradient edges (one input
// slot per tensor of the message, leaves included: they keep their link), under a fresh
// message id. The receiver attaches a RecvBackward, named by the same message id, as the
// grad_fn of the received tensors that required grad. In the backward pass, RecvBackward's
// gradients travel back (an RPC to the sender) to that SendBackward, from which the sender
// runs its local engine. Replies work the same way in the other direction.
#pragma once

#include <cstdint>
#include <vector>

#include "autograd/node.h"

namespace distgrad::autograd::distributed {

// The sender's end: hands the gradients it receives to the tensors that were sent.
class SendBackward final : public Node {
 public:
  // `tensors` are the message's tensors, in order; undefined edges for those without grad.
  explicit SendBackward(const std::vector<Tensor>& tensors);

  TensorList apply(TensorList&& grads) override { return std::move(grads); }
  std::string name() const override { return "SendBackward"; }
};

// The receiver's end: sends the gradients of the received tensors to the sender.
class RecvBackward final : public Node {
 public:
  // `slots[i]` is the index in the message of this node's input slot i; `message_size` the
  // number of tensors of the message.
  RecvBackward(int64_t context_id, int64_t message_id, int from_worker, std::vector<size_t> slots, size_t message_size);

  TensorList apply(TensorList&& grads) override;
  std::string name() const override { return "RecvBackward"; }

  int from_worker() const { return from_worker_; }

 private:
  const int64_t context_id_;
  const int64_t message_id_;
  const int from_worker_;
  const std::vector<size_t> slots_;
  const size_t message_size_;
};

}  // namespace distgrad::autograd::distributed
