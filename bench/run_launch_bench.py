#!/usr/bin/env python3
"""Start-up of a local job: from starting the launcher to every worker past its first barrier.

  python3 bench/run_launch_bench.py --build build --rounds 3 [--workers 4,16,64]
      [--peer-python ~/.venvs/distgrad-peer/bin/python] [--timeout 180]

For each worker count and round, alternately (the order rotating from round to round):
  distgrad: BUILD/launcher/distgrad-run --standalone --nproc-per-node N BUILD/bench/rpc_bench startup
  torchrun: torchrun --standalone --nproc-per-node N bench/peer/rpc_torch.py startup
            (the peer's interpreter; PyTorch RPC over TensorPipe, default transports)
Both programs time init_rpc and a barrier on every rank and report, on rank 0, the largest time
from DISTGRAD_BENCH_SPAWN_TIME, which this script sets to the clock when it starts the launcher
(so the figure includes the launcher's own start). The whole launcher's wall time (to its exit,
shutdown included) is reported beside it. A run that fails or times out is reported with its
error. Prints one JSON object per (workers, contender) with medians over rounds, then a Markdown
table on stderr.
"""
import argparse
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def command(args, contender, workers):
    if contender == "distgrad":
        return [os.path.join(args.build, "launcher", "distgrad-run"), "--standalone", "--nproc-per-node", str(workers),
                os.path.join(args.build, "bench", "rpc_bench"), "startup"]
    torchrun = os.path.join(os.path.dirname(args.peer_python), "torchrun")
    return [torchrun, "--standalone", "--nproc-per-node", str(workers), os.path.join(HERE, "peer", "rpc_torch.py"),
            "startup"]


def run_once(args, contender, workers):
    """(seconds to all past the barrier, launcher wall seconds, error or None)."""
    env = dict(os.environ, OMP_NUM_THREADS="1")
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "DISTGRAD_TOKEN"):
        env.pop(name, None)
    start = time.time()
    env["DISTGRAD_BENCH_SPAWN_TIME"] = repr(start)
    process = subprocess.Popen(command(args, contender, workers), env=env, stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        output, _ = process.communicate(timeout=args.timeout)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        output, _ = process.communicate()
        return None, time.time() - start, f"timed out after {args.timeout:.0f} s"
    wall = time.time() - start
    match = re.search(r'\{"name": "startup/\d+workers".*?\}', output)
    if process.returncode != 0 or match is None:
        tail = " | ".join(line for line in output.strip().splitlines()[-3:])
        return None, wall, f"exit code {process.returncode}: {tail[:300]}"
    return json.loads(match.group(0))["seconds_per_iter"], wall, None


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--build", default="build")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--workers", default="4,16,64")
    parser.add_argument("--peer-python", default=os.path.expanduser("~/.venvs/distgrad-peer/bin/python"))
    parser.add_argument("--timeout", type=float, default=180.0)
    args = parser.parse_args()
    contenders = ["distgrad"] + (["torchrun"] if args.peer_python and os.path.exists(args.peer_python) else [])
    results = {}
    for round_index in range(args.rounds):
        for workers in [int(n) for n in args.workers.split(",")]:
            order = contenders[round_index % len(contenders):] + contenders[:round_index % len(contenders)]
            for contender in order:
                seconds, wall, error = run_once(args, contender, workers)
                results.setdefault((workers, contender), []).append((seconds, wall, error))
                print(json.dumps({"round": round_index, "workers": workers, "contender": contender,
                                  "seconds": seconds, "wall": round(wall, 3), "error": error}), file=sys.stderr)
    table = ["| workers | distgrad-run: all past the barrier | its wall time | torchrun: all past the barrier | "
             "its wall time | ratio |", "|---|---|---|---|---|---|"]
    for workers in [int(n) for n in args.workers.split(",")]:
        cells, medians = [str(workers)], {}
        for contender in ["distgrad", "torchrun"]:
            runs = results.get((workers, contender), [])
            passed = [run[0] for run in runs if run[0] is not None]
            errors = [run[2] for run in runs if run[2] is not None]
            summary = {"workers": workers, "contender": contender, "rounds": len(runs),
                       "seconds": statistics.median(passed) if passed else None,
                       "wall": statistics.median(run[1] for run in runs if run[0] is not None) if passed else None,
                       "errors": errors}
            print(json.dumps(summary))
            medians[contender] = summary["seconds"]
            failed = f" ({len(errors)} of {len(runs)} failed)" if errors else ""
            if not runs:
                cells += ["-", "-"]
            elif passed:
                cells += [f"{summary['seconds']:.2f} s{failed}", f"{summary['wall']:.2f} s"]
            else:
                cells += [f"failed: {errors[0][:120]}", "-"]
        ratio = medians["torchrun"] / medians["distgrad"] if medians.get("torchrun") and medians.get("distgrad") else None
        cells.append(f"{ratio:.2f}" if ratio else "-")
        table.append("| " + " | ".join(cells) + " |")
    print("\n".join(table), file=sys.stderr)


if __name__ == "__main__":
    main()
