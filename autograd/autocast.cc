#include "autograd/autocast.h"

#include <algorithm>

#include "autograd/ops.h"

namespace distgrad::autograd {

// Note [Autocast policy]
// PyTorch's autocast op lists (torch.amp, CUDA's), for the ops distgrad has, on every device
// type (PyTorch's CPU lists keep the reductions, softmax and the norms in the half dtype; one
// policy on both devices gives the CPU the results CUDA defines):
// - lower precision (the scope's dtype, accumulating in float32: Note [Half precision compute]):
//   matmul, addmm, linear, conv2d, and through them scaled_dot_product_attention and
//   MultiheadAttention;
// - float32: sum, prod, cumsum, norm, logsumexp, softmax, log_softmax, exp, expm1, log, log1p,
//   pow, rsqrt, softplus, layer_norm, group_norm, batch_norm, and the losses (mse, l1, smooth_l1,
//   huber, nll, cross_entropy, binary_cross_entropy and _with_logits, kl_div);
// - every other op runs in its inputs' dtype, two floating dtypes promoting to the wider one.
// Differences from PyTorch: batch_norm returns float32 (PyTorch keeps the input's half dtype with
// float32 statistics), binary_cross_entropy is computed in float32 where CUDA's autocast refuses
// it, and casts of a parameter are not cached within a scope (each op casts again).
namespace {

struct AutocastState {
  bool enabled = false;
  DType dtype = kBFloat16;
};

thread_local AutocastState autocast_states[2] = {{false, kBFloat16}, {false, kFloat16}};

AutocastState& state_of(DeviceType device_type) { return autocast_states[device_type == DeviceType::kCUDA ? 1 : 0]; }

DType default_dtype(DeviceType device_type) { return device_type == DeviceType::kCUDA ? kFloat16 : kBFloat16; }

// Whether autocast casts `t`: defined, on a device autocast is on for, and floating but not float64.
const AutocastState* casting_state(const Tensor& t) {
  if (!t.defined() || !is_floating(t.dtype()) || t.dtype() == kFloat64) return nullptr;
  const AutocastState& state = state_of(t.device().type);
  return state.enabled ? &state : nullptr;
}

// The scope's half dtype when autocast's lower-precision cast changes `t`.
std::optional<DType> lower_precision_cast(const Tensor& t) {
  const AutocastState* state = casting_state(t);
  if (state == nullptr || t.dtype() == state->dtype) return std::nullopt;
  return state->dtype;
}

// Whether autocast's float32 cast changes `t`.
bool widens_to_float32(const Tensor& t) { return casting_state(t) != nullptr && is_half(t.dtype()); }

}  // namespace

bool is_autocast_enabled(DeviceType device_type) { return state_of(device_type).enabled; }

DType autocast_dtype(DeviceType device_type) { return state_of(device_type).dtype; }

AutocastGuard::AutocastGuard(DeviceType device_type, std::optional<DType> dtype, bool enabled)
    : device_type_(device_type),
      previous_enabled_(state_of(device_type).enabled),
      previous_dtype_(state_of(device_type).dtype) {
  const DType chosen = dtype.value_or(default_dtype(device_type));
  DISTGRAD_CHECK(is_half(chosen), "AutocastGuard: expected float16 or bfloat16, found ", dtype_name(chosen));
  state_of(device_type) = {.enabled = enabled, .dtype = enabled ? chosen : previous_dtype_};
}

AutocastGuard::~AutocastGuard() { state_of(device_type_) = {.enabled = previous_enabled_, .dtype = previous_dtype_}; }

Tensor autocast_to_lower_precision(const Tensor& t) {
  const std::optional<DType> dtype = lower_precision_cast(t);
  return dtype ? to(t, *dtype) : t;
}

Tensor autocast_to_float32(const Tensor& t) { return widens_to_float32(t) ? to(t, kFloat32) : t; }

bool casts_to_lower_precision(std::initializer_list<const Tensor*> operands) {
  return std::any_of(operands.begin(), operands.end(),
                     [](const Tensor* t) { return lower_precision_cast(*t).has_value(); });
}

bool casts_to_float32(std::initializer_list<const Tensor*> operands) {
  return std::any_of(operands.begin(), operands.end(), [](const Tensor* t) { return widens_to_float32(*t); });
}

}  // namespace distgrad::autograd
