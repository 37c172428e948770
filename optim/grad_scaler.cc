#include "optim/grad_scaler.h"

#include <cmath>
#include <limits>

#include "autograd/grad_mode.h"
#include "autograd/ops.h"
#include "core/error.h"
#include "core/ops.h"

namespace distgrad::optim {

GradScaler::GradScaler(GradScalerOptions options) : options_(options), scale_(options.init_scale) {
  DISTGRAD_CHECK(options.init_scale > 0 && std::isfinite(options.init_scale),
                 "GradScaler: expected a positive, finite init_scale, found ", options.init_scale);
  DISTGRAD_CHECK(options.growth_factor > 1, "GradScaler: expected growth_factor > 1, found ", options.growth_factor);
  DISTGRAD_CHECK(options.backoff_factor > 0 && options.backoff_factor < 1,
                 "GradScaler: expected backoff_factor in (0, 1), found ", options.backoff_factor);
  DISTGRAD_CHECK(options.growth_interval > 0, "GradScaler: expected a positive growth_interval, found ",
                 options.growth_interval);
}

Tensor GradScaler::scale(const Tensor& loss) const {
  loss.check_defined("GradScaler::scale");
  DISTGRAD_CHECK(is_floating(loss.dtype()), "GradScaler::scale: expected a floating loss, found a ", loss.describe());
  return options_.enabled ? loss * scale_ : loss;
}

void GradScaler::unscale_(Optimizer& optimizer) {
  if (!options_.enabled) return;
  Stage& stage = stages_[&optimizer];
  DISTGRAD_CHECK(!stage.unscaled, "GradScaler::unscale_: already called on this ", optimizer.name(),
                 " optimizer since the last update()");
  DISTGRAD_CHECK(!stage.stepped, "GradScaler::unscale_: called after step(); call it before step()");
  autograd::NoGradGuard no_grad;
  // torch's inverse: the reciprocal in double, rounded to float32.
  const double inverse = static_cast<float>(1.0 / scale_);
  for (const Tensor& parameter : optimizer.parameters()) {
    const Tensor grad = parameter.grad();
    if (!grad.defined()) continue;
    untracked::mul_(grad, inverse);
    // Finite where |g| < inf (NaN compares false).
    if (!untracked::all(untracked::lt(untracked::abs(grad), std::numeric_limits<double>::infinity()))) {
      stage.found_inf = true;
    }
  }
  stage.unscaled = true;
}

bool GradScaler::step(Optimizer& optimizer) {
  if (!options_.enabled) {
    optimizer.step();
    return true;
  }
  DISTGRAD_CHECK(!stages_[&optimizer].stepped, "GradScaler::step: already called on this ", optimizer.name(),
                 " optimizer since the last update()");
  if (!stages_[&optimizer].unscaled) unscale_(optimizer);
  Stage& stage = stages_[&optimizer];
  stage.stepped = true;
  if (stage.found_inf) return false;
  optimizer.step();
  return true;
}

void GradScaler::update() {
  if (!options_.enabled) return;
  DISTGRAD_CHECK(!stages_.empty(), "GradScaler::update: no gradients were unscaled or stepped since the last ",
                 "update(); call step(optimizer) first");
  bool found_inf = false;
  for (const auto& [optimizer, stage] : stages_) found_inf = found_inf || stage.found_inf;
  if (found_inf) {
    scale_ *= options_.backoff_factor;
    growth_tracker_ = 0;
  } else if (++growth_tracker_ == options_.growth_interval) {
    scale_ *= options_.growth_factor;
    growth_tracker_ = 0;
  }
  stages_.clear();
}

void GradScaler::update(double new_scale) {
  if (!options_.enabled) return;
  DISTGRAD_CHECK(new_scale > 0 && std::isfinite(new_scale), "GradScaler::update: expected a positive, finite scale, ",
                 "found ", new_scale);
  scale_ = new_scale;
  stages_.clear();
}

}  // namespace distgrad::optim
