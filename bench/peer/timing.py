"""Timing shared by the peer's benchmark twins."""
import statistics
import time


def median_time(fn, repetitions, min_seconds=0.3):
    """Median over `repetitions` batches of the seconds per call of fn().

    A batch repeats fn() for about `min_seconds`; the batch size is found by doubling until a
    trial batch lasts a tenth of that, after one warm-up call.
    """
    fn()
    iters = 1
    while True:
        start = time.perf_counter()
        for _ in range(iters):
            fn()
        elapsed = time.perf_counter() - start
        if elapsed > min_seconds / 10:
            break
        iters *= 2
    per_batch = max(1, int(iters * (min_seconds / max(elapsed, 1e-9))))
    samples = []
    for _ in range(repetitions):
        start = time.perf_counter()
        for _ in range(per_batch):
            fn()
        samples.append((time.perf_counter() - start) / per_batch)
    return statistics.median(samples)
