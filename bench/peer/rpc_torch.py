"""PyTorch twin of bench/rpc_bench.cc: the same modes with torch.distributed.rpc over TensorPipe
(and torch.distributed.autograd for the autograd mode).

  RANK=r WORLD_SIZE=n MASTER_ADDR=127.0.0.1 MASTER_PORT=p python rpc_torch.py MODE [--transports default|uv]
      [--duration-s 3] [--window 32] [--repetitions-scale 1] [--timeout-s 120]
      [--rref-workloads remote_to_here,create_rate,parameter_server_step]

MODE is latency, throughput, startup, autograd or rref (see rpc_bench.cc; autograd needs 3 workers);
rank 0 prints one JSON line per workload, with the same names as rpc_bench. The autograd mode
calls the builtin torch.add on worker1 (sent as a builtin operator, no Python there; the chain's
hops are Python functions). The rref mode's remote function and parameter server are Python
(rpc.remote of echo, an RRef to a ParameterServer object); create_rate polls worker1's
_rref_context_get_debug_info()["num_owner_rrefs"]. --transports uv passes _transports=["uv"] (TCP
only: TensorPipe's default shared-memory transport busy-polls a core in every process).
Run with the peer's interpreter (scripts/install_peer.sh); bench/run_rpc_bench.py drives it.
"""
import argparse
import json
import os
import re
import sys
import time

import torch
import torch.distributed.autograd as dist_autograd
import torch.distributed.rpc as rpc
from torch.distributed.rpc import api as rpc_api

LATENCY_WORKLOADS = (("1float", 1, 1000), ("1KB", 256, 200), ("1MB", 256 << 10, 50), ("64MB", 16 << 20, 10))
RREF_WORKLOADS = ("remote_to_here", "create_rate", "parameter_server_step")


def echo(tensor):
    return tensor


def chain_on_worker0(x):
    return x * 2.0


def chain_on_worker2(x):
    return rpc.rpc_sync("worker0", chain_on_worker0, args=(x * x,))


def chain_on_worker1(x):
    """The first of the three hops of dist_autograd/chain3, each calling the next."""
    return rpc.rpc_sync("worker2", chain_on_worker2, args=(torch.sin(x),))


def quantile(sorted_samples, q):
    """Linear interpolation between neighbours, as rpc_bench.cc (numpy's default)."""
    position = q * (len(sorted_samples) - 1)
    below = int(position)
    above = min(below + 1, len(sorted_samples) - 1)
    return sorted_samples[below] + (position - below) * (sorted_samples[above] - sorted_samples[below])


def emit(row, args):
    row["torch_version"] = torch.__version__
    row["transports"] = args.transports
    print(json.dumps(row), flush=True)


def run_latency(args):
    for label, elements, repetitions in LATENCY_WORKLOADS:
        tensor = torch.ones(elements)
        repetitions = max(3, int(repetitions * args.repetitions_scale))
        warm_up = max(2, repetitions // 10)
        # Echoes off worker1 blocking and through a future, and (tiny ones) off worker0 itself, as
        # rpc_bench.cc's run_latency.
        for kind in ("sync", "async", "self"):
            if kind == "self" and elements > 256:
                continue

            def round_trip():
                if kind == "sync":
                    reply = rpc.rpc_sync("worker1", echo, args=(tensor,))
                elif kind == "async":
                    reply = rpc.rpc_async("worker1", echo, args=(tensor,)).wait()
                else:
                    reply = rpc.rpc_sync("worker0", echo, args=(tensor,))
                assert reply.numel() == elements, f"the echo of {elements} elements came back with {reply.numel()}"

            for _ in range(warm_up):
                round_trip()
            samples = []
            for _ in range(repetitions):
                start = time.perf_counter()
                round_trip()
                samples.append(time.perf_counter() - start)
            samples.sort()
            emit({"name": f"latency/{kind}/{label}", "seconds_per_iter": quantile(samples, 0.5),
                  "p10": quantile(samples, 0.1), "p90": quantile(samples, 0.9), "repetitions": repetitions,
                  "bytes": elements * 4}, args)


def time_samples(repetitions, iteration, args):
    """Warm-up iterations, then the seconds of `repetitions` timed ones, sorted, as rpc_bench.cc's time_samples."""
    repetitions = max(3, int(repetitions * args.repetitions_scale))
    for _ in range(max(2, repetitions // 10)):
        iteration()
    samples = []
    for _ in range(repetitions):
        start = time.perf_counter()
        iteration()
        samples.append(time.perf_counter() - start)
    return sorted(samples)


def emit_samples(name, samples, nbytes, args, **extra):
    emit({"name": name, "seconds_per_iter": quantile(samples, 0.5), "p10": quantile(samples, 0.1),
          "p90": quantile(samples, 0.9), "repetitions": len(samples), "bytes": nbytes, **extra}, args)


def time_iterations(name, repetitions, nbytes, iteration, args):
    """time_samples, printed, as rpc_bench.cc's time_iterations."""
    emit_samples(name, time_samples(repetitions, iteration, args), nbytes, args)


def check_gradient(what, found, expected):
    assert torch.allclose(found, expected, rtol=1e-5, atol=1e-6), f"the gradient of {what} is wrong"


def run_context(side, repetitions, args):
    t1 = torch.rand(side, side, requires_grad=True)
    t2 = torch.rand(side, side, requires_grad=True)
    t4 = torch.rand(side, side, requires_grad=True)
    checked = False

    def iteration():
        nonlocal checked
        with dist_autograd.context() as ctx:
            t3 = rpc.rpc_sync("worker1", torch.add, args=(t1, t2))
            loss = (t3 * t4).sum()
            dist_autograd.backward(ctx, [loss])
            grads = dist_autograd.get_gradients(ctx)
            assert len(grads) == 3, f"expected 3 gradients in the context, found {len(grads)}"
            if not checked:
                check_gradient("t1", grads[t1], t4.detach())
                check_gradient("t2", grads[t2], t4.detach())
                check_gradient("t4", grads[t4], t1.detach() + t2.detach())
                checked = True

    time_iterations(f"dist_autograd/context/{side}x{side}", repetitions, side * side * 4, iteration, args)


def run_floor(side, repetitions, args):
    pair, single = torch.ones(2 * side * side), torch.ones(side * side)

    def iteration():
        first = rpc.rpc_sync("worker1", echo, args=(pair,))
        second = rpc.rpc_sync("worker1", echo, args=(single,))
        assert first.numel() == pair.numel() and second.numel() == single.numel()

    time_iterations(f"dist_autograd/floor/{side}x{side}", repetitions, side * side * 4, iteration, args)


def run_chain(repetitions, args):
    x = torch.rand(3, 3, requires_grad=True)
    checked = False

    def iteration():
        nonlocal checked
        with dist_autograd.context() as ctx:
            loss = rpc.rpc_sync("worker1", chain_on_worker1, args=(x,)).sum()
            dist_autograd.backward(ctx, [loss])
            grads = dist_autograd.get_gradients(ctx)
            assert len(grads) == 1, f"expected 1 gradient in the context, found {len(grads)}"
            if not checked:  # d/dx sum(2 sin(x)^2) = 4 sin(x) cos(x)
                check_gradient("x", grads[x], torch.sin(x.detach()) * torch.cos(x.detach()) * 4.0)
                checked = True

    time_iterations("dist_autograd/chain3", repetitions, 3 * 3 * 4, iteration, args)


def run_autograd(args):
    run_context(3, 1000, args)
    run_context(1000, 50, args)
    run_floor(1000, 50, args)
    run_chain(500, args)


def owned_values():
    """The values this worker owns (rref/create_rate waits until worker1's are gone)."""
    return int(rpc._rref_context_get_debug_info()["num_owner_rrefs"])


class ParameterServer:
    """A weight on its owner: forward is x W, apply one SGD step from a context's gradient."""

    def __init__(self, side):
        self.weight = torch.rand(side, side, requires_grad=True)

    def forward(self, x):
        return x @ self.weight

    def apply(self, context_id, lr):
        gradients = dist_autograd.get_gradients(context_id)
        with torch.no_grad():
            self.weight.sub_(gradients[self.weight] * lr)


def run_remote_to_here(repetitions, args):
    tensor = torch.ones(1)

    def iteration():
        value = rpc.remote("worker1", echo, args=(tensor,)).to_here()
        assert value.numel() == 1, f"to_here of a 1-element echo gave {value.numel()} elements"

    time_iterations("rref/remote_to_here", repetitions, 4, iteration, args)


def run_create_rate(trials, args):
    """RRefs created on worker1 in batches of 100, each batch dropped at once, until worker1 owns none of them."""
    batch_size, per_trial = 100, 1000
    tensor = torch.ones(1)

    def trial():
        for _ in range(0, per_trial, batch_size):
            batch = [rpc.remote("worker1", echo, args=(tensor,)) for _ in range(batch_size)]
            batch.clear()
        start = time.perf_counter()
        left = rpc.rpc_sync("worker1", owned_values)
        while left != 0:
            assert time.perf_counter() - start < 60, f"worker1 still owns {left} values 60 s after the drop"
            time.sleep(1e-3)
            left = rpc.rpc_sync("worker1", owned_values)

    samples = [sample / per_trial for sample in time_samples(trials, trial, args)]
    emit_samples("rref/create_rate", samples, 4, args, rrefs_per_second=1 / quantile(samples, 0.5))


def run_parameter_server_step(repetitions, args):
    side, batch, lr = 256, 32, 1e-4
    server = rpc.remote("worker1", ParameterServer, args=(side,))
    x = torch.randn(batch, side)

    def iteration():
        with dist_autograd.context() as ctx:
            y = server.rpc_sync().forward(x)
            loss = (y * y).sum()
            dist_autograd.backward(ctx, [loss])
            server.rpc_sync().apply(ctx, lr)

    time_iterations("rref/parameter_server_step", repetitions, batch * side * 4, iteration, args)


def run_rref(args):
    known = {"remote_to_here": lambda: run_remote_to_here(1000, args), "create_rate": lambda: run_create_rate(10, args),
             "parameter_server_step": lambda: run_parameter_server_step(200, args)}
    for name in RREF_WORKLOADS:
        if name in args.rref_workloads:
            known[name]()


def run_throughput(args):
    tensor = torch.ones(1)
    in_flight = []

    def run_for(seconds):
        completed = 0
        start = time.perf_counter()
        while time.perf_counter() - start < seconds:
            while len(in_flight) < args.window:
                in_flight.append(rpc.rpc_async("worker1", echo, args=(tensor,)))
            in_flight.pop(0).wait()
            completed += 1
        return completed, time.perf_counter() - start

    run_for(args.duration_s / 10)
    completed, elapsed = run_for(args.duration_s)
    for future in in_flight:
        future.wait()
    calls_per_second = completed / elapsed
    emit({"name": f"throughput/window{args.window}", "seconds_per_iter": 1 / calls_per_second,
          "calls_per_second": calls_per_second}, args)


def seconds_since_process_start():
    """From /proc/self/stat's start time (clock ticks since boot), as rpc_bench.cc."""
    with open("/proc/self/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    started = int(fields[19]) / os.sysconf("SC_CLK_TCK")  # field 22 of the whole line
    return time.clock_gettime(time.CLOCK_BOOTTIME) - started


def run_startup(args, rank, world_size, before_init):
    """A barrier after init_rpc; every rank's times gathered on rank 0 (RPC's own all-gather), as rpc_bench.cc."""
    spawned = float(os.environ.get("DISTGRAD_BENCH_SPAWN_TIME", "0"))
    rpc_api._all_gather(None, timeout=args.timeout_s)  # raises, unlike rpc_api._barrier
    passed = time.perf_counter()
    process_seconds = seconds_since_process_start()
    times = (process_seconds, time.time() - spawned if spawned else process_seconds, passed - before_init)
    gathered = rpc_api._all_gather(times, timeout=args.timeout_s).values()
    if rank == 0:
        emit({"name": f"startup/{world_size}workers", "seconds_per_iter": max(t[1] for t in gathered),
              "max_process_seconds": max(t[0] for t in gathered), "max_init_seconds": max(t[2] for t in gathered),
              "workers": world_size}, args)
    return passed


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("mode", choices=["latency", "throughput", "startup", "autograd", "rref"])
    parser.add_argument("--transports", choices=["default", "uv"], default="default")
    parser.add_argument("--duration-s", type=float, default=3.0)
    parser.add_argument("--window", type=int, default=32)
    parser.add_argument("--repetitions-scale", type=float, default=1.0)
    parser.add_argument("--timeout-s", type=float, default=120.0, help="init_rpc, the barrier and every call")
    parser.add_argument("--rref-workloads", default=",".join(RREF_WORKLOADS), help="rref: the names after rref/")
    args = parser.parse_args()
    args.rref_workloads = args.rref_workloads.split(",")
    unknown = sorted(set(args.rref_workloads) - set(RREF_WORKLOADS))
    if unknown:
        parser.error(f"--rref-workloads expects {', '.join(RREF_WORKLOADS)}, found {', '.join(unknown)}")
    torch.set_num_threads(1)

    rank, world_size = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    options = rpc.TensorPipeRpcBackendOptions(
        init_method=f"tcp://{os.environ.get('MASTER_ADDR', '127.0.0.1')}:{os.environ['MASTER_PORT']}",
        rpc_timeout=args.timeout_s, _transports=["uv"] if args.transports == "uv" else None)
    stage = "init_rpc"
    try:
        before_init = time.perf_counter()
        rpc.init_rpc(f"worker{rank}", rank=rank, world_size=world_size, rpc_backend_options=options)
        stage, passed = args.mode, None
        if args.mode == "startup":
            passed = run_startup(args, rank, world_size, before_init)
        elif rank == 0:
            {"latency": run_latency, "throughput": run_throughput, "autograd": run_autograd,
             "rref": run_rref}[args.mode](args)
        stage = "shutdown"
        rpc.shutdown(graceful=True)
        if passed is not None and rank == 0:
            emit({"name": f"shutdown/{world_size}workers", "seconds_per_iter": time.perf_counter() - passed}, args)
    except Exception as error:  # reported as the workload's result: PyTorch RPC fails at scale
        # "Followers ['worker5', 'worker9', ...] timed out" -> "Followers [62 workers] timed out"
        text = re.sub(r"\[('worker\d+'(, )?)+\]", lambda m: f"[{m.group(0).count('worker')} workers]", str(error))
        text = f"{stage}: {type(error).__name__}: {text}"
        print(f"[worker{rank}] error: {text}", file=sys.stderr, flush=True)
        if rank == 0:
            emit({"name": f"{args.mode}/{world_size}workers", "error": text[:500]}, args)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
