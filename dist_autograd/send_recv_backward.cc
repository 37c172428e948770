#include "dist_autograd/send_recv_backward.h"

#include "autograd/autograd_meta.h"
#include "dist_autograd/backward_pass.h"
#include "dist_autograd/context.h"

namespace distgrad::dist_autograd {
namespace {

autograd::EdgeList edges_of(const std::vector<Tensor>& tensors) {
  autograd::EdgeList edges;
  for (const Tensor& tensor : tensors) {
    edges.push_back(tensor.requires_grad() ? autograd::gradient_edge(tensor) : autograd::Edge{});
  }
  return edges;
}

}  // namespace

SendBackward::SendBackward(const std::vector<Tensor>& tensors, MessageOrder order)
    : Node(edges_of(tensors)), order_(std::move(order)) {
  for (const Tensor& tensor : tensors) add_input_metadata(tensor);
}

RecvBackward::RecvBackward(std::weak_ptr<DistAutogradContext> context, int64_t message_id, MessageOrder order,
                           int from_worker, std::vector<size_t> slots, size_t message_size)
    : context_(std::move(context)),
      message_id_(message_id),
      order_(std::move(order)),
      from_worker_(from_worker),
      slots_(std::move(slots)),
      message_size_(message_size) {}

autograd::TensorList RecvBackward::apply(autograd::TensorList&& grads) {
  std::vector<Tensor> message_grads(message_size_);
  for (size_t i = 0; i < slots_.size() && i < grads.size(); ++i) message_grads[slots_[i]] = std::move(grads[i]);
  const ContextPtr context = context_.lock();
  DISTGRAD_CHECK(context != nullptr, "distributed autograd: the context of message ", message_id_,
                 " was released before its gradients could be sent back");
  send_gradients(*context, from_worker_, message_id_, order_, std::move(message_grads));
  return {};
}

}  // namespace distgrad::dist_autograd
