"""Distributed MAML on sinusoids with TorchOpt's own torchopt.distributed API.

  RANK=r WORLD_SIZE=n MASTER_ADDR=127.0.0.1 MASTER_PORT=p python maml_torchopt.py [--transports default|uv]

The twin of bench/maml_bench.cc (workload: maml_common.py), written as TorchOpt's distributed
MAML example (examples/distributed/few-shot/maml_omniglot.py) with sinusoids for Omniglot:
auto_init_rpc, and an inner_loop under parallelize(dim_partitioner(dim=0, exclusive=True,
keepdim=False), mean_reducer) that fetches the network from an RRef, clones it by reference,
and adapts it with torchopt.MetaSGD. Each outer iteration on rank 0 wraps
module_clone(net, by='clone') in a new RRef, calls inner_loop inside
torchopt.distributed.autograd.context(), and runs todist.autograd.backward (which accumulates
into .grad) and an Adam step. Run with the peer's interpreter (scripts/install_peer.sh);
bench/run_maml_bench.py drives it.
"""
import sys

import torch
import torch.nn.functional as F
import torchopt
import torchopt.distributed as todist

import maml_common

ARGS = maml_common.parser(__doc__).parse_args()


@todist.parallelize(partitioner=todist.dim_partitioner(dim=0, exclusive=True, keepdim=False),
                    reducer=todist.mean_reducer)
def inner_loop(net_rref, x_support, y_support, x_query, y_query, inner_steps, inner_lr):
    """The query loss of one task after inner_steps MetaSGD steps on a by-reference clone of the net."""
    net = torchopt.module_clone(net_rref.to_here(), by="reference", detach_buffers=True)
    inner_opt = torchopt.MetaSGD(net, lr=inner_lr)
    for _ in range(inner_steps):
        inner_opt.step(F.mse_loss(net(x_support), y_support))
    return F.mse_loss(net(x_query), y_query)


def worker_init():
    torch.set_num_threads(1)
    torch.manual_seed(ARGS.seed + todist.get_rank())


@todist.rank_zero_only
def train():
    torch.manual_seed(ARGS.seed)
    generator = torch.Generator().manual_seed(ARGS.seed + 2)
    net = maml_common.build_net()
    meta_opt = torch.optim.Adam(net.parameters(), lr=ARGS.outer_lr)

    def distributed_forward(tasks):
        net_rref = todist.rpc.RRef(torchopt.module_clone(net, by="clone"))
        return inner_loop(net_rref, *tasks, ARGS.inner_steps, ARGS.inner_lr)

    def distributed_iteration():
        tasks = maml_common.sample_tasks(ARGS.meta_batch, ARGS.shots, generator)
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
