// An outside program written against distgrad (tests/package/package_test.sh): a call of a
// registered function on worker1 inside a distributed autograd context, and the backward pass
// that brings the gradient back. Prints "consumer: ..." and exits 0 when the result and the
// gradient are right.
#include <cstdio>
#include <stdexcept>

#include "distgrad.h"

namespace dg = distgrad;

dg::Tensor scaled_sum(dg::Tensor x, double factor) { return dg::sum(x) * factor; }
DISTGRAD_REMOTE(scaled_sum);

int main() {
  return dg::auto_init_rpc(nullptr, dg::rank_zero_only([] {
                             dg::autograd::Context context;
                             const dg::Tensor x = dg::ones({3}, dg::requires_grad());
                             const dg::Tensor y = dg::rpc::rpc_sync("worker1", scaled_sum, x, 2.0);
                             dg::autograd::backward(context, {y});
                             const double value = y.item<double>();
                             const std::vector<double> gradient = x.grad().to_vector<double>();
                             if (value != 6.0 || gradient != std::vector<double>{2.0, 2.0, 2.0}) {
                               throw std::runtime_error("consumer: wrong result or gradient");
                             }
                             std::printf("consumer: worker1 returned %g, and the gradient %g %g %g came back\n", value,
                                         gradient[0], gradient[1], gradient[2]);
                           }));
}
