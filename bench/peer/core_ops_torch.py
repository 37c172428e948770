"""PyTorch twin of bench/core_ops_bench.cc: the same workloads, printed as JSON lines.

Each line: {"name": ..., "seconds_per_iter": median, "bytes_per_second" | "GFLOPS": ...}.
Run with the peer's interpreter (scripts/install_peer.sh); bench/run_core_bench.py drives it.
"""
import json
import statistics
import sys
import time

import torch

LARGE = 16 << 20


def median_time(fn, min_seconds=0.3, repetitions=5):
    """Median over `repetitions` batches of the seconds per call of fn()."""
    fn()
    iters = 1
    while True:  # grow the batch until it lasts a tenth of min_seconds
        start = time.perf_counter()
        for _ in range(iters):
            fn()
        elapsed = time.perf_counter() - start
        if elapsed > min_seconds / 10:
            break
        iters *= 4
    per_batch = max(1, int(iters * (min_seconds / max(elapsed, 1e-9))))
    samples = []
    for _ in range(repetitions):
        start = time.perf_counter()
        for _ in range(per_batch):
            fn()
        samples.append((time.perf_counter() - start) / per_batch)
    return statistics.median(samples)


def main():
    repetitions = int(sys.argv[1]) if len(sys.argv) > 1 else 5
    torch.manual_seed(0)
    results = []
    a1, b1 = torch.ones(1), torch.ones(1)
    results.append({"name": "AddOneElement", "seconds_per_iter": median_time(lambda: torch.add(a1, b1), repetitions=repetitions)})
    results.append({"name": "AddOneElementInPlace", "seconds_per_iter": median_time(lambda: a1.add_(b1), repetitions=repetitions)})
    a, b = torch.rand(LARGE), torch.rand(LARGE)
    for name, fn in (("Add16M", lambda: torch.add(a, b)), ("AddInPlace16M", lambda: a.add_(b))):
        seconds = median_time(fn, repetitions=repetitions)
        results.append({"name": name, "seconds_per_iter": seconds, "bytes_per_second": 3 * LARGE * 4 / seconds})
    for n in (512, 1024, 2048):
        x, y = torch.randn(n, n), torch.randn(n, n)
        seconds = median_time(lambda: torch.matmul(x, y), repetitions=repetitions)
        results.append({"name": f"Matmul/{n}", "seconds_per_iter": seconds, "GFLOPS": 2 * n**3 / seconds / 1e9})
    for result in results:
        result["torch_version"] = torch.__version__
        result["threads"] = torch.get_num_threads()
        print(json.dumps(result))


if __name__ == "__main__":
    main()
