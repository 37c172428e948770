#include "launcher/elastic_agent.h"

#include <unistd.h>

#include <cstdio>
#include <random>
#include <thread>

#include "core/error.h"
#include "launcher/stop_signals.h"
#include "launcher/worker_group.h"
#include "rendezvous/net_util.h"

namespace distgrad::launcher {
namespace {

using Clock = std::chrono::steady_clock;
using rendezvous::ElasticState;

// How often a node waiting for a round to complete looks at the state.
constexpr std::chrono::milliseconds kJoinPoll{100};

int64_t wall_clock_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// "<host>_<pid>_<random>": unique per launcher run, readable in the state.
std::string new_node_id() {
  char host[256] = {};
  gethostname(host, sizeof(host) - 1);
  std::random_device random;
  char suffix[16];
  std::snprintf(suffix, sizeof(suffix), "%08x", random());
  return std::string(host) + "_" + std::to_string(getpid()) + "_" + suffix;
}

}  // namespace

ElasticAgent::ElasticAgent(LaunchOptions options, GroupInfo group, std::unique_ptr<rendezvous::StateBackend> backend,
                           bool hosts_rendezvous, const std::string& store_host)
    : options_(std::move(options)),
      group_(std::move(group)),
      backend_(std::move(backend)),
      hosts_rendezvous_(hosts_rendezvous),
      store_(store_host, 0, group_.token),
      next_check_(Clock::now()) {
  node_.id = new_node_id();
  node_.store_address = store_.address();
  node_.nproc = group_.nproc_per_node;
}

template <typename Change>
ElasticState ElasticAgent::update(Change change) {
  for (;;) {
    const std::optional<rendezvous::StateBackend::Versioned> current = backend_->load();
    ElasticState state = current ? ElasticState::decode(current->state) : ElasticState{};
    change(state);
    const std::string text = state.encode();
    if (current && text == current->state) return state;
    if (backend_->replace(current ? &current->version : nullptr, text)) return state;
  }
}

std::optional<ElasticState> ElasticAgent::rendezvous() {
  const rendezvous::ElasticSettings& settings = options_.rdzv_conf;
  const Clock::time_point deadline = Clock::now() + settings.join_timeout;
  for (;;) {
    if (received_stop_signal() != 0) return std::nullopt;
    const ElasticState state = update([&](ElasticState& s) {
      const int64_t now = wall_clock_ms();
      rendezvous::drop_silent_nodes(s, now, settings);
      // A round completed with this node since it last looked: join() would take this node for
      // one whose workers failed and open the next round.
      const bool placed = s.complete && s.rank_of(node_.id) && s.round != last_round_;
      if (placed) {
        rendezvous::heartbeat(s, node_.id, now);
      } else {
        rendezvous::join(s, node_, now, settings);
      }
    });
    DISTGRAD_CHECK(!state.closed, "distgrad-run: the elastic rendezvous ", options_.run_id, " at ",
                   backend_->describe(), " is closed",
                   state.closed_reason.empty() ? " (its job finished; a new job needs a new --rdzv-id)"
                                               : ": " + state.closed_reason);
    if (state.complete && state.rank_of(node_.id)) return state;
    DISTGRAD_CHECK(Clock::now() < deadline, "distgrad-run: the elastic rendezvous ", options_.run_id, " at ",
                   backend_->describe(), " did not form within ", settings.join_timeout.count() / 1000.0,
                   " s (join_timeout): round ", state.round, " has ", state.participants.size(), " of at least ",
                   settings.min_nodes, " nodes", state.complete ? " and is full; this node waits as a standby" : "");
    std::this_thread::sleep_for(kJoinPoll);
  }
}

bool ElasticAgent::round_over(int64_t round) {
  if (Clock::now() < next_check_) return false;
  next_check_ = Clock::now() + std::min<std::chrono::milliseconds>(options_.rdzv_conf.keep_alive_interval / 2,
                                                                   std::chrono::seconds(1));
  bool known = true;
  const ElasticState state = update([&](ElasticState& s) {
    const int64_t now = wall_clock_ms();
    rendezvous::drop_silent_nodes(s, now, options_.rdzv_conf);
    known = rendezvous::heartbeat(s, node_.id, now);
    rendezvous::admit_waiting(s, options_.rdzv_conf);
  });
  const bool over = !known || state.closed || state.round != round || !state.rank_of(node_.id);
  if (over && !state.closed) {
    std::fprintf(stderr,
                 "distgrad-run: the job's nodes changed (round %lld is over); stopping the workers to re-form\n",
                 static_cast<long long>(round));
  }
  return over;
}

void ElasticAgent::finish(int64_t round) {
  const Clock::time_point deadline = Clock::now() + WorkerGroup::kOtherNodesTimeout;
  for (;;) {
    const ElasticState state = update([&](ElasticState& s) {
      const int64_t now = wall_clock_ms();
      rendezvous::drop_silent_nodes(s, now, options_.rdzv_conf);
      rendezvous::heartbeat(s, node_.id, now);
      rendezvous::finish(s, node_.id, round);
    });
    if (state.closed || state.all_finished() || received_stop_signal() != 0) return;
    DISTGRAD_CHECK(Clock::now() < deadline,
                   "distgrad-run: this node's workers finished, but not every node's did within ",
                   WorkerGroup::kOtherNodesTimeout.count(), " s");
    std::this_thread::sleep_for(kJoinPoll);
  }
}

void ElasticAgent::leave() {
  update([&](ElasticState& s) { rendezvous::leave(s, node_.id, options_.rdzv_conf); });
  if (!hosts_rendezvous_) return;
  // The others still read the state here: wait until they left, or went silent, or a while.
  const Clock::time_point deadline = Clock::now() + options_.rdzv_conf.silence_limit() + std::chrono::seconds(5);
  while (Clock::now() < deadline && received_stop_signal() == 0) {
    const std::optional<rendezvous::StateBackend::Versioned> current = backend_->load();
    if (!current) return;
    ElasticState state = ElasticState::decode(current->state);
    rendezvous::drop_silent_nodes(state, wall_clock_ms(), options_.rdzv_conf);
    if (state.nodes.empty()) return;
    std::this_thread::sleep_for(kJoinPoll);
  }
}

void ElasticAgent::close(const std::string& reason) {
  update([&](ElasticState& s) {
    s.closed = true;
    s.closed_reason = reason;
  });
}

std::string ElasticAgent::describe_round(const ElasticState& state) const {
  const int node_rank = *state.rank_of(node_.id);
  const int first = state.first_rank(node_rank);
  return "round " + std::to_string(state.round) + ": node " + std::to_string(node_rank) + " of " +
         std::to_string(state.participants.size()) + ", ranks " + std::to_string(first) + "-" +
         std::to_string(first + node_.nproc - 1) + " of " + std::to_string(state.world_size());
}

int ElasticAgent::run() {
  StopSignals signals;
  int code = 0;
  try {
    code = run_rounds();
  } catch (...) {
    try {
      leave();
    } catch (const std::exception&) {  // the backend is what failed, most likely: the first error says it
    }
    throw;
  }
  leave();
  return code;
}

int ElasticAgent::run_rounds() {
  WorkerGroup workers(options_, group_);
  int restarts = 0;
  for (;;) {
    const std::optional<ElasticState> round = rendezvous();
    if (!round) return 128 + received_stop_signal();
    last_round_ = round->round;
    const int node_rank = *round->rank_of(node_.id);
    const std::string& store_address = round->nodes.at(round->participants.front()).store_address;
    GroupInfo group = group_;
    const rendezvous::HostPort store = rendezvous::split_host_port(store_address);
    group.master_port = store.port;
    group.placement = NodePlacement{node_rank, round->first_rank(node_rank), round->world_size(), store.host};
    workers.set_group(group);
    std::fprintf(stderr, "distgrad-run: elastic %s\n", describe_round(*round).c_str());
    std::optional<std::string> backend_error;
    const AttemptEnd end = workers.run_attempt(static_cast<int>(round->round), [&] {
      try {
        return round_over(round->round);
      } catch (const std::exception& error) {
        backend_error = error.what();
        return true;
      }
    });
    if (backend_error) DISTGRAD_FAIL(*backend_error);
    if (end.interrupted_by != 0) return 128 + end.interrupted_by;
    if (end.stopped_by_caller) continue;
    if (!end.failure) {
      finish(round->round);
      return received_stop_signal() != 0 ? 128 + received_stop_signal() : 0;
    }
    if (restarts >= options_.max_restarts) {
      std::fprintf(stderr, "distgrad-run: %s; no restarts left (--max-restarts %d): ending the job on every node\n",
                   end.failure->describe().c_str(), options_.max_restarts);
      close("node " + std::to_string(node_rank) + ": " + end.failure->describe());
      return end.failure->status();
    }
    ++restarts;
    std::fprintf(stderr, "distgrad-run: %s; re-forming the job (restart %d of %d)\n", end.failure->describe().c_str(),
                 restarts, options_.max_restarts);
  }
}

}  // namespace distgrad::launcher
