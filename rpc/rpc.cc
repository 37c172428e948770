#include "rpc/rpc.h"

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <mutex>
#include <set>
#include <utility>
#include <vector>

#include "rendezvous/world.h"
#include "rpc/trace_clock.h"
#include "trace/trace.h"

namespace distgrad::rpc {
namespace {

std::mutex agent_mutex;  // guards owned_agent's creation and destruction
std::unique_ptr<Agent> owned_agent;
std::atomic<Agent*> running_agent{nullptr};   // owned_agent while it may be used
std::atomic<int64_t> default_timeout_ms{-1};  // -1: the agent's RpcOptions::timeout

// Run on every other worker when worker `rank` rejoined (Note [Rejoining workers] in
// rpc/agent.cc); returns the caller's lost workers.
std::vector<int> take_back_worker(int rank, int64_t incarnation) { return agent().take_back(rank, incarnation); }
DISTGRAD_REMOTE_NAMED(take_back_worker, "__distgrad.rejoined");

// The rejoined worker's side (Note [Rejoining workers]): every other worker takes it back, rank 0
// necessarily; one that cannot be reached is marked lost here, as are those the others lost.
void announce_rejoin(Agent& self) {
  const int me = self.world().rank;
  std::vector<std::pair<int, Future<std::vector<int>>>> replies;
  for (int rank = 0; rank < self.world().world_size; ++rank) {
    if (rank == me) continue;
    replies.emplace_back(
        rank, rpc_async_with_timeout(rank, self.options().init_timeout, &take_back_worker, me, self.incarnation()));
  }
  std::set<int> lost;
  for (auto& [rank, reply] : replies) {
    try {
      for (int other : reply.get()) lost.insert(other);
    } catch (const RemoteError& error) {
      DISTGRAD_CHECK(rank != 0, "init_rpc: ", self.worker_name(me), " rejoined the world, but ", self.worker_name(0),
                     " did not take it back: ", error.what());
      if (error.code() != StatusCode::kUnavailable && error.code() != StatusCode::kDeadlineExceeded) throw;
      lost.insert(rank);
    }
  }
  lost.erase(me);
  for (int rank : lost) self.mark_lost(rank);
  self.finish_rejoin();
}

}  // namespace

void start_agent(const RpcOptions& options) {
  std::lock_guard<std::mutex> lock(agent_mutex);
  DISTGRAD_CHECK(owned_agent == nullptr, "init_rpc: RPC is already running in this process");
  if (rendezvous::world_info().source == "default") {
    // Started by hand, not by a launcher: say so, since a world of one is rarely what was meant.
    std::fprintf(stderr,
                 "distgrad: no launcher's variables are set (RANK and WORLD_SIZE, SLURM_PROCID or "
                 "OMPI_COMM_WORLD_RANK): running as a world of one worker; start the program with "
                 "distgrad-run (or torchrun, srun, mpirun) for more\n");
  }
  const rendezvous::WorldInfo& world = rendezvous::world_info();
  if (trace::start_from_environment())
    trace::set_process(world.rank, rendezvous::worker_name(world.rank, world.world_size));
  auto agent = std::make_unique<Agent>(options);
  agent->start();
  owned_agent = std::move(agent);
  running_agent = owned_agent.get();
  if (owned_agent->rejoined()) {
    try {
      announce_rejoin(*owned_agent);
    } catch (...) {
      running_agent = nullptr;
      owned_agent.reset();
      throw;
    }
  }
  owned_agent->open_calls();  // Note [Calls before init_rpc returns]
  detail::measure_trace_clock();
}

void shutdown(bool graceful) {
  std::lock_guard<std::mutex> lock(agent_mutex);
  if (owned_agent == nullptr) return;
  // A recording job's clocks are measured again (Note [Trace clocks]); every rank writes its file
  // inside the agent's graceful shutdown, and rank 0 merges them all after it.
  const std::string trace_directory = graceful ? trace::directory() : "";
  if (!trace_directory.empty()) detail::measure_trace_clock();
  // The agent keeps serving (and stays current) during a graceful shutdown; if that fails, it
  // is still running and shutdown(false) stops it.
  owned_agent->shutdown(graceful);
  const bool report = !trace_directory.empty() && owned_agent->world().rank == 0;
  running_agent = nullptr;
  owned_agent.reset();
  default_timeout_ms = -1;
  if (report) detail::report_trace(trace_directory);
}

bool is_initialized() { return running_agent.load() != nullptr; }

Agent& agent() {
  Agent* agent = running_agent.load();
  DISTGRAD_CHECK(agent != nullptr, "rpc: RPC is not running in this process; call init_rpc() (or auto_init_rpc) first");
  return *agent;
}

int get_rank() { return rendezvous::world_info().rank; }
int get_world_size() { return rendezvous::world_info().world_size; }
int get_local_rank() { return rendezvous::world_info().local_rank; }
int get_local_world_size() { return rendezvous::world_info().local_world_size; }
std::string get_worker_name() { return get_worker_name(get_rank()); }
std::string get_worker_name(int rank) {
  DISTGRAD_CHECK(rank >= 0 && rank < get_world_size(), "get_worker_name: no worker ", rank, " in a world of ",
                 get_world_size());
  return rendezvous::worker_name(rank, get_world_size());
}
int get_worker_id(std::string_view name) { return rendezvous::get_worker_id(name, get_world_size()); }

void barrier() { agent().barrier(agent().options().init_timeout); }
void barrier(std::chrono::milliseconds timeout) { agent().barrier(timeout); }

TransportStats transport_stats() { return agent().transport_stats(); }

void mark_worker_lost(int rank) { agent().mark_lost(rank); }

bool is_worker_lost(int rank) {
  const std::vector<int> lost = lost_workers();
  return std::find(lost.begin(), lost.end(), rank) != lost.end();
}

std::vector<int> lost_workers() { return is_initialized() ? agent().lost_workers() : std::vector<int>{}; }

void mark_worker_lost(int rank, int64_t seen_at_epoch) { agent().mark_lost(rank, seen_at_epoch); }

int64_t membership_epoch() { return is_initialized() ? agent().membership_epoch() : 0; }

std::vector<int> live_workers() {
  const std::vector<int> lost = lost_workers();
  std::vector<int> live;
  for (int rank = 0; rank < get_world_size(); ++rank) {
    if (std::find(lost.begin(), lost.end(), rank) == lost.end()) live.push_back(rank);
  }
  return live;
}

void on_membership_change(std::function<void(const MembershipChange&)> callback) {
  agent().on_membership_change(std::move(callback));
}

bool rejoined_world() { return is_initialized() && agent().rejoined(); }

int64_t incarnation() { return is_initialized() ? agent().incarnation() : 0; }

void set_default_timeout(std::chrono::milliseconds timeout) {
  DISTGRAD_CHECK(timeout.count() >= 0, "set_default_timeout: expected a non-negative timeout, found ", timeout.count(),
                 " ms");
  default_timeout_ms = timeout.count();
}

std::chrono::milliseconds default_timeout() {
  const int64_t set = default_timeout_ms.load();
  return set >= 0 ? std::chrono::milliseconds(set) : agent().options().timeout;
}

int WorkerRef::rank() const {
  if (name_.empty()) {
    DISTGRAD_CHECK(rank_ >= 0 && rank_ < get_world_size(), "rpc: no worker ", rank_, " in a world of ",
                   get_world_size());
    return rank_;
  }
  return get_worker_id(name_);
}

std::optional<int> WorkerRef::find_rank() const {
  if (!name_.empty()) return rendezvous::find_worker_id(name_, get_world_size());
  if (rank_ < 0 || rank_ >= get_world_size()) return std::nullopt;
  return rank_;
}

std::string WorkerRef::str() const { return name_.empty() ? std::to_string(rank_) : "\"" + name_ + "\""; }

namespace detail {

const std::string& registered_name(FunctionAddress function) {
  const std::string* name = FunctionRegistry::instance().name_of(function);
  DISTGRAD_CHECK(name != nullptr, "rpc: the function is not registered; add DISTGRAD_REMOTE(function) at namespace ",
                 "scope next to its definition");
  return *name;
}

namespace {

void tell_failed(const std::vector<std::shared_ptr<CallAttachment>>& attachments) {
  for (const auto& attachment : attachments) attachment->call_failed();
}

}  // namespace

Future<Encoded> send_async(int to, OutgoingCall call, std::chrono::milliseconds timeout) {
  std::vector<std::shared_ptr<CallAttachment>> attachments = std::move(call.arguments.attachments);
  Future<Encoded> reply = agent().call_async(to, std::move(call), timeout);
  if (attachments.empty()) return reply;
  return reply.then([attachments = std::move(attachments)](const Future<Encoded>& done) {
    if (done.error() != nullptr) tell_failed(attachments);
    return done.get();
  });
}

Encoded send_sync(int to, OutgoingCall call, std::chrono::milliseconds timeout) {
  std::vector<std::shared_ptr<CallAttachment>> attachments = std::move(call.arguments.attachments);
  try {
    return agent().call_sync(to, std::move(call), timeout);
  } catch (...) {
    tell_failed(attachments);
    throw;
  }
}

}  // namespace detail

}  // namespace distgrad::rpc
