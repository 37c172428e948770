// Distributed higher-order gradients (create_graph across workers, docs/distributed-autograd.md)
// beside the same arithmetic in one process. There is no peer to run: PyTorch's distributed
// autograd has no create_graph.
//
// Every rank runs this program with the launcher's environment (RANK, WORLD_SIZE, MASTER_ADDR,
// MASTER_PORT); rank 0 measures and prints one JSON line per workload on stdout:
//   hvp    4 ranks: Hessian-vector products of an MLP whose --hops layers (1, 2, 3) run on
//          workers 1, 2, 3, rank 0 calling each in turn. Layer k is tanh(h W_k) with W_k
//          --width x --width, h --batch x --width float32; the weights are leaves on rank 0, sent
//          with each call. Per product, in a context: loss = sum(f(x)^2), the gradients with
//          respect to the weights by grad with create_graph, then the gradient of their dot
//          product with fixed directions v: "hvp/distributed/hopsK"; median, p10 and p90
//          seconds. "hvp/local/hopsK" is the same arithmetic in this process with the local
//          engine. Each hop adds a call to the forward, and a gradient message each way to
//          each of the two passes.
//   maml   N ranks, or one process with --local: outer iterations of examples/maml_data_parallel
//          with its flags and defaults (a meta-batch of 16 tasks of 10 shots, 5 inner steps, each
//          support set split over the N ranks, each inner gradient a distributed grad with
//          create_graph), timed as bench/maml_bench times them: "maml_data_parallel/worldN",
//          "maml_data_parallel/local" (bench/maml_timing.h).
//
//   build/launcher/distgrad-run --standalone --nproc-per-node 4 build/bench/higher_order_bench hvp
//   build/bench/higher_order_bench maml --local
// bench/run_higher_order_bench.py runs them all, in rounds, and prints the tables of
// docs/benchmarks.md.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <exception>
#include <string>
#include <utility>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "bench/maml_timing.h"
#include "distgrad.h"
#include "examples/data_parallel_maml.h"
#include "examples/maml_flags.h"
#include "examples/sinusoid.h"

ABSL_FLAG(int, width, 64, "hvp: the width of every layer");
ABSL_FLAG(int, batch, 32, "hvp: the rows of the input");
ABSL_FLAG(int, repetitions, 200, "hvp: timed products per workload (after a tenth as many of warm-up)");
ABSL_FLAG(int, warmup, 3, "maml: outer iterations before timing");
ABSL_FLAG(bool, local, false, "maml: one process, no RPC, the local engine");

namespace dg = distgrad;

namespace {

// One layer of the MLP, on the worker the hop reaches.
dg::Tensor tanh_layer(dg::Tensor h, dg::Tensor weight) { return dg::tanh(dg::matmul(h, weight)); }
DISTGRAD_REMOTE(tanh_layer);

// f(x) through `hops` layers: on workers 1..hops when distributed, here otherwise.
dg::Tensor mlp(const dg::Tensor& x, const std::vector<dg::Tensor>& weights, bool distributed) {
  dg::Tensor h = x;
  for (size_t k = 0; k < weights.size(); ++k) {
    h = distributed ? dg::rpc::rpc_sync(static_cast<int>(k) + 1, tanh_layer, h, weights[k]) : tanh_layer(h, weights[k]);
  }
  return h;
}

// H v for loss = sum(f(x)^2) with respect to `weights`, by two passes: in `context` when given.
std::vector<dg::Tensor> hessian_vector_product(const dg::autograd::Context* context, const dg::Tensor& x,
                                               const std::vector<dg::Tensor>& weights,
                                               const std::vector<dg::Tensor>& directions) {
  const dg::Tensor f = mlp(x, weights, context != nullptr);
  const dg::Tensor loss = (f * f).sum();
  const auto grad = [&](const dg::Tensor& output, dg::autograd::GradOptions options) {
    return context != nullptr ? dg::autograd::grad(*context, {output}, weights, options)
                              : dg::autograd::grad({output}, weights, options);
  };
  const std::vector<dg::Tensor> gradients = grad(loss, {.create_graph = true});
  dg::Tensor dot;
  for (size_t k = 0; k < weights.size(); ++k) {
    const dg::Tensor term = (gradients[k] * directions[k]).sum();
    dot = dot.defined() ? dot + term : term;
  }
  return grad(dot, {});
}

double median(std::vector<double> samples) { return bench::quantile(std::move(samples), 0.5); }

// Times `product` (after a tenth as many warm-up runs) and prints its line.
template <typename F>
void time_products(const std::string& name, F product) {
  const int repetitions = std::max(3, absl::GetFlag(FLAGS_repetitions));
  for (int i = 0; i < std::max(2, repetitions / 10); ++i) product();
  std::vector<double> samples;
  for (int i = 0; i < repetitions; ++i) {
    const auto start = bench::Clock::now();
    product();
    samples.push_back(bench::seconds_between(start, bench::Clock::now()));
  }
  std::printf("{\"name\": \"%s\", \"seconds_per_iter\": %.9g, \"p10\": %.9g, \"p90\": %.9g, \"repetitions\": %zu}\n",
              name.c_str(), median(samples), bench::quantile(samples, 0.1), bench::quantile(samples, 0.9),
              samples.size());
  std::fflush(stdout);
}

// Rank 0 of a world of 4: local and distributed products for 1, 2 and 3 hops, the distributed
// result checked against the local one first.
void run_hvp() {
  DISTGRAD_CHECK(dg::get_world_size() == 4, "higher_order_bench hvp: expected a world of 4 ranks, found ",
                 dg::get_world_size());
  const int64_t width = absl::GetFlag(FLAGS_width), batch = absl::GetFlag(FLAGS_batch);
  dg::Generator generator(3);
  const dg::Tensor x = dg::randn({batch, width}, {}, generator);
  for (int hops = 1; hops <= 3; ++hops) {
    std::vector<dg::Tensor> weights, directions;
    for (int k = 0; k < hops; ++k) {
      dg::Tensor weight = dg::randn({width, width}, {}, generator) / std::sqrt(static_cast<double>(width));
      weight.requires_grad_();
      weights.push_back(weight);
      directions.push_back(dg::randn({width, width}, {}, generator));
    }
    const std::vector<dg::Tensor> expected = hessian_vector_product(nullptr, x, weights, directions);
    {
      dg::autograd::Context context;
      const std::vector<dg::Tensor> found = hessian_vector_product(&context, x, weights, directions);
      for (int k = 0; k < hops; ++k) {
        // float32, sums in another order: entries up to a few hundred differ by up to 1e-4.
        DISTGRAD_CHECK(dg::untracked::allclose(found[k], expected[k], 1e-4, 1e-3),
                       "higher_order_bench: the distributed Hessian-vector product differs from the local one at "
                       "layer ",
                       k + 1, " of ", hops);
      }
    }
    const std::string suffix = "/hops" + std::to_string(hops);
    time_products("hvp/local" + suffix, [&] { hessian_vector_product(nullptr, x, weights, directions); });
    time_products("hvp/distributed" + suffix, [&] {
      dg::autograd::Context context;
      hessian_vector_product(&context, x, weights, directions);
    });
  }
}

// Rank 0 (or the one process of --local): examples/maml_data_parallel's outer iterations.
void run_maml() {
  const bool local = absl::GetFlag(FLAGS_local);
  const int inner_steps = absl::GetFlag(FLAGS_inner_steps);
  const double inner_lr = absl::GetFlag(FLAGS_inner_lr);
  dg::manual_seed(absl::GetFlag(FLAGS_seed));
  dg::Generator task_generator(absl::GetFlag(FLAGS_seed) + 2);
  sinusoid::Net net;
  dg::optim::Adam outer(net.parameters(), absl::GetFlag(FLAGS_outer_lr));
  auto outer_iteration = [&] {
    const sinusoid::Tasks tasks =
        sinusoid::sample_tasks(absl::GetFlag(FLAGS_meta_batch), absl::GetFlag(FLAGS_shots), task_generator);
    outer.zero_grad();
    const bench::OuterIterationPhases phases =
        bench::forward_and_backward(local, dg::Device::cpu(), [&](const dg::autograd::Context* context) {
          return sinusoid::data_parallel::meta_loss(context, dg::nn::module_clone(net, dg::nn::CloneBy::kClone), tasks,
                                                    inner_steps, inner_lr);
        });
    outer.step();
    return phases;
  };
  bench::time_outer_iterations(
      local ? "maml_data_parallel/local" : "maml_data_parallel/world" + std::to_string(dg::get_world_size()),
      absl::GetFlag(FLAGS_warmup), absl::GetFlag(FLAGS_iterations), outer_iteration);
}

}  // namespace

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage("higher_order_bench hvp|maml [--local] (one process per rank; see the file's comment)");
  absl::SetFlag(&FLAGS_iterations, 20);  // maml: timed outer iterations (the example's default is 2000)
  const std::vector<char*> positional = absl::ParseCommandLine(argc, argv);
  const std::string mode = positional.size() == 2 ? positional[1] : "";
  if (mode != "hvp" && mode != "maml") {
    std::fprintf(stderr, "higher_order_bench: expected the mode hvp or maml, found '%s'\n", mode.c_str());
    return 2;
  }
  try {
    if (mode == "maml" && absl::GetFlag(FLAGS_local)) {
      run_maml();
      return 0;
    }
    return dg::auto_init_rpc([] { dg::manual_seed(absl::GetFlag(FLAGS_seed) + dg::get_rank()); },
                             dg::rank_zero_only(mode == "hvp" ? run_hvp : run_maml));
  } catch (const std::exception& error) {
    std::fprintf(stderr, "higher_order_bench: %s\n", error.what());
    return 1;
  }
}
