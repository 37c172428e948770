"""What the peer's MAML benchmarks share: the two workloads' tasks and networks, the timing, the options.

--workload sinusoid (the default) is bench/maml_bench.cc's: a meta-batch of 16 sinusoid tasks of
10 shots (y = A sin(x + phase), A ~ U[0.1, 5], phase ~ U[0, pi], x ~ U[-5, 5], tensors
[T, K, 1], as many query points as shots), an MLP 1-40-40-1 with ReLU, 5 second-order inner
SGD steps at 0.01 on the mean squared error; a task returns its query loss.

--workload fewshot is bench/maml_fewshot_bench.cc's, TorchOpt's distributed MAML example
(examples/distributed/few-shot/maml_omniglot.py) on Fashion-MNIST for Omniglot: a meta-batch of
32 tasks, each 5 of the 10 training-set classes in a random order (labels 0..4) with 5 support
and 15 query images of each, distinct (x [T, ways*shots or ways*queries, 1, 28, 28] float32 in
[0, 1], y int64); MAML's Omniglot network (three blocks of Conv2d(64, 3x3), BatchNorm2d with
momentum 1 in training mode, ReLU, 2x2 max-pooling, then Linear(64, ways): 75,205 parameters at
5 ways); 5 second-order inner SGD steps at 0.1 on the cross-entropy; a task returns its query
loss and accuracy (TorchOpt's example's pair, averaged by transpose_mean_reducer). The images
come from $DISTGRAD_FASHION_MNIST_DIR when set and not empty, else
/usr/share/datasets/fashion-mnist (the gzip IDX files train-images-idx3-ubyte.gz and
train-labels-idx1-ubyte.gz).

Both: Adam at 1e-3 on rank 0, one call per task round robin over the ranks. The options given
override the workload's defaults (WORKLOAD_DEFAULTS). Rank 0 times each outer iteration after a
warm-up and prints one JSON line with the same names as maml_bench / maml_fewshot_bench:
"maml/worldN" or "maml_fewshot/worldN" (N = WORLD_SIZE), "maml/local" or "maml_fewshot/local"
(one process, no RPC).
"""
import argparse
import gzip
import json
import math
import os
import statistics
import struct
import time

import torch
import torch.distributed.rpc as rpc
import torch.nn as nn
import torch.nn.functional as F

# The name prefix of the JSON line and the defaults of the options left out, per workload.
WORKLOAD_NAMES = {"sinusoid": "maml", "fewshot": "maml_fewshot"}
WORKLOAD_DEFAULTS = {
    "sinusoid": dict(meta_batch=16, shots=10, inner_steps=5, inner_lr=0.01, outer_lr=1e-3),
    "fewshot": dict(meta_batch=32, ways=5, shots=5, queries=15, inner_steps=5, inner_lr=0.1, outer_lr=1e-3),
}
FASHION_MNIST_DIR = "/usr/share/datasets/fashion-mnist"


def parser(description):
    """The options every MAML twin takes (as maml_bench's flags, plus the RPC transport)."""
    result = argparse.ArgumentParser(description=description, formatter_class=argparse.RawDescriptionHelpFormatter)
    result.add_argument("--warmup", type=int, default=5)
    result.add_argument("--iterations", type=int, default=30)
    result.add_argument("--workload", choices=sorted(WORKLOAD_NAMES), default="sinusoid")
    result.add_argument("--meta-batch", type=int, help="tasks per outer iteration (sinusoid 16, fewshot 32)")
    result.add_argument("--ways", type=int, help="classes of a task (fewshot only; 5)")
    result.add_argument("--shots", type=int, help="support examples per class (sinusoid 10, fewshot 5)")
    result.add_argument("--queries", type=int, help="query examples per class (fewshot only; 15)")
    result.add_argument("--inner-steps", type=int, help="5")
    result.add_argument("--inner-lr", type=float, help="sinusoid 0.01, fewshot 0.1")
    result.add_argument("--outer-lr", type=float, help="1e-3")
    result.add_argument("--seed", type=int, default=0)
    result.add_argument("--transports", choices=["default", "uv"], default="default",
                        help='uv: _transports=["uv"] (TCP only, no busy-polling shared-memory transport)')
    result.add_argument("--timeout-s", type=float, default=120.0, help="init_rpc and every call")
    result.add_argument("--device", choices=["cpu", "cuda"], default="cpu",
                        help="where the network and the tasks live (cuda: maml_torch_rpc.py --local only)")
    return result


def parse_args(argument_parser):
    """The parsed options, those left out taken from the workload's defaults."""
    args = argument_parser.parse_args()
    for key, value in WORKLOAD_DEFAULTS[args.workload].items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    if args.workload == "sinusoid":  # one output, as many query points as shots
        args.ways, args.queries = 1, args.shots
    return args


def backend_options(args):
    """TensorPipe options for the launcher's MASTER_ADDR/MASTER_PORT and the chosen transports."""
    return rpc.TensorPipeRpcBackendOptions(
        init_method=f"tcp://{os.environ.get('MASTER_ADDR', '127.0.0.1')}:{os.environ['MASTER_PORT']}",
        rpc_timeout=args.timeout_s, _transports=["uv"] if args.transports == "uv" else None)


def build_net(workload, ways):
    """A new network for the workload (fewshot: `ways` outputs), in training mode."""
    if workload == "sinusoid":
        return nn.Sequential(nn.Linear(1, 40), nn.ReLU(), nn.Linear(40, 40), nn.ReLU(), nn.Linear(40, 1))
    layers = []
    for in_channels in (1, 64, 64):
        layers += [nn.Conv2d(in_channels, 64, 3), nn.BatchNorm2d(64, momentum=1.0, affine=True), nn.ReLU(),
                   nn.MaxPool2d(2, 2)]
    net = nn.Sequential(*layers, nn.Flatten(), nn.Linear(64, ways))
    count = sum(parameter.numel() for parameter in net.parameters())
    assert count == 74880 + 65 * ways, f"the fewshot network has {count} parameters"  # 75,205 at 5 ways
    return net


def sample_tasks(tasks, shots, generator):
    """Sinusoid tasks: (x_support, y_support, x_query, y_query), each [tasks, shots, 1]."""
    amplitude = torch.rand(tasks, 1, 1, generator=generator) * 4.9 + 0.1
    phase = torch.rand(tasks, 1, 1, generator=generator) * math.pi
    x_support = torch.rand(tasks, shots, 1, generator=generator) * 10 - 5
    x_query = torch.rand(tasks, shots, 1, generator=generator) * 10 - 5
    return (x_support, amplitude * torch.sin(x_support + phase), x_query, amplitude * torch.sin(x_query + phase))


def read_idx(path):
    """The tensor of a gzip IDX file (magic 0x0000 0x08 = uint8, then the dims, big-endian)."""
    with gzip.open(path, "rb") as file:
        data = file.read()
    zero, kind, rank = struct.unpack_from(">HBB", data)
    assert zero == 0 and kind == 0x08, f"{path}: not an IDX file of uint8"
    dims = struct.unpack_from(f">{rank}I", data, 4)
    return torch.frombuffer(bytearray(data), dtype=torch.uint8, offset=4 + 4 * rank).reshape(dims)


def load_fashion_mnist():
    """The Fashion-MNIST training set: images [N, 1, 28, 28] float32 in [0, 1], labels [N] int64."""
    folder = os.environ.get("DISTGRAD_FASHION_MNIST_DIR") or FASHION_MNIST_DIR
    images = read_idx(os.path.join(folder, "train-images-idx3-ubyte.gz"))
    labels = read_idx(os.path.join(folder, "train-labels-idx1-ubyte.gz")).long()
    assert images.shape[0] == labels.shape[0], "Fashion-MNIST: as many images as labels"
    return images.reshape(-1, 1, 28, 28).float() / 255, labels


class FewShotSampler:
    """Few-shot tasks: `ways` distinct classes in a random order (labels 0..ways-1), then `shots`
    support and `queries` query images of each, all distinct."""

    def __init__(self, images, labels, ways, shots, queries):
        self.images, self.ways, self.shots, self.queries = images, ways, shots, queries
        self.images_of_class = [torch.nonzero(labels == c).flatten() for c in range(int(labels.max()) + 1)]
        assert 2 <= ways <= len(self.images_of_class), f"fewshot: {ways} ways of {len(self.images_of_class)} classes"
        assert min(len(pool) for pool in self.images_of_class) >= shots + queries, "fewshot: a class is too small"

    def __call__(self, tasks, generator):
        """(x_support [T, ways*shots, 1, 28, 28], y_support [T, ways*shots] int64, x_query, y_query)."""
        picked = torch.empty(tasks, self.ways, self.shots + self.queries, dtype=torch.int64)
        for task in range(tasks):
            classes = torch.randperm(len(self.images_of_class), generator=generator)[:self.ways]
            for way, c in enumerate(classes.tolist()):
                pool = self.images_of_class[c]
                picked[task, way] = pool[torch.randperm(len(pool), generator=generator)[:self.shots + self.queries]]
        labels = torch.arange(self.ways).view(1, self.ways, 1)

        def split(part, per_class):
            rows = picked[:, :, part].reshape(-1)
            return (self.images[rows].reshape(tasks, self.ways * per_class, 1, 28, 28),
                    labels.expand(tasks, self.ways, per_class).reshape(tasks, -1).clone())

        return (*split(slice(0, self.shots), self.shots),
                *split(slice(self.shots, None), self.queries))


def task_sampler(args):
    """sample(tasks, generator) -> (x_support, y_support, x_query, y_query), leading dim `tasks`.
    Loads the dataset (fewshot): call it on the rank that samples only."""
    if args.workload == "sinusoid":
        return lambda tasks, generator: sample_tasks(tasks, args.shots, generator)
    return FewShotSampler(*load_fashion_mnist(), args.ways, args.shots, args.queries)


def task_loss(workload, output, target):
    """The loss of the inner steps and of the query set."""
    return F.mse_loss(output, target) if workload == "sinusoid" else F.cross_entropy(output, target)


def task_result(workload, query_output, query_target):
    """What a task returns: its query loss (sinusoid), or its query loss and accuracy (fewshot)."""
    loss = task_loss(workload, query_output, query_target)
    if workload == "sinusoid":
        return loss
    return loss, (query_output.argmax(dim=1) == query_target).float().mean().item()


def transpose_mean_reducer(results):
    """The mean loss and mean accuracy of (loss, accuracy) pairs, as TorchOpt's example's reducer."""
    losses, accuracies = tuple(zip(*results))
    return torch.mean(torch.stack(losses)), statistics.fmean(accuracies)


def mean_result(results):
    """The mean of the tasks' results: a loss, or (loss, accuracy) when the tasks return pairs."""
    results = list(results)
    return transpose_mean_reducer(results) if isinstance(results[0], tuple) else torch.stack(results).mean()


def loss_of(result):
    """The loss of a (reduced) result, without the accuracy."""
    return result[0] if isinstance(result, tuple) else result


def synchronize(device):
    """Waits for what was queued on `device` (a CUDA device; nothing to wait for on the CPU)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def run_phases(forward, backward, device=torch.device("cpu")):
    """Calls forward() and backward(its loss); returns the seconds of each, the work queued on
    `device` done."""
    start = time.perf_counter()
    loss = forward()
    synchronize(device)
    middle = time.perf_counter()
    backward(loss)
    synchronize(device)
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
    prefix = WORKLOAD_NAMES[args.workload]
    name = f"{prefix}/local" if local else f"{prefix}/world{int(os.environ.get('WORLD_SIZE', '1'))}"
    print(json.dumps({"name": name, "seconds_per_iter": statistics.median(samples), "p10": deciles[0],
                      "p90": deciles[8], "iterations": len(samples),
                      "forward_seconds": statistics.median(forward_samples),
                      "backward_seconds": statistics.median(backward_samples), "torch_version": torch.__version__,
                      "contender": contender, "transports": "none" if local else args.transports}), flush=True)
