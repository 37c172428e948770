// JobStore: the job's rendezvous Store as one process uses it. RPC (init_rpc) and process groups
// (ddp::init_process_group) share it, so a program that uses both still has one Store.
//
//   std::shared_ptr<rendezvous::JobStore> store = rendezvous::JobStore::connect("init_process_group", timeout);
//   store->client().set(store->key("ddp", "gloo/0/rank1"), address);
//
// Note [Job store]
// - Where: MASTER_ADDR:MASTER_PORT from world_info(). Under torchrun, whose agent hosts its own
//   store at MASTER_PORT and says so with TORCHELASTIC_USE_AGENT_STORE=True, distgrad's Store
//   takes MASTER_PORT + 1.
// - Who serves it: rank 0, unless DISTGRAD_USE_AGENT_STORE=1 says the launcher does
//   (distgrad-run hosts it so that it outlives worker restarts).
// - Keys: "<scope>/<run id>/<restart count>/<name>", the run id and restart count from
//   DISTGRAD_RUN_ID and DISTGRAD_RESTART_COUNT (or torchrun's TORCHELASTIC_*), so a restarted
//   group never reads the keys of the attempt before it.
// - Security: a MASTER_ADDR that is not loopback needs DISTGRAD_TOKEN (Note [Store token]) or
//   DISTGRAD_INSECURE=1.
// - Lifetime: connect() hands every caller in the process the same JobStore while one is held;
//   the server stops when the last holder lets go. A graceful shutdown calls leave() first, so
//   that the host outlives everyone's use of the Store.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "rendezvous/store.h"
#include "rendezvous/world.h"

namespace distgrad::rendezvous {

class JobStore {
 public:
  // The process's JobStore, connected (and served, on the host) on first use. `caller` names
  // the API in errors ("init_rpc: MASTER_ADDR=... is not a loopback address and no job token
  // ..."); `timeout` bounds reaching the Store and is the client's timeout.
  static std::shared_ptr<JobStore> connect(std::string_view caller, std::chrono::milliseconds timeout);
  ~JobStore();
  JobStore(const JobStore&) = delete;
  JobStore& operator=(const JobStore&) = delete;

  StoreClient& client() { return client_; }
  const WorldInfo& world() const { return world_; }
  // The job token (DISTGRAD_TOKEN; empty when none is set).
  const std::string& token() const { return token_; }
  bool hosts_server() const { return server_ != nullptr; }

  // "<scope>/<run id>/<restart count>/<name>" (Note [Job store]).
  std::string key(std::string_view scope, std::string_view name) const;
  // key(scope, name + "/" + rank) for every rank of the world.
  std::vector<std::string> rank_keys(std::string_view scope, std::string_view name) const;

  // Says this rank is done with `scope`'s keys; the host then waits (at most `timeout`) until
  // every rank but those `gone` (workers lost for good) has said so, so that it does not stop
  // serving while others still read.
  void leave(std::string_view scope, std::chrono::milliseconds timeout, const std::vector<int>& gone = {});

 private:
  JobStore(const WorldInfo& world, std::string token, std::string store_address, std::unique_ptr<StoreServer> server,
           std::chrono::milliseconds timeout);

  const WorldInfo world_;
  const std::string token_;
  const std::string run_prefix_;         // "<run id>/<restart count>/"
  std::unique_ptr<StoreServer> server_;  // on the host only
  StoreClient client_;
};

}  // namespace distgrad::rendezvous
