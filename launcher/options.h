// The command line of `distgrad-run`: torchrun's flags and their environment fallbacks.
//
//   distgrad-run [--nnodes N|MIN:MAX] [--nproc-per-node K|auto|cpu|gpu] [--node-rank R]
//                [--master-addr A] [--master-port P] [--standalone] [--max-restarts M]
//                [--rdzv-backend static|c10d|etcd] [--rdzv-endpoint H:P] [--rdzv-id ID]
//                [--rdzv-conf K=V,...] [--local-addr A]
//                [--monitor-interval S] [--log-dir D] [--redirects SPEC] [--tee SPEC]
//                [--role NAME] [--run-id ID] [--no-line-buffered] program [args...]
//
// As torchrun: every flag takes `-` or `_` spellings (`--nproc-per-node`, `--nproc_per_node`)
// and `--flag value` or `--flag=value`; a flag not given falls back to the environment variable
// PET_<FLAG> (PET_NPROC_PER_NODE, ...), then to torchrun's default. The first argument that is
// not a flag is the program: everything after it is the program's. The static rendezvous
// (node ranks given, node 0 hosts the Store) is the default; `--rdzv-backend c10d` or `etcd`
// makes the job elastic (launcher/elastic_agent.h), which `--nnodes MIN:MAX` with MIN != MAX
// needs. `--rdzv-id` and `--run-id` are one setting. Every bad value is an Error naming the flag
// (or variable) and the value.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "rendezvous/elastic_state.h"
#include "rendezvous/world.h"

namespace distgrad::launcher {

struct LaunchOptions {
  int nnodes = 1;  // MIN of --nnodes MIN:MAX
  int max_nnodes = 1;
  // "K", "auto" (GPUs if any, else CPUs), "cpu" (CPU cores) or "gpu" (CUDA devices), as given.
  std::string nproc_per_node = "1";
  int node_rank = 0;
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
  bool standalone = false;  // one node, a free port chosen by the launcher
  int max_restarts = 0;
  // A worker other than rank 0 that fails leaves the others running (docs/fault-tolerance.md).
  bool tolerate_lost_workers = false;
  // Such a worker starts again into the running world, up to this many times per local rank
  // (Note [Rejoining workers] in rpc/agent.cc); implies tolerate_lost_workers.
  int max_rejoins = 0;
  double monitor_interval_s = 0.1;
  std::optional<std::string> log_dir;
  // Where the workers record their trace (DISTGRAD_TRACE), made absolute; merged at the end.
  std::optional<std::string> trace_dir;
  std::string redirects = "0";  // 0 none, 1 stdout, 2 stderr, 3 both; or "rank:n,..." per rank
  std::string tee = "0";
  std::string role = "default";
  std::string run_id = "none";  // --run-id, or torchrun's --rdzv-id
  // "static", or an elastic rendezvous: "c10d" (distgrad's Store) or "etcd" (its v3 API).
  std::string rdzv_backend = "static";
  std::string rdzv_endpoint;  // "host:port" of the elastic rendezvous (default port: c10d 29400, etcd 2379)
  // --rdzv-conf's timeouts; min_nodes and max_nodes are --nnodes'.
  rendezvous::ElasticSettings rdzv_conf;
  // The address other nodes reach this one at; by default the one towards the rendezvous endpoint.
  std::optional<std::string> local_addr;
  // Ask the workers for line-buffered stdout (launcher/worker_env.h); --no-line-buffered: off.
  bool line_buffered = true;
  bool help = false;
  std::vector<std::string> program;  // the program and its arguments

  bool elastic() const { return rdzv_backend != "static"; }
};

// Parses `args` (without the launcher's own name) with `getenv` for the PET_ fallbacks.
LaunchOptions parse_launch_options(const std::vector<std::string>& args, const rendezvous::EnvLookup& getenv);

// The --help text.
std::string launch_usage();

// How many workers this node starts for `nproc_per_node`, given the machine's CPU cores and
// CUDA devices.
int workers_per_node(std::string_view nproc_per_node, int cpu_cores, int cuda_devices);

}  // namespace distgrad::launcher
