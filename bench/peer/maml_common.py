"""What the peer's MAML benchmarks share: the sinusoid tasks, the network, the timing, the options.

The workload is bench/maml_bench.cc's: a meta-batch of 16 sinusoid tasks of 10 shots (y = A sin(x +
phase), A ~ U[0.1, 5], phase ~ U[0, pi], x ~ U[-5, 5], tensors [T, K, 1]), an MLP 1-40-40-1 with
ReLU, 5 second-order inner SGD steps at 0.01, Adam at 1e-3 on rank 0. Rank 0 times each outer
iteration after a warm-up and prints one JSON line with the same names as maml_bench:
"maml/worldN" (N = WORLD_SIZE) or "maml/local" (one process, no RPC).
"""
import argparse
import json
import math
import os
import statistics
import time

import torch
import torch.distributed.rpc as rpc
import torch.nn as nn


def parser(description):
    """The options every MAML twin takes (as maml_bench's flags, plus the RPC transport)."""
    result = argparse.ArgumentParser(description=description, formatter_class=argparse.RawDescriptionHelpFormatter)
    result.add_argument("--warmup", type=int, default=5)
    result.add_argument("--iterations", type=int, default=30)
    result.add_argument("--meta-batch", type=int, default=16)
    result.add_argument("--shots", type=int, default=10)
    result.add_argument("--inner-steps", type=int, default=5)
    result.add_argument("--inner-lr", type=float, default=0.01)
    result.add_argument("--outer-lr", type=float, default=1e-3)
    result.add_argument("--seed", type=int, default=0)
    result.add_argument("--transports", choices=["default", "uv"], default="default",
                        help='uv: _transports=["uv"] (TCP only, no busy-polling shared-memory transport)')
    result.add_argument("--timeout-s", type=float, default=120.0, help="init_rpc and every call")
    return result


def backend_options(args):
    """TensorPipe options for the launcher's MASTER_ADDR/MASTER_PORT and the chosen transports."""
    return rpc.TensorPipeRpcBackendOptions(
        init_method=f"tcp://{os.environ.get('MASTER_ADDR', '127.0.0.1')}:{os.environ['MASTER_PORT']}",
        rpc_timeout=args.timeout_s, _transports=["uv"] if args.transports == "uv" else None)


def build_net():
    return nn.Sequential(nn.Linear(1, 40), nn.ReLU(), nn.Linear(40, 40), nn.ReLU(), nn.Linear(40, 1))


def sample_tasks(tasks, shots, generator):
    """(x_support, y_support, x_query, y_query), each [tasks, shots, 1]."""
    amplitude = torch.rand(tasks, 1, 1, generator=generator) * 4.9 + 0.1
    phase = torch.rand(tasks, 1, 1, generator=generator) * math.pi
    x_support = torch.rand(tasks, shots, 1, generator=generator) * 10 - 5
    x_query = torch.rand(tasks, shots, 1, generator=generator) * 10 - 5
    return (x_support, amplitude * torch.sin(x_support + phase), x_query, amplitude * torch.sin(x_query + phase))


def run_phases(forward, backward):
    """Calls forward() and backward(its loss); returns the seconds of each."""
    start = time.perf_counter()
    loss = forward()
    middle = time.perf_counter()
    backward(loss)
    return middle - start, time.perf_counter() - middle


def time_and_report(outer_iteration, args, contender):
    """Runs --warmup iterations, then times --iterations one by one; prints the JSON line.

    outer_iteration() returns the seconds of its forward part (from cloning the parameters to
    the mean loss) and of its backward pass (run_phases), reported as medians beside the whole
    iteration's."""
    for _ in range(args.warmup):
        outer_iteration()
    samples, forward_samples, backward_samples = [], [], []
    for _ in range(args.iterations):
        start = time.perf_counter()
        forward_seconds, backward_seconds = outer_iteration()
        samples.append(time.perf_counter() - start)
        forward_samples.append(forward_seconds)
        backward_samples.append(backward_seconds)
    # Linear interpolation between neighbours (numpy's default), as maml_bench.cc.
    deciles = statistics.quantiles(samples, n=10, method="inclusive") if len(samples) > 1 else samples * 9
    local = getattr(args, "local", False)
    name = "maml/local" if local else f"maml/world{int(os.environ.get('WORLD_SIZE', '1'))}"
    print(json.dumps({"name": name, "seconds_per_iter": statistics.median(samples), "p10": deciles[0],
                      "p90": deciles[8], "iterations": len(samples),
                      "forward_seconds": statistics.median(forward_samples),
                      "backward_seconds": statistics.median(backward_samples), "torch_version": torch.__version__,
                      "contender": contender, "transports": "none" if local else args.transports}), flush=True)
