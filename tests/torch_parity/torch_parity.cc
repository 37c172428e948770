// distgrad's side of the parity check against PyTorch (run_torch_parity.sh drives it): reads the
// inputs and PyTorch's outputs that torch_reference.py wrote into DIR, computes the same cases
// (values, first and second derivatives, each case under the same name) and fails, naming each
// case, where any element differs from PyTorch's by more than 1e-13 relative to the largest
// magnitude of PyTorch's tensor (float16 and bfloat16 results: one unit in the last place of
// that magnitude, both sides computing in float and rounding once), or has another dtype.
//
//   torch_parity DIR
#include <cmath>
#include <cstdio>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "distgrad.h"

namespace dg = distgrad;
using dg::Tensor;
using dg::autograd::TensorList;

std::map<std::string, Tensor> in, ref;
double worst = 0;
int compared = 0, failed = 0;

void compare(const std::string& name, const Tensor& ours, double tolerance = 1e-13) {
  auto it = ref.find(name);
  if (it == ref.end()) {
    std::printf("MISSING reference %s\n", name.c_str());
    ++failed;
    return;
  }
  const Tensor& theirs = it->second;
  if (ours.sizes() != theirs.sizes()) {
    std::printf("SHAPE %s: ours %s, torch %s\n", name.c_str(), dg::shape_str(ours.sizes()).c_str(),
                dg::shape_str(theirs.sizes()).c_str());
    ++failed;
    return;
  }
  if (ours.dtype() != theirs.dtype()) {
    std::printf("DTYPE %s: ours %s, torch %s\n", name.c_str(), dg::dtype_name(ours.dtype()),
                dg::dtype_name(theirs.dtype()));
    ++failed;
    return;
  }
  const std::vector<double> a = dg::to(dg::contiguous(ours.detach()), dg::kFloat64).to_vector<double>();
  const std::vector<double> b = theirs.to_vector<double>();
  double scale = 0, err = 0;
  size_t at = 0;
  for (size_t i = 0; i < a.size(); ++i) scale = std::max(scale, std::abs(b[i]));
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::isnan(a[i]) && std::isnan(b[i])) continue;
    if (std::isinf(b[i]) && a[i] == b[i]) continue;
    const double e = std::abs(a[i] - b[i]) / std::max(scale, 1e-300);
    if (!(e <= err)) {
      err = e;
      at = i;
    }
  }
  ++compared;
  worst = std::max(worst, err);
  if (!(err <= tolerance)) {
    std::printf("DIFF %s: max relative error %.3g at %zu: ours %.17g, torch %.17g\n", name.c_str(), err, at, a[at],
                b[at]);
    ++failed;
  }
}

Tensor leaf(const std::string& name) {
  Tensor t = dg::clone(in.at(name));
  t.requires_grad_();
  return t;
}

void record(const std::string& name, const std::function<Tensor(const TensorList&)>& fn,
            std::vector<std::string> leaves, bool second = true) {
  TensorList xs;
  for (auto& l : leaves) xs.push_back(leaf(l));
  Tensor y = fn(xs);
  compare(name, y);
  // A fixed weighting of the outputs (sum(y^2) is nearly constant after a normalisation).
  const Tensor weights = dg::reshape(dg::cos(dg::arange(y.numel(), {.dtype = dg::kFloat64})), y.sizes());
  Tensor s = dg::sum(y * weights) + dg::sum(y * y) / 2.0;
  TensorList gs = dg::autograd::grad({s}, xs, {.create_graph = second, .allow_unused = true});
  for (size_t i = 0; i < xs.size(); ++i)
    compare(name + ".grad." + leaves[i], gs[i].defined() ? gs[i] : dg::zeros_like(xs[i]));
  if (!second) return;
  Tensor total;
  for (auto& g : gs)
    if (g.defined()) total = total.defined() ? total + dg::sum(g * g) : dg::sum(g * g);
  TensorList ggs = dg::autograd::grad({total}, xs, {.allow_unused = true});
  for (size_t i = 0; i < xs.size(); ++i)
    compare(name + ".gg." + leaves[i], ggs[i].defined() ? ggs[i] : dg::zeros_like(xs[i]));
}

// float16 and bfloat16: the values of elementwise ops, reductions, matmul, conv2d and layer_norm
// on PyTorch's half inputs, and a linear layer and its loss and gradients under CPU autocast.
void compare_half_precision() {
  for (const auto& [tag, ulp] : {std::pair{"f16", std::ldexp(1.0, -10)}, std::pair{"bf16", std::ldexp(1.0, -7)}}) {
    const std::string prefix = tag;
    const auto h = [&](const std::string& name) { return in.at(prefix + "." + name); };
    const Tensor a = h("a"), b = h("b"), pos = h("pos"), cube = h("cube");
    compare(prefix + ".elementwise",
            dg::cat({a + b, a * b, a / (dg::abs(b) + 0.5), dg::exp(a), dg::log(pos), dg::tanh(a), dg::sigmoid(a),
                     dg::sqrt(pos), a * 3.0, dg::relu(a)}),
            ulp);
    compare(prefix + ".reductions",
            dg::cat({dg::sum(cube, {0, 2}), dg::flatten(dg::mean(cube, {1})), dg::flatten(dg::amax(cube, {2})),
                     dg::flatten(dg::softmax(a, 1)), dg::flatten(dg::log_softmax(a, 0)),
                     dg::flatten(dg::logsumexp(cube, {1}))}),
            ulp);
    compare(prefix + ".matmul", dg::matmul(h("mat"), dg::slice(a, 0, 0, 3)), ulp);
    compare(prefix + ".conv2d",
            dg::conv2d(h("img"), h("w_full"), h("bias3"), {.stride = {2, 1}, .padding = {1, 2}, .dilation = {1, 2}}),
            ulp);
    compare(prefix + ".layer_norm", dg::nn::layer_norm(h("ln_x"), {8}, h("ln_w"), h("ln_b")), ulp);
  }
  Tensor w = dg::to(dg::slice(in.at("b"), 0, 0, 3), dg::kFloat32), bias = dg::to(in.at("bias3"), dg::kFloat32);
  w.requires_grad_();
  bias.requires_grad_();
  Tensor output, loss;
  {
    dg::autograd::AutocastGuard autocast(dg::DeviceType::kCPU);
    output = dg::nn::linear(dg::to(in.at("a"), dg::kFloat32), w, bias);
    loss = dg::nn::cross_entropy(output, dg::from_vector<int64_t>({0, 2, 1, 1, 0}));
  }
  loss.backward();
  const double bf16_ulp = std::ldexp(1.0, -7);
  compare("autocast.linear", output, bf16_ulp);
  compare("autocast.loss", loss, 1e-6);
  compare("autocast.grad.w", w.grad(), bf16_ulp);
  compare("autocast.grad.b", bias.grad(), 1e-6);
}

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: torch_parity DIR (with torch_reference.py's two files)\n");
    return 2;
  }
  const std::string dir = argv[1];
  for (auto& [n, t] : dg::load_safetensors(dir + "/inputs.safetensors").tensors) in[n] = t;
  for (auto& [n, t] : dg::load_safetensors(dir + "/torch_outputs.safetensors").tensors) ref[n] = t;
  namespace nn = dg::nn;
  using In = const TensorList&;
  record("silu", [](In x) { return dg::silu(x[0]); }, {"x"});
  record("leaky_relu", [](In x) { return dg::leaky_relu(x[0], 0.2); }, {"x"});
  record("elu", [](In x) { return dg::elu(x[0], 0.7); }, {"x"});
  record("softplus", [](In x) { return dg::softplus(x[0], 1.5, 20); }, {"x"});
  record("logsigmoid", [](In x) { return dg::logsigmoid(x[0]); }, {"x"});
  record("hardtanh", [](In x) { return dg::hardtanh(x[0], -1.5, 2.0); }, {"x"});
  record("expm1", [](In x) { return dg::expm1(x[0]); }, {"x"});
  record("amax", [](In x) { return dg::amax(x[0], {0, 2}); }, {"cube"});
  record("amin", [](In x) { return dg::amin(x[0], {1}, true); }, {"cube"});
  record("prod_dim", [](In x) { return dg::prod(x[0], 1); }, {"prodz"});
  record("prod_all", [](In x) { return dg::prod(x[0]); }, {"prodz"});
  record("prod_nozero", [](In x) { return dg::prod(x[0], 2); }, {"cube"});
  record("cumsum", [](In x) { return dg::cumsum(x[0], 1); }, {"cube"});
  record("layer_norm", [](In x) { return nn::layer_norm(x[0], {8}, x[1], x[2]); }, {"ln_x", "ln_w", "ln_b"});
  record("layer_norm2", [](In x) { return nn::layer_norm(x[0], {3, 8}); }, {"ln_x"});
  record("group_norm", [](In x) { return nn::group_norm(x[0], 3, x[1], x[2]); }, {"gn_x", "gn_w", "gn_b"});
  record("conv_grouped",
         [](In x) {
           return dg::conv2d(x[0], x[1], x[2], {.stride = {2, 1}, .padding = {1, 1}, .dilation = {1, 2}, .groups = 2});
         },
         {"img", "cw", "cb"});
  record("maxpool_ceil",
         [](In x) {
           return dg::max_pool2d(x[0], {.kernel_size = {2, 3}, .stride = {2, 2}, .ceil_mode = true}).values;
         },
         {"img"});
  record("maxpool_ceil_pad",
         [](In x) {
           return dg::max_pool2d(x[0], {.kernel_size = {3, 3}, .stride = {2, 2}, .padding = {1, 1}, .ceil_mode = true})
               .values;
         },
         {"img"});
  record("adaptive", [](In x) { return nn::adaptive_avg_pool2d(x[0], {3, 4}); }, {"img"});
  record("pad_reflect", [](In x) { return nn::pad(x[0], {2, 1, 1, 3}, nn::PadMode::kReflect); }, {"img"});
  record("pad_replicate", [](In x) { return nn::pad(x[0], {2, 1, 1, 3}, nn::PadMode::kReplicate); }, {"img"});
  record("pad_circular", [](In x) { return nn::pad(x[0], {2, 1, 1, 3}, nn::PadMode::kCircular); }, {"img"});
  record("pad_constant", [](In x) { return nn::pad(x[0], {2, -1, 1, 3}, nn::PadMode::kConstant, 0.5); }, {"img"});
  record("sdpa", [](In x) { return nn::scaled_dot_product_attention(x[0], x[1], x[2]); }, {"q", "k", "v"});
  record("sdpa_causal", [](In x) { return nn::scaled_dot_product_attention(x[0], x[1], x[2], {.is_causal = true}); },
         {"q", "k", "v"});
  record("sdpa_mask",
         [](In x) {
           return nn::scaled_dot_product_attention(x[0], x[1], x[2],
                                                   {.attn_mask = dg::to(in.at("mask"), dg::kBool), .scale = 0.7});
         },
         {"q", "k", "v"});
  record("bce_logits",
         [](In x) { return nn::binary_cross_entropy_with_logits(x[0], in.at("bin_t"), {.pos_weight = in.at("posw")}); },
         {"a"});
  record("bce_logits_w",
         [](In x) {
           return nn::binary_cross_entropy_with_logits(
               x[0], in.at("bin_t"), {.weight = dg::abs(in.at("b")), .reduction = nn::Reduction::kSum});
         },
         {"a"});
  record("ce_weight", [](In x) { return nn::cross_entropy(x[0], in.at("labels"), {.weight = in.at("cw4")}); },
         {"logits"});
  record("ce_ignore", [](In x) { return nn::cross_entropy(x[0], in.at("labels"), {.ignore_index = 1}); }, {"logits"});
  record("ce_smooth",
         [](In x) {
           return nn::cross_entropy(x[0], in.at("labels"),
                                    {.weight = in.at("cw4"), .ignore_index = 3, .label_smoothing = 0.15});
         },
         {"logits"});
  record("ce_smooth_none",
         [](In x) {
           return nn::cross_entropy(x[0], in.at("labels"),
                                    {.label_smoothing = 0.15, .reduction = nn::Reduction::kNone});
         },
         {"logits"});
  record("ce_probs", [](In x) { return nn::cross_entropy(x[0], in.at("probs"), {.label_smoothing = 0.1}); },
         {"logits"});
  record("nll_weight_sum",
         [](In x) {
           return nn::nll_loss(dg::log_softmax(x[0], 1), in.at("labels"),
                               {.weight = in.at("cw4"), .reduction = nn::Reduction::kSum});
         },
         {"logits"});
  record("smooth_l1", [](In x) { return nn::smooth_l1_loss(x[0], in.at("b"), nn::Reduction::kMean, 0.7); }, {"a"});
  record("huber", [](In x) { return nn::huber_loss(x[0], in.at("b"), nn::Reduction::kSum, 0.7); }, {"a"});
  record("kl", [](In x) { return nn::kl_div(dg::log_softmax(x[0], 1), in.at("probs"), nn::Reduction::kBatchMean); },
         {"a"});
  record("kl_log",
         [](In x) {
           return nn::kl_div(dg::log_softmax(x[0], 1), dg::log_softmax(in.at("b"), 1), nn::Reduction::kSum, true);
         },
         {"a"});
  record(
      "embedding", [](In x) { return nn::embedding(in.at("ids"), x[0], 1); }, {"emb_w"}, false);
  // The ops of the first plan, kept to PyTorch's derivatives.
  record("arithmetic",
         [](In x) {
           return (x[0] + x[2]) * x[1] - x[0] / (dg::abs(x[1]) + 0.5) + dg::pow(dg::abs(x[0]) + 0.1, x[1]) +
                  2.0 / (dg::abs(x[2]) + 1.0);
         },
         {"a", "b", "row"});
  record("maximum_minimum", [](In x) { return dg::maximum(x[0], x[1]) + 2.0 * dg::minimum(x[0], x[1]); }, {"a", "b"});
  record("unary",
         [](In x) {
           const Tensor &a = x[0], &p = x[1];
           return dg::cat({dg::exp(a), dg::log(p), dg::log1p(p), dg::sqrt(p), dg::rsqrt(p), dg::sin(a), dg::cos(a),
                           dg::tanh(a), dg::sigmoid(a), dg::relu(a), dg::gelu(a), dg::erf(a), dg::clamp(a, -0.5, 0.7),
                           dg::abs(a)});
         },
         {"a", "pos"});
  record("reductions",
         [](In x) {
           const Tensor& c = x[0];
           return dg::cat({dg::sum(c, {0, 2}), dg::flatten(dg::mean(c, {1})), dg::flatten(dg::var(c, {2})),
                           dg::std(c, {0, 1}), dg::flatten(dg::max(c, 1).values), dg::flatten(dg::min(c, 0).values),
                           dg::reshape(dg::max(c), {1}), dg::flatten(dg::logsumexp(c, {1}))});
         },
         {"cube"});
  record("softmax_family", [](In x) { return dg::cat({dg::softmax(x[0], 1), dg::log_softmax(x[0], 0)}); }, {"a"});
  record("norms",
         [](In x) {
           return dg::stack({dg::norm(x[0]), dg::norm(x[0], 1), dg::norm(x[0], 3), dg::norm(x[0], INFINITY)});
         },
         {"a"});
  record("matmul",
         [](In x) {
           const Tensor& a = x[1];
           return dg::sum(dg::matmul(x[0], dg::narrow(a, 0, 0, 3)), {0}) +
                  dg::sum(dg::addmm(dg::reshape(dg::narrow(dg::select(a, 0, 0), 0, 0, 2), {2, 1}),
                                    dg::narrow(dg::narrow(a, 0, 0, 2), 1, 0, 3),
                                    dg::narrow(dg::narrow(a, 0, 2, 3), 1, 0, 2)));
         },
         {"mat", "a"});
  record("conv2d",
         [](In x) {
           return dg::conv2d(x[0], x[1], x[2], {.stride = {2, 1}, .padding = {1, 2}, .dilation = {1, 2}});
         },
         {"img", "w_full", "bias3"});
  record(
      "pooling",
      [](In x) {
        return dg::cat(
            {dg::flatten(dg::max_pool2d(x[0], {.kernel_size = {3, 2}, .stride = {2, 1}, .padding = {1, 1}}).values),
             dg::flatten(dg::avg_pool2d(x[0], {.kernel_size = {2, 3}, .padding = {1, 1}, .count_include_pad = false})),
             dg::flatten(dg::avg_pool2d(x[0], {.kernel_size = {2, 2}}))});
      },
      {"img"});
  record("batch_norm_training", [](In x) { return nn::batch_norm(x[0], {}, {}, x[1], x[2], true); },
         {"gn_x", "gn_w", "gn_b"});
  record("indexing",
         [](In x) {
           const Tensor &a = x[0], &b = x[1];
           const Tensor rows = dg::from_vector<int64_t>({4, 0, 4});
           const Tensor columns = dg::from_vector<int64_t>({0, 3, 1, 1, 2, 0, 3, 3, 0, 0}, {5, 2});
           return dg::cat({dg::flatten(dg::cat({a, b}, 0)), dg::flatten(dg::stack({a, b}, 2)),
                           dg::flatten(dg::index_select(a, 0, rows)), dg::flatten(dg::gather(a, 1, columns)),
                           dg::flatten(dg::where(dg::gt(b, 0.0), a, b)),
                           dg::flatten(dg::masked_fill(a, dg::lt(b, 0.0), 2.0))});
         },
         {"a", "b"});
  record("scatter_add",
         [](In x) {
           const Tensor columns = dg::from_vector<int64_t>({0, 3, 1, 1, 2, 0, 3, 3, 0, 0}, {5, 2});
           return dg::scatter_add(x[0], 1, columns, dg::narrow(x[1], 1, 0, 2));
         },
         {"a", "b"});
  record("older_losses",
         [](In x) {
           return dg::stack({nn::mse_loss(x[0], in.at("b")), nn::nll_loss(dg::log_softmax(x[0], 1), in.at("labels")),
                             nn::cross_entropy(x[0], in.at("labels"), nn::Reduction::kSum)});
         },
         {"a"});
  // First order only (torch_reference.py says why).
  record(
      "binary_cross_entropy", [](In x) { return nn::binary_cross_entropy(x[0], in.at("bin_t")); }, {"probs01"}, false);
  nn::MultiheadAttention mha(8, 2, {.batch_first = true}, {.dtype = dg::kFloat64});
  nn::TransformerEncoderLayer enc(8, 2, {.dim_feedforward = 12, .dropout = 0.0, .batch_first = true},
                                  {.dtype = dg::kFloat64});
  dg::nn::ParamDict mha_state, enc_state;
  for (auto& [n, t] : in) {
    if (n.rfind("mha.", 0) == 0) mha_state.insert(n.substr(4), t);
    if (n.rfind("enc.", 0) == 0) enc_state.insert(n.substr(4), t);
  }
  mha.load_state_dict(mha_state);
  enc.load_state_dict(enc_state);
  const Tensor padding = dg::to(in.at("kpm"), dg::kBool);
  record("mha",
         [&](In x) {
           auto r = mha.forward(x[0], x[0], x[0], {.key_padding_mask = padding});
           compare("mha_weights", r.weights);
           return r.output;
         },
         {"seq"});
  record("encoder", [&](In x) { return enc.forward(x[0], {.is_causal = true}); }, {"seq"});
  compare_half_precision();
  std::printf("%d tensors compared with PyTorch's, %d differ beyond their tolerance; largest difference %.3g\n",
              compared, failed, worst);
  return failed ? 1 : 0;
}
