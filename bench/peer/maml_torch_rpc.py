"""Distributed MAML (sinusoids or few-shot Fashion-MNIST) written by hand on torch.distributed.rpc and
torch.distributed.autograd.

  RANK=r WORLD_SIZE=n MASTER_ADDR=127.0.0.1 MASTER_PORT=p python maml_torch_rpc.py
      [--workload sinusoid|fewshot] [--transports default|uv]
  python maml_torch_rpc.py --local [--workload sinusoid|fewshot] [--device cpu|cuda]
      (plain single-process PyTorch, the same iteration; --device cuda on the first GPU)

The twin of bench/maml_bench.cc (--workload sinusoid, the default) and of
bench/maml_fewshot_bench.cc (--workload fewshot); the workloads are maml_common.py's. Each outer
iteration on rank 0: inside a distributed autograd context, the parameters are cloned (a clone
stays linked to the graph; an nn.Parameter sent over RPC arrives detached), one rpc_async per
task goes round-robin over every worker (rank 0 included) to adapt_and_eval, which takes 5 inner
steps with torch.autograd.grad(create_graph=True) and torch.func.functional_call (on a network of
its thread's, whose BatchNorm buffers it updates) and returns the query loss (fewshot: the query
loss and accuracy); the mean of the losses goes through dist_autograd.backward, and a local Adam
steps on the gradients from dist_autograd.get_gradients. --local calls adapt_and_eval directly on
the network's own parameters and calls .backward(). Run with the peer's interpreter
(scripts/install_peer.sh); bench/run_maml_bench.py drives it.
"""
import os
import sys
import threading

import torch
import torch.distributed.autograd as dist_autograd
import torch.distributed.rpc as rpc

import maml_common

_THREAD = threading.local()


def adapt_and_eval(params, x_support, y_support, x_query, y_query, inner_steps, inner_lr, workload, ways):
    """One task's result (maml_common.task_result: the query loss, fewshot with the accuracy) after
    inner_steps differentiable SGD steps; the tensors are the task's, without the leading task dim."""
    if not hasattr(_THREAD, "nets"):  # functional_call swaps tensors into the module: one per thread
        _THREAD.nets = {}
    key = (workload, ways, x_support.device)
    if key not in _THREAD.nets:
        _THREAD.nets[key] = maml_common.build_net(workload, ways).to(x_support.device)
    net = _THREAD.nets[key]
    for _ in range(inner_steps):
        loss = maml_common.task_loss(workload, torch.func.functional_call(net, params, (x_support,)), y_support)
        grads = torch.autograd.grad(loss, tuple(params.values()), create_graph=True)
        params = {name: value - inner_lr * grad for (name, value), grad in zip(params.items(), grads)}
    return maml_common.task_result(workload, torch.func.functional_call(net, params, (x_query,)), y_query)


def main():
    parser = maml_common.parser(__doc__)
    parser.add_argument("--local", action="store_true", help="one process, no RPC: plain PyTorch")
    args = maml_common.parse_args(parser)
    if args.device != "cpu" and not args.local:
        parser.error("--device cuda runs with --local only (CUDA tensors between ranks would need device maps)")
    device = torch.device(args.device)
    # Plain float32 on the GPU, as ours computes: no TF32 in cuDNN's convolutions (on by default).
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.set_num_threads(1)
    rank, world_size = int(os.environ.get("RANK", "0")), int(os.environ.get("WORLD_SIZE", "1"))
    if not args.local:
        rpc.init_rpc(f"worker{rank}", rank=rank, world_size=world_size,
                     rpc_backend_options=maml_common.backend_options(args))
    if rank == 0:
        torch.manual_seed(args.seed)
        generator = torch.Generator().manual_seed(args.seed + 2)
        net = maml_common.build_net(args.workload, args.ways).to(device)
        sample_tasks = maml_common.task_sampler(args)
        inner = (args.inner_steps, args.inner_lr, args.workload, args.ways)
        outer = torch.optim.Adam(net.parameters(), lr=args.outer_lr)

        def local_iteration():
            tasks = [t.to(device) for t in sample_tasks(args.meta_batch, generator)]
            outer.zero_grad()
            params = dict(net.named_parameters())
            phases = maml_common.run_phases(
                lambda: maml_common.loss_of(maml_common.mean_result(
                    adapt_and_eval(params, *(t[i] for t in tasks), *inner) for i in range(args.meta_batch))),
                lambda loss: loss.backward(), device)
            outer.step()
            maml_common.synchronize(device)
            return phases

        def distributed_forward(tasks):
            params = {name: value.clone() for name, value in net.named_parameters()}
            futures = [rpc.rpc_async(i % world_size, adapt_and_eval,
                                     args=(params, *(t[i] for t in tasks), *inner))
                       for i in range(args.meta_batch)]
            return maml_common.loss_of(maml_common.mean_result(future.wait() for future in futures))

        def distributed_iteration():
            tasks = sample_tasks(args.meta_batch, generator)
            with dist_autograd.context() as context_id:
                phases = maml_common.run_phases(lambda: distributed_forward(tasks),
                                                lambda loss: dist_autograd.backward(context_id, [loss]))
                gradients = dist_autograd.get_gradients(context_id)
                for parameter in net.parameters():
                    parameter.grad = gradients[parameter]
                outer.step()
            return phases

        maml_common.time_and_report(local_iteration if args.local else distributed_iteration, args, "torch-rpc")
    if not args.local:
        rpc.shutdown(graceful=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
