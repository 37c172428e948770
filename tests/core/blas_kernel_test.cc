// The BLAS kernel choice (core/blas_kernel.h): this process runs the fastest core type its CPU
// allows without a warning, fresh processes honour OPENBLAS_CORETYPE and warn (on rank 0 only)
// when it is below the CPU's, and the self-check passes OpenBLAS and catches wrong products.
#include "core/blas_kernel.h"

#include <cblas.h>
#include <gtest/gtest.h>
#include <strings.h>

#include <array>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

namespace distgrad {
namespace {

std::string output_of(const std::string& command) {
  std::unique_ptr<FILE, int (*)(FILE*)> pipe(popen(command.c_str(), "r"), pclose);
  if (!pipe) return "popen failed for " + command;
  std::string output;
  std::array<char, 4096> chunk;
  while (size_t read = std::fread(chunk.data(), 1, chunk.size(), pipe.get())) output.append(chunk.data(), read);
  return output;
}

// The probe's output, with the environment given (OPENBLAS_CORETYPE and RANK unset otherwise).
std::string probe_output(const std::string& environment) {
  return output_of("env -u OPENBLAS_CORETYPE -u RANK -u OMPI_COMM_WORLD_RANK -u PMI_RANK -u SLURM_PROCID " +
                   environment + " " DISTGRAD_BLAS_KERNEL_PROBE " 2>&1");
}

// The value of `field=` in the probe's report.
std::string reported(const std::string& output, const std::string& field) {
  const size_t at = output.find(" " + field + "=");
  if (at == std::string::npos) return "(no " + field + " in the probe's output)";
  const size_t from = at + field.size() + 2;
  return output.substr(from, output.find_first_of(" \n", from) - from);
}

int lines_containing(const std::string& text, const std::string& part) {
  int lines = 0;
  for (size_t at = text.find(part); at != std::string::npos; at = text.find(part, at + part.size())) ++lines;
  return lines;
}

// A process started without OPENBLAS_CORETYPE runs the fastest core type its CPU allows,
// chosen by OpenBLAS or by distgrad, without a warning.
TEST(BlasKernel, AProcessRunsTheFastestCoreTypeItsCpuAllows) {
  const std::string output = probe_output("");
  EXPECT_EQ(output.find("loaded\ncore="), 0u) << output;
  EXPECT_EQ(lines_containing(output, "distgrad:"), 0) << output;
  EXPECT_NE(output.find(" self_check=passed\n"), std::string::npos) << output;
  // The probe's own view of its CPU (under valgrind this process sees fewer instruction sets).
  const std::string best = reported(output, "best");
  if (output.find(" chosen_by=distgrad ") != std::string::npos) {
    EXPECT_NE(output.find("core=" + best + " "), std::string::npos) << output;
  }
  if (best == "SkylakeX") {
    const bool avx512_kernels = output.find("core=SkylakeX ") != std::string::npos ||
                                output.find("core=Cooperlake ") != std::string::npos ||
                                output.find("core=SapphireRapids ") != std::string::npos;
    EXPECT_TRUE(avx512_kernels) << output;
  }
#if defined(__x86_64__)
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512dq") &&
      __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512cd")) {
    EXPECT_EQ(best, "SkylakeX");
  }
#endif
}

TEST(BlasKernel, ThisProcessReportsTheCoreTypeOpenblasRuns) {
  EXPECT_EQ(blas_kernel().core, openblas_get_corename());
  EXPECT_EQ(blas_kernel().chosen_by == BlasKernelChooser::kEnvironment, std::getenv("OPENBLAS_CORETYPE") != nullptr);
}

TEST(BlasKernel, OpenblasCoretypeIsHonouredAndWarnedAboutOnRankZeroWhenBelowTheCpus) {
  const std::string rank_zero = probe_output("OPENBLAS_CORETYPE=Sandybridge");
  const std::string best = reported(rank_zero, "best");
  if (best.empty() || strcasecmp(best.c_str(), "Sandybridge") == 0) GTEST_SKIP() << "the CPU allows " << best;
  EXPECT_NE(rank_zero.find("core=Sandybridge best=" + best + " chosen_by=OPENBLAS_CORETYPE"), std::string::npos)
      << rank_zero;
  EXPECT_EQ(rank_zero.find("loaded\ndistgrad: OpenBLAS runs its Sandybridge kernels on a CPU that can run " + best +
                           " ones (OPENBLAS_CORETYPE=Sandybridge)"),
            0u)
      << rank_zero;
  EXPECT_EQ(lines_containing(rank_zero, "distgrad:"), 1) << rank_zero;
  const std::string rank_one = probe_output("OPENBLAS_CORETYPE=Sandybridge RANK=1");
  EXPECT_EQ(lines_containing(rank_one, "distgrad:"), 0) << rank_one;
  EXPECT_NE(rank_one.find("core=Sandybridge"), std::string::npos) << rank_one;
}

using detail::openblas_dgemm;
using detail::openblas_sgemm;

// sgemm that gets one element of the transposed-A products past the small-matrix size wrong.
void sgemm_with_one_wrong_element(bool transpose_a, bool transpose_b, int m, int n, int k, float alpha, const float* a,
                                  int lda, const float* b, int ldb, float beta, float* c, int ldc) {
  openblas_sgemm(transpose_a, transpose_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
  if (transpose_a && !transpose_b && m * n * k > 1000000) c[5 * ldc + 7] += 0.25f;
}

// dgemm computed in float32: right to float precision only.
void dgemm_in_float(bool transpose_a, bool transpose_b, int m, int n, int k, double alpha, const double* a, int lda,
                    const double* b, int ldb, double beta, double* c, int ldc) {
  const std::vector<float> a32(a, a + static_cast<size_t>(transpose_a ? k : m) * lda);
  const std::vector<float> b32(b, b + static_cast<size_t>(transpose_b ? n : k) * ldb);
  std::vector<float> c32(c, c + static_cast<size_t>(m) * ldc);
  openblas_sgemm(transpose_a, transpose_b, m, n, k, static_cast<float>(alpha), a32.data(), lda, b32.data(), ldb,
                 static_cast<float>(beta), c32.data(), ldc);
  std::copy(c32.begin(), c32.end(), c);
}

TEST(BlasKernel, TheSelfCheckPassesOpenblasAndNamesTheFirstWrongElement) {
  EXPECT_EQ(detail::first_wrong_product(openblas_sgemm, openblas_dgemm), "");
  const std::string one_wrong = detail::first_wrong_product(sgemm_with_one_wrong_element, openblas_dgemm);
  EXPECT_EQ(one_wrong.rfind("sgemm 101x103x97, A transposed: C[5,7] = ", 0), 0u) << one_wrong;
  EXPECT_NE(one_wrong.find(", expected "), std::string::npos) << one_wrong;
  const std::string float_precision = detail::first_wrong_product(openblas_sgemm, dgemm_in_float);
  EXPECT_EQ(float_precision.rfind("dgemm 13x11x7: C[", 0), 0u) << float_precision;
}

// The switch the choice uses, tried here from whatever core type this process runs to two
// others and back, each checked with the self-check.
TEST(BlasKernel, OpenblasSwitchesItsKernelsAtRunTimeAndBack) {
  if (!detail::openblas_can_switch_cores()) GTEST_SKIP() << "this OpenBLAS is built without DYNAMIC_ARCH";
  const std::string running = blas_kernel().core;
  for (const std::string core : {"Sandybridge", "Nehalem"}) {
    ASSERT_TRUE(detail::use_openblas_core(core)) << core;
    EXPECT_EQ(std::string(openblas_get_corename()), core);
    EXPECT_EQ(detail::first_wrong_product(openblas_sgemm, openblas_dgemm), "") << core;
  }
  EXPECT_FALSE(detail::use_openblas_core("NoSuchCore"));
  ASSERT_TRUE(detail::use_openblas_core(running));
  EXPECT_EQ(std::string(openblas_get_corename()), running);
}

}  // namespace
}  // namespace distgrad
