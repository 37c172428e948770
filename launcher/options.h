// The command line of `distgrad-run`: torchrun's flags and their environment fallbacks.
//
//   distgrad-run [--nnodes N|N:N] [--nproc-per-node K|auto|cpu|gpu] [--node-rank R]
//                [--master-addr A] [--master-port P] [--standalone] [--max-restarts M]
//                [--monitor-interval S] [--log-dir D] [--redirects SPEC] [--tee SPEC]
//                [--role NAME] [--run-id ID] [--no-line-buffered] program [args...]
//
// As torchrun: every flag takes `-` or `_` spellings (`--nproc-per-node`, `--nproc_per_node`)
// and `--flag value` or `--flag=value`; a flag not given falls back to the environment variable
// PET_<FLAG> (PET_NPROC_PER_NODE, ...), then to torchrun's default. The first argument that is
// not a flag is the program: everything after it is the program's. Only static rendezvous is
// supported: `--nnodes MIN:MAX` with MIN != MAX is an error that says so. Every bad value is an
// Error naming the flag (or variable) and the value.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "rendezvous/world.h"

namespace distgrad::launcher {

struct LaunchOptions {
  int nnodes = 1;
  // "K", "auto" (GPUs if any, else CPUs), "cpu" (CPU cores) or "gpu" (CUDA devices), as given.
  std::string nproc_per_node = "1";
  int node_rank = 0;
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
  bool standalone = false;  // one node, a free port chosen by the launcher
  int max_restarts = 0;
  // A worker other than rank 0 that fails leaves the others running (docs/fault-tolerance.md).
  bool tolerate_lost_workers = false;
  double monitor_interval_s = 0.1;
  std::optional<std::string> log_dir;
  // Where the workers record their trace (DISTGRAD_TRACE), made absolute; merged at the end.
  std::optional<std::string> trace_dir;
  std::string redirects = "0";  // 0 none, 1 stdout, 2 stderr, 3 both; or "rank:n,..." per rank
  std::string tee = "0";
  std::string role = "default";
  std::string run_id = "none";
  // Ask the workers for line-buffered stdout (launcher/worker_env.h); --no-line-buffered: off.
  bool line_buffered = true;
  bool help = false;
  std::vector<std::string> program;  // the program and its arguments
};

// Parses `args` (without the launcher's own name) with `getenv` for the PET_ fallbacks.
LaunchOptions parse_launch_options(const std::vector<std::string>& args, const rendezvous::EnvLookup& getenv);

// The --help text.
std::string launch_usage();

// How many workers this node starts for `nproc_per_node`, given the machine's CPU cores and
// CUDA devices.
int workers_per_node(std::string_view nproc_per_node, int cpu_cores, int cuda_devices);

}  // namespace distgrad::launcher
