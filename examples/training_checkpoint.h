// The checkpoint of the Fashion-MNIST trainers (examples/fashion_mnist_train and
// examples/ddp_fashion_mnist): one safetensors file, written atomically, with the weights
// ("model.*"), the Adam state ("optimizer.*") and string metadata ("epoch", "model", ...).
#pragma once

#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>

#include "core/safetensors.h"
#include "nn/module.h"
#include "optim/adam.h"

namespace examples {

inline void save_training_checkpoint(const std::string& path, const distgrad::nn::Module& model,
                                     const distgrad::optim::Adam& optimizer,
                                     const std::map<std::string, std::string>& metadata) {
  distgrad::NamedTensors tensors;
  for (const auto& [name, tensor] : model.state_dict()) tensors.emplace_back("model." + name, tensor);
  for (const auto& [name, tensor] : optimizer.state_dict()) tensors.emplace_back("optimizer." + name, tensor);
  distgrad::save_safetensors(path, tensors, metadata);
}

// Loads `path` into `model` and `optimizer` and returns its metadata. A file made for another
// kind of model (metadata "model" other than `model_kind`) ends the program with code 2, the
// message starting with `program`.
inline std::map<std::string, std::string> load_training_checkpoint(const std::string& path, distgrad::nn::Module& model,
                                                                   distgrad::optim::Adam& optimizer,
                                                                   const char* program, const std::string& model_kind) {
  const distgrad::SafetensorsContents contents = distgrad::load_safetensors(path);
  if (contents.metadata.count("model") && contents.metadata.at("model") != model_kind) {
    std::fprintf(stderr, "%s: %s holds a %s, not a %s\n", program, path.c_str(), contents.metadata.at("model").c_str(),
                 model_kind.c_str());
    std::exit(2);
  }
  distgrad::nn::ParamDict weights, state;
  for (const auto& [name, tensor] : contents.tensors) {
    if (name.starts_with("model.")) weights.insert(name.substr(6), tensor);
    if (name.starts_with("optimizer.")) state.insert(name.substr(10), tensor);
  }
  model.load_state_dict(weights);
  optimizer.load_state_dict(state);
  return contents.metadata;
}

}  // namespace examples
