#!/usr/bin/env python3
"""PyTorch's side of the parity check (tests/torch_parity): float64 inputs and what PyTorch
computes from them (values, first derivatives and second derivatives of a fixed scalar function
of each output), written as two safetensors files for torch_parity.cc to compare with.

  python torch_reference.py DIR      (the peer's interpreter: scripts/install_peer.sh)

Each case's name is the key of its output; "<name>.grad.<input>" and "<name>.gg.<input>" are
the gradients of s = sum(y * cos(arange)) + sum(y^2) / 2 and of sum(grad^2) (second order).
Attention runs PyTorch's math backend: its CPU flash kernel has no double backward.
"""
import sys

import torch
import torch.nn.functional as F
from safetensors.torch import save_file
from torch.nn.attention import SDPBackend, sdpa_kernel

directory = sys.argv[1]
torch.manual_seed(0)
d = torch.float64
t = {}
t["x"] = torch.randn(4, 6, dtype=d) * 3
t["x"][0, 0] = 0.0
t["x"][1, 1] = 25.0  # softplus threshold side
t["cube"] = torch.randn(3, 4, 5, dtype=d)
t["prodz"] = torch.randn(3, 4, dtype=d); t["prodz"][1, 2] = 0.0
t["ln_x"] = torch.randn(2, 3, 8, dtype=d); t["ln_w"] = torch.randn(8, dtype=d); t["ln_b"] = torch.randn(8, dtype=d)
t["gn_x"] = torch.randn(2, 6, 3, 2, dtype=d); t["gn_w"] = torch.randn(6, dtype=d); t["gn_b"] = torch.randn(6, dtype=d)
t["img"] = torch.randn(2, 4, 7, 6, dtype=d)
t["cw"] = torch.randn(6, 2, 3, 2, dtype=d); t["cb"] = torch.randn(6, dtype=d)
t["q"] = torch.randn(2, 3, 5, 4, dtype=d); t["k"] = torch.randn(2, 3, 6, 4, dtype=d); t["v"] = torch.randn(2, 3, 6, 3, dtype=d)
t["mask"] = (torch.rand(5, 6) > 0.3).to(d)
t["logits"] = torch.randn(5, 4, dtype=d); t["labels"] = torch.tensor([1, 0, 3, 2, 1], dtype=torch.int64)
t["cw4"] = torch.rand(4, dtype=d) + 0.5
t["bin_t"] = torch.rand(5, 4, dtype=d); t["posw"] = torch.rand(4, dtype=d) * 3
t["a"] = torch.randn(5, 4, dtype=d); t["b"] = torch.randn(5, 4, dtype=d)
t["row"] = torch.randn(4, dtype=d); t["pos"] = torch.rand(5, 4, dtype=d) + 0.5
t["mat"] = torch.randn(2, 4, 3, dtype=d); t["bias3"] = torch.randn(3, dtype=d)
t["w_full"] = torch.randn(3, 4, 3, 3, dtype=d); t["probs01"] = torch.rand(5, 4, dtype=d) * 0.9 + 0.05
t["probs"] = torch.softmax(torch.randn(5, 4, dtype=d), 1); t["probs"][0, 0] = 0.0
# attention module weights
mha = torch.nn.MultiheadAttention(8, 2, batch_first=True, dtype=d)
enc = torch.nn.TransformerEncoderLayer(8, 2, dim_feedforward=12, dropout=0.0, batch_first=True, dtype=d)
for n, p in mha.state_dict().items(): t["mha." + n] = p.contiguous()
for n, p in enc.state_dict().items(): t["enc." + n] = p.contiguous()
t["seq"] = torch.randn(2, 5, 8, dtype=d)
t["kpm"] = torch.tensor([[0, 0, 0, 0, 1], [0, 0, 1, 1, 0]], dtype=d)
t["emb_w"] = torch.randn(7, 3, dtype=d); t["ids"] = torch.tensor([[1, 3, 0], [6, 1, 1]], dtype=torch.int64)
# Half precision: inputs rounded to float16 and bfloat16 by PyTorch ("f16.a", "bf16.a", ...).
for tag, half in (("f16", torch.float16), ("bf16", torch.bfloat16)):
    for k in ("a", "b", "pos", "cube", "mat", "img", "w_full", "bias3", "ln_x", "ln_w", "ln_b"):
        t[f"{tag}.{k}"] = t[k].to(half)
t = {k: v.contiguous() for k, v in t.items()}
save_file(t, f"{directory}/inputs.safetensors")

out = {}
# PyTorch's math backend for the whole script (kept referenced): its CPU flash kernel has no double backward.
math_backend = sdpa_kernel(SDPBackend.MATH)
math_backend.__enter__()


def leaf(name):
    return t[name].clone().requires_grad_(True)


def record(name, fn, *leaves, second=True):
    xs = [leaf(l) for l in leaves]
    y = fn(*xs)
    out[name] = y.detach()
    weights = torch.cos(torch.arange(y.numel(), dtype=torch.float64)).reshape(y.shape)
    s = (y * weights).sum() + (y * y).sum() / 2
    gs = torch.autograd.grad(s, xs, create_graph=second, allow_unused=True)
    for l, g in zip(leaves, gs):
        out[f"{name}.grad.{l}"] = (g if g is not None else torch.zeros_like(t[l])).detach()
    if second:
        total = sum((g * g).sum() for g in gs if g is not None)
        ggs = torch.autograd.grad(total, xs, allow_unused=True)
        for l, g in zip(leaves, ggs):
            out[f"{name}.gg.{l}"] = (g if g is not None else torch.zeros_like(t[l])).detach()
record("silu", F.silu, "x")
record("leaky_relu", lambda x: F.leaky_relu(x, 0.2), "x")
record("elu", lambda x: F.elu(x, 0.7), "x")
record("softplus", lambda x: F.softplus(x, beta=1.5, threshold=20), "x")
record("logsigmoid", F.logsigmoid, "x")
record("hardtanh", lambda x: F.hardtanh(x, -1.5, 2.0), "x")
record("expm1", torch.expm1, "x")
record("amax", lambda c: torch.amax(c, dim=(0, 2)), "cube")
record("amin", lambda c: torch.amin(c, dim=(1,), keepdim=True), "cube")
record("prod_dim", lambda p: torch.prod(p, 1), "prodz")
record("prod_all", lambda p: torch.prod(p), "prodz")
record("prod_nozero", lambda c: torch.prod(c, 2), "cube")
record("cumsum", lambda c: torch.cumsum(c, 1), "cube")
record("layer_norm", lambda x, w, b: F.layer_norm(x, (8,), w, b), "ln_x", "ln_w", "ln_b")
record("layer_norm2", lambda x: F.layer_norm(x, (3, 8)), "ln_x")
record("group_norm", lambda x, w, b: F.group_norm(x, 3, w, b), "gn_x", "gn_w", "gn_b")
record("conv_grouped", lambda x, w, b: F.conv2d(x, w, b, stride=(2, 1), padding=(1, 1), dilation=(1, 2), groups=2), "img", "cw", "cb")
record("maxpool_ceil", lambda x: F.max_pool2d(x, (2, 3), stride=(2, 2), ceil_mode=True), "img")
record("maxpool_ceil_pad", lambda x: F.max_pool2d(x, 3, stride=2, padding=1, ceil_mode=True), "img")
record("adaptive", lambda x: F.adaptive_avg_pool2d(x, (3, 4)), "img")
record("pad_reflect", lambda x: F.pad(x, (2, 1, 1, 3), mode="reflect"), "img")
record("pad_replicate", lambda x: F.pad(x, (2, 1, 1, 3), mode="replicate"), "img")
record("pad_circular", lambda x: F.pad(x, (2, 1, 1, 3), mode="circular"), "img")
record("pad_constant", lambda x: F.pad(x, (2, -1, 1, 3), value=0.5), "img")
record("sdpa", lambda q, k, v: F.scaled_dot_product_attention(q, k, v), "q", "k", "v")
record("sdpa_causal", lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True), "q", "k", "v")
record("sdpa_mask", lambda q, k, v: F.scaled_dot_product_attention(q, k, v, attn_mask=t["mask"].bool(), scale=0.7), "q", "k", "v")
record("bce_logits", lambda a: F.binary_cross_entropy_with_logits(a, t["bin_t"], pos_weight=t["posw"]), "a")
record("bce_logits_w", lambda a: F.binary_cross_entropy_with_logits(a, t["bin_t"], weight=t["b"].abs(), reduction="sum"), "a")
record("ce_weight", lambda l: F.cross_entropy(l, t["labels"], weight=t["cw4"]), "logits")
record("ce_ignore", lambda l: F.cross_entropy(l, t["labels"], ignore_index=1), "logits")
record("ce_smooth", lambda l: F.cross_entropy(l, t["labels"], weight=t["cw4"], ignore_index=3, label_smoothing=0.15), "logits")
record("ce_smooth_none", lambda l: F.cross_entropy(l, t["labels"], label_smoothing=0.15, reduction="none"), "logits")
record("ce_probs", lambda l: F.cross_entropy(l, t["probs"], label_smoothing=0.1), "logits")
record("nll_weight_sum", lambda l: F.nll_loss(F.log_softmax(l, 1), t["labels"], weight=t["cw4"], reduction="sum"), "logits")
record("smooth_l1", lambda a: F.smooth_l1_loss(a, t["b"], beta=0.7), "a")
record("huber", lambda a: F.huber_loss(a, t["b"], delta=0.7, reduction="sum"), "a")
record("kl", lambda a: F.kl_div(F.log_softmax(a, 1), t["probs"], reduction="batchmean"), "a")
record("kl_log", lambda a: F.kl_div(F.log_softmax(a, 1), F.log_softmax(t["b"], 1), reduction="sum", log_target=True), "a")
record("embedding", lambda w: F.embedding(t["ids"], w, padding_idx=1), "emb_w", second=False)
# The ops of the first plan, kept to PyTorch's derivatives (issue 33: "keep it so").
record("arithmetic", lambda a, b, r: (a + r) * b - a / (b.abs() + 0.5) + torch.pow(a.abs() + 0.1, b) + 2.0 / (r.abs() + 1), "a", "b", "row")
record("maximum_minimum", lambda a, b: torch.maximum(a, b) + 2 * torch.minimum(a, b.t().t()), "a", "b")
record("unary", lambda a, p: torch.cat([torch.exp(a), torch.log(p), torch.log1p(p), torch.sqrt(p), torch.rsqrt(p), torch.sin(a), torch.cos(a), torch.tanh(a), torch.sigmoid(a), torch.relu(a), F.gelu(a), torch.erf(a), torch.clamp(a, -0.5, 0.7), a.abs()]), "a", "pos")
record("reductions", lambda c: torch.cat([c.sum((0, 2)), c.mean(1).flatten(), c.var(2).flatten(), c.std((0, 1)), c.max(1).values.flatten(), c.min(0).values.flatten(), c.max().reshape(1), torch.logsumexp(c, 1).flatten()]), "cube")
record("softmax_family", lambda a: torch.cat([torch.softmax(a, 1), torch.log_softmax(a, 0)]), "a")
record("norms", lambda a: torch.stack([a.norm(), a.norm(1), a.norm(3), a.norm(float("inf"))]), "a")
record("matmul", lambda m, a: torch.matmul(m, a[:3]) .sum(0) + torch.addmm(a[0, :2].reshape(2, 1), a[:2, :3], a[2:5, :2]).sum(), "mat", "a")
record("conv2d", lambda x, w, b: F.conv2d(x, w, b, stride=(2, 1), padding=(1, 2), dilation=(1, 2)), "img", "w_full", "bias3")
record("pooling", lambda x: torch.cat([F.max_pool2d(x, (3, 2), stride=(2, 1), padding=1).flatten(), F.avg_pool2d(x, (2, 3), padding=1, count_include_pad=False).flatten(), F.avg_pool2d(x, 2).flatten()]), "img")
record("batch_norm_training", lambda x, w, b: F.batch_norm(x, None, None, w, b, training=True), "gn_x", "gn_w", "gn_b")
record("indexing", lambda a, b: torch.cat([torch.cat([a, b], 0).flatten(), torch.stack([a, b], 2).flatten(), a.index_select(0, torch.tensor([4, 0, 4])).flatten(), a.gather(1, torch.tensor([[0, 3], [1, 1], [2, 0], [3, 3], [0, 0]])).flatten(), torch.where(b > 0, a, b).flatten(), a.masked_fill(b < 0, 2.0).flatten()]), "a", "b")
record("scatter_add", lambda a, b: a.scatter_add(1, torch.tensor([[0, 3], [1, 1], [2, 0], [3, 3], [0, 0]]), b[:, :2]), "a", "b")
record("older_losses", lambda a: torch.stack([F.mse_loss(a, t["b"]), F.nll_loss(F.log_softmax(a, 1), t["labels"]), F.cross_entropy(a, t["labels"], reduction="sum")]), "a")
# First order only: PyTorch's double backward of binary_cross_entropy divides by
# (p + 1e-12)^2 (1 - p + 1e-12)^2, distgrad's derivative of its gradient by (p (1 - p))^2 (about
# 1e-12 / (p (1 - p)) relative apart; docs/nn.md).
record("binary_cross_entropy", lambda p: F.binary_cross_entropy(p, t["bin_t"]), "probs01", second=False)
mha = torch.nn.MultiheadAttention(8, 2, batch_first=True, dtype=torch.float64)
mha.load_state_dict({k[4:]: v for k, v in t.items() if k.startswith("mha.")})
def run_mha(x):
    o, w = mha(x, x, x, key_padding_mask=t["kpm"].bool())
    out["mha_weights"] = w.detach()
    return o
record("mha", run_mha, "seq")
enc = torch.nn.TransformerEncoderLayer(8, 2, dim_feedforward=12, dropout=0.0, batch_first=True, dtype=torch.float64)
enc.load_state_dict({k[4:]: v for k, v in t.items() if k.startswith("enc.")})
record("encoder", lambda x: enc(x, src_mask=torch.nn.Transformer.generate_square_subsequent_mask(5, dtype=torch.float64), is_causal=True), "seq")
# Half precision, values: what PyTorch's CPU half kernels compute from the half inputs.
for tag in ("f16", "bf16"):
    def h(k):
        return t[f"{tag}.{k}"]
    a, b, pos = h("a"), h("b"), h("pos")
    out[f"{tag}.elementwise"] = torch.cat([a + b, a * b, a / (b.abs() + 0.5), torch.exp(a), torch.log(pos), torch.tanh(a), torch.sigmoid(a), torch.sqrt(pos), a * 3.0, torch.relu(a)])
    out[f"{tag}.reductions"] = torch.cat([h("cube").sum((0, 2)), h("cube").mean(1).flatten(), h("cube").amax(2).flatten(), torch.softmax(a, 1).flatten(), torch.log_softmax(a, 0).flatten(), torch.logsumexp(h("cube"), 1).flatten()])
    out[f"{tag}.matmul"] = torch.matmul(h("mat"), a[:3])
    out[f"{tag}.conv2d"] = F.conv2d(h("img"), h("w_full"), h("bias3"), stride=(2, 1), padding=(1, 2), dilation=(1, 2))
    out[f"{tag}.layer_norm"] = F.layer_norm(h("ln_x"), (8,), h("ln_w"), h("ln_b"))
# Autocast on the CPU (bfloat16): a linear layer's bfloat16 output, the float32 loss, and the
# float32 gradients of its float32 weight and bias.
amp_w = t["b"][:3].float().requires_grad_(True)
amp_b = t["bias3"].float().requires_grad_(True)
with torch.autocast("cpu", dtype=torch.bfloat16):
    amp_out = F.linear(t["a"].float(), amp_w, amp_b)
    amp_loss = F.cross_entropy(amp_out, torch.tensor([0, 2, 1, 1, 0]))
amp_loss.backward()
out["autocast.linear"] = amp_out.detach()
out["autocast.loss"] = amp_loss.detach()
out["autocast.grad.w"] = amp_w.grad
out["autocast.grad.b"] = amp_b.grad
save_file({k: v.contiguous() for k, v in out.items()}, f"{directory}/torch_outputs.safetensors")
print(f"torch {torch.__version__}: {len(out)} reference tensors")
