#!/usr/bin/env python3
"""Times distributed MAML, ours beside TorchOpt's and hand-written torch RPC; or soaks ours.

  python3 bench/run_maml_bench.py --build build --rounds 3 [--workload sinusoid|fewshot] [--worlds 1,2,3]
      [--peer-transports default,uv] [--warmup 5] [--iterations 30] [--timeout S]
      [--peer-python ~/.venvs/distgrad-peer/bin/python] [--ours distgrad,distgrad-grpc] [--device cpu|cuda]
      [--baseline BUILD_OF_ANOTHER_COMMIT]
  python3 bench/run_maml_bench.py --build build --soak 1000 [--workload sinusoid|fewshot] [--soak-world 3]
      [--soak-iterations 3] [--soak-timeout S] [--soak-seconds 600] [--soak-contender distgrad]

Workloads (bench/peer/maml_common.py describes both): sinusoid (the default; ours is
BUILD/bench/maml_bench, workload names maml/...) and fewshot, TorchOpt's distributed MAML
example (maml_omniglot.py) on Fashion-MNIST (ours is BUILD/bench/maml_fewshot_bench, workload
names maml_fewshot/...; the peers get --workload fewshot). The fewshot issue asks for worlds 1
to 4: pass --worlds 1,2,3,4 (the default stays 1,2,3).

--device cuda (fewshot only) computes on the GPUs: ours in one process and in every world (its
ranks share the machine's GPUs, rank r on GPU r modulo their number), and plain PyTorch in one
process (maml_torch_rpc.py --local --device cuda). The peers' worlds stay out: CUDA tensors over
their RPC would need device maps, which TorchOpt's example does not set.

Benchmark: each round runs, for every world size, one world per contender, in an order that
rotates from round to round: our binary (distgrad; and distgrad-grpc, the same with
DISTGRAD_GRPC_ONLY=1: gRPC alone, as before the fast paths; with --baseline, each of them again
from another build, "distgrad@baseline" ...: a refactor's before and after in one run),
bench/peer/maml_torchopt.py (TorchOpt's
torchopt.distributed API) and bench/peer/maml_torch_rpc.py (torch.distributed.rpc and
distributed autograd by hand), each peer once per TensorPipe transport setting ("default"; "uv"
for _transports=["uv"], TCP only). Each round also runs the single-process versions
(maml/local or maml_fewshot/local): ours without RPC, and plain PyTorch (maml_torch_rpc.py
--local: torch.autograd.grad with create_graph). Worlds start as bench/run_rpc_bench.py starts
them (its run_world: launcher environment, free port, OMP_NUM_THREADS=1, killed after --timeout
seconds: by default 150 for sinusoid, 1200 for fewshot, whose iterations take seconds). A
workload's figure is the median over rounds of each round's median seconds per outer iteration
(p10, p90 and the forward and backward parts likewise). Prints one JSON object per workload
with the ratios peer time / our time (larger is better for us) and our time over the fastest
peer's (the issue's target: at most 0.15; a baseline contender's ratio is its time over the same
contender's in BUILD), then Markdown tables on stderr.

Soak (--soak K): starts up to K short worlds of one contender one after another (K runs or
--soak-seconds, whichever comes first) and counts those that hung (killed at --soak-timeout: by
default 60 s for sinusoid, 300 s for fewshot) or failed; prints one JSON summary line.
"""
import argparse
import json
import os
import statistics
import sys
import time

from run_rpc_bench import OURS, baseline_labels, format_seconds, our_contender, peer_python_or_none, reference, run_world

HERE = os.path.dirname(os.path.abspath(__file__))
PEERS = {"torchopt": "maml_torchopt.py", "torch-rpc": "maml_torch_rpc.py"}
PEER_TITLES = {"torchopt": "TorchOpt", "torch-rpc": "torch RPC"}
# Per workload: our binary under BUILD/bench, and the prefix of the workload names.
OUR_BINARIES = {"sinusoid": "maml_bench", "fewshot": "maml_fewshot_bench"}
NAME_PREFIXES = {"sinusoid": "maml", "fewshot": "maml_fewshot"}
# Per workload: the default --timeout and --soak-timeout, in seconds.
TIMEOUTS = {"sinusoid": (150.0, 60.0), "fewshot": (1200.0, 300.0)}


def contender_command(args, label, flags):
    """The command line of a contender: one of OURS (from the baseline build with its suffix), or
    PEER-TRANSPORTS such as "torchopt-uv"."""
    if our_contender(label):
        build = args.build if label in OURS else args.baseline
        return ([os.path.join(build, "bench", OUR_BINARIES[args.workload])]
                + [f"--{flag.replace('-', '_')}" for flag in flags])
    peer, transports = label.rsplit("-", 1)
    return ([args.peer_python, os.path.join(HERE, "peer", PEERS[peer]), "--workload", args.workload,
             "--transports", transports] + [f"--{flag}" for flag in flags])


def labels(args):
    peers = [f"{peer}-{t}" for peer in PEERS for t in args.peer_transports] if args.peer_python else []
    return args.ours + baseline_labels(args) + peers


def benchmark(args):
    flags = [f"warmup={args.warmup}", f"iterations={args.iterations}"]
    flags += ["device=cuda"] if args.device == "cuda" else []
    world_labels = args.ours + baseline_labels(args) if args.device == "cuda" else labels(args)
    prefix = NAME_PREFIXES[args.workload]
    results, errors = {}, {}  # (workload, label) -> rows / error texts
    for round_index in range(args.rounds):
        # Single-process runs (no RPC, so no transport to vary): ours, and plain PyTorch.
        local_labels = ["distgrad"] + [label for label in baseline_labels(args) if reference(label) == "distgrad"] + (
            [f"torch-rpc-{args.peer_transports[0]}"] if args.peer_python else [])
        runs = [(f"{prefix}/local", label, 1, flags + ["local"]) for label in local_labels]
        runs += [(f"{prefix}/world{size}", label, size, flags) for size in args.worlds for label in world_labels]
        for size in [0] + args.worlds:  # rotate within each world size so contenders alternate
            group = [run for run in runs if (run[2] if run[0] != f"{prefix}/local" else 0) == size]
            shift = round_index % len(group)
            for name, label, world_size, run_flags in group[shift:] + group[:shift]:
                rows, error, elapsed = run_world(contender_command(args, label, run_flags), world_size, args.timeout,
                                                 OURS.get(our_contender(label)))
                rows = [row for row in rows if row.get("name") == name]
                print(json.dumps({"round": round_index, "workload": name, "contender": label,
                                  "seconds": round(elapsed, 3), "error": error,
                                  "median": rows[0]["seconds_per_iter"] if rows else None}), file=sys.stderr)
                if rows and not error:
                    results.setdefault((name, label), []).append(rows[0])
                else:
                    errors.setdefault((name, label), []).append(error or "no result printed")
    report(args, results, errors)


FIGURES = ("seconds_per_iter", "p10", "p90", "forward_seconds", "backward_seconds")


def summarize(rows):
    """The median over rounds of each figure of a contender's rows (None without rows)."""
    if not rows:
        return None
    return dict({key: statistics.median(row[key] for row in rows) for key in FIGURES}, rounds=len(rows),
                torch_version=rows[0].get("torch_version"), transports=rows[0].get("transports"))


def cell_text(summary, failures):
    """A table cell: the median [p10-p90], and how many rounds failed."""
    if summary is None:
        return f"failed: {failures[0][:160]}" if failures else "-"
    spread = f"[{format_seconds(summary['p10'])}-{format_seconds(summary['p90'])}]"
    failed = f" ({len(failures)} of {len(failures) + summary['rounds']} rounds failed)" if failures else ""
    return f"{format_seconds(summary['seconds_per_iter'])} {spread}{failed}"


def title(label):
    """A contender's column title: ours as they are named, peers as "TorchOpt uv"."""
    if our_contender(label):
        return label
    peer, transports = label.rsplit("-", 1)
    return f"{PEER_TITLES[peer]} {transports}"


def report(args, results, errors):
    other_labels = labels(args)[1:]  # our other contenders, then the peers
    peer_labels = [label for label in other_labels if not our_contender(label)]
    titles = [title(label) for label in other_labels]
    header = ["workload", "distgrad"] + [text for name in titles for text in (name, "ratio")]
    header.append("distgrad / fastest peer")
    table = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    phases = ["| workload | " + " | ".join(["distgrad"] + titles) + " |", "|" + "---|" * (2 + len(titles))]
    prefix = NAME_PREFIXES[args.workload]
    for name in [f"{prefix}/local"] + [f"{prefix}/world{size}" for size in args.worlds]:
        ran = [label for label in labels(args) if (name, label) in results or (name, label) in errors]
        summaries = {label: summarize(results.get((name, label))) for label in ran}
        ours = summaries.get("distgrad")
        result = {"name": name}
        cells = [name, cell_text(ours, errors.get((name, "distgrad"), []))]
        for label in labels(args):
            if label in ran:
                result.update({label: summaries[label], f"{label}_errors": errors.get((name, label))})
        for label in other_labels:  # the single-process peers ran under one transport's label only
            peer = summaries.get(label)
            compared = summaries.get(reference(label))
            ratio = peer["seconds_per_iter"] / compared["seconds_per_iter"] if peer and compared else None
            if label in ran:
                result[f"ratio_{label}"] = ratio
            cells += [cell_text(peer, errors.get((name, label), [])) if label in ran else "-",
                      f"{ratio:.2f}" if ratio else "-"]
        timed_peers = [label for label in peer_labels if summaries.get(label)]
        if ours and timed_peers:
            fastest = min(timed_peers, key=lambda label: summaries[label]["seconds_per_iter"])
            result["fastest_peer"] = fastest
            result["distgrad_over_fastest_peer"] = ours["seconds_per_iter"] / summaries[fastest]["seconds_per_iter"]
            cells.append(f"{result['distgrad_over_fastest_peer']:.3f} ({fastest})")
        else:
            cells.append("-")
        print(json.dumps(result))
        table.append("| " + " | ".join(cells) + " |")
        phases.append("| " + " | ".join([name] + [
            f"{format_seconds(summaries[label]['forward_seconds'])} + "
            f"{format_seconds(summaries[label]['backward_seconds'])}" if summaries.get(label) else "-"
            for label in labels(args)]) + " |")
    print("\n".join(table), file=sys.stderr)
    print("\nForward (clone, calls, mean) + backward, medians:\n" + "\n".join(phases), file=sys.stderr)


def soak(args):
    flags = ["warmup=0", f"iterations={args.soak_iterations}"]
    command = contender_command(args, args.soak_contender, flags)
    name = f"{NAME_PREFIXES[args.workload]}/world{args.soak_world}"
    runs, hangs, failures, seconds, first_errors = 0, 0, 0, [], []
    start = time.monotonic()
    while runs < args.soak and time.monotonic() - start < args.soak_seconds:
        rows, error, elapsed = run_world(command, args.soak_world, args.soak_timeout,
                                         OURS.get(our_contender(args.soak_contender)))
        runs += 1
        seconds.append(elapsed)
        if error or not any(row.get("name") == name for row in rows):
            hung = error is not None and error.startswith("timed out")
            hangs += hung
            failures += not hung
            if len(first_errors) < 5:
                first_errors.append(f"run {runs}: {error or 'no result printed'}")
            print(json.dumps({"run": runs, "error": error or "no result printed"}), file=sys.stderr)
        elif runs % 50 == 0:
            print(json.dumps({"runs": runs, "hangs": hangs, "failures": failures,
                              "elapsed_s": round(time.monotonic() - start, 1)}), file=sys.stderr)
    print(json.dumps({"soak": name, "workload": args.workload, "contender": args.soak_contender,
                      "iterations_per_run": args.soak_iterations,
                      "runs": runs, "requested": args.soak, "hangs": hangs, "failures": failures,
                      "timeout_s": args.soak_timeout, "total_s": round(time.monotonic() - start, 1),
                      "run_seconds_median": statistics.median(seconds) if seconds else None,
                      "run_seconds_max": max(seconds) if seconds else None, "first_errors": first_errors}))


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--build", default="build")
    parser.add_argument("--workload", choices=sorted(OUR_BINARIES), default="sinusoid",
                        help="sinusoid: maml_bench; fewshot: maml_fewshot_bench (the peers get --workload)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--worlds", default="1,2,3", help="comma-separated world sizes")
    parser.add_argument("--warmup", type=int, default=5, help="outer iterations before timing, per world")
    parser.add_argument("--iterations", type=int, default=30, help="timed outer iterations per world")
    parser.add_argument("--peer-transports", default="default,uv", help="TensorPipe settings: default, uv or both")
    parser.add_argument("--ours", default="distgrad,distgrad-grpc",
                        help="our contenders: distgrad (every fast path), distgrad-cross-host (DISTGRAD_SAME_HOST=0), "
                        "distgrad-grpc (DISTGRAD_GRPC_ONLY=1), distgrad-traced (DISTGRAD_TRACE: recording a trace)")
    parser.add_argument("--baseline", help="a build of another commit whose binary runs beside BUILD's, as each of "
                        "--ours with the suffix @baseline")
    parser.add_argument("--peer-python", default=os.path.expanduser("~/.venvs/distgrad-peer/bin/python"),
                        help="the peer's interpreter; an empty string measures distgrad alone")
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu",
                        help="fewshot only: cuda computes on the GPUs (the peers in one process only)")
    parser.add_argument("--timeout", type=float, help="seconds before a world is killed (default: sinusoid 150, "
                        "fewshot 1200; the peers give up on a call after 120 s)")
    parser.add_argument("--soak", type=int, default=0, help="soak mode: start up to this many short worlds")
    parser.add_argument("--soak-world", type=int, default=3)
    parser.add_argument("--soak-iterations", type=int, default=3)
    parser.add_argument("--soak-timeout", type=float,
                        help="seconds before a soak world counts as hung (default: sinusoid 60, fewshot 300)")
    parser.add_argument("--soak-seconds", type=float, default=600.0, help="stop starting soak worlds after this")
    parser.add_argument("--soak-contender", default="distgrad", help="distgrad, or e.g. torchopt-uv")
    args = parser.parse_args()
    default_timeout, default_soak_timeout = TIMEOUTS[args.workload]
    args.timeout = default_timeout if args.timeout is None else args.timeout
    args.soak_timeout = default_soak_timeout if args.soak_timeout is None else args.soak_timeout
    args.worlds = [int(n) for n in args.worlds.split(",")]
    args.peer_transports = args.peer_transports.split(",")
    args.ours = args.ours.split(",")
    if args.ours[0] != "distgrad" or any(label not in OURS for label in args.ours):
        parser.error(f"--ours must start with distgrad and name contenders of {sorted(OURS)}")
    if args.device == "cuda" and args.workload != "fewshot":
        parser.error("--device cuda needs --workload fewshot (maml_bench computes on the CPU)")
    args.peer_python = peer_python_or_none(args.peer_python)
    soak(args) if args.soak else benchmark(args)


if __name__ == "__main__":
    main()
