// The environment of each worker `distgrad-run` starts (the torchrun variables, plus distgrad's,
// plus what asks the worker for line-buffered output).
#pragma once

#include <map>
#include <optional>
#include <string>

#include "launcher/options.h"

namespace distgrad::launcher {

// Where this node's workers sit in the world of one elastic round (launcher/elastic_agent.h).
struct NodePlacement {
  int node_rank = 0;
  int first_rank = 0;  // the global rank of local rank 0
  int world_size = 1;
  std::string master_addr;  // of the Store the round's workers use
};

// What is fixed for one start of the worker group on this node.
struct GroupInfo {
  int nproc_per_node = 1;   // resolved (workers_per_node)
  int master_port = 29500;  // resolved (--standalone picks a free one)
  int restart_count = 0;    // starts of the group before this one
  std::string token;        // the job's secret, DISTGRAD_TOKEN
  // coreutils' libstdbuf.so to preload for line-buffered stdout (find_line_buffer_library), or
  // empty: none.
  std::string line_buffer_library;
  // Set by an elastic round; otherwise the options' static --node-rank, --nnodes, --master-addr.
  std::optional<NodePlacement> placement;
};

// The environment of local worker `local_rank`: `env` (the launcher's own) with these set: RANK
// = node_rank * nproc_per_node + local_rank, LOCAL_RANK, WORLD_SIZE = nnodes * nproc_per_node,
// LOCAL_WORLD_SIZE, GROUP_RANK (the node rank), ROLE_NAME, ROLE_RANK, ROLE_WORLD_SIZE,
// MASTER_ADDR, MASTER_PORT, DISTGRAD_RESTART_COUNT, DISTGRAD_MAX_RESTARTS, DISTGRAD_RUN_ID,
// DISTGRAD_TOKEN, DISTGRAD_USE_AGENT_STORE=1 (the launcher hosts the Store), DISTGRAD_TRACE with
// --trace, and OMP_NUM_THREADS=1 unless `env` sets it. With a placement (an elastic round), RANK
// is its first_rank + local_rank, and WORLD_SIZE, GROUP_RANK and MASTER_ADDR are its own. With
// `options.line_buffered`, see Note [Line-buffered workers].
std::map<std::string, std::string> worker_environment(const LaunchOptions& options, const GroupInfo& group,
                                                      int local_rank, std::map<std::string, std::string> env);

// Note [Line-buffered workers]
// A worker's stdout is a pipe to the launcher, so C stdio (and Python) buffer it in blocks: a
// program that prints a line and computes for a minute shows the line a minute late, or never if
// it is killed. What `stdbuf -oL` does asks any dynamically linked program for line buffering:
// coreutils' libstdbuf.so, appended to the user's LD_PRELOAD, sets stdout line-buffered before
// main when _STDBUF_O=L. stderr is left alone: C's is unbuffered already, and line buffering
// would hold back a progress line redrawn with '\r'. Python ignores both and reads
// PYTHONUNBUFFERED=1. Variables the user set win (_STDBUF_O, PYTHONUNBUFFERED), and a program's
// own setvbuf after main wins over libstdbuf. Statically linked programs are not reached.

// The path of coreutils' libstdbuf.so on this machine (where Debian, Fedora and Arch install it),
// or empty when there is none.
std::string find_line_buffer_library();

}  // namespace distgrad::launcher
