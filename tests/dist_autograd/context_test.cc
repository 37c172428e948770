// Distributed autograd contexts in one process: one backward pass at a time, and a pass joined
// under its id.
#include "dist_autograd/context.h"

#include "dist_autograd/backward_pass.h"
#include "tests/core/test_util.h"

namespace distgrad::dist_autograd {
namespace {

TEST(DistAutogradContext, ASecondPassWhileOneRunsIsRefusedNamingTheContext) {
  DistAutogradContext context(7);
  const std::shared_ptr<BackwardPass> pass = context.begin_pass(1, /*retain_graph=*/false);
  EXPECT_EQ(context.pass(), pass);
  EXPECT_ERROR_CONTAINS(context.begin_pass(2, false), "a backward pass of context 7 is already running");
  context.end_pass();
  EXPECT_EQ(context.pass(), nullptr);
  EXPECT_EQ(context.begin_pass(3, false)->id(), 3);
}

TEST(DistAutogradContext, WorkersJoinAPassUnderItsIdAndANewIdReplacesIt) {
  DistAutogradContext context(7);
  const std::shared_ptr<BackwardPass> first = context.join_pass(1, false);
  EXPECT_EQ(context.join_pass(1, false), first);
  const std::shared_ptr<BackwardPass> second = context.join_pass(2, false);
  EXPECT_NE(second, first);
  EXPECT_EQ(context.pass(), second);
}

}  // namespace
}  // namespace distgrad::dist_autograd
