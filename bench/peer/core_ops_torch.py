"""PyTorch twin of bench/core_ops_bench.cc: the same workloads, printed as JSON lines.

  python core_ops_torch.py [REPETITIONS] [NAME_REGEX]

Each line: {"name": ..., "seconds_per_iter": median, "bytes_per_second" | "GFLOPS": ...}.
Run with the peer's interpreter (scripts/install_peer.sh); bench/run_bench.py drives it.
The Cuda* workloads run when PyTorch sees a GPU.
"""
import json
import re
import sys

import torch

from timing import median_time

LARGE = 16 << 20
CUDA_OPS_PER_CALL = 20  # as kCudaOpsPerIteration in core_ops_bench.cc: queue 20 ops, then wait


def cuda_median_time(op, repetitions):
    """Seconds per op when CUDA_OPS_PER_CALL ops are queued and then waited for."""
    def batch():
        for _ in range(CUDA_OPS_PER_CALL):
            op()
        torch.cuda.synchronize()
    return median_time(batch, repetitions) / CUDA_OPS_PER_CALL


def workloads():
    """(name, on_cuda, setup) triples; setup() returns (fn, bytes moved per call or None, flops per call or None)."""
    def add_one(in_place, device="cpu"):
        a, b = torch.ones(1, device=device), torch.ones(1, device=device)
        return (lambda: a.add_(b)) if in_place else (lambda: torch.add(a, b)), None, None

    def add_large(in_place, device="cpu"):
        a, b = torch.rand(LARGE, device=device), torch.rand(LARGE, device=device)
        return (lambda: a.add_(b)) if in_place else (lambda: torch.add(a, b)), 3 * LARGE * 4, None

    def sum_large(device):
        a = torch.rand(LARGE, device=device)
        return (lambda: torch.sum(a)), LARGE * 4, None

    def matmul(n, device="cpu"):
        x, y = torch.randn(n, n, device=device), torch.randn(n, n, device=device)
        return (lambda: torch.matmul(x, y)), None, 2 * n**3

    activation = (64, 32, 28, 28)  # as kActivation in core_ops_bench.cc
    activation_bytes = 64 * 32 * 28 * 28 * 4

    def max_pool():
        x = torch.randn(activation)
        return (lambda: torch.nn.functional.max_pool2d_with_indices(x, 2)), activation_bytes, None

    def max_pool_backward():
        x = torch.randn(activation)
        _, indices = torch.nn.functional.max_pool2d_with_indices(x, 2)
        grad = torch.randn(64, 32, 14, 14)
        return (lambda: torch.ops.aten.max_pool2d_with_indices_backward(grad, x, [2, 2], [2, 2], [0, 0], [1, 1], False,
                                                                         indices)), activation_bytes, None

    def relu():
        x = torch.randn(activation)
        return (lambda: torch.relu(x)), 2 * activation_bytes, None

    def relu_backward():
        y, grad = torch.relu(torch.randn(activation)), torch.randn(activation)
        return (lambda: torch.ops.aten.threshold_backward(grad, y, 0)), 3 * activation_bytes, None

    def relu_backward_in_place():
        y, grad = torch.relu(torch.randn(activation)), torch.randn(activation)
        return (lambda: torch.ops.aten.threshold_backward.grad_input(grad, y, 0, grad_input=grad)), \
            3 * activation_bytes, None

    def mul_then_sum():
        a, b = torch.randn(100, 64, 14, 14), torch.randn(100, 64, 14, 14)
        return (lambda: (a * b).sum((0, 2, 3), keepdim=True)), 2 * a.numel() * 4, None

    def batch_norm():
        x, w, b = torch.randn(100, 64, 14, 14), torch.randn(64), torch.randn(64)
        return (lambda: torch.ops.aten.native_batch_norm(x, w, b, None, None, True, 0.1, 1e-5)), \
            2 * x.numel() * 4, None

    def batch_norm_backward():  # a fresh gradient copied in first, as BM_BatchNormBackward does
        x, w, g = torch.randn(100, 64, 14, 14), torch.randn(64), torch.randn(100, 64, 14, 14)
        fresh = torch.empty_like(g)
        _, mean, invstd = torch.ops.aten.native_batch_norm(x, w, None, None, None, True, 0.1, 1e-5)

        def run():
            fresh.copy_(g)
            return torch.ops.aten.native_batch_norm_backward(fresh, x, w, None, None, mean, invstd, True, 1e-5,
                                                             [True, True, True])
        return run, 4 * x.numel() * 4, None

    def im2col():
        x = torch.randn(64, 32, 14, 14)
        return (lambda: torch.nn.functional.unfold(x, 3, padding=1)), 9 * x.numel() * 4, None

    def col2im():
        columns = torch.randn(64, 32 * 9, 14 * 14)
        return (lambda: torch.nn.functional.fold(columns, (14, 14), 3, padding=1)), columns.numel() * 4, None

    conv_flops = 2.0 * 64 * 64 * (32 * 9) * (14 * 14)  # as kConvFlops

    def conv2d():
        x, w, b = torch.randn(64, 32, 14, 14), torch.randn(64, 32, 3, 3), torch.randn(64)
        return (lambda: torch.nn.functional.conv2d(x, w, b, padding=1)), None, conv_flops

    def conv2d_backward():
        x, w, g = torch.randn(64, 32, 14, 14), torch.randn(64, 32, 3, 3), torch.randn(64, 64, 14, 14)
        return (lambda: torch.ops.aten.convolution_backward(g, x, w, [64], [1, 1], [1, 1], [1, 1], False, [0, 0], 1,
                                                             [True, True, True])), None, 2 * conv_flops

    yield "MaxPool2d", False, max_pool
    yield "MaxPool2dBackward", False, max_pool_backward
    yield "Relu", False, relu
    yield "ReluBackward", False, relu_backward
    yield "ReluBackwardInPlace", False, relu_backward_in_place
    yield "MulThenSum", False, mul_then_sum
    yield "BatchNorm", False, batch_norm
    yield "BatchNormBackward", False, batch_norm_backward
    yield "Im2col", False, im2col
    yield "Col2im", False, col2im
    yield "Conv2d", False, conv2d
    yield "Conv2dBackward", False, conv2d_backward
    yield "AddOneElement", False, lambda: add_one(False)
    yield "AddOneElementInPlace", False, lambda: add_one(True)
    yield "Add16M", False, lambda: add_large(False)
    yield "AddInPlace16M", False, lambda: add_large(True)
    for n in (512, 1024, 2048):
        yield f"Matmul/{n}", False, lambda n=n: matmul(n)
    yield "CudaAddOneElement", True, lambda: add_one(False, "cuda")
    yield "CudaAdd16M", True, lambda: add_large(False, "cuda")
    yield "CudaSum16M", True, lambda: sum_large("cuda")
    for n in (1024, 2048, 4096):
        yield f"CudaMatmul/{n}", True, lambda n=n: matmul(n, "cuda")


def main():
    repetitions = int(sys.argv[1]) if len(sys.argv) > 1 else 5
    name_filter = re.compile(sys.argv[2] if len(sys.argv) > 2 else ".")
    torch.manual_seed(0)
    for name, on_cuda, setup in workloads():
        if not name_filter.search(name) or (on_cuda and not torch.cuda.is_available()):
            continue
        fn, nbytes, flops = setup()
        seconds = cuda_median_time(fn, repetitions) if on_cuda else median_time(fn, repetitions)
        result = {"name": name, "seconds_per_iter": seconds}
        if nbytes:
            result["bytes_per_second"] = nbytes / seconds
        if flops:
            result["GFLOPS"] = flops / seconds / 1e9
        result["torch_version"] = torch.__version__
        result["threads"] = torch.get_num_threads()
        print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
