"""PyTorch twin of bench/train_steps_bench.cc: the same training steps, printed as JSON lines.

  python train_steps_torch.py [REPETITIONS] [NAME_REGEX]

Workloads (float32, CPU, the inputs drawn once before timing, as in the C++ twin):
  MamlSinusoidStep: one meta-training step of MAML on sinusoid regression (Finn et al.):
    an MLP 1-40-40-1 with ReLU; a meta-batch of 16 tasks, each 5 inner SGD steps at lr 0.01
    on 10 support points, differentiated with create_graph (second order), then the query
    loss on 10 points; the mean of the 16 query losses backward, and an Adam step at 1e-3.
  FashionMlpStep: one training step of an MLP 784-256-128-10 with ReLU on a batch of 128
    Fashion-MNIST-sized inputs: forward, cross entropy, backward, Adam step.
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


WORKLOADS = [("MamlSinusoidStep", maml_step_fn), ("FashionMlpStep", fashion_mlp_step_fn)]


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
