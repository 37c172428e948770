// WorkerDirectory: an agent's part of the rendezvous (internal to rpc/). Through the job's Store
// (rendezvous/job_store.h, keys under "rpc") it publishes how this worker can be reached, reads
// how every other can, and runs the waits of init_rpc, barrier() and a graceful shutdown.
//
// Note [Rendezvous entry]
// Each worker publishes one Store entry, one item per line: "HOST:PORT" (gRPC), its host identity
// (transport/shared_memory.h; "-" with RpcOptions::same_host off), then "shm PID FD INODE" when
// its shared-memory path is on, and "socket NAME" (its Unix socket) and "tcp PORT" (the same
// server on TCP at HOST) when it takes socket calls. Peers with this worker's identity use shm and
// socket; the others tcp.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "rendezvous/job_store.h"
#include "rendezvous/world.h"

namespace distgrad::rpc {

// How one worker can be reached (Note [Rendezvous entry]).
struct WorkerEntry {
  std::string grpc_address;         // HOST:PORT of its gRPC server
  std::string host_identity = "-";  // "-": treat it as on another host
  std::string shared_memory_card;   // transport::shm::Links::card(); empty when its shared memory is off
  std::string socket_name;          // its call socket's abstract Unix name; empty when it takes none
  int tcp_port = 0;                 // the call socket's TCP port at the gRPC host; 0 when none

  std::string encode() const;
  // Throws distgrad::Error naming the entry when it does not parse.
  static WorkerEntry decode(const std::string& text);
};

class WorkerDirectory {
 public:
  // Connects to the job's Store within `timeout`. `names` are the workers', by rank.
  WorkerDirectory(const rendezvous::WorldInfo& world, std::vector<std::string> names,
                  std::chrono::milliseconds timeout);

  rendezvous::StoreClient& store() { return store_->client(); }

  void publish(const WorkerEntry& entry);
  // Every worker's entry, by rank, once all are published; throws naming the workers that did
  // not publish within `timeout`.
  std::vector<WorkerEntry> collect(std::chrono::milliseconds timeout);
  // Worker `rank`'s entry as published now (a rejoined worker's replaces its first one).
  WorkerEntry read_entry(int rank);
  // For a worker that rejoins the world (Note [Rejoining workers] in rpc/agent.cc): counts this
  // rank's lives and returns this one's, 1 for the first rejoin.
  int64_t claim_incarnation();

  // Records this worker's arrival at the wait `name` and returns once every worker arrived, but
  // those recorded lost (Note [Waiting without the lost]). With a timeout, throws naming the
  // missing workers when it passes; with none (0), calls `check_alive(rank)` for each missing
  // worker every second (it throws when one is gone). `what` names the wait in errors
  // ("barrier", "shutdown").
  // `skip`: ranks not waited for either (workers that rejoined, which count their barriers anew).
  void wait_for_everyone(const std::string& name, std::chrono::milliseconds timeout, const char* what,
                         const std::function<void(int rank)>& check_alive, const std::vector<int>& skip = {});

  // Records `ranks` lost, for every worker's waits, until forget_lost.
  void record_lost(const std::vector<int>& ranks);
  // Takes back the record that `rank` is lost (it rejoined the world).
  void forget_lost(int rank);
  // The ranks some worker recorded lost.
  std::vector<int> recorded_lost();

  // Says this worker is done with the Store; on its host, waits until everyone but the lost is
  // (at most 30 s).
  void leave();

 private:
  // The ranks whose key among rank_keys(name) is in `missing`.
  std::vector<int> missing_ranks(const std::string& name, const std::vector<std::string>& missing) const;

  const rendezvous::WorldInfo world_;
  const std::vector<std::string> names_;
  const std::shared_ptr<rendezvous::JobStore> store_;  // shared with the process groups (Note [Job store])
};

}  // namespace distgrad::rpc
