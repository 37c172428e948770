#include "rendezvous/elastic_state.h"

#include <algorithm>

#include "core/error.h"
#include "nlohmann/json.hpp"

namespace distgrad::rendezvous {
namespace {

bool contains(const std::vector<std::string>& ids, const std::string& id) {
  return std::find(ids.begin(), ids.end(), id) != ids.end();
}

void erase(std::vector<std::string>& ids, const std::string& id) { std::erase(ids, id); }

// Orders `ids` by their nodes' first arrival (Note [Elastic rounds]: node ranks follow it).
void sort_by_arrival(const ElasticState& state, std::vector<std::string>& ids) {
  std::sort(ids.begin(), ids.end(), [&](const std::string& a, const std::string& b) {
    return state.nodes.at(a).arrival < state.nodes.at(b).arrival;
  });
}

// Opens the next round with `joiners` (by arrival, at most MAX of them; the rest wait).
void open_next_round(ElasticState& state, std::vector<std::string> joiners, const ElasticSettings& settings) {
  sort_by_arrival(state, joiners);
  const size_t admitted = std::min(joiners.size(), static_cast<size_t>(settings.max_nodes));
  state.round += 1;
  state.complete = false;
  state.last_call_ms = 0;
  state.participants.assign(joiners.begin(), joiners.begin() + static_cast<std::ptrdiff_t>(admitted));
  state.waiting.assign(joiners.begin() + static_cast<std::ptrdiff_t>(admitted), joiners.end());
  state.finished.clear();
}

// Removes the nodes `ids`; a complete round that loses a participant gives way to the next
// round, unless some participant finished.
void remove_nodes(ElasticState& state, const std::vector<std::string>& ids, const ElasticSettings& settings) {
  const bool job_ending = !state.finished.empty();
  bool lost_participant = false;
  for (const std::string& id : ids) {
    state.nodes.erase(id);
    lost_participant |= contains(state.participants, id);
    erase(state.participants, id);
    erase(state.waiting, id);
    erase(state.finished, id);
  }
  if (state.complete && lost_participant && !job_ending && !state.closed)
    open_next_round(state, state.waiting, settings);
  if (!state.complete && static_cast<int>(state.participants.size()) < settings.min_nodes) state.last_call_ms = 0;
}

}  // namespace

std::string ElasticState::encode() const {
  nlohmann::json nodes_json = nlohmann::json::array();
  for (const auto& [id, node] : nodes) {
    nodes_json.push_back({{"id", id},
                          {"store", node.store_address},
                          {"nproc", node.nproc},
                          {"arrival", node.arrival},
                          {"heartbeat_ms", node.heartbeat_ms}});
  }
  return nlohmann::json{{"round", round},
                        {"complete", complete},
                        {"formed_before", formed_before},
                        {"last_call_ms", last_call_ms},
                        {"nodes", nodes_json},
                        {"participants", participants},
                        {"waiting", waiting},
                        {"finished", finished},
                        {"next_arrival", next_arrival},
                        {"closed", closed},
                        {"closed_reason", closed_reason}}
      .dump();
}

ElasticState ElasticState::decode(const std::string& text) {
  ElasticState state;
  try {
    const nlohmann::json json = nlohmann::json::parse(text);
    json.at("round").get_to(state.round);
    json.at("complete").get_to(state.complete);
    json.at("formed_before").get_to(state.formed_before);
    json.at("last_call_ms").get_to(state.last_call_ms);
    for (const nlohmann::json& node_json : json.at("nodes")) {
      ElasticNode node;
      node_json.at("id").get_to(node.id);
      node_json.at("store").get_to(node.store_address);
      node_json.at("nproc").get_to(node.nproc);
      node_json.at("arrival").get_to(node.arrival);
      node_json.at("heartbeat_ms").get_to(node.heartbeat_ms);
      state.nodes[node.id] = node;
    }
    json.at("participants").get_to(state.participants);
    json.at("waiting").get_to(state.waiting);
    json.at("finished").get_to(state.finished);
    json.at("next_arrival").get_to(state.next_arrival);
    json.at("closed").get_to(state.closed);
    json.at("closed_reason").get_to(state.closed_reason);
  } catch (const nlohmann::json::exception& error) {
    DISTGRAD_CHECK(false, "the elastic rendezvous state is not one distgrad-run wrote (", error.what(), "): \"",
                   text.substr(0, 200), "\"");
  }
  for (const std::vector<std::string>* ids : {&state.participants, &state.waiting, &state.finished}) {
    for (const std::string& id : *ids) {
      DISTGRAD_CHECK(state.nodes.contains(id), "the elastic rendezvous state names node ", id,
                     " without describing it: \"", text.substr(0, 200), "\"");
    }
  }
  return state;
}

std::optional<int> ElasticState::rank_of(const std::string& id) const {
  const auto found = std::find(participants.begin(), participants.end(), id);
  if (found == participants.end()) return std::nullopt;
  return static_cast<int>(found - participants.begin());
}

int ElasticState::world_size() const { return first_rank(static_cast<int>(participants.size())); }

int ElasticState::first_rank(int node_rank) const {
  int rank = 0;
  for (int i = 0; i < node_rank; ++i) rank += nodes.at(participants[i]).nproc;
  return rank;
}

bool ElasticState::all_finished() const {
  return std::all_of(participants.begin(), participants.end(),
                     [&](const std::string& id) { return contains(finished, id); });
}

void join(ElasticState& state, ElasticNode node, int64_t now_ms, const ElasticSettings& settings) {
  if (auto known = state.nodes.find(node.id); known != state.nodes.end()) {
    node.arrival = known->second.arrival;
  } else {
    node.arrival = state.next_arrival++;
  }
  node.heartbeat_ms = now_ms;
  const std::string id = node.id;
  state.nodes[id] = std::move(node);
  if (state.closed) return;
  if (!state.complete) {
    if (!contains(state.participants, id)) state.participants.push_back(id);
    erase(state.waiting, id);
  } else if (state.finished.empty() &&
             (contains(state.participants, id) || static_cast<int>(state.participants.size()) < settings.max_nodes)) {
    // A participant whose workers failed, or a newcomer with room: the next round, with the waiting.
    std::vector<std::string> joiners = state.waiting;
    if (!contains(joiners, id)) joiners.push_back(id);
    open_next_round(state, std::move(joiners), settings);
  } else if (!contains(state.participants, id) && !contains(state.waiting, id)) {
    state.waiting.push_back(id);  // a full job, or one ending (a participant of it just stays)
  }
  complete_if_ready(state, now_ms, settings);
}

bool heartbeat(ElasticState& state, const std::string& id, int64_t now_ms) {
  auto node = state.nodes.find(id);
  if (node == state.nodes.end()) return false;
  node->second.heartbeat_ms = now_ms;
  return true;
}

bool drop_silent_nodes(ElasticState& state, int64_t now_ms, const ElasticSettings& settings) {
  std::vector<std::string> silent;
  for (const auto& [id, node] : state.nodes) {
    if (now_ms - node.heartbeat_ms > settings.silence_limit().count()) silent.push_back(id);
  }
  remove_nodes(state, silent, settings);
  return !silent.empty();
}

void leave(ElasticState& state, const std::string& id, const ElasticSettings& settings) {
  const bool job_done = state.complete && !state.finished.empty() && state.all_finished();
  remove_nodes(state, {id}, settings);
  if (job_done && state.participants.empty()) state.closed = true;
}

void finish(ElasticState& state, const std::string& id, int64_t round) {
  if (state.round == round && state.rank_of(id) && !contains(state.finished, id)) state.finished.push_back(id);
}

bool complete_if_ready(ElasticState& state, int64_t now_ms, const ElasticSettings& settings) {
  if (state.complete || state.closed) return false;
  const int joined = static_cast<int>(state.participants.size());
  if (joined < settings.min_nodes) return false;
  if (state.last_call_ms == 0) state.last_call_ms = now_ms + settings.last_call_timeout.count();
  const bool everyone_joined = std::all_of(state.nodes.begin(), state.nodes.end(),
                                           [&](const auto& node) { return contains(state.participants, node.first); });
  if (joined < settings.max_nodes && now_ms < state.last_call_ms && !(state.formed_before && everyone_joined)) {
    return false;
  }
  sort_by_arrival(state, state.participants);
  state.complete = true;
  state.formed_before = true;
  state.last_call_ms = 0;
  return true;
}

bool admit_waiting(ElasticState& state, const ElasticSettings& settings) {
  if (!state.complete || state.closed || state.waiting.empty() || !state.finished.empty() ||
      static_cast<int>(state.participants.size()) >= settings.max_nodes) {
    return false;
  }
  open_next_round(state, state.waiting, settings);
  return true;
}

}  // namespace distgrad::rendezvous
