// The interceptor chain in one process: each interceptor's bytes travel in the header under its
// name and come back to it alone; bytes for an interceptor the chain lacks, and a chain that is
// not well formed, are errors naming the interceptor.
#include "rpc/interceptor_chain.h"

#include "core/creation.h"
#include "rpc/errors.h"
#include "tests/core/test_util.h"

namespace distgrad::rpc {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

// Says `bytes` before requests and replies, and records what it is told on arrival.
class Recording final : public CallInterceptor {
 public:
  Recording(std::string name, std::string bytes) : name_(std::move(name)), bytes_(std::move(bytes)) {}

  std::string_view name() const override { return name_; }
  std::string before_request(const CallSite&, const std::vector<Tensor>&) override { return bytes_; }
  std::shared_ptr<void> on_request(const CallSite& call, std::vector<Tensor>& tensors,
                                   std::string_view bytes) override {
    received.push_back(std::to_string(call.peer) + " " + std::string(call.function) + " " +
                       std::to_string(tensors.size()) + " '" + std::string(bytes) + "'");
    return std::make_shared<int>(0);
  }
  std::string before_reply(const CallSite&, const std::vector<Tensor>&) override { return bytes_; }
  void on_reply(const CallSite&, std::vector<Tensor>&, std::string_view bytes) override {
    received.push_back("reply '" + std::string(bytes) + "'");
  }

  std::vector<std::string> received;

 private:
  const std::string name_, bytes_;
};

TEST(InterceptorChain, EachInterceptorGetsItsOwnBytesBack) {
  auto sender_a = std::make_shared<Recording>("a", "from a");
  auto sender_b = std::make_shared<Recording>("b", "");  // says nothing
  const InterceptorChain sender({sender_a, sender_b});
  std::vector<Tensor> tensors = {ones({2}), ones({3})};
  wire::CallHeader request;
  sender.before_request({1, "f"}, tensors, request);
  ASSERT_EQ(request.extensions_size(), 1);
  EXPECT_EQ(request.extensions(0).interceptor(), "a");

  auto receiver_b = std::make_shared<Recording>("b", "");
  auto receiver_a = std::make_shared<Recording>("a", "from a's callee");
  const InterceptorChain receiver({receiver_b, receiver_a});  // another order: matched by name
  const InterceptorChain::Scopes scopes = receiver.on_request({0, "f"}, tensors, request);
  EXPECT_EQ(scopes.size(), 2u);
  EXPECT_THAT(receiver_a->received, ElementsAre("0 f 2 'from a'"));
  EXPECT_THAT(receiver_b->received, ElementsAre("0 f 2 ''"));

  wire::ReplyHeader reply;
  receiver.before_reply({0, "f"}, tensors, reply);
  sender.on_reply({1, "f"}, tensors, reply);
  EXPECT_THAT(sender_a->received, ElementsAre("reply 'from a's callee'"));
  EXPECT_THAT(sender_b->received, ElementsAre("reply ''"));
}

TEST(InterceptorChain, BytesForAnInterceptorItLacksAreFailedPreconditionNamingIt) {
  const InterceptorChain sender({std::make_shared<Recording>("stamp", "x")});
  const InterceptorChain receiver({std::make_shared<Recording>("other", "")});
  std::vector<Tensor> tensors;
  wire::CallHeader request;
  sender.before_request({1, "f"}, tensors, request);
  try {
    receiver.on_request({0, "f"}, tensors, request);
    FAIL() << "a call with bytes for a missing interceptor was taken";
  } catch (const StatusError& error) {
    EXPECT_EQ(error.code(), StatusCode::kFailedPrecondition);
    EXPECT_THAT(error.what(), HasSubstr("the call of f carries bytes for the call interceptor 'stamp'"));
  }
  wire::ReplyHeader reply;
  sender.before_reply({0, "g"}, tensors, reply);
  EXPECT_THAT(testing::message_of<StatusError>([&] {
                receiver.on_reply({1, "g"}, tensors, reply);
              }),
              HasSubstr("the reply of g carries bytes for the call interceptor 'stamp'"));
}

TEST(InterceptorChain, NullUnnamedAndTwiceNamedInterceptorsAreRefused) {
  EXPECT_ERROR_CONTAINS(InterceptorChain({std::make_shared<Recording>("a", ""), nullptr}),
                        "RpcOptions::interceptors[1] is null");
  EXPECT_ERROR_CONTAINS(InterceptorChain({std::make_shared<Recording>("", "")}),
                        "RpcOptions::interceptors[0] has an empty name");
  EXPECT_ERROR_CONTAINS(InterceptorChain({std::make_shared<Recording>("a", ""), std::make_shared<Recording>("b", ""),
                                          std::make_shared<Recording>("a", "")}),
                        "two interceptors are named 'a' (RpcOptions::interceptors[0] and [2])");
}

}  // namespace
}  // namespace distgrad::rpc
