"""PyTorch side of the DDP benchmark: gloo all_reduce bandwidth and DistributedDataParallel step time.

  RANK=r WORLD_SIZE=n MASTER_ADDR=127.0.0.1 MASTER_PORT=p python ddp_torch.py --mode allreduce
      [--sizes 1024,16384,...] [--warmup 3] [--iters 20]
  RANK=r WORLD_SIZE=n MASTER_ADDR=127.0.0.1 MASTER_PORT=p python ddp_torch.py --mode ddp_step
      [--model mlp|cnn] [--batch 64] [--warmup 5] [--iters 50]

Launched once per rank (as torchrun would), CPU only, torch.set_num_threads(1), backend gloo.
allreduce: float32 tensors of each size (bytes; default 1 KB .. 64 MB), dist.all_reduce timed one
call at a time after a barrier (sizes >= 16 MB run max(5, iters // 4) iterations); rank 0 prints
{"bench": "allreduce", "impl": "torch-gloo", "world", "bytes", "median_ms", "busbw_gbps"}, with the
bus bandwidth of NCCL-tests: bytes * 2 (W - 1) / W / median time, in GB/s (1e9 bytes).
ddp_step: an MLP 784-256-256-10 or a small CNN (two conv+pool, two linear) in DistributedDataParallel
(bucket_cap_mb 25), SGD lr 0.01, a random per-rank batch [B, 1, 28, 28]; a step is zero_grad,
forward, cross entropy, backward, step; rank 0 prints {"bench": "ddp_step", "impl": "torch-ddp-gloo",
"world", "model", "batch", "median_ms", "p10_ms", "p90_ms"}. Run with the peer's interpreter.
"""
import argparse
import datetime
import json
import sys
import time

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

DEFAULT_SIZES = (1 << 10, 16 << 10, 256 << 10, 1 << 20, 4 << 20, 16 << 20, 64 << 20)


def quantile(sorted_samples, q):
    """Linear interpolation between neighbours (numpy's default), as rpc_torch.py."""
    position = q * (len(sorted_samples) - 1)
    below = int(position)
    above = min(below + 1, len(sorted_samples) - 1)
    return sorted_samples[below] + (position - below) * (sorted_samples[above] - sorted_samples[below])


def timed_samples(fn, warmup, iters):
    """Seconds of each of `iters` calls of fn(), after `warmup` calls and a barrier; sorted."""
    for _ in range(warmup):
        fn()
    dist.barrier()
    samples = []
    for _ in range(iters):
        start = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - start)
    return sorted(samples)


def emit(row):
    if dist.get_rank() == 0:
        row["torch_version"] = torch.__version__
        print(json.dumps(row), flush=True)


def run_allreduce(args, world):
    rank = dist.get_rank()
    for nbytes in args.sizes:
        tensor = torch.full((max(1, nbytes // 4),), float(rank + 1))
        dist.all_reduce(tensor)  # a check, once: the sum of 1..W everywhere
        expected = world * (world + 1) / 2
        assert torch.all(tensor == expected), f"all_reduce of {nbytes} bytes gave {tensor[0].item()}, not {expected}"
        tensor.zero_()  # zeros stay zeros: no overflow over the timed sums
        iters = args.iters if nbytes < (16 << 20) else max(5, args.iters // 4)
        samples = timed_samples(lambda: dist.all_reduce(tensor), args.warmup, iters)
        median = quantile(samples, 0.5)
        emit({"bench": "allreduce", "impl": "torch-gloo", "world": world, "bytes": nbytes,
              "median_ms": median * 1e3, "busbw_gbps": nbytes * 2 * (world - 1) / world / median / 1e9,
              "iters": iters})


def build_model(name):
    if name == "mlp":
        return nn.Sequential(nn.Flatten(), nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(),
                             nn.Linear(256, 10))
    return nn.Sequential(nn.Conv2d(1, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                         nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
                         nn.Linear(64 * 7 * 7, 128), nn.ReLU(), nn.Linear(128, 10))


def run_ddp_step(args, world):
    rank = dist.get_rank()
    torch.manual_seed(args.seed)  # the same initial weights everywhere (DDP broadcasts rank 0's anyway)
    model = nn.parallel.DistributedDataParallel(build_model(args.model), bucket_cap_mb=25)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    generator = torch.Generator().manual_seed(args.seed + 1 + rank)
    images = torch.rand(args.batch, 1, 28, 28, generator=generator)
    labels = torch.randint(0, 10, (args.batch,), generator=generator)

    def step():
        optimizer.zero_grad()
        F.cross_entropy(model(images), labels).backward()
        optimizer.step()

    samples = timed_samples(step, args.warmup, args.iters)
    emit({"bench": "ddp_step", "impl": "torch-ddp-gloo", "world": world, "model": args.model,
          "batch": args.batch, "median_ms": quantile(samples, 0.5) * 1e3, "p10_ms": quantile(samples, 0.1) * 1e3,
          "p90_ms": quantile(samples, 0.9) * 1e3, "iters": args.iters})


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--mode", choices=["allreduce", "ddp_step"], required=True)
    parser.add_argument("--sizes", type=lambda s: [int(x) for x in s.split(",") if x],
                        default=list(DEFAULT_SIZES), help="allreduce: comma list of byte counts")
    parser.add_argument("--model", choices=["mlp", "cnn"], default="mlp")
    parser.add_argument("--batch", type=int, default=64, help="ddp_step: samples per rank")
    parser.add_argument("--warmup", type=int, help="default 3 (allreduce) or 5 (ddp_step)")
    parser.add_argument("--iters", type=int, help="default 20 (allreduce) or 50 (ddp_step)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--timeout-s", type=float, default=120.0, help="init_process_group and collectives")
    args = parser.parse_args()
    allreduce = args.mode == "allreduce"
    args.warmup = args.warmup if args.warmup is not None else (3 if allreduce else 5)
    args.iters = args.iters if args.iters is not None else (20 if allreduce else 50)
    torch.set_num_threads(1)
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=args.timeout_s))
    try:
        world = dist.get_world_size()
        if allreduce:
            run_allreduce(args, world)
        else:
            run_ddp_step(args, world)
        dist.barrier()
    finally:
        dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
