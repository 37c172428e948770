#!/usr/bin/env python3
"""Distributed higher-order gradients beside one process (bench/higher_order_bench.cc).

  python3 bench/run_higher_order_bench.py --build build --rounds 3 [--ours distgrad,distgrad-grpc]
      [--worlds 1,2,3,4] [--repetitions 200] [--iterations 20]

Each round runs, for every contender of ours (run_rpc_bench.OURS: "distgrad" with every fast path
on, "distgrad-cross-host", "distgrad-grpc"), the hvp mode in a world of 4 and the maml mode at each
world size, and maml --local once; the order of the contenders rotates from round to round. There
is no peer: PyTorch's distributed autograd has no create_graph.

Prints one JSON object per figure (the median over rounds of each round's median) and the Markdown
tables of docs/benchmarks.md: per hop count, the local and the distributed product and their
ratio, and the cost of each extra hop (the slope of the distributed time over the hops, less the
local slope: the messages of one more hop); per world size, the example's iteration and its ratio
to the one-process time.
"""
import argparse
import json
import os
import statistics
import sys

from run_rpc_bench import OURS, format_seconds, run_world

HOPS = (1, 2, 3)


def median_over_rounds(results, name, label):
    rows = results.get((name, label), [])
    return statistics.median(row["seconds_per_iter"] for row in rows) if rows else None


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--build", default="build")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--ours", default="distgrad", help="contenders of ours, comma-separated: " + ", ".join(OURS))
    parser.add_argument("--worlds", default="1,2,3,4", help="maml: the world sizes")
    parser.add_argument("--repetitions", type=int, default=200, help="hvp: timed products per workload")
    parser.add_argument("--iterations", type=int, default=20, help="maml: timed outer iterations")
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds for one world")
    args = parser.parse_args()
    ours = args.ours.split(",")
    unknown = [label for label in ours if label not in OURS]
    if unknown:
        parser.error(f"--ours expects labels among {', '.join(OURS)}, found {', '.join(unknown)}")
    worlds = [int(size) for size in args.worlds.split(",")]
    binary = os.path.join(args.build, "bench", "higher_order_bench")
    if not os.access(binary, os.X_OK):
        parser.error(f"no {binary}: build the higher_order_bench target first")

    # (label, command, world size, environment); "local" runs one process without RPC.
    runs = [("local", [binary, "maml", "--local", f"--iterations={args.iterations}"], 1, {})]
    for label in ours:
        runs.append((label, [binary, "hvp", f"--repetitions={args.repetitions}"], 4, OURS[label]))
        runs += [(label, [binary, "maml", f"--iterations={args.iterations}"], size, OURS[label]) for size in worlds]
    results, failures = {}, []
    for round_index in range(args.rounds):
        shift = round_index % len(runs)
        for label, command, world_size, env in runs[shift:] + runs[:shift]:
            rows, error, elapsed = run_world(command, world_size, args.timeout, env)
            print(json.dumps({"round": round_index, "contender": label, "command": " ".join(command[1:]),
                              "world_size": world_size, "seconds": round(elapsed, 3), "error": error}),
                  file=sys.stderr)
            if error:
                failures.append(f"{label} {' '.join(command[1:])} (world of {world_size}): {error}")
                continue
            for row in rows:
                # The local product is measured in every contender's world: it is ours alone.
                is_local = row["name"].startswith(("hvp/local", "maml_data_parallel/local"))
                results.setdefault((row["name"], "local" if is_local else label), []).append(row)

    for (name, label), rows in sorted(results.items()):
        print(json.dumps({"workload": name, "contender": label, "rounds": len(rows),
                          "seconds_per_iter": statistics.median(row["seconds_per_iter"] for row in rows)}))

    print("\n| Hessian-vector product | one process | " + " | ".join(f"{label} | ratio" for label in ours) + " |")
    print("|---|---|" + "---|---|" * len(ours))
    local = {hops: median_over_rounds(results, f"hvp/local/hops{hops}", "local") for hops in HOPS}
    for hops in HOPS:
        cells = [format_seconds(local[hops]) if local[hops] else "-"]
        for label in ours:
            found = median_over_rounds(results, f"hvp/distributed/hops{hops}", label)
            cells += [format_seconds(found) if found else "-",
                      f"{found / local[hops]:.1f}x" if found and local[hops] else "-"]
        print(f"| {hops} hop{'s' if hops > 1 else ''} | " + " | ".join(cells) + " |")
    for label in ours:
        first = median_over_rounds(results, "hvp/distributed/hops1", label)
        last = median_over_rounds(results, f"hvp/distributed/hops{HOPS[-1]}", label)
        if first and last and local[1] and local[HOPS[-1]]:
            per_hop = ((last - first) - (local[HOPS[-1]] - local[1])) / (HOPS[-1] - 1)
            print(f"\n{label}: each extra hop (a call, and a gradient message each way in each of the two passes) "
                  f"costs {format_seconds(per_hop)} over its arithmetic")

    one_process = median_over_rounds(results, "maml_data_parallel/local", "local")
    print(f"\nmaml_data_parallel: one process {format_seconds(one_process) if one_process else '-'} per iteration")
    print("\n| maml_data_parallel iteration | " + " | ".join(f"{label} | over one process" for label in ours) + " |")
    print("|---|" + "---|---|" * len(ours))
    for size in worlds:
        cells = []
        for label in ours:
            found = median_over_rounds(results, f"maml_data_parallel/world{size}", label)
            cells += [format_seconds(found) if found else "-",
                      f"{found / one_process:.2f}x" if found and one_process else "-"]
        print(f"| world of {size} | " + " | ".join(cells) + " |")
    if failures:
        print("\nfailed runs:\n  " + "\n  ".join(failures))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
