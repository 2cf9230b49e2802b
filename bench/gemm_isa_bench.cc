// The CPU GEMM under each instruction set it can pick at run time (engine/cpu/isa.h):
// the AVX2 kernel and, where the CPU has AVX-512 F/VL, the AVX-512 one (same results,
// bit for bit). Shapes of the llama-3.2-1b preset's projections with f16 weights as
// stored: decode (M = 1, bound by weight bandwidth) and prefill chunks (compute-bound).
// BM_GemmBf16: bf16 weights at the AVX-512 f32 kernel (isa 2) and, from 16 rows on, at
// AVX512-BF16's dot products over x rounded to bf16 (isa 3; engine/cpu/gemm_bf16.h).
//
//   build/bench/gemm_isa_bench [--gemm_threads=N]
//
// --gemm_threads=1 runs the GEMM on the calling thread alone, so the CPU column is all of
// its work: on a machine others load, CPU time per GEMM moves far less than wall time.
#include <benchmark/benchmark.h>

#include <cstdlib>
#include <random>
#include <string_view>
#include <vector>

#include "engine/cpu/isa.h"
#include "engine/cpu/ops.h"
#include "engine/util/thread_pool.h"

namespace ptxserve::cpu {
namespace {

// args: isa (0 avx2, 1 avx512, 2 avx512_vnni, 3 avx512_bf16), M, N, K.
void RunGemm(benchmark::State& state, DType dtype) {
  const auto isa = static_cast<Isa>(state.range(0));
  const int64_t M = state.range(1), N = state.range(2), K = state.range(3);
  if (!SetGemmIsa(isa)) return state.SkipWithError("this CPU lacks the instruction set");
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> x(M * K), wf(N * K), y(M * N);
  for (float& v : x) v = dist(rng);
  for (float& v : wf) v = dist(rng);
  std::vector<uint16_t> w(N * K);
  ConvertFromFloat(dtype, wf.data(), wf.size(), w.data());
  for (auto _ : state) {
    Gemm(x.data(), WeightMatrix{w.data(), dtype}, nullptr, M, N, K, y.data());
    benchmark::DoNotOptimize(y.data());
  }
  SetGemmIsa(DetectIsa());
  state.SetLabel(IsaName(isa));
  state.counters["GFLOP_per_s"] = benchmark::Counter(2e-9 * static_cast<double>(M * N * K),
                                                     benchmark::Counter::kIsIterationInvariantRate);
}

void BM_Gemm(benchmark::State& state) { RunGemm(state, DType::kF16); }
void BM_GemmBf16(benchmark::State& state) { RunGemm(state, DType::kBF16); }

void Shapes(benchmark::internal::Benchmark* b) {
  for (int64_t M : {1, 64, 512}) {
    for (int64_t isa : {0, 1}) b->Args({isa, M, 2048, 2048});  // q_proj / o_proj
  }
  for (int64_t isa : {0, 1}) b->Args({isa, 512, 8192, 2048});  // gate or up
  for (int64_t isa : {0, 1}) b->Args({isa, 512, 2048, 8192});  // down
}
BENCHMARK(BM_Gemm)->Apply(Shapes)->Unit(benchmark::kMillisecond)->UseRealTime();

void Bf16Shapes(benchmark::internal::Benchmark* b) {
  for (int64_t M : {1, 16, 64, 512}) {
    for (int64_t isa : {2, 3}) b->Args({isa, M, 2048, 2048});
  }
  for (int64_t isa : {2, 3}) b->Args({isa, 512, 8192, 2048});
  for (int64_t isa : {2, 3}) b->Args({isa, 512, 2048, 8192});
}
BENCHMARK(BM_GemmBf16)->Apply(Bf16Shapes)->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace
}  // namespace ptxserve::cpu

int main(int argc, char** argv) {
  constexpr std::string_view kThreads = "--gemm_threads=";
  int kept = 1;
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    if (arg.starts_with(kThreads)) {
      ptxserve::ThreadPool::SetDefaultThreadCount(std::atoi(argv[i] + kThreads.size()));
    } else {
      argv[kept++] = argv[i];
    }
  }
  argc = kept;
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
