// CPU prefill: a 512-token prompt through the CPU backend, and the share of that step
// spent in paged attention; plus the attention op alone at prefill and decode shapes.
//
// BM_PrefillStep runs one untimed Step (a warmup, as llama-bench's), then alternates, per
// iteration, one timed Step over the whole prompt with num_layers timed cpu::PagedAttention
// calls at the same shape (512 query rows of one sequence against its 512 cached
// positions), so both see the same machine load:
// attention_pct = 100 * attention time / step time; once per GEMM instruction set the
// CPU has (each gives the AVX2 kernels' bits, except that with AVX512-VNNI q8_0 runs the
// integer kernel at 512 rows, where the others widen its rows). The model is read from --model
// (default /tmp/m1b-f16, made by `ptxserve make-model --preset llama-3.2-1b --dtype f16`).
// BM_Attention needs no model: the llama-3.2-1b attention shape (32 query heads, 8 KV
// heads, head_dim 64) at a prefill of `rows` rows and at decode (1 row per sequence).
//
//   build/bench/prefill_bench --model=/tmp/m1b-f16
//   build/bench/prefill_bench --benchmark_filter=BM_Attention
#include <benchmark/benchmark.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "engine/cpu/cpu_backend.h"
#include "engine/cpu/isa.h"
#include "engine/cpu/ops.h"
#include "engine/model/model.h"
#include "engine/step_batch.h"

namespace ptxserve {
namespace {

constexpr int kPrompt = 512;
constexpr int kBlockSize = 16;

std::string& ModelDir() {
  static std::string dir = "/tmp/m1b-f16";
  return dir;
}

// One attention problem in the StepBatch layout: `seqs` sequences of `context` cached
// positions each, the last `rows` of them queried, blocks handed out in order.
struct AttentionProblem {
  int64_t heads, kv_heads, head_dim;
  DType dtype;
  int32_t seqs, context, rows;
  std::vector<int32_t> positions, query_start, seq_lens, tables;
  int32_t max_blocks = 0;
  std::vector<float> q, out;
  std::vector<uint8_t> k_pool, v_pool;

  AttentionProblem(int64_t h, int64_t kvh, int64_t hd, DType dt, int32_t s, int32_t ctx, int32_t r)
      : heads(h), kv_heads(kvh), head_dim(hd), dtype(dt), seqs(s), context(ctx), rows(r) {
    max_blocks = (context + kBlockSize - 1) / kBlockSize;
    query_start.push_back(0);
    for (int32_t i = 0; i < seqs; ++i) {
      for (int32_t p = context - rows; p < context; ++p) positions.push_back(p);
      query_start.push_back(query_start.back() + rows);
      seq_lens.push_back(context);
      for (int32_t b = 0; b < max_blocks; ++b) tables.push_back(i * max_blocks + b);
    }
    std::mt19937 rng(7);
    std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
    q.resize(static_cast<size_t>(seqs) * rows * heads * head_dim);
    for (float& x : q) x = dist(rng);
    out.resize(q.size());
    const size_t pool = static_cast<size_t>(seqs) * max_blocks * kv_heads * kBlockSize * head_dim;
    std::vector<float> kv(pool);
    k_pool.resize(pool * DTypeSize(dtype));
    v_pool.resize(k_pool.size());
    for (auto* dst : {&k_pool, &v_pool}) {
      for (float& x : kv) x = dist(rng);
      ConvertFromFloat(dtype, kv.data(), pool, dst->data());
    }
  }

  void Run() {
    cpu::PagedAttention(q.data(), positions.data(), query_start.data(), seq_lens.data(),
                        tables.data(), max_blocks, seqs, heads, kv_heads, head_dim, kBlockSize,
                        dtype, k_pool.data(), v_pool.data(),
                        1.0f / std::sqrt(static_cast<float>(head_dim)), out.data());
    benchmark::DoNotOptimize(out.data());
  }

  // Multiply-adds of QK^T and PV over the causal triangle, for GFLOP/s.
  double Flops() const {
    double pairs = 0;
    for (int32_t p : positions) pairs += p + 1.0;
    return 4.0 * pairs * static_cast<double>(heads * head_dim);
  }
};

void BM_Attention(benchmark::State& state, DType dtype) {
  const auto seqs = static_cast<int32_t>(state.range(0));
  const auto context = static_cast<int32_t>(state.range(1));
  const auto rows = static_cast<int32_t>(state.range(2));
  AttentionProblem p(32, 8, 64, dtype, seqs, context, rows);
  for (auto _ : state) p.Run();
  state.counters["GFLOP_per_s"] =
      benchmark::Counter(p.Flops() * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
}

// arg: the GEMM's instruction set (0 avx2, 1 avx512, 2 avx512_vnni, 3 avx512_bf16;
// engine/cpu/isa.h).
void BM_PrefillStep(benchmark::State& state) {
  const auto isa = static_cast<cpu::Isa>(state.range(0));
  if (!cpu::SetGemmIsa(isa)) return state.SkipWithError("this CPU lacks the instruction set");
  state.SetLabel(cpu::IsaName(isa));
  auto loaded = LoadModel(ModelDir());
  if (!loaded.ok()) return state.SkipWithError(("cannot load " + ModelDir()).c_str());
  const ModelConfig& c = loaded->config;
  KvCacheConfig kv;
  kv.block_size = kBlockSize;
  kv.num_blocks = kPrompt / kBlockSize + 1;
  auto backend = CpuBackend::Create(*loaded, kv);
  if (!backend.ok()) return state.SkipWithError(backend.status().ToString().c_str());
  StepBatch b;
  b.max_blocks_per_seq = kv.num_blocks;
  b.query_start = {0, kPrompt};
  for (int p = 0; p < kPrompt; ++p) {
    b.token_ids.push_back(static_cast<int32_t>((p * 7919) % c.vocab_size));
    b.positions.push_back(p);
    b.slot_mapping.push_back(p);
  }
  b.seq_lens = {kPrompt};
  b.logits_rows = {kPrompt - 1};
  for (int i = 0; i < kv.num_blocks; ++i) b.block_tables.push_back(i);
  AttentionProblem attention(c.num_heads, c.num_kv_heads, c.head_dim, kv.dtype, 1, kPrompt,
                             kPrompt);

  std::vector<float> logits;
  // One untimed Step first, as llama-bench's warmup run: the first Step maps the weights'
  // file pages and first-touches the activation buffers (page faults, ~10% of a cold
  // 512-token step here), which a serving process pays once, not per prompt.
  if (auto st = (*backend)->Step(b, &logits); !st.ok()) {
    return state.SkipWithError(st.ToString().c_str());
  }
  double step_s = 0, attention_s = 0;
  using Clock = std::chrono::steady_clock;
  for (auto _ : state) {
    const auto t0 = Clock::now();
    if (auto st = (*backend)->Step(b, &logits); !st.ok()) {
      return state.SkipWithError(st.ToString().c_str());
    }
    const auto t1 = Clock::now();
    for (int l = 0; l < c.num_layers; ++l) attention.Run();
    const auto t2 = Clock::now();
    step_s += std::chrono::duration<double>(t1 - t0).count();
    attention_s += std::chrono::duration<double>(t2 - t1).count();
    state.SetIterationTime(std::chrono::duration<double>(t1 - t0).count());
  }
  const double n = static_cast<double>(state.iterations());
  state.counters["step_ms"] = 1e3 * step_s / n;
  state.counters["attention_ms"] = 1e3 * attention_s / n;
  state.counters["attention_pct"] = 100.0 * attention_s / step_s;
  state.counters["prompt_tokens_per_s"] = kPrompt * n / step_s;
  cpu::SetGemmIsa(cpu::DetectIsa());
}

// args: sequences, context, query rows per sequence.
BENCHMARK_CAPTURE(BM_Attention, f32, DType::kF32)
    ->Args({1, kPrompt, kPrompt})
    ->Args({1, 1000, 1000})
    ->Args({1, 2048, 256})
    ->Args({1, kPrompt, 1})
    ->Args({16, kPrompt, 1})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
BENCHMARK_CAPTURE(BM_Attention, f16, DType::kF16)
    ->Args({1, kPrompt, kPrompt})
    ->Args({16, kPrompt, 1})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
BENCHMARK(BM_PrefillStep)
    ->Arg(static_cast<int>(cpu::Isa::kAvx2))
    ->Arg(static_cast<int>(cpu::Isa::kAvx512))
    ->Arg(static_cast<int>(cpu::Isa::kAvx512Vnni))
    ->Arg(static_cast<int>(cpu::Isa::kAvx512Bf16))
    ->Iterations(2)
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace ptxserve

// --model=DIR is ours; the rest is Google Benchmark's.
int main(int argc, char** argv) {
  std::vector<char*> rest;
  for (int i = 0; i < argc; ++i) {
    if (std::strncmp(argv[i], "--model=", 8) == 0) {
      ptxserve::ModelDir() = argv[i] + 8;
    } else {
      rest.push_back(argv[i]);
    }
  }
  int n = static_cast<int>(rest.size());
  benchmark::Initialize(&n, rest.data());
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
