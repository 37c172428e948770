// Module: registration and naming, parameter and buffer order, train/eval, dtype conversion,
// state dicts and safetensors checkpoints, and every error by message.
#include "nn/module.h"

#include <unistd.h>

#include <filesystem>
#include <memory>
#include <stdexcept>
#include <string>

#include "autograd/ops.h"
#include "nn/batch_norm.h"
#include "nn/linear.h"
#include "nn/sequential.h"
#include "tests/nn/nn_test_util.h"

namespace distgrad {
namespace {

using ::testing::ElementsAre;
using testing::values;

// A module whose registration calls are public, to test them one by one.
struct Registry : nn::Module {
  void add_parameter(const std::string& name, Tensor& slot) { register_parameter(name, slot); }
  void add_buffer(const std::string& name, Tensor& slot) { register_buffer(name, slot); }
  void add_module(const std::string& name, std::shared_ptr<nn::Module> child) { register_module(name, child); }
  std::string name() const override { return "Registry"; }
};

// A parameter and a buffer of its own, then a Linear, a BatchNorm1d and a Sequential.
struct Net : nn::Module {
  Net() {
    register_parameter("scale", scale);
    register_buffer("steps", steps);
    encoder = register_module("encoder", std::make_shared<nn::Linear>(2, 3));
    norm = register_module("norm", std::make_shared<nn::BatchNorm1d>(3));
    head = register_module("head", std::make_shared<nn::Sequential>(std::initializer_list<std::shared_ptr<nn::Module>>{
                                       std::make_shared<nn::Linear>(3, 1)}));
  }
  Tensor forward(const Tensor& x) override { return head->forward(norm->forward(encoder->forward(x))) * scale; }
  std::string name() const override { return "Net"; }

  Tensor scale = ones({1});
  Tensor steps = zeros({}, {.dtype = kInt64});
  std::shared_ptr<nn::Linear> encoder;
  std::shared_ptr<nn::BatchNorm1d> norm;
  std::shared_ptr<nn::Sequential> head;
};

TEST(Module, NamesNestedEntriesWithDotsInRegistrationOrder) {
  Net net;
  EXPECT_THAT(net.named_parameters().keys(), ElementsAre("scale", "encoder.weight", "encoder.bias", "norm.weight",
                                                         "norm.bias", "head.0.weight", "head.0.bias"));
  EXPECT_THAT(net.named_buffers().keys(),
              ElementsAre("steps", "norm.running_mean", "norm.running_var", "norm.num_batches_tracked"));
  EXPECT_THAT(net.named_parameters(/*recurse=*/false).keys(), ElementsAre("scale"));
  EXPECT_THAT(net.named_buffers(/*recurse=*/false).keys(), ElementsAre("steps"));
  ASSERT_EQ(net.named_children().size(), 3u);
  EXPECT_EQ(net.named_children()[2].first, "head");
  EXPECT_TRUE(net.parameters()[1].is_same(net.encoder->weight));  // the module's own tensors, not copies
  EXPECT_TRUE(
      net.named_parameters().at("head.0.bias").is_same(std::static_pointer_cast<nn::Linear>((*net.head)[0])->bias));
}

TEST(Module, RegisteredParametersAreLeavesThatRequireGrad) {
  Registry module;
  Tensor computed = from_vector<double>({1, 2}) * 2.0;
  Tensor buffer = zeros({2});
  module.add_parameter("w", computed);
  module.add_buffer("b", buffer);
  EXPECT_TRUE(computed.is_leaf());
  EXPECT_TRUE(computed.requires_grad());
  EXPECT_FALSE(buffer.requires_grad());
}

TEST(Module, RejectsDuplicateDottedAndEmptyNames) {
  Registry module;
  Tensor w = zeros({1}), b = zeros({1}), other = zeros({1});
  module.add_parameter("w", w);
  module.add_buffer("b", b);
  module.add_module("child", std::make_shared<Registry>());
  EXPECT_ERROR_CONTAINS(module.add_parameter("w", other), "Registry: 'w' is already registered");
  EXPECT_ERROR_CONTAINS(module.add_buffer("w", other), "Registry: 'w' is already registered");
  EXPECT_ERROR_CONTAINS(module.add_parameter("b", other), "Registry: 'b' is already registered");
  EXPECT_ERROR_CONTAINS(module.add_module("child", std::make_shared<Registry>()),
                        "Registry: 'child' is already registered");
  EXPECT_ERROR_CONTAINS(module.add_parameter("child", other), "Registry: 'child' is already registered");
  EXPECT_ERROR_CONTAINS(module.add_parameter("a.b", other),
                        "Registry: expected a non-empty name without dots, found 'a.b'");
  EXPECT_ERROR_CONTAINS(module.add_module("", std::make_shared<Registry>()),
                        "Registry: expected a non-empty name without dots, found ''");
  EXPECT_ERROR_CONTAINS(module.add_module("null", nullptr), "Registry: register_module('null') got a null module");
  Tensor undefined;
  EXPECT_ERROR_CONTAINS(module.add_parameter("undefined", undefined), "register_parameter");
}

TEST(Module, TrainAndEvalReachEveryDescendant) {
  Net net;
  EXPECT_TRUE(net.is_training());
  net.eval();
  EXPECT_FALSE(net.is_training());
  EXPECT_FALSE(net.norm->is_training());
  EXPECT_FALSE((*net.head)[0]->is_training());
  net.train();
  EXPECT_TRUE((*net.head)[0]->is_training());
  net.norm->eval();  // a child alone
  EXPECT_TRUE(net.is_training());
  EXPECT_FALSE(net.norm->is_training());
}

TEST(Module, ToFloat64KeepsParametersLeavesThatRequireGrad) {
  Net net;
  const std::vector<double> before = values(net.encoder->weight);
  net.to(kFloat64);
  for (const auto& [name, parameter] : net.named_parameters()) {
    EXPECT_EQ(parameter.dtype(), kFloat64) << name;
    EXPECT_TRUE(parameter.is_leaf()) << name;
    EXPECT_TRUE(parameter.requires_grad()) << name;
  }
  EXPECT_EQ(net.encoder->weight.dtype(), kFloat64);  // the members themselves were replaced
  EXPECT_EQ(values(net.encoder->weight), before);
  EXPECT_EQ(net.norm->running_mean.dtype(), kFloat64);
  EXPECT_EQ(net.norm->num_batches_tracked.dtype(), kInt64);  // integer buffers keep their dtype
  EXPECT_EQ(net.steps.dtype(), kInt64);
  const Tensor y = net.forward(randn({4, 2}, {.dtype = kFloat64}));
  y.sum().backward();
  EXPECT_TRUE(net.encoder->weight.grad().defined());
}

TEST(Module, ZeroGradResetsEveryParameterGrad) {
  Net net;
  net.forward(randn({4, 2})).sum().backward();
  EXPECT_TRUE(net.scale.grad().defined());
  net.zero_grad();
  for (const Tensor& parameter : net.parameters()) EXPECT_FALSE(parameter.grad().defined());
}

TEST(Module, StateDictRoundTrip) {
  manual_seed(1);
  Net source;
  source.norm->forward(randn({5, 3}));  // moves the running statistics away from their start
  manual_seed(2);
  Net target;
  const nn::ParamDict state = source.state_dict();
  EXPECT_THAT(state.keys(), ElementsAre("scale", "steps", "encoder.weight", "encoder.bias", "norm.weight", "norm.bias",
                                        "norm.running_mean", "norm.running_var", "norm.num_batches_tracked",
                                        "head.0.weight", "head.0.bias"));
  for (const auto& [name, tensor] : state) EXPECT_FALSE(tensor.requires_grad()) << name;
  const Tensor own_weight = target.encoder->weight;
  target.load_state_dict(state);
  for (const auto& [name, tensor] : target.state_dict()) EXPECT_EQ(values(tensor), values(state.at(name))) << name;
  EXPECT_TRUE(target.encoder->weight.is_same(own_weight));  // copied into, not replaced
  EXPECT_TRUE(target.encoder->weight.is_leaf());
  EXPECT_TRUE(target.encoder->weight.requires_grad());
  EXPECT_EQ(target.norm->num_batches_tracked.item<int64_t>(), 1);
}

TEST(Module, StrictLoadNamesMissingAndUnexpectedKeys) {
  Net net;
  nn::ParamDict partial;
  for (const auto& [name, tensor] : net.state_dict()) {
    if (name != "encoder.bias" && name != "norm.running_var") partial.insert(name, untracked::clone(tensor));
  }
  partial.insert("decoder.weight", zeros({1}));
  const std::vector<double> weight_before = values(net.encoder->weight);
  for (const auto& [name, tensor] : partial) {
    if (tensor.numel() > 0 && is_floating(tensor.dtype())) untracked::fill_(tensor, 5.0);
  }
  EXPECT_ERROR_CONTAINS(net.load_state_dict(partial),
                        "load_state_dict: the state does not match Net; missing keys: encoder.bias, "
                        "norm.running_var; unexpected keys: decoder.weight");
  EXPECT_EQ(values(net.encoder->weight), weight_before);  // a failed load changes nothing
  // Not strict: the keys present are loaded, the others ignored.
  nn::ParamDict changed{{"encoder.bias", full({3}, 7.0)}, {"decoder.weight", zeros({1})}};
  net.load_state_dict(changed, /*strict=*/false);
  EXPECT_EQ(values(net.encoder->bias), (std::vector<double>{7, 7, 7}));
}

TEST(Module, LoadStateDictShapeMismatchNamesKeyAndShapes) {
  Net net;
  nn::ParamDict state = net.state_dict();
  state.insert("scale", full({1}, 9.0));  // comes before the mismatch, and must not be loaded
  state.insert("encoder.weight", zeros({2, 3}));
  EXPECT_ERROR_CONTAINS(net.load_state_dict(state),
                        "load_state_dict: 'encoder.weight' expects shape [3, 2], the state has [2, 3]");
  EXPECT_EQ(values(net.scale), (std::vector<double>{1}));
}

TEST(Module, SaveAndLoadThroughSafetensors) {
  testing::ScratchDir dir;
  manual_seed(3);
  Net source;
  source.norm->forward(randn({5, 3}));
  nn::save(source, dir.file("net.safetensors"));
  manual_seed(4);
  Net target;
  nn::load(target, dir.file("net.safetensors"));
  for (const auto& [name, tensor] : source.state_dict()) {
    const Tensor loaded = target.state_dict().at(name);
    EXPECT_EQ(loaded.dtype(), tensor.dtype()) << name;
    EXPECT_EQ(values(loaded), values(tensor)) << name;
  }
  Registry other;
  Tensor w = zeros({1});
  other.add_parameter("w", w);
  EXPECT_ERROR_CONTAINS(nn::load(other, dir.file("net.safetensors")), "missing keys: w", "unexpected keys: scale");
}

TEST(Module, BaseForwardSaysTheModuleHasNone) {
  Registry module;
  EXPECT_ERROR_CONTAINS(module.forward(zeros({1})), "Registry: this module has no single-input forward()");
}

}  // namespace
}  // namespace distgrad
