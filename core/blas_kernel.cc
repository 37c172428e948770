#include "core/blas_kernel.h"

#include <cblas.h>
#include <dlfcn.h>
#include <strings.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <mutex>
#include <optional>
#include <vector>

#include "core/error.h"

namespace distgrad {

// Note [Choosing the BLAS kernels]
// OpenBLAS built with DYNAMIC_ARCH (Debian's) carries kernels for every x86-64 core type and
// picks one when it loads, from the CPU's vendor, family and model. A model newer than the
// release gets an older core type: 0.3.21 runs its SSE3 Prescott kernels on Sapphire Rapids-era
// Xeons (sgemm at a fifth of the SkylakeX kernels' speed, docs/benchmarks.md#blas-kernels).
// distgrad instead ranks the core types by the instruction sets their kernels need (AVX-512
// F/CD/BW/DQ/VL for SkylakeX, AVX2 and FMA for Haswell, AVX for Sandybridge), asks the CPU which
// of them it and the OS support (__builtin_cpu_supports reads cpuid and XCR0), and when OpenBLAS
// chose a lower rank it switches: `gotoblas_dynamic_quit` forgets the choice and
// `gotoblas_dynamic_init` makes it again, reading OPENBLAS_CORETYPE, which is set only for that
// call. This runs while the library loads (a static initializer beside the CPU gemm, in
// core/cpu/cpu_kernels.cc), before any product, while the process has one thread of its own
// (OpenBLAS's pool sleeps and reads no environment). The new kernels must then reproduce a plain
// sum on a few shapes (detail::first_wrong_product); if they do not, OpenBLAS's own choice is
// restored and the warning says why. A user's OPENBLAS_CORETYPE is left alone, with a warning
// when the core type OpenBLAS runs under it is below the CPU's (0.3.21 runs its own choice for a
// name it does not know). The warning waits for the first product, so programs that multiply no
// matrices (distgrad-run, distgrad-trace) never print it. Both OpenBLAS functions are looked up
// with dlsym: an OpenBLAS built for one core type has neither and keeps its kernels.

namespace {

// Ranks of OpenBLAS's x86-64 core types by the widest vectors their gemm kernels use.
int rank_of_core(const std::string& core) {
  for (const char* name : {"SkylakeX", "Cooperlake", "SapphireRapids"}) {
    if (strcasecmp(core.c_str(), name) == 0) return 3;
  }
  for (const char* name : {"Haswell", "Zen"}) {
    if (strcasecmp(core.c_str(), name) == 0) return 2;
  }
  for (const char* name : {"Sandybridge", "Bulldozer", "Piledriver", "Steamroller", "Excavator"}) {
    if (strcasecmp(core.c_str(), name) == 0) return 1;
  }
  return 0;
}

std::string best_core_for_this_cpu() {
#if defined(__x86_64__)
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512cd") && __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl")) {
    return "SkylakeX";
  }
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return "Haswell";
  if (__builtin_cpu_supports("avx")) return "Sandybridge";
#endif
  return "";
}

std::string openblas_core() { return openblas_get_corename(); }

// Rank 0 of a job, or a process outside one: the first of the launchers' rank variables set.
bool printed_by_this_rank() {
  for (const char* variable : {"RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK", "SLURM_PROCID"}) {
    if (const char* rank = std::getenv(variable)) return std::strcmp(rank, "0") == 0;
  }
  return true;
}

std::string fallback_warning(const BlasKernel& blas, const std::string& reason) {
  return detail::str_cat("distgrad: OpenBLAS runs its ", blas.core, " kernels on a CPU that can run ",
                         blas.best_core_for_cpu, " ones (", reason,
                         "): matrix products may run at a fraction of the CPU's speed; see "
                         "docs/core.md#blas-kernels");
}

BlasKernel choose_blas_kernel() {
  BlasKernel blas;
  blas.core = openblas_core();
  blas.best_core_for_cpu = best_core_for_this_cpu();
  if (const char* forced = std::getenv("OPENBLAS_CORETYPE")) {
    blas.chosen_by = BlasKernelChooser::kEnvironment;
    if (rank_of_core(blas.core) < rank_of_core(blas.best_core_for_cpu)) {
      blas.warning = fallback_warning(blas, detail::str_cat("OPENBLAS_CORETYPE=", forced));
    }
    return blas;
  }
  if (rank_of_core(blas.core) >= rank_of_core(blas.best_core_for_cpu)) return blas;

  if (!detail::openblas_can_switch_cores()) {
    blas.warning = fallback_warning(blas, "this OpenBLAS was built for one core type, without DYNAMIC_ARCH");
    return blas;
  }
  if (!detail::use_openblas_core(blas.best_core_for_cpu)) {
    detail::use_openblas_core("");
    blas.core = openblas_core();
    blas.warning = fallback_warning(blas, detail::str_cat("this OpenBLAS has no ", blas.best_core_for_cpu, " kernels"));
    return blas;
  }
  blas.self_check_failure = detail::first_wrong_product(detail::openblas_sgemm, detail::openblas_dgemm);
  if (!blas.self_check_failure.empty()) {
    detail::use_openblas_core("");
    blas.core = openblas_core();
    blas.warning = fallback_warning(
        blas, detail::str_cat(blas.best_core_for_cpu, "'s products failed a check: ", blas.self_check_failure));
    return blas;
  }
  blas.core = openblas_core();
  blas.chosen_by = BlasKernelChooser::kDistgrad;
  return blas;
}

// Values in [-1, 1) that are the same on every machine.
template <typename T>
std::vector<T> check_values(size_t count, uint32_t seed) {
  std::vector<T> values(count);
  for (size_t i = 0; i < count; ++i) {
    const uint32_t hash = (static_cast<uint32_t>(i) + seed) * 2654435761u;
    values[i] = static_cast<T>(static_cast<double>(hash >> 8) / static_cast<double>(1u << 23) - 1.0);
  }
  return values;
}

struct ProductShape {
  int m, n, k;
  bool transpose_a, transpose_b;
};

// The first element of alpha * op(A) * op(B) + beta * C that `gemm` got wrong, or "".
template <typename T, typename Gemm>
std::string first_wrong_element(const char* name, Gemm gemm, const ProductShape& shape) {
  const auto [m, n, k, transpose_a, transpose_b] = shape;
  const int lda = transpose_a ? m : k, ldb = transpose_b ? k : n;
  const std::vector<T> a = check_values<T>(static_cast<size_t>(m) * k, 1);
  const std::vector<T> b = check_values<T>(static_cast<size_t>(k) * n, 2);
  const std::vector<T> c_before = check_values<T>(static_cast<size_t>(m) * n, 3);
  const T alpha = T(1.5), beta = T(-0.5);
  std::vector<T> c = c_before;
  gemm(transpose_a, transpose_b, m, n, k, alpha, a.data(), lda, b.data(), ldb, beta, c.data(), n);

  // The reference row by row in double, with each element's sum of magnitudes for the bound.
  std::vector<double> row(n), magnitude(n);
  for (int i = 0; i < m; ++i) {
    std::fill(row.begin(), row.end(), 0.0);
    std::fill(magnitude.begin(), magnitude.end(), 0.0);
    for (int p = 0; p < k; ++p) {
      const double a_ip = transpose_a ? a[static_cast<size_t>(p) * lda + i] : a[static_cast<size_t>(i) * lda + p];
      for (int j = 0; j < n; ++j) {
        const double b_pj = transpose_b ? b[static_cast<size_t>(j) * ldb + p] : b[static_cast<size_t>(p) * ldb + j];
        row[j] += a_ip * b_pj;
        magnitude[j] += std::abs(a_ip * b_pj);
      }
    }
    for (int j = 0; j < n; ++j) {
      const size_t at = static_cast<size_t>(i) * n + j;
      const double expected = alpha * row[j] + beta * static_cast<double>(c_before[at]);
      const double bound = 8.0 * (k + 2) * std::numeric_limits<T>::epsilon() *
                           (std::abs(alpha) * magnitude[j] + std::abs(beta * static_cast<double>(c_before[at])));
      if (!(std::abs(static_cast<double>(c[at]) - expected) <= bound)) {
        return detail::str_cat(name, " ", m, "x", n, "x", k, transpose_a ? ", A transposed" : "",
                               transpose_b ? ", B transposed" : "", ": C[", i, ",", j, "] = ", c[at], ", expected ",
                               expected);
      }
    }
  }
  return "";
}

}  // namespace

const char* to_string(BlasKernelChooser chooser) {
  switch (chooser) {
    case BlasKernelChooser::kOpenBlas: return "OpenBLAS";
    case BlasKernelChooser::kDistgrad: return "distgrad";
    case BlasKernelChooser::kEnvironment: return "OPENBLAS_CORETYPE";
  }
  return "unknown";
}

const BlasKernel& blas_kernel() {
  static const BlasKernel blas = choose_blas_kernel();
  return blas;
}

void warn_once_if_blas_kernel_is_slow() {
  static std::once_flag warned;
  std::call_once(warned, [] {
    const BlasKernel& blas = blas_kernel();
    if (!blas.warning.empty() && printed_by_this_rank()) std::fprintf(stderr, "%s\n", blas.warning.c_str());
  });
}

namespace detail {

namespace {

// OpenBLAS's run-time kernel switch, exported when it was built with DYNAMIC_ARCH.
struct OpenBlasDynamicArch {
  void (*quit)() = reinterpret_cast<void (*)()>(dlsym(RTLD_DEFAULT, "gotoblas_dynamic_quit"));
  void (*init)() = reinterpret_cast<void (*)()>(dlsym(RTLD_DEFAULT, "gotoblas_dynamic_init"));
};

const OpenBlasDynamicArch& openblas_dynamic_arch() {
  static const OpenBlasDynamicArch functions;
  return functions;
}

CBLAS_TRANSPOSE cblas_transpose(bool transpose) { return transpose ? CblasTrans : CblasNoTrans; }

}  // namespace

void openblas_sgemm(bool transpose_a, bool transpose_b, int m, int n, int k, float alpha, const float* a, int lda,
                    const float* b, int ldb, float beta, float* c, int ldc) {
  cblas_sgemm(CblasRowMajor, cblas_transpose(transpose_a), cblas_transpose(transpose_b), m, n, k, alpha, a, lda, b, ldb,
              beta, c, ldc);
}

void openblas_dgemm(bool transpose_a, bool transpose_b, int m, int n, int k, double alpha, const double* a, int lda,
                    const double* b, int ldb, double beta, double* c, int ldc) {
  cblas_dgemm(CblasRowMajor, cblas_transpose(transpose_a), cblas_transpose(transpose_b), m, n, k, alpha, a, lda, b, ldb,
              beta, c, ldc);
}

bool openblas_can_switch_cores() {
  return openblas_dynamic_arch().quit != nullptr && openblas_dynamic_arch().init != nullptr;
}

bool use_openblas_core(const std::string& core) {
  if (!openblas_can_switch_cores()) return false;
  if (core.empty()) {
    openblas_dynamic_arch().quit();
    openblas_dynamic_arch().init();
    return true;
  }
  const char* set = std::getenv("OPENBLAS_CORETYPE");
  const std::optional<std::string> users = set ? std::optional<std::string>(set) : std::nullopt;
  setenv("OPENBLAS_CORETYPE", core.c_str(), 1);
  openblas_dynamic_arch().quit();
  openblas_dynamic_arch().init();
  if (users) {
    setenv("OPENBLAS_CORETYPE", users->c_str(), 1);
  } else {
    unsetenv("OPENBLAS_CORETYPE");
  }
  return strcasecmp(openblas_core().c_str(), core.c_str()) == 0;
}

std::string first_wrong_product(SgemmFunction sgemm, DgemmFunction dgemm) {
  // Shapes under and past OpenBLAS's small-matrix paths (M*N*K <= 100^3), with edges that are
  // no multiple of any kernel's block.
  const ProductShape shapes[] = {
      {13, 11, 7, false, false},    {13, 11, 7, true, true},     {9, 16, 5, false, true},
      {101, 103, 97, false, false}, {101, 103, 97, true, false}, {101, 103, 97, false, true},
      {101, 103, 97, true, true},
  };
  for (const ProductShape& shape : shapes) {
    if (std::string wrong = first_wrong_element<float>("sgemm", sgemm, shape); !wrong.empty()) return wrong;
    if (std::string wrong = first_wrong_element<double>("dgemm", dgemm, shape); !wrong.empty()) return wrong;
  }
  return "";
}

}  // namespace detail
}  // namespace distgrad
