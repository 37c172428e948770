// The BLAS kernels this process's matrix products run on, chosen from what the CPU can do.
//
// distgrad's CPU matmul, conv2d and their gradients call OpenBLAS. Debian's OpenBLAS (built
// with DYNAMIC_ARCH) picks its kernels from a list of CPU models it knows, and on CPUs newer
// than its release it falls back to older ones: on AVX-512 Xeons its SSE3 "Prescott" kernels
// (a quarter of the CPU's speed), on AVX-512 EPYCs its AVX2 "Haswell" ones (half). So the
// first time the library is loaded, before any matrix product, distgrad asks the CPU which
// instruction sets it and the OS support, and when OpenBLAS chose a core type below them it
// switches OpenBLAS to the core type they allow (Note [Choosing the BLAS kernels] in
// blas_kernel.cc), checks a few products against a plain sum, and keeps the switch only if
// they agree. This happens in every process, however it was started (distgrad-run, srun,
// torchrun, mpirun or alone). `OPENBLAS_CORETYPE` set by the user is left as it is.
//
//   const distgrad::BlasKernel& blas = distgrad::blas_kernel();
//   std::cout << blas.core << " (the CPU allows " << blas.best_core_for_cpu << ")\n";
#pragma once

#include <string>

namespace distgrad {

// Who chose the core type OpenBLAS runs.
enum class BlasKernelChooser {
  kOpenBlas,     // OpenBLAS's own choice, from its list of CPU models (distgrad agreed or could not switch)
  kDistgrad,     // distgrad, from the CPU's instruction sets
  kEnvironment,  // the user, through OPENBLAS_CORETYPE
};

const char* to_string(BlasKernelChooser chooser);

struct BlasKernel {
  std::string core;               // the core type OpenBLAS runs, as it names it ("SkylakeX", "Haswell", ...)
  std::string best_core_for_cpu;  // the fastest core type this CPU and OS can run; "" when not x86-64 or SSE only
  BlasKernelChooser chosen_by = BlasKernelChooser::kOpenBlas;
  std::string self_check_failure;  // why the CPU's core type was not kept ("" when it was, or never tried)
  // One line when `core` is below `best_core_for_cpu`, saying why; "" otherwise. Printed on
  // standard error before the process's first matrix product, by rank 0 only (the first of RANK,
  // OMPI_COMM_WORLD_RANK, PMI_RANK and SLURM_PROCID set is 0, or none is set).
  std::string warning;
};

// The choice, made once per process when the library is loaded.
const BlasKernel& blas_kernel();

// Prints blas_kernel().warning as described there, once per process; the CPU gemm calls it.
void warn_once_if_blas_kernel_is_slow();

namespace detail {

// Whether this OpenBLAS can change its kernels at run time (built with DYNAMIC_ARCH).
bool openblas_can_switch_cores();

// Makes OpenBLAS run `core`'s kernels, or those it picks itself for "" (with the user's
// OPENBLAS_CORETYPE, if set), as if it were loading again. Returns false when it cannot switch
// or has no such core type. Process-wide, and only safe while no other thread runs BLAS or
// reads the environment (Note [Choosing the BLAS kernels]).
bool use_openblas_core(const std::string& core);

// C = alpha * op(A) * op(B) + beta * C on row-major matrices, as cblas_sgemm / cblas_dgemm
// with CblasRowMajor.
using SgemmFunction = void (*)(bool transpose_a, bool transpose_b, int m, int n, int k, float alpha, const float* a,
                               int lda, const float* b, int ldb, float beta, float* c, int ldc);
using DgemmFunction = void (*)(bool transpose_a, bool transpose_b, int m, int n, int k, double alpha, const double* a,
                               int lda, const double* b, int ldb, double beta, double* c, int ldc);

// OpenBLAS's cblas_sgemm and cblas_dgemm in these forms.
void openblas_sgemm(bool transpose_a, bool transpose_b, int m, int n, int k, float alpha, const float* a, int lda,
                    const float* b, int ldb, float beta, float* c, int ldc);
void openblas_dgemm(bool transpose_a, bool transpose_b, int m, int n, int k, double alpha, const double* a, int lda,
                    const double* b, int ldb, double beta, double* c, int ldc);

// Runs sgemm and dgemm on a few shapes (small ones and ones past OpenBLAS's small-matrix
// paths, each transpose) and compares every element with a sum in double, within a bound of
// rounding. Returns "" when all agree, else the first disagreement ("sgemm 101x103x97, A
// transposed: C[5,7] = 1.25, expected 0.8125").
std::string first_wrong_product(SgemmFunction sgemm, DgemmFunction dgemm);

}  // namespace detail
}  // namespace distgrad
