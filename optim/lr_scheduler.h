// Learning-rate schedulers for the in-place optimizers (torch.optim.lr_scheduler): StepLR,
// CosineAnnealingLR, LinearLR, LambdaLR.
//
// A scheduler records each param group's learning rate when it is made (torch's base_lrs;
// torch reads them from the groups' initial_lr, which the first scheduler made on them writes)
// and sets every group's lr to its schedule at the current epoch: at construction the epoch is
// 0 (LinearLR already multiplies by start_factor then), and each step() advances it by one.
// Call step() once per epoch (or per iteration, for warmups), after the optimizer's step(), as
// in torch:
//
//   dg::optim::SGD sgd(net.parameters(), {.lr = 0.1, .momentum = 0.9});
//   dg::optim::StepLR scheduler(sgd, /*step_size=*/30, /*gamma=*/0.1);
//   for (int epoch = 0; epoch < 90; ++epoch) {
//     train_one_epoch(net, sgd);
//     scheduler.step();                      // lr 0.1 for 30 epochs, 0.01 for 30, 0.001
//   }
//
// Each lr is torch's closed form (_get_closed_form_lr) of the epoch and the group's base lr,
// computed by the schedules of optim/schedule.h: base_lr * gamma^(epoch / step_size), ... These
// equal torch's recursive (chainable) values up to rounding when no one else changes the lrs; a
// scheduler overwrites an lr set by hand at its next step(), and two schedulers on one optimizer
// do not compose (torch's ChainedScheduler and SequentialLR are not offered). The scheduler
// refers to the optimizer, which must outlive it.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "optim/optimizer.h"
#include "optim/schedule.h"

namespace distgrad::optim {

class LRScheduler {
 public:
  virtual ~LRScheduler() = default;
  // Not copyable: two copies would step one optimizer's lrs.
  LRScheduler(const LRScheduler&) = delete;
  LRScheduler& operator=(const LRScheduler&) = delete;

  // Advances the epoch by one and sets each group's lr to its schedule there.
  void step();
  // The lr of each group set by the last step() (or the constructor).
  const std::vector<double>& get_last_lr() const { return last_lr_; }
  // Each group's lr when the scheduler was made.
  const std::vector<double>& base_lrs() const { return base_lrs_; }
  // The epoch of get_last_lr(): 0 after construction, +1 at each step().
  int64_t last_epoch() const { return last_epoch_; }
  // "StepLR", "LinearLR", ...: used in errors.
  const std::string& name() const { return name_; }

 protected:
  // `schedule_for(base_lr)` is a group's lr as a function of the epoch; sets the lrs of epoch 0.
  LRScheduler(std::string name, Optimizer& optimizer, const std::function<Schedule(double base_lr)>& schedule_for);

 private:
  // Sets each group's lr to its schedule at `epoch`, which becomes the last epoch; changes
  // nothing unless every lr is >= 0.
  void set_lrs(int64_t epoch);

  std::string name_;
  Optimizer& optimizer_;
  std::vector<double> base_lrs_;
  std::vector<Schedule> schedules_;  // per group
  int64_t last_epoch_ = 0;
  std::vector<double> last_lr_;
};

// base_lr * gamma^floor(epoch / step_size): the lr decays by gamma every step_size epochs
// (torch.optim.lr_scheduler.StepLR). Requires step_size > 0 and gamma >= 0.
class StepLR : public LRScheduler {
 public:
  StepLR(Optimizer& optimizer, int64_t step_size, double gamma = 0.1);
};

// eta_min + (base_lr - eta_min) * (1 + cos(pi * epoch / T_max)) / 2: half a cosine from base_lr
// down to eta_min at epoch T_max, rising again after it (torch.optim.lr_scheduler.
// CosineAnnealingLR). Requires T_max > 0 and eta_min >= 0.
class CosineAnnealingLR : public LRScheduler {
 public:
  CosineAnnealingLR(Optimizer& optimizer, int64_t t_max, double eta_min = 0);
};

// base_lr times a factor that goes in a straight line from start_factor at epoch 0 to
// end_factor at epoch total_iters and stays there (torch.optim.lr_scheduler.LinearLR; with the
// defaults, a warmup from a third of the lr over 5 epochs). Requires 0 < start_factor <= 1,
// 0 <= end_factor <= 1 and total_iters > 0.
class LinearLR : public LRScheduler {
 public:
  explicit LinearLR(Optimizer& optimizer, double start_factor = 1.0 / 3, double end_factor = 1.0,
                    int64_t total_iters = 5);
};

// base_lr * lr_lambda(epoch), for any shape of schedule (torch.optim.lr_scheduler.LambdaLR, one
// function for every group). The lrs it gives must be >= 0.
class LambdaLR : public LRScheduler {
 public:
  LambdaLR(Optimizer& optimizer, std::function<double(int64_t epoch)> lr_lambda);
};

}  // namespace distgrad::optim
