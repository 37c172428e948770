// DistributedOptimizer: one optimizer over parameters that live on several workers
// (torch.distributed.optim.DistributedOptimizer).
//
// It takes RRefs to parameters (leaf tensors that require grad, on any workers: rpc/rref.h) and
// puts one local optimizer on each owner, for that owner's parameters (a LocalOptimizer, a remote
// object). step(context) makes every owner, in parallel, step its optimizer with the gradients
// that distributed autograd accumulated in `context` for its parameters (parameters without one
// are left alone), and returns once all have; an owner's error comes back naming it. The steps
// of every local optimizer of one worker run one at a time, as PyTorch's (its
// _LocalOptimizer.global_lock): several trainers, each with its DistributedOptimizer and its
// context, may step the same parameters, whose .grad() each step borrows. The parameters' own
// .grad() is left as it was.
//
//   std::vector<dg::rpc::RRef<dg::Tensor>> params = ps.rpc_sync(&ParameterServer::parameter_rrefs);
//   dg::optim::DistributedOptimizer<dg::optim::SGD> optimizer(params, {.lr = 0.05});
//   {
//     dg::autograd::Context context;
//     dg::Tensor loss = loss_fn(ps.rpc_sync(&ParameterServer::forward, x), y);
//     dg::autograd::backward(context, {loss});
//     optimizer.step(context);
//   }
//
// SGD, Adam and AdamW are registered; another optimizer type O (constructible from
// (std::vector<Tensor>, options), options with a codec) is registered with
// DISTGRAD_DISTRIBUTED_OPTIMIZER(O) in O's namespace.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "autograd/grad_mode.h"
#include "dist_autograd/dist_autograd.h"
#include "optim/adam.h"
#include "optim/sgd.h"
#include "rpc/rref.h"

namespace distgrad::optim {

// The options an optimizer is constructed with (SGDOptions for SGD, AdamWOptions for AdamW, ...).
template <typename Optim>
using OptionsOf = decltype(std::declval<typename Optim::ParamGroup>().options);

namespace detail {
// Held by every local optimizer's step in this process: the optimizers of several trainers may
// hold the same parameters and set their grad() for the step.
std::mutex& local_step_mutex();

// Sets each parameter's grad() to its gradient in `context` (undefined when it has none) for the
// scope, and restores the grads it found.
class ContextGradients {
 public:
  ContextGradients(const std::vector<Tensor>& parameters, int64_t context);
  ~ContextGradients();
  ContextGradients(const ContextGradients&) = delete;
  ContextGradients& operator=(const ContextGradients&) = delete;

 private:
  const std::vector<Tensor>& parameters_;
  std::vector<Tensor> saved_;
};
}  // namespace detail

// The optimizer of one owner's parameters (a remote object made by DistributedOptimizer).
template <typename Optim>
class LocalOptimizer {
 public:
  LocalOptimizer(std::vector<rpc::RRef<Tensor>> parameters, OptionsOf<Optim> options)
      : rrefs_(std::move(parameters)), optimizer_(local_values(rrefs_), options) {}

  // One step with the gradients of `context` on this worker.
  void step(int64_t context) {
    std::lock_guard<std::mutex> lock(detail::local_step_mutex());
    detail::ContextGradients gradients(optimizer_.parameters(), context);
    optimizer_.step();
  }

 private:
  static std::vector<Tensor> local_values(const std::vector<rpc::RRef<Tensor>>& rrefs) {
    std::vector<Tensor> values;
    for (const rpc::RRef<Tensor>& rref : rrefs) values.push_back(rref.local_value());
    return values;
  }

  std::vector<rpc::RRef<Tensor>> rrefs_;  // keep the parameters alive with the optimizer
  Optim optimizer_;
};

template <typename Optim>
class DistributedOptimizer {
 public:
  using Options = OptionsOf<Optim>;

  // A local optimizer on each owner of `parameters`, with `options`.
  DistributedOptimizer(const std::vector<rpc::RRef<Tensor>>& parameters, Options options) {
    std::map<int, std::vector<rpc::RRef<Tensor>>> by_owner;
    for (const rpc::RRef<Tensor>& parameter : parameters) by_owner[parameter.owner()].push_back(parameter);
    for (auto& [owner, owned] : by_owner) {
      optimizers_.push_back(rpc::remote_object<LocalOptimizer<Optim>>(owner, std::move(owned), options));
    }
  }

  // Steps every owner's parameters with the gradients of `context`, owners in parallel.
  void step(autograd::ContextId context) {
    std::vector<rpc::Future<void>> steps;
    for (const auto& optimizer : optimizers_) {
      steps.push_back(optimizer.rpc_async(&LocalOptimizer<Optim>::step, context.value()));
    }
    rpc::wait_all(steps);
  }

  // The workers that own parameters, ascending.
  std::vector<int> owners() const {
    std::vector<int> ranks;
    for (const auto& optimizer : optimizers_) ranks.push_back(optimizer.owner());
    return ranks;
  }

 private:
  std::vector<rpc::RRef<LocalOptimizer<Optim>>> optimizers_;
};

DISTGRAD_CODEC(SGDOptions, lr, momentum, dampening, weight_decay, nesterov);
DISTGRAD_CODEC(AdamOptions, lr, betas, eps, eps_root, weight_decay, amsgrad, moment_requires_grad);
DISTGRAD_CODEC(AdamWOptions, lr, betas, eps, weight_decay, amsgrad);

}  // namespace distgrad::optim

// Registers LocalOptimizer<Optim> as a remote class (rpc/remote_class.h), in Optim's namespace.
#define DISTGRAD_DISTRIBUTED_OPTIMIZER(Optim)                                                                         \
  DISTGRAD_REMOTE_CLASS(::distgrad::optim::LocalOptimizer<Optim>,                                                     \
                        std::vector<::distgrad::rpc::RRef<::distgrad::Tensor>>, ::distgrad::optim::OptionsOf<Optim>); \
  DISTGRAD_REMOTE_METHOD(::distgrad::optim::LocalOptimizer<Optim>, step)

namespace distgrad::optim {
DISTGRAD_DISTRIBUTED_OPTIMIZER(SGD);
DISTGRAD_DISTRIBUTED_OPTIMIZER(Adam);
DISTGRAD_DISTRIBUTED_OPTIMIZER(AdamW);
}  // namespace distgrad::optim
