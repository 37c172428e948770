// Distributed autograd's call interceptor in one process (its bytes handed from a sending side
// to a receiving side by hand, as rpc does between workers): which tensors required grad, the
// context carried by every call inside one, SendBackward/RecvBackward pairs, the order of calls,
// grad mode off, and malformed bytes.
#include "dist_autograd/interceptor.h"

#include "autograd/grad_mode.h"
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
  for (const Tensor& tensor : sent) tensors.push_back(untracked::clone(tensor.detach()));
  return tensors;
}

TEST(AutogradInterceptor, OutsideAContextTensorsThatRequiredGradArriveAsLeavesThatRequireIt) {
  const auto interceptor = make_interceptor();
  const std::vector<Tensor> sent = {ones({2}, requires_grad()), ones({3}), zeros({2}, requires_grad())};
  const std::string bytes = interceptor->before_request({1, "f"}, sent);
  EXPECT_EQ(bytes.size(), 22u);  // two ids, the flags, an empty call path, one byte of bits
  std::vector<Tensor> tensors = received(sent);
  EXPECT_EQ(interceptor->on_request({0, "f"}, tensors, bytes), nullptr);  // no context to enter
  EXPECT_TRUE(tensors[0].requires_grad() && tensors[0].is_leaf());
  EXPECT_FALSE(tensors[1].requires_grad());
  EXPECT_TRUE(tensors[2].requires_grad());
}

TEST(AutogradInterceptor, OutsideAContextAMessageWithoutTensorsThatRequireGradSaysNothing) {
  const auto interceptor = make_interceptor();
  EXPECT_EQ(interceptor->before_request({1, "f"}, {ones({2}), Tensor()}), "");
  EXPECT_EQ(interceptor->before_reply({1, "f"}, {ones({2})}), "");
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

TEST(AutogradInterceptor, InsideAContextEveryCallCarriesItAndAResultOfTheCalleesParametersComesBackWithHistory) {
  const auto interceptor = make_interceptor();
  autograd::Context context;
  const ContextPtr state = ContextContainer::instance().find(context.id());
  const std::string request = interceptor->before_request({1, "f"}, {ones({2})});  // nothing requires grad
  EXPECT_TRUE(state->send_functions().empty());
  EXPECT_EQ(state->workers(), std::set<int>{1});  // a release will reach the callee
  std::vector<Tensor> arguments = {ones({2})};
  std::string reply;
  const Tensor parameter = ones({2}, requires_grad());  // the callee's own
  {
    ContextScope elsewhere(nullptr);
    const std::shared_ptr<void> scope = interceptor->on_request({0, "f"}, arguments, request);
    EXPECT_EQ(current_context(), state);
    EXPECT_EQ(current_call(), CallPath{0});  // the caller's first call in the context
    EXPECT_FALSE(arguments[0].requires_grad());
    reply = interceptor->before_reply({0, "f"}, {parameter * 2.0});
  }
  EXPECT_EQ(state->send_functions().size(), 1u);  // the reply's SendBackward (callee and caller share it here)
  std::vector<Tensor> result = {ones({2})};
  interceptor->on_reply({1, "f"}, result, reply);
  ASSERT_NE(result[0].grad_fn(), nullptr);
  EXPECT_EQ(result[0].grad_fn()->name(), "RecvBackward");
}

TEST(AutogradInterceptor, CallsAreNumberedInProgramOrderDownTheTreeOfCalls) {
  const auto interceptor = make_interceptor();
  autograd::Context context;
  const std::string first = interceptor->before_request({1, "f"}, {});
  const std::string second = interceptor->before_request({2, "f"}, {});
  ContextScope elsewhere(nullptr);
  std::vector<Tensor> none;
  {
    const std::shared_ptr<void> scope = interceptor->on_request({0, "f"}, none, second);
    EXPECT_EQ(current_call(), (CallPath{1}));
    EXPECT_EQ(next_call(), (CallPath{1, 0}));  // the calls the function makes
    EXPECT_EQ(next_call(), (CallPath{1, 1}));
  }
  const std::shared_ptr<void> scope = interceptor->on_request({0, "f"}, none, first);
  EXPECT_EQ(current_call(), (CallPath{0}));
  EXPECT_EQ(next_call(), (CallPath{0, 0}));
}

TEST(AutogradInterceptor, WithGradModeOffNothingIsRecordedAndTheResultDoesNotRequireGrad) {
  const auto interceptor = make_interceptor();
  autograd::Context context;
  const ContextPtr state = ContextContainer::instance().find(context.id());
  std::string request;
  {
    autograd::NoGradGuard no_grad;
    request = interceptor->before_request({1, "f"}, {ones({2}, requires_grad())});
  }
  EXPECT_TRUE(state->send_functions().empty() && state->workers().empty());
  std::vector<Tensor> arguments = {ones({2})};
  std::string reply;
  {
    ContextScope elsewhere(nullptr);
    const std::shared_ptr<void> scope = interceptor->on_request({0, "f"}, arguments, request);
    EXPECT_EQ(current_context(), nullptr);  // the callee does not join the context
    EXPECT_FALSE(arguments[0].requires_grad());
    reply = interceptor->before_reply({0, "f"}, {ones({2}, requires_grad())});
  }
  EXPECT_EQ(reply, "");  // the caller had grad mode off: its result will not require grad
  std::vector<Tensor> result = {ones({2})};
  interceptor->on_reply({1, "f"}, result, reply);
  EXPECT_FALSE(result[0].requires_grad());
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
                                        "expected 22"));
  }
  EXPECT_THAT(testing::message_of<rpc::StatusError>([&] {
                interceptor->on_reply({1, "g"}, tensors, std::string(23, '\0'));
              }),
              HasSubstr("carries 23 bytes of autograd record, expected 22"));
  std::string deep(22, '\0');
  deep[17] = '\xff';  // a call path of 255 levels in a record with room for none
  EXPECT_THAT(testing::message_of<rpc::StatusError>([&] {
                interceptor->on_reply({1, "g"}, tensors, deep);
              }),
              HasSubstr("carries 22 bytes of autograd record, expected 1042"));
}

}  // namespace
}  // namespace distgrad::dist_autograd
