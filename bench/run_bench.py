#!/usr/bin/env python3
"""Runs a benchmark program and its PyTorch twin alternately and reports medians and ratios.

  python3 bench/run_bench.py NAME --build build --rounds 3 [--peer-python ~/.venvs/distgrad-peer/bin/python]
      [--filter REGEX]   (e.g. --filter Cuda on a machine with a GPU)

NAME is core_ops or train_steps: the program is BUILD/bench/NAME_bench and its twin
bench/peer/NAME_torch.py; both print the same workload names.

Prints one JSON object per workload (ours, the peer's, and the ratio peer/ours where larger
is better for us) and a Markdown table for docs/benchmarks.md.
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def run_ours(binary, repetitions, name_filter):
    out = subprocess.run([binary, "--benchmark_format=json", f"--benchmark_repetitions={repetitions}",
                          "--benchmark_report_aggregates_only=true", f"--benchmark_filter={name_filter}"],
                         check=True, capture_output=True, text=True)
    rows = {}
    for bench in json.loads(out.stdout)["benchmarks"]:
        if bench.get("aggregate_name") != "median":
            continue
        name = bench["run_name"].removeprefix("BM_").removesuffix("/real_time")
        unit = {"ns": 1e-9, "us": 1e-6, "ms": 1e-3, "s": 1.0}[bench["time_unit"]]
        # CUDA benchmarks queue several ops per iteration and report seconds per op.
        row = {"seconds_per_iter": bench.get("seconds_per_op", bench["real_time"] * unit)}
        for key in ("bytes_per_second", "GFLOPS"):
            if key in bench:
                row[key] = bench[key]
        rows[name] = row
    return rows


def run_peer(python, script, repetitions, name_filter):
    out = subprocess.run([python, script, str(repetitions), name_filter],
                         check=True, capture_output=True, text=True)
    return {row["name"]: row for row in map(json.loads, out.stdout.splitlines())}


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("name", choices=["core_ops", "train_steps"])
    parser.add_argument("--build", default="build")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--repetitions", type=int, default=5)
    parser.add_argument("--peer-python", default=os.path.expanduser("~/.venvs/distgrad-peer/bin/python"))
    parser.add_argument("--filter", default=".", help="regex on workload names, e.g. Cuda")
    args = parser.parse_args()
    binary = os.path.join(args.build, "bench", f"{args.name}_bench")
    peer_script = os.path.join(HERE, "peer", f"{args.name}_torch.py")

    ours, peer = {}, {}
    for _ in range(args.rounds):  # alternate so both see the same machine state
        for name, row in run_ours(binary, args.repetitions, args.filter).items():
            ours.setdefault(name, []).append(row)
        if shutil.which(args.peer_python):
            for name, row in run_peer(args.peer_python, peer_script, args.repetitions, args.filter).items():
                peer.setdefault(name, []).append(row)

    def median_of(rows, key):
        values = [r[key] for r in rows if key in r]
        return statistics.median(values) if values else None

    table = ["| workload | distgrad | PyTorch | PyTorch time / distgrad time |", "|---|---|---|---|"]
    for name, rows in ours.items():
        result = {"name": name, "seconds_per_iter": median_of(rows, "seconds_per_iter")}
        for key in ("bytes_per_second", "GFLOPS"):
            if median_of(rows, key) is not None:
                result[key] = median_of(rows, key)
        peer_rows = peer.get(name)
        if peer_rows:
            result["peer_seconds_per_iter"] = median_of(peer_rows, "seconds_per_iter")
            result["peer"] = f"torch {peer_rows[0]['torch_version']} ({peer_rows[0]['threads']} threads)"
            result["speedup_vs_peer"] = result["peer_seconds_per_iter"] / result["seconds_per_iter"]
        print(json.dumps(result))

        def fmt(seconds, row_key_source):
            if seconds < 1e-5:
                text = f"{seconds * 1e9:.0f} ns"
            elif seconds < 1e-3:
                text = f"{seconds * 1e6:.1f} us"
            else:
                text = f"{seconds * 1e3:.2f} ms"
            if "bytes_per_second" in row_key_source:
                text += f" ({row_key_source['bytes_per_second'] / 1e9:.1f} GB/s)"
            if "GFLOPS" in row_key_source:
                text += f" ({row_key_source['GFLOPS']:.1f} GFLOP/s)"
            return text

        ours_text = fmt(result["seconds_per_iter"], result)
        if peer_rows:
            peer_summary = {k: median_of(peer_rows, k) for k in ("bytes_per_second", "GFLOPS") if median_of(peer_rows, k)}
            peer_text = fmt(result["peer_seconds_per_iter"], peer_summary)
            ratio = f"{result['speedup_vs_peer']:.2f}"
        else:
            peer_text, ratio = "-", "-"
        table.append(f"| {name} | {ours_text} | {peer_text} | {ratio} |")
    print("\n".join(table), file=sys.stderr)


if __name__ == "__main__":
    main()
