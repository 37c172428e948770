// What the launchers of a multi-node job tell each other through node 0's Store: that an attempt
// failed on some node (so every node stops its workers and restarts them, or gives up, together)
// and that a node's workers all finished (so that no node exits while another may restart).
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "launcher/worker_group.h"
#include "rendezvous/store.h"

namespace distgrad::launcher {

class JobStatus {
 public:
  // `store`: a client of node 0's Store; keys live under "launcher/<run_id>/".
  JobStatus(std::unique_ptr<rendezvous::StoreClient> store, std::string run_id, int nnodes);

  // Records the first failure of `attempt` on this node (another node's may come first).
  void report_failure(int attempt, const WorkerExit& exit);
  // A failure of `attempt` reported by any node, or nullopt.
  std::optional<WorkerExit> failure(int attempt);
  // Records that this node's workers of `attempt` all succeeded.
  void report_finished(int attempt);
  // Whether every node reported `attempt` finished.
  bool all_finished(int attempt);
  // Records that this node's launcher is done with the job (after its last attempt).
  void report_leaving(int attempt);
  // Whether every node's launcher is done: node 0's, which hosts the Store, waits for this
  // before it exits, so that no other node finds the Store gone while it still needs it.
  bool all_left(int attempt);

 private:
  std::string key(const std::string& what, int attempt) const;

  std::unique_ptr<rendezvous::StoreClient> store_;
  std::string run_id_;
  int nnodes_;
};

}  // namespace distgrad::launcher
