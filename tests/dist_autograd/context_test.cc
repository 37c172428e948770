// Distributed autograd contexts in one process: one backward pass at a time, a pass joined
// under its id, and a pass's gradients added up in the order of its runs whatever order they
// arrived in.
#include "dist_autograd/context.h"

#include <algorithm>

#include "core/creation.h"
#include "dist_autograd/backward_pass.h"
#include "tests/core/test_util.h"

namespace distgrad::dist_autograd {
namespace {

TEST(DistAutogradContext, ASecondPassWhileOneRunsIsRefusedNamingTheContext) {
  DistAutogradContext context(7);
  const std::shared_ptr<BackwardPass> pass = context.begin_pass(1, PassOptions{});
  EXPECT_EQ(context.pass(), pass);
  EXPECT_ERROR_CONTAINS(context.begin_pass(2, PassOptions{}), "a backward pass of context 7 is already running");
  context.end_pass();
  EXPECT_EQ(context.pass(), nullptr);
  EXPECT_EQ(context.begin_pass(3, PassOptions{})->id(), 3);
}

TEST(DistAutogradContext, WorkersJoinAPassUnderItsIdAndANewIdReplacesIt) {
  DistAutogradContext context(7);
  const std::shared_ptr<BackwardPass> first = context.join_pass(1, PassOptions{});
  EXPECT_EQ(context.join_pass(1, PassOptions{}), first);
  const std::shared_ptr<BackwardPass> second = context.join_pass(2, PassOptions{});
  EXPECT_NE(second, first);
  EXPECT_EQ(context.pass(), second);
}

// The runs of one pass, each with the gradient it brings one leaf: the driver's own run first,
// then runs started by the messages of calls 0, 1 and 2 (and one from a message that call 1's run
// sent on). Summed in that order the result is 1e16 + 1 - 1e16 + 3 + 0.5 = 3.5; in another order
// it differs (1e16 - 1e16 + 1 ... = 4.5).
struct RunGradient {
  RunOrder run;
  double grad;
};
std::vector<RunGradient> runs_of_a_pass() {
  const MessageOrder call0{{0}, true}, call1{{1}, true}, call2{{2}, true}, nested{{1, 0}, false};
  return {{{}, 1e16}, {{call0}, 1}, {{call1}, -1e16}, {{call1, nested}, 3}, {{call2}, 0.5}};
}

TEST(DistAutogradContext, APassAddsItsRunsGradientsInRunOrderWhateverOrderTheyArrive) {
  const Tensor leaf = zeros({1}, {.dtype = kFloat64, .requires_grad = true});
  std::vector<RunGradient> runs = runs_of_a_pass();
  std::sort(runs.begin(), runs.end(), [](const RunGradient& a, const RunGradient& b) { return a.run < b.run; });
  double in_order = 0;
  for (const RunGradient& run : runs) in_order = in_order + run.grad;
  do {
    DistAutogradContext context(7);
    context.begin_pass(1, PassOptions{});
    for (const RunGradient& run : runs) context.accumulate(leaf, full({1}, run.grad, {.dtype = kFloat64}), run.run);
    EXPECT_EQ(context.gradients().at(0).grad.item<double>(), in_order);  // read during the pass
    const std::vector<LeafGradient> pass = context.end_pass();
    ASSERT_EQ(pass.size(), 1u);
    EXPECT_EQ(pass[0].grad.item<double>(), in_order);
    EXPECT_EQ(context.gradients().at(0).grad.item<double>(), in_order);
  } while (std::next_permutation(runs.begin(), runs.end(),
                                 [](const RunGradient& a, const RunGradient& b) { return a.run < b.run; }));
  EXPECT_EQ(in_order, 3.5);
}

TEST(DistAutogradContext, AWorkerEndsAPassWhenTheNextOneArrivesAndKeepsTheSumOfBoth) {
  const Tensor leaf = zeros({1}, {.dtype = kFloat64, .requires_grad = true});
  DistAutogradContext context(7);
  context.join_pass(1, PassOptions{});
  context.accumulate(leaf, full({1}, 2.0, {.dtype = kFloat64}), {MessageOrder{{1}, true}});
  context.accumulate(leaf, full({1}, 1.0, {.dtype = kFloat64}), {MessageOrder{{0}, true}});
  context.join_pass(2, PassOptions{});
  context.accumulate(leaf, full({1}, 4.0, {.dtype = kFloat64}), {MessageOrder{{0}, true}});
  EXPECT_EQ(context.gradients().at(0).grad.item<double>(), 7.0);
}

// Calls take their places in program order; a repeated call takes the place it is given, and the
// thread's own sequence comes back after the scope.
TEST(ContextScope, ARepeatedCallTakesTheFailedCallsPlaceAndTheSequenceResumesAfter) {
  const ContextPtr context = ContextContainer::instance().create();
  {
    ContextScope driver(context);
    EXPECT_EQ(next_call(), (CallPath{0}));
    EXPECT_EQ(upcoming_call(), (CallPath{1}));
    EXPECT_EQ(upcoming_call(), (CallPath{1}));  // peeking takes nothing
    EXPECT_EQ(next_call(), (CallPath{1}));
    {
      const ContextScope repeated = ContextScope::repeating(context, {0});
      EXPECT_EQ(current_context(), context);
      EXPECT_EQ(next_call(), (CallPath{0}));
    }
    {
      const ContextScope nested = ContextScope::repeating(context, {4, 2});
      EXPECT_EQ(next_call(), (CallPath{4, 2}));
    }
    EXPECT_EQ(next_call(), (CallPath{2}));
  }
  EXPECT_EQ(current_context(), nullptr);
  EXPECT_THROW(ContextScope::repeating(context, {}), Error);
  ContextContainer::instance().release(context->id());
}

// A call of a context that was released here, before or after it joined, runs in a context that
// is not kept, rather than re-creating the context with nothing left to release it.
TEST(ContextContainer, ALateCallOfAReleasedContextLeavesNoContextBehind) {
  ContextContainer& contexts = ContextContainer::instance();
  const int64_t joined = (int64_t{5} << 48) | 77, never_here = (int64_t{5} << 48) | 78;
  ASSERT_NE(contexts.get_or_create(joined), nullptr);
  EXPECT_NE(contexts.release(joined), nullptr);
  EXPECT_EQ(contexts.release(never_here), nullptr);  // the release came first
  for (const int64_t id : {joined, never_here}) {
    const ContextPtr late = contexts.get_or_create(id);
    ASSERT_NE(late, nullptr);
    EXPECT_EQ(late->id(), id);
    EXPECT_EQ(contexts.find(id), nullptr) << "context " << id << " was re-created after its release";
  }
}

}  // namespace
}  // namespace distgrad::dist_autograd
