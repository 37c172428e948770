#!/usr/bin/env python3
"""Runs the RPC benchmark worlds, ours and torch.distributed.rpc's, alternately; reports medians and ratios.

  python3 bench/run_rpc_bench.py --build build --rounds 3 [--modes latency,throughput,startup,autograd,rref]
      [--startup-workers 64] [--peer-transports default,uv] [--peer-python ~/.venvs/distgrad-peer/bin/python]
      [--ours distgrad,distgrad-cross-host,distgrad-grpc] [--baseline BUILD_OF_ANOTHER_COMMIT]

Each round starts one world per contender and mode: BUILD/bench/rpc_bench (ours: "distgrad" with its
defaults, every fast path on; "distgrad-cross-host" with DISTGRAD_SAME_HOST=0, as if the peers were on other
hosts; "distgrad-grpc" with DISTGRAD_GRPC_ONLY=1, gRPC alone), with --baseline each of them again from
another build ("distgrad@baseline", ...: a refactor's before and after, measured in the same run), and
bench/peer/rpc_torch.py once per TensorPipe transport setting ("default", and "uv" for
_transports=["uv"]: TCP only, no busy-polling shared-memory transport). Every process gets the
launcher's environment (RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR=127.0.0.1, a
free MASTER_PORT), OMP_NUM_THREADS=1, its own process group, and DISTGRAD_BENCH_SPAWN_TIME (the
clock when the world's first process was started, for the start-up mode). A world still running
after its timeout is killed (SIGKILL, every process group), and so are the other ranks shortly
after one rank fails. The contenders' order rotates from round to round.

Prints one JSON object per workload (the median over rounds of each round's figure, and the
ratio peer time / our time, where larger is better for us; for a baseline contender, its time over
the same contender's in BUILD, where larger means BUILD is faster) and a Markdown table for
docs/benchmarks.md (on stderr). A world that fails or times out is reported with its error.
The autograd mode (3 workers) also prints, per contender, its 1000x1000 context's time over the
bytes-on-wire floor measured in the same world (the median over rounds of each round's ratio).
The rref mode runs two worlds per contender: remote_to_here and create_rate with 2 workers,
parameter_server_step with 3 (RREF_WORLDS).
"""
import argparse
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
# Variables a launcher may have left in our own environment; the worlds get only ours.
LAUNCHER_PREFIXES = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_", "SLURM_", "OMPI_",
                     "DISTGRAD_TOKEN", "DISTGRAD_INSECURE", "DISTGRAD_USE_AGENT_STORE", "DISTGRAD_SHM", "DISTGRAD_SAME_HOST",
                     "DISTGRAD_SOCKET_CALLS", "DISTGRAD_SOCKET_OWN_READS", "DISTGRAD_GRPC_ONLY", "DISTGRAD_TRACE")
# A value of a contender's variable that run_world replaces with a fresh folder of the world's own.
WORLD_FOLDER = "<world folder>"
# Our contenders: the defaults (every fast path on), as if the peers were on other hosts (small calls
# on TCP sockets, the rest over gRPC), gRPC alone, the defaults recording a trace (docs/tracing.md), and
# the defaults with blocking calls woken by the socket's reader thread (Note [Reading one's own reply]).
OURS = {"distgrad": {}, "distgrad-cross-host": {"DISTGRAD_SAME_HOST": "0"}, "distgrad-grpc": {"DISTGRAD_GRPC_ONLY": "1"},
        "distgrad-traced": {"DISTGRAD_TRACE": WORLD_FOLDER},
        "distgrad-reader-wakes": {"DISTGRAD_SOCKET_OWN_READS": "0"},
        "distgrad-no-loopback": {"DISTGRAD_LOOPBACK": "0"}}
# The suffix of a contender of OURS run from the --baseline build.
BASELINE = "@baseline"
# The rref mode's worlds: (workers, the workloads measured there).
RREF_WORLDS = ((2, "remote_to_here,create_rate"), (3, "parameter_server_step"))


def our_contender(label):
    """The contender of OURS a label names ("distgrad-grpc@baseline" -> "distgrad-grpc"), or None for a peer."""
    base = label[:-len(BASELINE)] if label.endswith(BASELINE) else label
    return base if base in OURS else None


def reference(label):
    """The contender a label's ratio compares with: a baseline's own contender, else distgrad."""
    return label[:-len(BASELINE)] if label.endswith(BASELINE) else "distgrad"


def baseline_labels(args):
    return [label + BASELINE for label in args.ours] if args.baseline else []


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def kill_group(process):
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def run_world(command, world_size, timeout, extra_env=None, failure_grace=20.0):
    """Starts `command` as ranks 0..world_size-1 (with `extra_env` added) and waits for them.

    Returns (rows printed by rank 0, error text or None, seconds the world ran)."""
    base = {k: v for k, v in os.environ.items() if not k.startswith(LAUNCHER_PREFIXES)}
    base.update(extra_env or {})
    base.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()), WORLD_SIZE=str(world_size),
                LOCAL_WORLD_SIZE=str(world_size), OMP_NUM_THREADS="1", DISTGRAD_BENCH_SPAWN_TIME=repr(time.time()))
    processes, outputs = [], []
    start = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="rpc_bench_") as folder:
        for name, value in base.items():
            if value == WORLD_FOLDER:
                base[name] = os.path.join(folder, name.lower())
        try:
            for rank in range(world_size):
                out = open(os.path.join(folder, f"{rank}.out"), "w+")
                err = open(os.path.join(folder, f"{rank}.err"), "w+")
                outputs.append((out, err))
                env = dict(base, RANK=str(rank), LOCAL_RANK=str(rank))
                processes.append(subprocess.Popen(command, env=env, stdout=out, stderr=err, start_new_session=True))
            deadline, first_failure, timed_out = start + timeout, None, False
            while any(p.poll() is None for p in processes):
                now = time.monotonic()
                if first_failure is None and any(p.returncode not in (None, 0) for p in processes):
                    first_failure = now
                if now > deadline or (first_failure is not None and now > first_failure + failure_grace):
                    timed_out = now > deadline
                    break
                time.sleep(0.05)
        finally:
            for process in processes:
                if process.poll() is None:
                    kill_group(process)
            for process in processes:
                process.wait()
        elapsed = time.monotonic() - start
        rows, errors = [], []
        for rank, (out, err) in enumerate(outputs):
            out.seek(0)
            err.seek(0)
            if rank == 0:
                rows = [json.loads(line) for line in out if line.startswith("{")]
            error_lines = [line.strip() for line in err if "error" in line.lower() and "Warning" not in line]
            code = processes[rank].returncode
            if code != 0 and error_lines:
                errors.append(f"rank {rank} (exit {code}): {error_lines[-1]}")
            out.close()
            err.close()
    failed = [rank for rank, p in enumerate(processes) if p.returncode != 0]
    error = None
    if timed_out:
        error = f"timed out after {timeout:.0f} s"
    if failed:
        killed = sum(1 for p in processes if p.returncode == -signal.SIGKILL)
        error = (error + "; " if error else "") + (f"{len(failed)} of {world_size} ranks failed ({killed} killed by "
                                                    f"the driver)" + (f"; first error: {errors[0]}" if errors else ""))
    return rows, error, elapsed


def contenders(args, mode):
    """(label, command, world size, environment) for every contender of a mode; startup gives one per world
    size, rref one per world of RREF_WORLDS."""
    ours = os.path.join(args.build, "bench", "rpc_bench")
    baseline = os.path.join(args.baseline, "bench", "rpc_bench") if args.baseline else None
    peer = [args.peer_python, os.path.join(HERE, "peer", "rpc_torch.py")]
    flags = {"latency": [f"--repetitions_scale={args.repetitions_scale}"],
             "throughput": [f"--duration_s={args.duration_s}", f"--window={args.window}"], "startup": [],
             "autograd": [f"--repetitions_scale={args.repetitions_scale}"],
             "rref": [f"--repetitions_scale={args.repetitions_scale}"]}[mode]
    if mode == "startup":
        worlds = [(size, flags) for size in args.startup_workers]
    elif mode == "rref":
        worlds = [(size, flags + [f"--rref_workloads={workloads}"]) for size, workloads in RREF_WORLDS]
    else:
        worlds = [(3 if mode == "autograd" else 2, flags)]
    for size, world_flags in worlds:
        peer_flags = [f.split("=", 1)[0].replace("_", "-") + "=" + f.split("=", 1)[1]  # --duration-s=3
                      for f in world_flags]
        for label in args.ours:
            yield label, [ours, mode] + world_flags, size, OURS[label]
        for label in baseline_labels(args):
            yield label, [baseline, mode] + world_flags, size, OURS[our_contender(label)]
        if args.peer_python:
            for transports in args.peer_transports:
                yield (f"tensorpipe-{transports}", peer + [mode, "--transports", transports,
                                                             f"--timeout-s={args.peer_rpc_timeout}"] + peer_flags,
                       size, {})


def peer_python_or_none(path):
    """`path` when the peer's interpreter is there, else "" (the benchmark then measures distgrad alone)."""
    if path and not os.path.exists(path):
        print(f"no peer interpreter at {path}: measuring distgrad alone", file=sys.stderr)
        return ""
    return path


def format_seconds(seconds):
    if seconds < 1e-3:
        return f"{seconds * 1e6:.0f} us"
    if seconds < 1:
        return f"{seconds * 1e3:.2f} ms" if seconds < 0.1 else f"{seconds * 1e3:.1f} ms"
    return f"{seconds:.2f} s"


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--build", default="build")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--modes", default="latency,throughput,startup", help="also: autograd, rref")
    parser.add_argument("--startup-workers", default="64", help="comma-separated world sizes for the start-up mode")
    parser.add_argument("--peer-transports", default="default,uv", help="TensorPipe settings: default, uv or both")
    parser.add_argument("--ours", default="distgrad,distgrad-cross-host,distgrad-grpc",
                        help="our contenders: distgrad (every fast path), distgrad-cross-host (DISTGRAD_SAME_HOST=0), "
                        "distgrad-grpc (DISTGRAD_GRPC_ONLY=1), distgrad-traced (DISTGRAD_TRACE: recording a trace)")
    parser.add_argument("--peer-python", default=os.path.expanduser("~/.venvs/distgrad-peer/bin/python"),
                        help="the peer's interpreter; an empty string measures distgrad alone")
    parser.add_argument("--baseline", help="a build of another commit whose rpc_bench runs beside BUILD's, as each "
                        "of --ours with the suffix @baseline")
    parser.add_argument("--repetitions-scale", type=float, default=1.0)
    parser.add_argument("--duration-s", type=float, default=3.0)
    parser.add_argument("--window", type=int, default=32)
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds before a world is killed")
    parser.add_argument("--peer-rpc-timeout", type=float, default=120.0, help="the peer's init and call timeout")
    args = parser.parse_args()
    args.startup_workers = [int(n) for n in args.startup_workers.split(",")]
    args.peer_transports = args.peer_transports.split(",")
    args.ours = args.ours.split(",")
    if args.ours[0] != "distgrad" or any(label not in OURS for label in args.ours):
        parser.error(f"--ours must start with distgrad and name contenders of {sorted(OURS)}")
    args.peer_python = peer_python_or_none(args.peer_python)

    results = {}  # (workload, contender) -> list of rows, one per round
    errors = {}   # (workload, contender) -> errors
    order = []    # workloads in the order they were first seen
    for round_index in range(args.rounds):
        for mode in args.modes.split(","):
            runs = list(contenders(args, mode))
            shift = round_index % len(runs)
            for label, command, size, env in runs[shift:] + runs[:shift]:  # alternate, starting elsewhere each round
                rows, error, elapsed = run_world(command, size, args.timeout, env)
                print(json.dumps({"round": round_index, "contender": label, "mode": mode, "workers": size,
                                  "seconds": round(elapsed, 3), "error": error, "rows": len(rows)}), file=sys.stderr)
                for row in rows:
                    if row["name"] not in order:
                        order.append(row["name"])
                    if "error" in row:
                        errors.setdefault((row["name"], label), []).append(row["error"])
                    else:
                        results.setdefault((row["name"], label), []).append(dict(row, round=round_index))
                name = f"startup/{size}workers"
                if error and mode == "startup" and not any(row["name"] == name for row in rows):
                    if name not in order:
                        order.append(name)
                    errors.setdefault((name, label), []).append(error)

    labels = args.ours + baseline_labels(args) + (
        [f"tensorpipe-{t}" for t in args.peer_transports] if args.peer_python else [])

    def summary(name, label):
        rows = results.get((name, label), [])
        if not rows:
            return None
        out = {"seconds_per_iter": statistics.median(r["seconds_per_iter"] for r in rows), "rounds": len(rows)}
        for key in ("p10", "p90", "calls_per_second", "rrefs_per_second", "max_process_seconds", "max_init_seconds"):
            if key in rows[0]:
                out[key] = statistics.median(r[key] for r in rows)
        if "torch_version" in rows[0]:
            out["peer"] = f"torch {rows[0]['torch_version']}, transports {rows[0]['transports']}"
        return out

    def cell(name, label, summary_row):
        failures = errors.get((name, label), [])
        if summary_row is None:
            return f"failed: {failures[0][:160]}" if failures else "-"
        text = format_seconds(summary_row["seconds_per_iter"])
        if "calls_per_second" in summary_row:
            text += f" ({summary_row['calls_per_second']:.0f} calls/s)"
        if "rrefs_per_second" in summary_row:
            text += f" ({summary_row['rrefs_per_second']:.0f} RRefs/s)"
        if "max_init_seconds" in summary_row:
            text += f" (init_rpc + barrier: {format_seconds(summary_row['max_init_seconds'])})"
        if "p10" in summary_row:
            text += f" [{format_seconds(summary_row['p10'])}-{format_seconds(summary_row['p90'])}]"
        if failures:
            text += f" ({len(failures)} of {len(failures) + summary_row['rounds']} rounds failed)"
        return text

    header = "| workload | distgrad | " + " | ".join(
        [f"{label} | ratio ({label})" for label in args.ours[1:] + baseline_labels(args)] +
        [f"TensorPipe {t} | ratio ({t})" for t in args.peer_transports if args.peer_python]) + " |"
    table = [header.replace("|  |", "|"), "|" + "---|" * (2 + 2 * (len(labels) - 1))]
    for name in order:
        ours = summary(name, "distgrad")
        result = {"name": name, "distgrad": ours, "distgrad_errors": errors.get((name, "distgrad"))}
        cells = [name, cell(name, "distgrad", ours)]
        for label in labels[1:]:
            peer = summary(name, label)
            result[label] = peer
            result[f"{label}_errors"] = errors.get((name, label))
            compared = summary(name, reference(label))
            ratio = peer["seconds_per_iter"] / compared["seconds_per_iter"] if peer and compared else None
            result[f"ratio_{label}"] = ratio
            cells += [cell(name, label, peer), f"{ratio:.2f}" if ratio else "-"]
        print(json.dumps(result))
        table.append("| " + " | ".join(cells) + " |")
    print("\n".join(table), file=sys.stderr)

    # The 1000x1000 context over its bytes-on-wire floor (rpc_bench.cc), round by round.
    context, floor = "dist_autograd/context/1000x1000", "dist_autograd/floor/1000x1000"
    for label in labels:
        floors = {row["round"]: row["seconds_per_iter"] for row in results.get((floor, label), [])}
        ratios = [row["seconds_per_iter"] / floors[row["round"]] for row in results.get((context, label), [])
                  if row["round"] in floors]
        if ratios:
            print(json.dumps({"name": f"{context} / floor", "contender": label, "ratio": statistics.median(ratios),
                              "per_round": [round(r, 3) for r in ratios]}))


if __name__ == "__main__":
    main()
