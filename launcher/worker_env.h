// The environment of each worker `distgrad-run` starts (the torchrun variables, plus distgrad's).
#pragma once

#include <map>
#include <string>

#include "launcher/options.h"

namespace distgrad::launcher {

// What is fixed for one start of the worker group on this node.
struct GroupInfo {
  int nproc_per_node = 1;   // resolved (workers_per_node)
  int master_port = 29500;  // resolved (--standalone picks a free one)
  int restart_count = 0;    // starts of the group before this one
  std::string token;        // the job's secret, DISTGRAD_TOKEN
};

// The environment of local worker `local_rank`: `env` (the launcher's own) with these set: RANK = node_rank *
// nproc_per_node + local_rank, LOCAL_RANK, WORLD_SIZE = nnodes * nproc_per_node, LOCAL_WORLD_SIZE, GROUP_RANK (the node
// rank), ROLE_NAME, ROLE_RANK, ROLE_WORLD_SIZE, MASTER_ADDR, MASTER_PORT, DISTGRAD_RESTART_COUNT,
// DISTGRAD_MAX_RESTARTS, DISTGRAD_RUN_ID, DISTGRAD_TOKEN, DISTGRAD_USE_AGENT_STORE=1 (the
// launcher hosts the Store), and OMP_NUM_THREADS=1 unless `env` sets it.
std::map<std::string, std::string> worker_environment(const LaunchOptions& options, const GroupInfo& group,
                                                      int local_rank, std::map<std::string, std::string> env);

}  // namespace distgrad::launcher
