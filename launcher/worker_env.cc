#include "launcher/worker_env.h"

#include <unistd.h>

#include <algorithm>
#include <vector>

#include "absl/strings/str_split.h"
#include "core/error.h"

namespace distgrad::launcher {
namespace {

// Note [Line-buffered workers].
void ask_for_line_buffering(const std::string& library, std::map<std::string, std::string>& env) {
  env.try_emplace("PYTHONUNBUFFERED", "1");
  if (library.empty()) return;
  std::string& preload = env["LD_PRELOAD"];
  const std::vector<std::string> preloaded = absl::StrSplit(preload, absl::ByAnyChar(": "), absl::SkipEmpty());
  if (std::find(preloaded.begin(), preloaded.end(), library) == preloaded.end()) {
    preload += preload.empty() ? library : ":" + library;
  }
  env.try_emplace("_STDBUF_O", "L");
}

}  // namespace

std::map<std::string, std::string> worker_environment(const LaunchOptions& options, const GroupInfo& group,
                                                      int local_rank, std::map<std::string, std::string> env) {
  DISTGRAD_CHECK(local_rank >= 0 && local_rank < group.nproc_per_node, "distgrad-run: local rank ", local_rank,
                 " is outside the ", group.nproc_per_node, " workers of this node");
  const NodePlacement placement =
      group.placement.value_or(NodePlacement{options.node_rank, options.node_rank * group.nproc_per_node,
                                             options.nnodes * group.nproc_per_node, options.master_addr});
  const int rank = placement.first_rank + local_rank;
  const int world_size = placement.world_size;
  env["RANK"] = std::to_string(rank);
  env["LOCAL_RANK"] = std::to_string(local_rank);
  env["WORLD_SIZE"] = std::to_string(world_size);
  env["LOCAL_WORLD_SIZE"] = std::to_string(group.nproc_per_node);
  env["GROUP_RANK"] = std::to_string(placement.node_rank);
  env["ROLE_NAME"] = options.role;
  env["ROLE_RANK"] = std::to_string(rank);
  env["ROLE_WORLD_SIZE"] = std::to_string(world_size);
  env["MASTER_ADDR"] = placement.master_addr;
  env["MASTER_PORT"] = std::to_string(group.master_port);
  env["DISTGRAD_RESTART_COUNT"] = std::to_string(group.restart_count);
  env["DISTGRAD_MAX_RESTARTS"] = std::to_string(options.max_restarts);
  env["DISTGRAD_RUN_ID"] = options.run_id;
  if (options.trace_dir) env["DISTGRAD_TRACE"] = *options.trace_dir;
  env["DISTGRAD_TOKEN"] = group.token;
  // Not = "1": GCC 12 warns falsely (-Wrestrict) on assigning a one-character literal (GCC bug 105329).
  env.insert_or_assign("DISTGRAD_USE_AGENT_STORE", std::string(1, '1'));
  env.try_emplace("OMP_NUM_THREADS", "1");
  if (options.line_buffered) ask_for_line_buffering(group.line_buffer_library, env);
  return env;
}

std::string find_line_buffer_library() {
  for (const char* path : {"/usr/libexec/coreutils/libstdbuf.so", "/usr/lib/coreutils/libstdbuf.so",
                           "/usr/local/libexec/coreutils/libstdbuf.so"}) {
    if (access(path, R_OK) == 0) return path;
  }
  return "";
}

}  // namespace distgrad::launcher
