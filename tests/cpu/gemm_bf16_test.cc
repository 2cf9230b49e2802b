// The bf16 GEMM on AVX512-BF16's dot products (engine/cpu/gemm_bf16.h) against sums in double
// over x rounded to bf16, within the error bound gemm_bf16.h derives; its rounding of x; its
// tail loads at arrays that end at a guard page; which calls Gemm sends to it; and the detection
// and forcing of the instruction set it needs. Kernel tests are skipped, with the reason printed,
// on CPUs without AVX512-BF16.
#include "engine/cpu/gemm_bf16.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "engine/cpu/isa.h"
#include "engine/cpu/ops.h"
#include "gtest/gtest.h"

namespace ptxserve::cpu {
namespace {

std::vector<float> Random(int64_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

std::vector<uint16_t> ToBf16(const std::vector<float>& v) {
  std::vector<uint16_t> b(v.size());
  for (size_t i = 0; i < v.size(); ++i) b[i] = FloatToBF16(v[i]);
  return b;
}

// gamma(n) = n u / (1 - n u), u = 2^-24: the bound on n roundings of a sum in f32.
double Gamma(int64_t n) {
  const double nu = static_cast<double>(n) * 0x1p-24;
  return nu / (1 - nu);
}

// n elements of T ending exactly where a PROT_NONE page starts, so that a read of even one byte
// past the array faults (SIGSEGV) instead of reading a neighbour's memory.
template <class T>
class GuardedArray {
 public:
  explicit GuardedArray(const std::vector<T>& values) {
    const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
    const size_t bytes = values.size() * sizeof(T);
    data_bytes_ = (bytes + page - 1) / page * page;
    map_bytes_ = data_bytes_ + page;
    void* map =
        mmap(nullptr, map_bytes_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (map == MAP_FAILED) return;
    base_ = static_cast<char*>(map);
    if (mprotect(base_ + data_bytes_, page, PROT_NONE) != 0) return;
    data_ = reinterpret_cast<T*>(base_ + data_bytes_ - bytes);
    std::memcpy(data_, values.data(), bytes);
  }
  ~GuardedArray() {
    if (base_ != nullptr) munmap(base_, map_bytes_);
  }
  GuardedArray(const GuardedArray&) = delete;
  GuardedArray& operator=(const GuardedArray&) = delete;
  const T* data() const { return data_; }  // nullptr if the mapping failed

 private:
  char* base_ = nullptr;
  T* data_ = nullptr;
  size_t data_bytes_ = 0, map_bytes_ = 0;
};

class Bf16DotTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (DetectIsa() < Isa::kAvx512Bf16) {
      std::printf("skipping: this CPU lacks AVX512-BF16, bf16 weights take the f32 kernel\n");
      GTEST_SKIP() << "no AVX512-BF16 on this CPU";
    }
  }
};

// M across the 6-row tiles (1, 5, 7, 13 leave remainders) and the 48-row blocks, N across the
// 4-row tiles and the thread split, K below, at and across the 32-k steps (a masked last
// step), with and without bias. Each output within gemm_bf16.h's f32 term of the double sum
// over bf16(x), and within the whole bound (x's rounding too) of the double sum over x.
TEST_F(Bf16DotTest, MatchesDoubleSumsOverRoundedX) {
  int64_t rounding_visible = 0;  // outputs where x's rounding moved the sum beyond f32's bound
  for (int64_t M : {1, 5, 7, 13, 16, 50}) {
    for (int64_t N : {1, 3, 4, 5, 9, 67}) {
      for (int64_t K : {1, 31, 32, 33, 64, 100, 257}) {
        SCOPED_TRACE(::testing::Message() << "M=" << M << " N=" << N << " K=" << K);
        const std::vector<float> x = Random(M * K, 1), bias = Random(N, 3);
        const std::vector<uint16_t> w = ToBf16(Random(N * K, 2));
        const std::vector<uint16_t> xb = ToBf16(x);
        const int64_t roundings = 2 * ((K + 31) / 32) + 5;
        for (const float* b : {static_cast<const float*>(nullptr), bias.data()}) {
          std::vector<float> y(M * N, NAN);
          GemmBf16Dot(x.data(), w.data(), b, M, N, K, y.data());
          for (int64_t m = 0; m < M; ++m) {
            for (int64_t n = 0; n < N; ++n) {
              double rounded = 0, exact = 0, magnitude = 0, magnitude_x = 0, magnitude_w = 0;
              for (int64_t k = 0; k < K; ++k) {
                const double wk = BF16ToFloat(w[n * K + k]);
                const double xk = BF16ToFloat(xb[m * K + k]);
                rounded += xk * wk;
                exact += static_cast<double>(x[m * K + k]) * wk;
                magnitude += std::fabs(xk * wk);
                magnitude_x += std::fabs(static_cast<double>(x[m * K + k]) * wk);
                magnitude_w += std::fabs(xk) + std::fabs(wk);
              }
              const double bias_n = b != nullptr ? b[n] : 0.0;
              const double f32_bound = Gamma(roundings) * magnitude + std::fabs(bias_n) * 0x1p-24 +
                                       0x1p-126 * (magnitude_w + static_cast<double>(K) + 48);
              const double got = y[m * N + n];
              ASSERT_LE(std::fabs(got - (rounded + bias_n)), f32_bound)
                  << "row " << m << " col " << n;
              ASSERT_LE(std::fabs(got - (exact + bias_n)), 0x1p-8 * magnitude_x + f32_bound)
                  << "row " << m << " col " << n;
              if (std::fabs(got - (exact + bias_n)) > f32_bound) ++rounding_visible;
            }
          }
        }
      }
    }
  }
  EXPECT_GT(rounding_visible, 0) << "x was not rounded to bf16";
}

// One non-zero weight per row (w = the identity) makes each output one of x's values as the
// kernel rounded it: ties go to the even neighbour, in a full 32-k step and in the masked tail.
TEST_F(Bf16DotTest, RoundsXToNearestEven) {
  const int64_t M = 2, K = 40, N = K;
  std::vector<float> x(M * K);
  const float one_ulp = 0x1p-7f;                         // bf16's spacing in [1, 2)
  const float ties[] = {1.0f + one_ulp / 2,              // -> 1 (even)
                        1.0f + 3 * one_ulp / 2,          // -> 1 + 2 ulp (even)
                        -(1.0f + one_ulp / 2),           // -> -1
                        1.0f + one_ulp / 2 + 0x1p-20f};  // just above the tie -> 1 + 1 ulp
  const std::vector<float> rest = Random(M * K, 4);
  for (int64_t i = 0; i < M * K; ++i) x[i] = i % 5 == 4 ? rest[i] : ties[i % 5 % 4];
  std::vector<uint16_t> w(N * K, 0);
  for (int64_t n = 0; n < N; ++n) w[n * K + n] = FloatToBF16(1.0f);
  std::vector<float> y(M * N);
  GemmBf16Dot(x.data(), w.data(), nullptr, M, N, K, y.data());
  EXPECT_EQ(y[0], 1.0f);
  EXPECT_EQ(y[1], 1.0f + 2 * one_ulp);
  EXPECT_EQ(y[2], -1.0f);
  EXPECT_EQ(y[3], 1.0f + one_ulp);
  for (int64_t i = 0; i < M * K; ++i) {
    ASSERT_EQ(y[i], BF16ToFloat(FloatToBF16(x[i]))) << "row " << i / K << " k " << i % K;
  }
}

// The kernel's reads past a row's last 32-k step are AVX-512 masked loads (vmovdqu16 of the
// weights, vmovups of x while it is packed, both zero-masked): a masked-off lane reads nothing
// and cannot fault, so no tail needs a copy. With x and w each ending at a PROT_NONE page, K
// short of a whole step (the last row's last load covers bytes past the array) and M, N with
// partial tiles, any full-width load of a tail would fault here; the sums must equal those
// over the same values in ordinary vectors, bit for bit.
TEST_F(Bf16DotTest, TailLoadsStayInsideArraysEndingAtAGuardPage) {
  for (int64_t K : {1, 17, 31, 33, 100}) {
    SCOPED_TRACE(::testing::Message() << "K=" << K);
    const int64_t M = kBf16DotMinRows + 1, N = 7;
    const std::vector<float> x = Random(M * K, 8), bias = Random(N, 10);
    const std::vector<uint16_t> w = ToBf16(Random(N * K, 9));
    const GuardedArray<float> guarded_x(x);
    const GuardedArray<uint16_t> guarded_w(w);
    const GuardedArray<float> guarded_bias(bias);
    ASSERT_NE(guarded_x.data(), nullptr) << "mmap/mprotect failed";
    ASSERT_NE(guarded_w.data(), nullptr) << "mmap/mprotect failed";
    ASSERT_NE(guarded_bias.data(), nullptr) << "mmap/mprotect failed";
    std::vector<float> want(M * N), got(M * N, NAN);
    GemmBf16Dot(x.data(), w.data(), bias.data(), M, N, K, want.data());
    GemmBf16Dot(guarded_x.data(), guarded_w.data(), guarded_bias.data(), M, N, K, got.data());
    EXPECT_EQ(got, want);
  }
}

// Gemm sends bf16 weights to the dot-product kernel from kBf16DotMinRows rows on, and only at
// Isa::kAvx512Bf16; fewer rows, or the level below it forced by SetGemmIsa, give the exact f32
// sums of the widened weights, as before.
TEST_F(Bf16DotTest, GemmTakesTheKernelFromMinRowsAtItsLevel) {
  const int64_t N = 9, K = 100;
  for (int64_t M : {kBf16DotMinRows - 1, kBf16DotMinRows, kBf16DotMinRows + 21}) {
    SCOPED_TRACE(::testing::Message() << "M=" << M);
    const std::vector<float> x = Random(M * K, 5), bias = Random(N, 7);
    const std::vector<uint16_t> w = ToBf16(Random(N * K, 6));
    std::vector<float> wf(N * K);
    ConvertToFloat(DType::kBF16, w.data(), w.size(), wf.data());
    std::vector<float> dot(M * N), widened(M * N), got(M * N), forced(M * N);
    GemmBf16Dot(x.data(), w.data(), bias.data(), M, N, K, dot.data());
    Gemm(x.data(), wf.data(), bias.data(), M, N, K, widened.data());
    ASSERT_EQ(GemmIsa(), Isa::kAvx512Bf16);
    Gemm(x.data(), WeightMatrix{w.data(), DType::kBF16}, bias.data(), M, N, K, got.data());
    ASSERT_TRUE(SetGemmIsa(Isa::kAvx512Vnni));
    Gemm(x.data(), WeightMatrix{w.data(), DType::kBF16}, bias.data(), M, N, K, forced.data());
    ASSERT_TRUE(SetGemmIsa(DetectIsa()));
    EXPECT_EQ(got, M >= kBf16DotMinRows ? dot : widened);
    EXPECT_EQ(forced, widened);
    EXPECT_NE(dot, widened);
  }
}

// SetGemmIsa takes every level up to DetectIsa() and refuses the ones above it, changing
// nothing, so a CPU without AVX512-BF16 keeps the kernels it has.
TEST(IsaTest, SetGemmIsaRefusesLevelsAboveTheCpus) {
  const Isa detected = DetectIsa();
  for (Isa isa : {Isa::kAvx2, Isa::kAvx512, Isa::kAvx512Vnni, Isa::kAvx512Bf16}) {
    SCOPED_TRACE(IsaName(isa));
    ASSERT_TRUE(SetGemmIsa(detected));
    if (isa <= detected) {
      EXPECT_TRUE(SetGemmIsa(isa));
      EXPECT_EQ(GemmIsa(), isa);
    } else {
      EXPECT_FALSE(SetGemmIsa(isa));
      EXPECT_EQ(GemmIsa(), detected);
    }
  }
  ASSERT_TRUE(SetGemmIsa(detected));
  EXPECT_STREQ(IsaName(Isa::kAvx512Bf16), "avx512_bf16");
}

// DetectIsa's cpuid reading agrees with the kernel's list of CPU flags (Linux only).
TEST(IsaTest, DetectIsaAgreesWithProcCpuinfo) {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line) && line.rfind("flags", 0) != 0) {
  }
  if (line.empty()) {
    std::printf("skipping: no flags line in /proc/cpuinfo here\n");
    GTEST_SKIP() << "no /proc/cpuinfo flags";
  }
  std::istringstream words(line);
  bool f = false, vl = false, vnni = false, bw = false, bf16 = false;
  for (std::string w; words >> w;) {
    f |= w == "avx512f";
    vl |= w == "avx512vl";
    vnni |= w == "avx512_vnni";
    bw |= w == "avx512bw";
    bf16 |= w == "avx512_bf16";
  }
  const Isa want = !(f && vl)   ? Isa::kAvx2
                   : !vnni      ? Isa::kAvx512
                   : bw && bf16 ? Isa::kAvx512Bf16
                                : Isa::kAvx512Vnni;
  EXPECT_EQ(DetectIsa(), want) << IsaName(DetectIsa()) << " vs " << IsaName(want);
}

}  // namespace
}  // namespace ptxserve::cpu
