#include "autograd/distributed/functions.h"

#include "autograd/autograd_meta.h"
#include "autograd/distributed/dist_engine.h"

namespace distgrad::autograd::distributed {
namespace {

EdgeList edges_of(const std::vector<Tensor>& tensors) {
  EdgeList edges;
  for (const Tensor& tensor : tensors) edges.push_back(tensor.requires_grad() ? gradient_edge(tensor) : Edge{});
  return edges;
}

}  // namespace

SendBackward::SendBackward(const std::vector<Tensor>& tensors) : Node(edges_of(tensors)) {
  for (const Tensor& tensor : tensors) add_input_metadata(tensor);
}

RecvBackward::RecvBackward(int64_t context_id, int64_t message_id, int from_worker, std::vector<size_t> slots,
                           size_t message_size)
    : context_id_(context_id),
      message_id_(message_id),
      from_worker_(from_worker),
      slots_(std::move(slots)),
      message_size_(message_size) {}

TensorList RecvBackward::apply(TensorList&& grads) {
  std::vector<Tensor> message_grads(message_size_);
  for (size_t i = 0; i < slots_.size() && i < grads.size(); ++i) message_grads[slots_[i]] = std::move(grads[i]);
  send_gradients(from_worker_, context_id_, message_id_, std::move(message_grads));
  return {};
}

}  // namespace distgrad::autograd::distributed
