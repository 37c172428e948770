// Tests of the elastic rendezvous' rounds (Note [Elastic rounds]) as plain state transitions with
// a given clock: when a round completes, how nodes that leave, go silent, arrive or fail re-form
// the job, and the encoding fed garbage.
#include "rendezvous/elastic_state.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "tests/core/test_util.h"

namespace distgrad::rendezvous {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;

ElasticSettings settings(int min_nodes, int max_nodes) {
  ElasticSettings s;
  s.min_nodes = min_nodes;
  s.max_nodes = max_nodes;
  s.last_call_timeout = std::chrono::milliseconds(1000);
  s.keep_alive_interval = std::chrono::milliseconds(100);
  s.keep_alive_max_attempt = 3;  // silent after 300 ms
  return s;
}

ElasticNode node(const std::string& id, int nproc = 1) {
  ElasticNode n;
  n.id = id;
  n.store_address = id + ":29500";
  n.nproc = nproc;
  return n;
}

TEST(ElasticRounds, TheFirstRoundWaitsForTheLastCallOnceMinNodesJoined) {
  const ElasticSettings s = settings(2, 3);
  ElasticState state;
  join(state, node("a"), 0, s);
  EXPECT_FALSE(state.complete);
  EXPECT_EQ(state.last_call_ms, 0);  // below MIN: no last call yet
  join(state, node("b"), 100, s);
  EXPECT_FALSE(state.complete);
  EXPECT_EQ(state.last_call_ms, 1100);
  EXPECT_FALSE(complete_if_ready(state, 1099, s));
  EXPECT_TRUE(complete_if_ready(state, 1100, s));
  EXPECT_THAT(state.participants, ElementsAre("a", "b"));
  EXPECT_EQ(state.round, 0);
}

TEST(ElasticRounds, ARoundCompletesAtOnceWithMaxNodes) {
  const ElasticSettings s = settings(1, 2);
  ElasticState state;
  join(state, node("a"), 0, s);
  EXPECT_FALSE(state.complete);
  join(state, node("b"), 10, s);
  EXPECT_TRUE(state.complete);
  EXPECT_EQ(*state.rank_of("b"), 1);
}

TEST(ElasticRounds, RanksFollowArrivalAndCountEachNodesWorkers) {
  const ElasticSettings s = settings(3, 3);
  ElasticState state;
  join(state, node("c", 2), 0, s);
  join(state, node("a", 4), 1, s);
  join(state, node("b", 1), 2, s);
  ASSERT_TRUE(state.complete);
  EXPECT_THAT(state.participants, ElementsAre("c", "a", "b"));
  EXPECT_EQ(state.world_size(), 7);
  EXPECT_EQ(state.first_rank(0), 0);
  EXPECT_EQ(state.first_rank(1), 2);
  EXPECT_EQ(state.first_rank(2), 6);
}

TEST(ElasticRounds, ASilentNodeOpensTheNextRoundWhichCompletesOnceTheSurvivorsJoined) {
  const ElasticSettings s = settings(1, 3);
  ElasticState state;
  for (const char* id : {"a", "b", "c"}) join(state, node(id), 0, s);
  ASSERT_TRUE(state.complete);
  heartbeat(state, "a", 250);
  heartbeat(state, "c", 250);
  EXPECT_FALSE(drop_silent_nodes(state, 300, s));  // b is silent for 300 ms: not yet over the limit
  EXPECT_TRUE(drop_silent_nodes(state, 301, s));
  EXPECT_EQ(state.round, 1);
  EXPECT_FALSE(state.complete);
  EXPECT_THAT(state.participants, IsEmpty());
  join(state, node("c"), 310, s);
  EXPECT_FALSE(state.complete);  // a, alive, has not joined yet; the last call is far
  join(state, node("a"), 320, s);
  ASSERT_TRUE(state.complete);                             // every live node joined a job formed before: no last call
  EXPECT_THAT(state.participants, ElementsAre("a", "c"));  // a arrived first, keeps rank 0
}

TEST(ElasticRounds, ANodeArrivingAtACompleteRoundWithRoomOpensTheNextRound) {
  const ElasticSettings s = settings(1, 2);
  ElasticState state;
  join(state, node("a"), 0, s);
  ASSERT_TRUE(complete_if_ready(state, 1000, s));
  join(state, node("b"), 1100, s);
  EXPECT_EQ(state.round, 1);
  EXPECT_THAT(state.participants, ElementsAre("b"));
  EXPECT_FALSE(state.complete);
  join(state, node("a"), 1150, s);  // a stopped its workers and joins
  ASSERT_TRUE(state.complete);
  EXPECT_THAT(state.participants, ElementsAre("a", "b"));
}

TEST(ElasticRounds, AtAFullRoundANewNodeWaitsAsAStandbyUntilAPlaceFrees) {
  const ElasticSettings s = settings(1, 2);
  ElasticState state;
  join(state, node("a"), 0, s);
  join(state, node("b"), 0, s);
  ASSERT_TRUE(state.complete);
  join(state, node("c"), 10, s);
  EXPECT_EQ(state.round, 0);
  EXPECT_THAT(state.waiting, ElementsAre("c"));
  EXPECT_FALSE(admit_waiting(state, s));  // no room
  leave(state, "b", s);
  EXPECT_EQ(state.round, 1);
  EXPECT_THAT(state.participants, ElementsAre("c"));
  EXPECT_THAT(state.waiting, IsEmpty());
}

TEST(ElasticRounds, RunningNodesAdmitWaitingOnesWhenThereIsRoom) {
  const ElasticSettings s = settings(1, 3);
  ElasticState state;
  join(state, node("a"), 0, s);
  ASSERT_TRUE(complete_if_ready(state, 1000, s));
  state.waiting.push_back("b");  // as a join raced with the completion would leave it
  state.nodes["b"] = node("b");
  EXPECT_TRUE(admit_waiting(state, s));
  EXPECT_EQ(state.round, 1);
  EXPECT_THAT(state.participants, ElementsAre("b"));
  EXPECT_FALSE(admit_waiting(state, s));  // the round is open: nothing to admit
}

TEST(ElasticRounds, AParticipantOfACompleteRoundThatJoinsAgainOpensTheNextRound) {
  const ElasticSettings s = settings(2, 2);
  ElasticState state;
  join(state, node("a"), 0, s);
  join(state, node("b"), 0, s);
  ASSERT_TRUE(state.complete);
  join(state, node("b"), 50, s);  // b's workers failed
  EXPECT_EQ(state.round, 1);
  EXPECT_THAT(state.participants, ElementsAre("b"));
  join(state, node("a"), 60, s);
  EXPECT_TRUE(state.complete);
}

TEST(ElasticRounds, BelowMinNodesARoundNeverCompletes) {
  const ElasticSettings s = settings(2, 2);
  ElasticState state;
  join(state, node("a"), 0, s);
  EXPECT_FALSE(complete_if_ready(state, 1'000'000, s));
  join(state, node("b"), 0, s);
  ASSERT_TRUE(state.complete);
  leave(state, "b", s);
  join(state, node("a"), 10, s);
  EXPECT_FALSE(complete_if_ready(state, 1'000'000, s));
  EXPECT_EQ(state.last_call_ms, 0);
}

TEST(ElasticRounds, OnceANodeFinishedNoRoundOpensAndTheLastToLeaveClosesTheJob) {
  const ElasticSettings s = settings(1, 3);
  ElasticState state;
  join(state, node("a"), 0, s);
  join(state, node("b"), 0, s);
  ASSERT_TRUE(complete_if_ready(state, 1000, s));
  finish(state, "a", /*round=*/1);  // not this round: nothing
  finish(state, "c", 0);            // no participant: nothing
  EXPECT_THAT(state.finished, IsEmpty());
  finish(state, "a", 0);
  finish(state, "a", 0);
  EXPECT_THAT(state.finished, ElementsAre("a"));
  join(state, node("b"), 1010, s);  // b's workers failed after a's finished: the job is ending
  EXPECT_EQ(state.round, 0);
  join(state, node("c"), 1020, s);
  EXPECT_EQ(state.round, 0);
  EXPECT_THAT(state.waiting, ElementsAre("c"));
  finish(state, "b", 0);
  EXPECT_TRUE(state.all_finished());
  leave(state, "a", s);
  EXPECT_EQ(state.round, 0);
  EXPECT_FALSE(state.closed);
  leave(state, "b", s);  // the last finished participant: no new round, the job is done
  EXPECT_EQ(state.round, 0);
  EXPECT_TRUE(state.closed);
  EXPECT_TRUE(state.closed_reason.empty());
}

TEST(ElasticRounds, AClosedRendezvousTakesNoOneIn) {
  const ElasticSettings s = settings(1, 2);
  ElasticState state;
  state.closed = true;
  join(state, node("a"), 0, s);
  EXPECT_THAT(state.participants, IsEmpty());
  EXPECT_FALSE(state.complete);
}

TEST(ElasticRounds, ADroppedNodeIsNoLongerKnownAndJoinsAnewAsTheLastArrival) {
  const ElasticSettings s = settings(1, 2);
  ElasticState state;
  join(state, node("a"), 0, s);
  join(state, node("b"), 0, s);
  ASSERT_TRUE(state.complete);
  heartbeat(state, "b", 400);
  drop_silent_nodes(state, 400, s);
  EXPECT_FALSE(heartbeat(state, "a", 400));
  join(state, node("a"), 410, s);
  join(state, node("b"), 420, s);
  ASSERT_TRUE(state.complete);
  EXPECT_THAT(state.participants, ElementsAre("b", "a"));
}

TEST(ElasticState, EncodesAndDecodesEveryField) {
  const ElasticSettings s = settings(1, 3);
  ElasticState state;
  join(state, node("a", 2), 5, s);
  join(state, node("b", 3), 6, s);
  complete_if_ready(state, 2000, s);
  join(state, node("c"), 2001, s);
  state.finished.push_back("a");
  state.closed_reason = "node 1: rank 3 exited with code 2";
  const ElasticState copy = ElasticState::decode(state.encode());
  EXPECT_EQ(copy.encode(), state.encode());
  EXPECT_EQ(copy.nodes.at("b").nproc, 3);
  EXPECT_EQ(copy.nodes.at("b").store_address, "b:29500");
  EXPECT_EQ(copy.nodes.at("c").heartbeat_ms, 2001);
  EXPECT_EQ(copy.round, state.round);
  EXPECT_EQ(copy.closed_reason, state.closed_reason);
}

TEST(ElasticState, DecodingGarbageSaysWhatItFound) {
  EXPECT_ERROR_CONTAINS(ElasticState::decode("not json"), "is not one distgrad-run wrote");
  EXPECT_ERROR_CONTAINS(ElasticState::decode("{\"round\": 1}"), "is not one distgrad-run wrote");
  ElasticState state;
  state.participants.push_back("ghost");
  EXPECT_ERROR_CONTAINS(ElasticState::decode(state.encode()), "names node ghost without describing it");
}

}  // namespace
}  // namespace distgrad::rendezvous
