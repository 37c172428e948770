// Prints the BLAS kernel choice of a fresh process (core/blas_kernel.h) for blas_kernel_test:
// "loaded" once loaded, then one matrix product (before which the library warns if it must),
// then "core=... best=... chosen_by=... self_check=...".
#include <cstdio>

#include "core/blas_kernel.h"
#include "core/creation.h"
#include "core/linalg.h"

int main() {
  std::fputs("loaded\n", stderr);
  const distgrad::Tensor product = distgrad::untracked::matmul(distgrad::ones({2, 3}), distgrad::ones({3, 2}));
  const distgrad::BlasKernel& blas = distgrad::blas_kernel();
  std::fflush(stderr);
  std::printf("core=%s best=%s chosen_by=%s self_check=%s\n", blas.core.c_str(), blas.best_core_for_cpu.c_str(),
              distgrad::to_string(blas.chosen_by),
              blas.self_check_failure.empty() ? "passed" : blas.self_check_failure.c_str());
  return product.numel() == 4 ? 0 : 1;
}
