"""Distributed MAML (sinusoids or few-shot Fashion-MNIST) with TorchOpt's own torchopt.distributed API.

  RANK=r WORLD_SIZE=n MASTER_ADDR=127.0.0.1 MASTER_PORT=p python maml_torchopt.py
      [--workload sinusoid|fewshot] [--transports default|uv]

The twin of bench/maml_bench.cc (--workload sinusoid, the default) and of
bench/maml_fewshot_bench.cc (--workload fewshot); the workloads are maml_common.py's. Written as
TorchOpt's distributed MAML example (examples/distributed/few-shot/maml_omniglot.py; fewshot is
that example with Fashion-MNIST for Omniglot): auto_init_rpc, and an inner_loop under
parallelize(dim_partitioner(dim=0, exclusive=True, keepdim=False), reducer) that fetches the
network from an RRef, clones it by reference (detach_buffers=True), and adapts it with
torchopt.MetaSGD. A task returns its query loss, reduced by todist.mean_reducer (sinusoid), or
its query loss and accuracy, reduced by the example's transpose_mean_reducer (fewshot). Each
outer iteration on rank 0 wraps module_clone(net, by='clone') in a new RRef, calls inner_loop
inside torchopt.distributed.autograd.context(), and runs todist.autograd.backward (which
accumulates into .grad) and an Adam step. Run with the peer's interpreter
(scripts/install_peer.sh); bench/run_maml_bench.py drives it.
"""
import sys

import torch
import torchopt
import torchopt.distributed as todist

import maml_common

PARSER = maml_common.parser(__doc__)
ARGS = maml_common.parse_args(PARSER)
if ARGS.device != "cpu":
    PARSER.error("runs on the CPU only (--device cuda: maml_torch_rpc.py --local)")
REDUCER = todist.mean_reducer if ARGS.workload == "sinusoid" else maml_common.transpose_mean_reducer


@todist.parallelize(partitioner=todist.dim_partitioner(dim=0, exclusive=True, keepdim=False), reducer=REDUCER)
def inner_loop(net_rref, x_support, y_support, x_query, y_query, inner_steps, inner_lr, workload):
    """One task's result (maml_common.task_result: the query loss, fewshot with the accuracy) after
    inner_steps MetaSGD steps on a by-reference clone of the net."""
    net = torchopt.module_clone(net_rref.to_here(), by="reference", detach_buffers=True)
    inner_opt = torchopt.MetaSGD(net, lr=inner_lr)
    for _ in range(inner_steps):
        inner_opt.step(maml_common.task_loss(workload, net(x_support), y_support))
    return maml_common.task_result(workload, net(x_query), y_query)


def worker_init():
    torch.set_num_threads(1)
    torch.manual_seed(ARGS.seed + todist.get_rank())


@todist.rank_zero_only
def train():
    torch.manual_seed(ARGS.seed)
    generator = torch.Generator().manual_seed(ARGS.seed + 2)
    net = maml_common.build_net(ARGS.workload, ARGS.ways)
    sample_tasks = maml_common.task_sampler(ARGS)
    meta_opt = torch.optim.Adam(net.parameters(), lr=ARGS.outer_lr)

    def distributed_forward(tasks):
        net_rref = todist.rpc.RRef(torchopt.module_clone(net, by="clone"))
        return maml_common.loss_of(inner_loop(net_rref, *tasks, ARGS.inner_steps, ARGS.inner_lr, ARGS.workload))

    def distributed_iteration():
        tasks = sample_tasks(ARGS.meta_batch, generator)
        meta_opt.zero_grad()
        with todist.autograd.context() as context_id:
            phases = maml_common.run_phases(lambda: distributed_forward(tasks),
                                            lambda loss: todist.autograd.backward(context_id, loss))
            meta_opt.step()
        return phases

    maml_common.time_and_report(distributed_iteration, ARGS, "torchopt")


def main():
    todist.auto_init_rpc(worker_init, rpc_backend_options=maml_common.backend_options(ARGS))(train)()
    return 0


if __name__ == "__main__":
    sys.exit(main())
