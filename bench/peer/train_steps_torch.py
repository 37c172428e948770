"""PyTorch twin of bench/train_steps_bench.cc: the same training steps, printed as JSON lines.

  python train_steps_torch.py [REPETITIONS] [NAME_REGEX]

Workloads (float32, CPU, the inputs drawn once before timing, as in the C++ twin):
  MamlSinusoidStep: one meta-training step of MAML on sinusoid regression (Finn et al.):
    an MLP 1-40-40-1 with ReLU; a meta-batch of 16 tasks, each 5 inner SGD steps at lr 0.01
    on 10 support points, differentiated with create_graph (second order), then the query
    loss on 10 points; the mean of the 16 query losses backward, and an Adam step at 1e-3.
  FashionMlpStep: one training step of an MLP 784-256-128-10 with ReLU on a batch of 128
    Fashion-MNIST-sized inputs: forward, cross entropy, backward, Adam step.
  LayerNormStep: F.layer_norm over the last dim of [64, 128, 256] with weight and bias, forward
    and backward of the sum.
  AttentionStep: causal F.scaled_dot_product_attention of [8, 4, 128, 64] query, key and value,
    forward and backward of the sum.
  TransformerMamlStep: one meta-training step of examples/maml_transformer in one process: the
    model (Linear(1, 16) embedding + learned positions, one causal TransformerEncoderLayer(16, 2,
    32, dropout 0.1, batch_first), Linear(16, 1)), 8 tasks, 2 inner SGD steps at 0.1 with
    create_graph on 10 sequences of 8 steps, the query loss, Adam 2e-3.
Each line: {"name": ..., "seconds_per_iter": median, "torch_version": ..., "threads": ...}.
"""
import json
import re
import sys

import torch

from timing import median_time
import torch.nn as nn
import torch.nn.functional as F

META_BATCH, SHOTS, INNER_STEPS, INNER_LR = 16, 10, 5, 0.01


def maml_step_fn():
    net = nn.Sequential(nn.Linear(1, 40), nn.ReLU(), nn.Linear(40, 40), nn.ReLU(), nn.Linear(40, 1))
    outer = torch.optim.Adam(net.parameters(), lr=1e-3)
    amplitude = torch.rand(META_BATCH, 1, 1) * 4.9 + 0.1
    phase = torch.rand(META_BATCH, 1, 1) * 3.14159265
    x_support = torch.rand(META_BATCH, SHOTS, 1) * 10 - 5
    x_query = torch.rand(META_BATCH, SHOTS, 1) * 10 - 5
    y_support = amplitude * torch.sin(x_support + phase)
    y_query = amplitude * torch.sin(x_query + phase)

    def step():
        outer.zero_grad()
        losses = []
        for task in range(META_BATCH):
            params = dict(net.named_parameters())
            for _ in range(INNER_STEPS):
                loss = F.mse_loss(torch.func.functional_call(net, params, (x_support[task],)), y_support[task])
                grads = torch.autograd.grad(loss, list(params.values()), create_graph=True)
                params = {n: p - INNER_LR * g for (n, p), g in zip(params.items(), grads)}
            losses.append(F.mse_loss(torch.func.functional_call(net, params, (x_query[task],)), y_query[task]))
        torch.stack(losses).mean().backward()
        outer.step()

    return step


def fashion_mlp_step_fn():
    net = nn.Sequential(nn.Flatten(), nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 128), nn.ReLU(), nn.Linear(128, 10))
    optimizer = torch.optim.Adam(net.parameters(), lr=1e-3)
    images = torch.rand(128, 1, 28, 28)
    labels = torch.randint(0, 10, (128,))

    def step():
        optimizer.zero_grad()
        F.cross_entropy(net(images), labels).backward()
        optimizer.step()

    return step


def layer_norm_step_fn():
    x = torch.randn(64, 128, 256, requires_grad=True)
    weight, bias = torch.ones(256, requires_grad=True), torch.zeros(256, requires_grad=True)

    def step():
        F.layer_norm(x, (256,), weight, bias).sum().backward()

    return step


def attention_step_fn():
    q, k, v = (torch.randn(8, 4, 128, 64, requires_grad=True) for _ in range(3))

    def step():
        F.scaled_dot_product_attention(q, k, v, is_causal=True).sum().backward()

    return step


class SequenceNet(nn.Module):
    def __init__(self, length):
        super().__init__()
        self.embed = nn.Linear(1, 16)
        self.positions = nn.Embedding(length, 16)
        self.encoder = nn.TransformerEncoderLayer(16, 2, dim_feedforward=32, dropout=0.1, batch_first=True)
        self.head = nn.Linear(16, 1)
        self.register_buffer("causal", nn.Transformer.generate_square_subsequent_mask(length), persistent=False)

    def forward(self, x):
        h = self.embed(x) + self.positions(torch.arange(x.size(1)))
        return self.head(self.encoder(h, src_mask=self.causal, is_causal=True))


def transformer_maml_step_fn():
    tasks, sequences, length = 8, 10, 8
    net = SequenceNet(length)
    outer = torch.optim.Adam(net.parameters(), lr=2e-3)
    a, b = torch.rand(tasks, 1, 1, 1) * 4 - 2, torch.rand(tasks, 1, 1, 1) * 4 - 2
    c = torch.rand(tasks, 1, 1, 1) * 2 - 1

    def targets(x):
        return a * x + b * F.pad(x[:, :, :-1], (0, 0, 1, 0)) + c

    x_support, x_query = (torch.rand(tasks, sequences, length, 1) * 2 - 1 for _ in range(2))
    y_support, y_query = targets(x_support), targets(x_query)

    def step():
        outer.zero_grad()
        losses = []
        for task in range(tasks):
            params = dict(net.named_parameters())
            for _ in range(2):
                loss = F.mse_loss(torch.func.functional_call(net, params, (x_support[task],)), y_support[task])
                grads = torch.autograd.grad(loss, list(params.values()), create_graph=True)
                params = {n: p - 0.1 * g for (n, p), g in zip(params.items(), grads)}
            losses.append(F.mse_loss(torch.func.functional_call(net, params, (x_query[task],)), y_query[task]))
        torch.stack(losses).mean().backward()
        outer.step()

    return step


WORKLOADS = [("MamlSinusoidStep", maml_step_fn), ("FashionMlpStep", fashion_mlp_step_fn),
             ("LayerNormStep", layer_norm_step_fn), ("AttentionStep", attention_step_fn),
             ("TransformerMamlStep", transformer_maml_step_fn)]


def main():
    repetitions = int(sys.argv[1]) if len(sys.argv) > 1 else 5
    name_filter = re.compile(sys.argv[2] if len(sys.argv) > 2 else ".")
    torch.manual_seed(0)
    for name, make in WORKLOADS:
        if not name_filter.search(name):
            continue
        seconds = median_time(make(), repetitions, min_seconds=0.5)
        print(json.dumps({"name": name, "seconds_per_iter": seconds, "torch_version": torch.__version__,
                          "threads": torch.get_num_threads()}), flush=True)


if __name__ == "__main__":
    main()
