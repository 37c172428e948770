#include "optim/lr_scheduler.h"

#include <memory>
#include <utility>

namespace distgrad::optim {

using detail::check_hyperparameter;

LRScheduler::LRScheduler(std::string name, Optimizer& optimizer,
                         const std::function<Schedule(double base_lr)>& schedule_for)
    : name_(std::move(name)), optimizer_(optimizer) {
  for (size_t group = 0; group < optimizer_.num_param_groups(); ++group) {
    base_lrs_.push_back(optimizer_.lr(group));
    schedules_.push_back(schedule_for(base_lrs_.back()));
  }
  set_lrs(0);
}

void LRScheduler::step() { set_lrs(last_epoch_ + 1); }

void LRScheduler::set_lrs(int64_t epoch) {
  std::vector<double> lrs;
  for (size_t group = 0; group < schedules_.size(); ++group) {
    const double lr = schedules_[group](epoch);
    DISTGRAD_CHECK(lr >= 0, name_, ": at epoch ", epoch, " param group ", group, "'s lr would be ", lr,
                   ", expected lr >= 0");
    lrs.push_back(lr);
  }
  for (size_t group = 0; group < lrs.size(); ++group) optimizer_.set_lr(group, lrs[group]);
  last_epoch_ = epoch;
  last_lr_ = std::move(lrs);
}

namespace {

std::function<Schedule(double)> step_lr(int64_t step_size, double gamma) {
  check_hyperparameter(step_size > 0, "StepLR", "step_size > 0", static_cast<double>(step_size));
  check_hyperparameter(gamma >= 0, "StepLR", "gamma >= 0", gamma);
  return [=](double base_lr) { return schedule::step(base_lr, step_size, gamma); };
}

std::function<Schedule(double)> cosine_annealing_lr(int64_t t_max, double eta_min) {
  check_hyperparameter(t_max > 0, "CosineAnnealingLR", "T_max > 0", static_cast<double>(t_max));
  check_hyperparameter(eta_min >= 0, "CosineAnnealingLR", "eta_min >= 0", eta_min);
  return [=](double base_lr) { return schedule::cosine(base_lr, t_max, eta_min); };
}

std::function<Schedule(double)> linear_lr(double start_factor, double end_factor, int64_t total_iters) {
  check_hyperparameter(start_factor > 0 && start_factor <= 1, "LinearLR", "0 < start_factor <= 1", start_factor);
  check_hyperparameter(end_factor >= 0 && end_factor <= 1, "LinearLR", "0 <= end_factor <= 1", end_factor);
  check_hyperparameter(total_iters > 0, "LinearLR", "total_iters > 0", static_cast<double>(total_iters));
  const Schedule factor = schedule::linear(start_factor, end_factor, total_iters);
  return [=](double base_lr) { return [=](int64_t epoch) { return base_lr * factor(epoch); }; };
}

std::function<Schedule(double)> lambda_lr(std::function<double(int64_t)> lr_lambda) {
  DISTGRAD_CHECK(lr_lambda != nullptr, "LambdaLR: expected a function of the epoch, found an empty std::function");
  // One function for every group, as in torch (a stateful one is not copied per group).
  auto shared = std::make_shared<const std::function<double(int64_t)>>(std::move(lr_lambda));
  return [shared](double base_lr) { return [=](int64_t epoch) { return base_lr * (*shared)(epoch); }; };
}

}  // namespace

StepLR::StepLR(Optimizer& optimizer, int64_t step_size, double gamma)
    : LRScheduler("StepLR", optimizer, step_lr(step_size, gamma)) {}

CosineAnnealingLR::CosineAnnealingLR(Optimizer& optimizer, int64_t t_max, double eta_min)
    : LRScheduler("CosineAnnealingLR", optimizer, cosine_annealing_lr(t_max, eta_min)) {}

LinearLR::LinearLR(Optimizer& optimizer, double start_factor, double end_factor, int64_t total_iters)
    : LRScheduler("LinearLR", optimizer, linear_lr(start_factor, end_factor, total_iters)) {}

LambdaLR::LambdaLR(Optimizer& optimizer, std::function<double(int64_t epoch)> lr_lambda)
    : LRScheduler("LambdaLR", optimizer, lambda_lr(std::move(lr_lambda))) {}

}  // namespace distgrad::optim
