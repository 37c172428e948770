// The state of an elastic rendezvous (`distgrad-run --nnodes MIN:MAX`): which nodes form the job
// in which round, as every node's launcher reads and replaces it in the rendezvous backend
// (rendezvous/state_backend.h). The transitions are plain functions of the state and the time,
// so that they are tested without processes; launcher/elastic_agent.h drives them.
//
//   ElasticState state = ElasticState::decode(text);      // from the backend
//   drop_silent_nodes(state, now, settings);
//   join(state, me, now, settings);                       // then backend.replace(..., state.encode())
//   if (state.complete && state.rank_of(me.id)) ...       // start the workers of this round
//
// Note [Elastic rounds]
// As torchrun's dynamic rendezvous: the job is formed in rounds. A round is open while nodes
// join it, and complete once MAX nodes joined, or MIN joined and the last call passed
// (`last_call_timeout` after the MIN-th joined), or, when the job was formed before (a node left
// or came), every live node joined. Node ranks follow the order in which nodes first arrived, so
// the nodes that stay keep their order. A node that arrives at a complete round with room waits
// in `waiting` and the running nodes open the next round for it; at a full round it waits as a
// standby until a place frees. A node whose heartbeat is older than keep_alive_interval x
// keep_alive_max_attempt is dropped; dropping a node of a complete round opens the next round,
// which the survivors join after stopping their workers. Every round restarts the workers with
// DISTGRAD_RESTART_COUNT = the round, so each round's workers have their own Store keys. A node
// that gives up closes the rendezvous with the reason, and every node ends; a node whose
// workers all succeeded marks itself finished, after which no new round opens.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace distgrad::rendezvous {

struct ElasticSettings {
  int min_nodes = 1;
  int max_nodes = 1;
  std::chrono::milliseconds join_timeout{std::chrono::seconds(600)};
  std::chrono::milliseconds last_call_timeout{std::chrono::seconds(30)};
  std::chrono::milliseconds keep_alive_interval{std::chrono::seconds(5)};
  int keep_alive_max_attempt = 3;

  std::chrono::milliseconds silence_limit() const { return keep_alive_interval * keep_alive_max_attempt; }
};

// One node's launcher as the others see it.
struct ElasticNode {
  std::string id;             // unique per launcher run: "<host>_<pid>_<random>"
  std::string store_address;  // "host:port" of the Store it hosts for its workers
  int nproc = 1;              // its workers
  int64_t arrival = 0;        // order of first arrival; node ranks follow it
  int64_t heartbeat_ms = 0;   // wall-clock time of its last sign of life
};

struct ElasticState {
  int64_t round = 0;
  bool complete = false;
  bool formed_before = false;                // some round completed before this one
  int64_t last_call_ms = 0;                  // wall-clock deadline of the open round; 0: fewer than MIN
  std::map<std::string, ElasticNode> nodes;  // every live node, by id
  std::vector<std::string> participants;     // of this round; by arrival once complete
  std::vector<std::string> waiting;          // arrived at a complete round
  std::vector<std::string> finished;         // participants whose workers of this round all succeeded
  int64_t next_arrival = 0;
  bool closed = false;
  std::string closed_reason;  // empty: the job succeeded

  std::string encode() const;
  // Throws distgrad::Error naming what is wrong when `text` is not a state encode() wrote.
  static ElasticState decode(const std::string& text);

  // The node rank of `id` in this round (its place among the participants), if it is one.
  std::optional<int> rank_of(const std::string& id) const;
  // The workers of the round: the sum of the participants' nproc.
  int world_size() const;
  // The global rank of the first worker of participant `node_rank`.
  int first_rank(int node_rank) const;
  bool all_finished() const;
};

// Records `node`'s sign of life and its wish to be in a complete round: it joins the open
// round, or opens the next one when the complete round has room or it is a participant that
// needs a new round (its workers failed), or waits at a full one; then completes the round when
// it can (Note [Elastic rounds]). A participant of a complete round in which another finished
// cannot open a new one: the job is ending.
void join(ElasticState& state, ElasticNode node, int64_t now_ms, const ElasticSettings& settings);

// Records a sign of life of node `id`; false when the node is no longer known (it was dropped).
bool heartbeat(ElasticState& state, const std::string& id, int64_t now_ms);

// Drops the nodes silent for longer than settings.silence_limit(); a complete round that loses a
// participant gives way to the next round, unless a participant already finished (the job is
// ending). Returns whether it dropped any.
bool drop_silent_nodes(ElasticState& state, int64_t now_ms, const ElasticSettings& settings);

// Records that participant `id`'s workers of round `round` all succeeded; nothing when the state
// is past that round or `id` is no participant of it.
void finish(ElasticState& state, const std::string& id, int64_t round);

// Removes node `id` (its launcher ends); as for a silent node, a complete round it was in gives
// way to the next, unless a participant finished. The rendezvous closes, the job done, when the
// last participant of a round in which all finished leaves.
void leave(ElasticState& state, const std::string& id, const ElasticSettings& settings);

// Completes the open round when it can (Note [Elastic rounds]); returns whether it did.
bool complete_if_ready(ElasticState& state, int64_t now_ms, const ElasticSettings& settings);

// Opens the next round for the waiting nodes when the complete round has room for them (the
// running nodes call it); returns whether it did.
bool admit_waiting(ElasticState& state, const ElasticSettings& settings);

}  // namespace distgrad::rendezvous
