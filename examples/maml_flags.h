// The command-line flags the MAML examples share (maml_sinusoid, maml_sinusoid_local). Defines
// them: include it from one source file of a program.
#pragma once

#include <cstdint>
#include <string>

#include "absl/flags/flag.h"

ABSL_FLAG(int, iterations, 2000, "meta-training iterations");
ABSL_FLAG(int, meta_batch, 16, "tasks per meta-iteration");
ABSL_FLAG(int, shots, 10, "support (and query) points per task");
ABSL_FLAG(int, inner_steps, 5, "SGD steps on each task's support set");
ABSL_FLAG(double, inner_lr, 0.01, "learning rate of the inner SGD steps");
ABSL_FLAG(double, outer_lr, 1e-3, "learning rate of the outer Adam optimizer");
ABSL_FLAG(int, eval_tasks, 200, "fresh tasks for the meta-test loss");
ABSL_FLAG(uint64_t, seed, 0, "random seed");
ABSL_FLAG(std::string, dump_gradients, "", "write the first iteration's meta-gradients here and stop");
ABSL_FLAG(std::string, save_parameters, "", "write the trained parameters here (safetensors) when training ends");
ABSL_FLAG(double, min_improvement, 0,
          "exit non-zero unless training lowers the meta-test loss at least this many times (0: never)");
