// Fits y = sin(x) on [-pi, pi] with a two-layer tanh network and a backward pass written by hand.
//
// Nothing requires grad, so the ops (distgrad's one op surface, autograd/ops.h) record no graph:
// this is what autograd's engine automates. The run prints the loss as it trains; with
// --max_mse it exits non-zero when the final loss is above that (the test's check).
//
//   build/examples/sine_regression [--steps N] [--hidden H] [--lr LR] [--seed S] [--max_mse M]
#include <cmath>
#include <cstdlib>
#include <iomanip>
#include <iostream>
#include <stdexcept>
#include <string>

#include "distgrad.h"

namespace dg = distgrad;
using namespace distgrad;

namespace {

struct Options {
  int steps = 2000;
  int64_t hidden = 32;
  double lr = 0.05;
  uint64_t seed = 0;
  double max_mse = 0;  // 0: no check
};

Options parse(int argc, char** argv) {
  Options options;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (flag == "--help" || flag == "-h") {
      std::cout << "usage: sine_regression [--steps N] [--hidden H] [--lr LR] [--seed S] [--max_mse M]\n"
                   "  --max_mse M  exit non-zero when the final mean squared error is above M (default 0: no check)\n";
      std::exit(0);
    }
    if (i + 1 >= argc) {
      std::cerr << "sine_regression: " << flag << " expects a value\n";
      std::exit(2);
    }
    const std::string value = argv[++i];
    try {
      if (flag == "--steps") options.steps = std::stoi(value);
      else if (flag == "--hidden") options.hidden = std::stoll(value);
      else if (flag == "--lr") options.lr = std::stod(value);
      else if (flag == "--seed") options.seed = std::stoull(value);
      else if (flag == "--max_mse") options.max_mse = std::stod(value);
      else {
        std::cerr << "sine_regression: unknown flag " << flag << " (try --help)\n";
        std::exit(2);
      }
    } catch (const std::logic_error&) {  // std::invalid_argument, std::out_of_range
      std::cerr << "sine_regression: " << flag << " expects a number, found '" << value << "'\n";
      std::exit(2);
    }
  }
  return options;
}

// A Linear -> tanh -> Linear network and its parameters' momentum buffers.
struct Network {
  dg::Tensor w1, b1, w2, b2;

  explicit Network(int64_t hidden)
      : w1(dg::randn({1, hidden}) * 1.0),
        b1(dg::zeros({hidden})),
        w2(dg::randn({hidden, 1}) * (1.0 / std::sqrt(static_cast<double>(hidden)))),
        b2(dg::zeros({1})) {}
};

}  // namespace

int main(int argc, char** argv) {
  const Options options = parse(argc, argv);
  dg::manual_seed(options.seed);

  const dg::Tensor x = reshape(dg::linspace(-M_PI, M_PI, 256), {256, 1});
  const dg::Tensor y = sin(x);
  Network net(options.hidden);
  Network velocity(options.hidden);
  for (dg::Tensor* v : {&velocity.w1, &velocity.b1, &velocity.w2, &velocity.b2}) zero_(*v);

  double first_loss = 0, loss_value = 0;
  for (int step = 0; step <= options.steps; ++step) {
    // Forward.
    const dg::Tensor hidden = tanh(addmm(net.b1, x, net.w1));
    const dg::Tensor prediction = addmm(net.b2, hidden, net.w2);
    const dg::Tensor error = prediction - y;
    loss_value = mean(error * error).item<double>();
    if (step == 0) first_loss = loss_value;
    if (step % (options.steps / 10 > 0 ? options.steps / 10 : 1) == 0) {
      std::cout << "step " << std::setw(5) << step << "  mse " << std::fixed << std::setprecision(6) << loss_value
                << "\n";
    }
    if (step == options.steps) break;

    // Backward of mean((h w2 + b2 - y)^2) with h = tanh(x w1 + b1).
    const dg::Tensor grad_prediction = error * (2.0 / static_cast<double>(x.size(0)));
    const dg::Tensor grad_w2 = matmul(t(hidden), grad_prediction);
    const dg::Tensor grad_b2 = sum(grad_prediction, {0});
    const dg::Tensor grad_hidden = matmul(grad_prediction, t(net.w2)) * (1.0 - hidden * hidden);
    const dg::Tensor grad_w1 = matmul(t(x), grad_hidden);
    const dg::Tensor grad_b1 = sum(grad_hidden, {0});

    // SGD with momentum 0.9, in place.
    const std::pair<dg::Tensor*, const dg::Tensor*> updates[] = {
        {&net.w1, &grad_w1}, {&net.b1, &grad_b1}, {&net.w2, &grad_w2}, {&net.b2, &grad_b2}};
    dg::Tensor* buffers[] = {&velocity.w1, &velocity.b1, &velocity.w2, &velocity.b2};
    for (int i = 0; i < 4; ++i) {
      mul_(*buffers[i], 0.9);
      add_(*buffers[i], *updates[i].second);
      sub_(*updates[i].first, *buffers[i] * options.lr);
    }
  }

  std::cout << "sin(x) fit: mse " << first_loss << " -> " << loss_value << "\n";
  const dg::Tensor probe = dg::from_vector<float>({-2.0f, 0.5f, 1.5f}, {3, 1});
  const dg::Tensor fit = addmm(net.b2, tanh(addmm(net.b1, probe, net.w1)), net.w2);
  std::cout << "x      = " << reshape(probe, {3}) << "\nfit(x) = " << reshape(fit, {3})
            << "\nsin(x) = " << reshape(sin(probe), {3}) << "\n";
  if (options.max_mse > 0 && !(loss_value <= options.max_mse)) {
    std::cerr << "sine_regression: the final mse " << loss_value << " is above --max_mse " << options.max_mse << "\n";
    return 1;
  }
  return 0;
}
