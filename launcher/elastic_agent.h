// ElasticAgent: this node's launcher in an elastic job (`distgrad-run --nnodes MIN:MAX
// --rdzv-backend c10d|etcd --rdzv-endpoint H:P --rdzv-id ID`), as torchrun's elastic agent.
//
// It joins the rendezvous (Note [Elastic rounds] in rendezvous/elastic_state.h), starts its
// workers with the round's world (RANK from its place among the nodes, WORLD_SIZE the round's
// total, MASTER_ADDR:MASTER_PORT the Store that node 0's launcher hosts for the round's workers,
// DISTGRAD_RESTART_COUNT = the round), and watches both: when the membership changes (a node
// stopped sending heartbeats, or one arrived while there is room) it stops its workers and
// joins the next round; when one of its workers fails it does the same while --max-restarts
// allows, and otherwise closes the rendezvous with the failure, which ends every node. The
// program resumes from its checkpoint at each start (docs/fault-tolerance.md, "Elastic jobs").
// Below MIN nodes a round waits up to join_timeout (--rdzv-conf), then the launcher fails.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "launcher/options.h"
#include "launcher/worker_env.h"
#include "rendezvous/elastic_state.h"
#include "rendezvous/state_backend.h"
#include "rendezvous/store.h"

namespace distgrad::launcher {

class ElasticAgent {
 public:
  // `group`: nproc_per_node, token and line-buffering resolved; placement and ports are the
  // rounds'. `backend`: where the rendezvous state lives; `hosts_rendezvous`: this launcher
  // serves it (c10d), so it leaves last. `store_host`: the address this node's Store for its
  // workers binds (other nodes' workers reach it there when this is node 0).
  ElasticAgent(LaunchOptions options, GroupInfo group, std::unique_ptr<rendezvous::StateBackend> backend,
               bool hosts_rendezvous, const std::string& store_host);

  // Runs rounds until the job succeeded (0), failed (the failure's code), or the launcher got
  // SIGINT or SIGTERM (128 + the signal), then leaves the rendezvous. Throws distgrad::Error when
  // the rendezvous does not form in time, is closed by another node's failure, or cannot be
  // reached.
  int run();

 private:
  // Reads the state, applies `change`, and writes it back unless it is unchanged or another
  // node wrote first (then reads again and repeats). Returns the state as written.
  template <typename Change>
  rendezvous::ElasticState update(Change change);
  // Joins until a round with this node completes; nullopt when the launcher was told to stop.
  std::optional<rendezvous::ElasticState> rendezvous();
  // Whether the round `round` is over for this node (membership changed, or the job closed);
  // also keeps this node's heartbeat. Asks the backend at most every poll interval.
  bool round_over(int64_t round);
  int run_rounds();
  // After this node's workers succeeded: waits until every node's did.
  void finish(int64_t round);
  // Takes this node out of the rendezvous (Note [Elastic rounds]); the host of a c10d
  // rendezvous then waits for the others to leave.
  void leave();
  // Ends the job on every node with `reason`.
  void close(const std::string& reason);
  std::string describe_round(const rendezvous::ElasticState& state) const;

  LaunchOptions options_;
  GroupInfo group_;
  std::unique_ptr<rendezvous::StateBackend> backend_;
  const bool hosts_rendezvous_;
  rendezvous::StoreServer store_;  // the Store of the workers' rounds in which this is node 0
  rendezvous::ElasticNode node_;
  int64_t last_round_ = -1;  // the round this node's workers last ran in
  std::chrono::steady_clock::time_point next_check_;
};

}  // namespace distgrad::launcher
