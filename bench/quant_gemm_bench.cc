// The CPU GEMM over f16 and block-quantized weights on Llama-3.2-1B's projection shapes,
// for a decode step (1 row), batches (8, 64) and a prefill chunk (512), with each
// q8_0/q4_0 kernel (widening in registers, widened rows, integer dot products) named
// explicitly (the integer one also on AVX2 alone, where the CPU has AVX512-VNNI: the label
// names the instruction set), q4_k and q6_k (widened rows, integer, integer on AVX2), and the
// Hugging Face formats fp8_e4m3 and int4_g128. GB/s is weight bytes read per second (the weights
// once per GEMM), the figure decode is bound by. Iterations cycle through copies of the weights
// filling kColdBytes, more than the last-level cache, so the weights come from memory as a whole
// model's do in decode.
//
//   build/bench/quant_gemm_bench
//   build/bench/quant_gemm_bench --benchmark_filter='q4_0.*/1/'
#include <benchmark/benchmark.h>

#include <algorithm>
#include <map>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "engine/cpu/gemm_tiles.h"
#include "engine/cpu/isa.h"
#include "engine/cpu/ops.h"
#include "engine/model/dtype.h"
#include "engine/model/quant.h"

namespace ptxserve {
namespace {

std::vector<float> RandomVec(int64_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> dist(-1, 1);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

// Weights of N x K as `quant` blocks (kNone: f16).
std::vector<uint8_t> Weights(QuantType quant, int64_t N, int64_t K) {
  const std::vector<float> f = RandomVec(N * K, 2);
  if (quant == QuantType::kNone) {
    std::vector<uint8_t> w(N * K * 2);
    ConvertFromFloat(DType::kF16, f.data(), f.size(), w.data());
    return w;
  }
  const int64_t row_bytes = QuantRowBytes(quant, K);
  std::vector<uint8_t> w(N * row_bytes);
  for (int64_t n = 0; n < N; ++n) {
    (void)QuantizeRow(quant, f.data() + n * K, K, w.data() + n * row_bytes);
  }
  return w;
}

constexpr size_t kColdBytes = size_t{512} << 20;

// state.range: (M, N, K). avx2: the GEMM kernels' AVX2 versions, whatever the CPU has.
void RunGemm(benchmark::State& state, QuantType quant, cpu::BlockKernel kernel, bool avx2 = false) {
  const int64_t M = state.range(0), N = state.range(1), K = state.range(2);
  cpu::SetGemmIsa(avx2 ? cpu::Isa::kAvx2 : cpu::DetectIsa());
  state.SetLabel(cpu::IsaName(cpu::GemmIsa()));
  // Google Benchmark calls this a few times per case: the copies are made once per case.
  static std::map<std::tuple<QuantType, int64_t, int64_t>, std::vector<uint8_t>> made;
  static std::vector<uint8_t> all;
  static std::tuple<QuantType, int64_t, int64_t> all_holds;
  const auto key = std::tuple{quant, N, K};
  std::vector<uint8_t>& w = made[key];
  if (w.empty()) w = Weights(quant, N, K);
  const size_t copies = std::max<size_t>(1, kColdBytes / w.size());
  if (all.size() != copies * w.size() || all_holds != key) {
    all.resize(copies * w.size());
    for (size_t c = 0; c < copies; ++c) std::copy(w.begin(), w.end(), all.begin() + c * w.size());
    all_holds = key;
  }
  const std::vector<float> x = RandomVec(M * K, 1);
  std::vector<float> y(M * N);
  size_t next = 0;
  for (auto _ : state) {
    const cpu::WeightMatrix wm{all.data() + next * w.size(), DType::kF16, quant};
    next = (next + 1) % copies;
    if (quant == QuantType::kNone) {
      cpu::Gemm(x.data(), wm, nullptr, M, N, K, y.data());
    } else {
      cpu::GemmQuantized(x.data(), wm, nullptr, M, N, K, y.data(), kernel);
    }
    benchmark::DoNotOptimize(y.data());
  }
  cpu::SetGemmIsa(cpu::DetectIsa());
  state.counters["GB/s"] = benchmark::Counter(static_cast<double>(w.size()) * 1e-9,
                                              benchmark::Counter::kIsIterationInvariantRate);
  state.counters["GFLOP/s"] =
      benchmark::Counter(2.0 * M * N * K * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
}

// Llama-3.2-1B: q/o (2048 x 2048), gate/up (8192 x 2048), down (2048 x 8192).
void Shapes(benchmark::internal::Benchmark* b) {
  for (int64_t m : {1, 8, 64, 512}) {
    for (auto [n, k] : {std::pair<int64_t, int64_t>{2048, 2048}, {8192, 2048}, {2048, 8192}}) {
      b->Args({m, n, k});
    }
  }
  b->ArgNames({"m", "n", "k"})->Unit(benchmark::kMicrosecond)->UseRealTime();
}

using cpu::BlockKernel;
BENCHMARK_CAPTURE(RunGemm, f16, QuantType::kNone, BlockKernel::kChosen)->Apply(Shapes);
BENCHMARK_CAPTURE(RunGemm, q8_0_widening, QuantType::kQ8_0, BlockKernel::kWidening)->Apply(Shapes);
BENCHMARK_CAPTURE(RunGemm, q8_0_widened_rows, QuantType::kQ8_0, BlockKernel::kWidenedRows)
    ->Apply(Shapes);
BENCHMARK_CAPTURE(RunGemm, q8_0_integer, QuantType::kQ8_0, BlockKernel::kInteger)->Apply(Shapes);
BENCHMARK_CAPTURE(RunGemm, q8_0_integer_avx2, QuantType::kQ8_0, BlockKernel::kInteger, true)
    ->Apply(Shapes);
BENCHMARK_CAPTURE(RunGemm, q4_0_widening, QuantType::kQ4_0, BlockKernel::kWidening)->Apply(Shapes);
BENCHMARK_CAPTURE(RunGemm, q4_0_widened_rows, QuantType::kQ4_0, BlockKernel::kWidenedRows)
    ->Apply(Shapes);
BENCHMARK_CAPTURE(RunGemm, q4_0_integer, QuantType::kQ4_0, BlockKernel::kInteger)->Apply(Shapes);
BENCHMARK_CAPTURE(RunGemm, q4_0_integer_avx2, QuantType::kQ4_0, BlockKernel::kInteger, true)
    ->Apply(Shapes);
BENCHMARK_CAPTURE(RunGemm, q8_0_chosen, QuantType::kQ8_0, BlockKernel::kChosen)->Apply(Shapes);
BENCHMARK_CAPTURE(RunGemm, q4_0_chosen, QuantType::kQ4_0, BlockKernel::kChosen)->Apply(Shapes);
// llama.cpp's k-quants (a Q4_K_M file's q4_k and q6_k): widened rows against the integer
// kernel (gemm_quant_k.cc; gemm_quant_k_vnni.cc's tile where the CPU has AVX512-VNNI, and
// the AVX2 one named apart).
BENCHMARK_CAPTURE(RunGemm, q4_k_widened_rows, QuantType::kQ4_K, BlockKernel::kWidenedRows)
    ->Apply(Shapes);
BENCHMARK_CAPTURE(RunGemm, q4_k_integer, QuantType::kQ4_K, BlockKernel::kInteger)->Apply(Shapes);
BENCHMARK_CAPTURE(RunGemm, q4_k_integer_avx2, QuantType::kQ4_K, BlockKernel::kInteger, true)
    ->Apply(Shapes);
BENCHMARK_CAPTURE(RunGemm, q6_k_widened_rows, QuantType::kQ6_K, BlockKernel::kWidenedRows)
    ->Apply(Shapes);
BENCHMARK_CAPTURE(RunGemm, q6_k_integer, QuantType::kQ6_K, BlockKernel::kInteger)->Apply(Shapes);
BENCHMARK_CAPTURE(RunGemm, q6_k_integer_avx2, QuantType::kQ6_K, BlockKernel::kInteger, true)
    ->Apply(Shapes);
// Hugging Face checkpoints' formats as loaded (fp8, awq/gptq): both exact kernels.
BENCHMARK_CAPTURE(RunGemm, fp8_e4m3_widening, QuantType::kFp8E4M3, BlockKernel::kWidening)
    ->Apply(Shapes);
BENCHMARK_CAPTURE(RunGemm, fp8_e4m3_widened_rows, QuantType::kFp8E4M3, BlockKernel::kWidenedRows)
    ->Apply(Shapes);
BENCHMARK_CAPTURE(RunGemm, int4_g128_widening, QuantType::kInt4G128, BlockKernel::kWidening)
    ->Apply(Shapes);
BENCHMARK_CAPTURE(RunGemm, int4_g128_widened_rows, QuantType::kInt4G128, BlockKernel::kWidenedRows)
    ->Apply(Shapes);

}  // namespace
}  // namespace ptxserve

BENCHMARK_MAIN();
