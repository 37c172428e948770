// Distributed autograd's call interceptor in one process (its bytes handed from a sending side
// to a receiving side by hand, as rpc does between workers): which tensors required grad,
// the context and a SendBackward/RecvBackward pair inside one, and malformed bytes.
#include "dist_autograd/interceptor.h"

#include "autograd/node.h"
#include "autograd/ops.h"
#include "core/creation.h"
#include "dist_autograd/context.h"
#include "dist_autograd/dist_autograd.h"
#include "rpc/errors.h"
#include "tests/core/test_util.h"

namespace distgrad::dist_autograd {
namespace {

using ::testing::HasSubstr;

// Fresh tensors of the shapes and dtypes of `sent`, as a receiver decodes them (no autograd state).
std::vector<Tensor> received(const std::vector<Tensor>& sent) {
  std::vector<Tensor> tensors;
  for (const Tensor& tensor : sent) tensors.push_back(ops::clone(tensor.detach()));
  return tensors;
}

TEST(AutogradInterceptor, OutsideAContextTensorsThatRequiredGradArriveAsLeavesThatRequireIt) {
  const auto interceptor = make_interceptor();
  const std::vector<Tensor> sent = {ones({2}, requires_grad()), ones({3}), zeros({2}, requires_grad())};
  const std::string bytes = interceptor->before_request({1, "f"}, sent);
  EXPECT_EQ(bytes.size(), 17u);  // two ids, one byte of bits
  std::vector<Tensor> tensors = received(sent);
  EXPECT_EQ(interceptor->on_request({0, "f"}, tensors, bytes), nullptr);  // no context to enter
  EXPECT_TRUE(tensors[0].requires_grad() && tensors[0].is_leaf());
  EXPECT_FALSE(tensors[1].requires_grad());
  EXPECT_TRUE(tensors[2].requires_grad());
}

TEST(AutogradInterceptor, AMessageWithoutTensorsThatRequireGradSaysNothing) {
  const auto interceptor = make_interceptor();
  autograd::Context context;
  EXPECT_EQ(interceptor->before_request({1, "f"}, {ones({2}), Tensor()}), "");
  EXPECT_EQ(interceptor->before_reply({1, "f"}, {}), "");
}

TEST(AutogradInterceptor, InsideAContextTheReceiverGetsARecvBackwardAndRunsInTheContext) {
  const auto interceptor = make_interceptor();
  autograd::Context context;
  const std::vector<Tensor> sent = {ones({2}, requires_grad())};
  const std::string bytes = interceptor->before_request({1, "f"}, sent);
  const ContextPtr state = ContextContainer::instance().find(context.id());
  ASSERT_NE(state, nullptr);
  EXPECT_EQ(state->send_functions().size(), 1u);  // the SendBackward of the message
  EXPECT_EQ(state->workers(), std::set<int>{1});
  std::vector<Tensor> tensors = received(sent);
  {
    ContextScope elsewhere(nullptr);  // as on the callee's executor thread
    const std::shared_ptr<void> scope = interceptor->on_request({0, "f"}, tensors, bytes);
    ASSERT_NE(scope, nullptr);
    EXPECT_EQ(current_context(), state);  // the function runs in the caller's context
  }
  ASSERT_NE(tensors[0].grad_fn(), nullptr);
  EXPECT_EQ(tensors[0].grad_fn()->name(), "RecvBackward");
  EXPECT_EQ(state->workers(), (std::set<int>{0, 1}));
}

TEST(AutogradInterceptor, BytesThatDoNotDescribeTheTensorsAreInvalidArgument) {
  const auto interceptor = make_interceptor();
  std::vector<Tensor> tensors = {ones({2}), ones({2})};
  try {
    interceptor->on_request({0, "f"}, tensors, "xyz");
    FAIL() << "malformed bytes were taken";
  } catch (const rpc::StatusError& error) {
    EXPECT_EQ(error.code(), rpc::StatusCode::kInvalidArgument);
    EXPECT_THAT(error.what(), HasSubstr("a message of f with 2 tensors carries 3 bytes of autograd record, "
                                        "expected 17"));
  }
  EXPECT_THAT(testing::message_of<rpc::StatusError>([&] {
                interceptor->on_reply({1, "g"}, tensors, std::string(18, '\0'));
              }),
              HasSubstr("carries 18 bytes of autograd record, expected 17"));
}

}  // namespace
}  // namespace distgrad::dist_autograd
