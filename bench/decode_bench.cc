// Decode throughput of the CPU backend against its memory-bandwidth roofline.
//
// A decode step streams every weight once, as stored (f32, f16, bf16 or quantized blocks),
// so a step cannot beat weight_bytes / memcpy_bandwidth. Both are measured in this run:
// BM_Memcpy copies a buffer of the same size; BM_Decode reports tokens/s and the
// roofline fraction (roofline_pct) = (step time at the memcpy bandwidth) / (step time).
//
//   build/bench/decode_bench                        # the test model and the 15m preset
//   build/bench/decode_bench --benchmark_filter=15m
//   build/bench/decode_bench --model=/tmp/m1b-q4_0.gguf   # any model directory or GGUF
#include <benchmark/benchmark.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "engine/cpu/cpu_backend.h"
#include "engine/kv_block_manager.h"
#include "engine/model/model.h"
#include "engine/model/synthetic.h"

namespace ptxserve {
namespace {

constexpr int kContext = 128;  // tokens already in each sequence's cache when decoding

// Stored bytes of every weight tensor a decode step reads: all but the embedding, of
// which a step reads one row per token (its bytes count once when it is also the LM head).
size_t WeightBytes(const Model& m) {
  size_t n = m.tensors.final_norm.nbytes + m.tensors.lm_head.nbytes;
  for (const auto& l : m.tensors.layers) {
    for (const Tensor* t : {&l.attn_norm, &l.wq, &l.wk, &l.wv, &l.wo, &l.bq, &l.bk, &l.bv,
                            &l.mlp_norm, &l.w_gate, &l.w_up, &l.w_down}) {
      if (t->present()) n += t->nbytes;
    }
  }
  return n;
}

// --model=PATH: benchmark that model (a directory or a GGUF file) instead of the built-ins.
std::string& ModelPath() {
  static std::string path;
  return path;
}

// Models by name: --model's, the shared test model, and the 15M synthetic preset written
// once.
const Model* GetModel(const std::string& name) {
  static std::map<std::string, std::unique_ptr<Model>> cache;
  if (auto it = cache.find(name); it != cache.end()) return it->second.get();
  std::string dir;
  if (!ModelPath().empty()) {
    dir = ModelPath();
  } else if (name == "tinystories") {
    dir = std::string(PTXSERVE_SHARED_MODELS) + "/tinystories-656k";
  } else {
    dir = (std::filesystem::temp_directory_path() / ("ptxserve-bench-" + name)).string();
    if (!std::filesystem::exists(dir + "/config.json")) {
      std::filesystem::create_directories(dir);
      auto spec = SyntheticPreset(name);
      if (!spec.ok() || !WriteSyntheticModel(dir, *spec, 1, DType::kF32).ok()) return nullptr;
    }
  }
  auto m = LoadModel(dir);
  if (!m.ok()) return nullptr;
  return (cache[name] = std::make_unique<Model>(*std::move(m))).get();
}

// memcpy bandwidth per model (bytes/s), measured by BM_Memcpy, which runs first.
std::map<std::string, double>& MemcpyBandwidth() {
  static std::map<std::string, double> bw;
  return bw;
}

void BM_Memcpy(benchmark::State& state, const std::string& name) {
  const Model* m = GetModel(name);
  if (!m) return state.SkipWithError(("model " + name + " unavailable").c_str());
  const size_t bytes = WeightBytes(*m);
  std::vector<char> src(bytes, 1), dst(bytes, 0);
  const auto t0 = std::chrono::steady_clock::now();
  for (auto _ : state) {
    std::memcpy(dst.data(), src.data(), bytes);
    benchmark::DoNotOptimize(dst.data());
    benchmark::ClobberMemory();
  }
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  MemcpyBandwidth()[name] = static_cast<double>(state.iterations()) * bytes / secs;
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * bytes);
  state.counters["weight_MB"] = bytes / 1e6;
}

void BM_Decode(benchmark::State& state, const std::string& name) {
  const Model* m = GetModel(name);
  if (!m) return state.SkipWithError(("model " + name + " unavailable").c_str());
  const int batch = static_cast<int>(state.range(0));
  KvCacheConfig kv;
  kv.block_size = 16;
  kv.num_blocks = batch * ((kContext + 16) / 16 + 1);
  auto backend = CreateCpuBackend(*m, kv);
  if (!backend.ok()) return state.SkipWithError(backend.status().ToString().c_str());
  KvBlockManager blocks(kv.num_blocks, kv.block_size);

  // Prefill every sequence to kContext tokens, then time one decode token per sequence.
  std::vector<std::vector<int32_t>> tables(batch);
  StepBatch prefill, decode;
  for (int s = 0; s < batch; ++s) {
    if (!blocks.EnsureCapacity(&tables[s], kContext + 1).ok()) {
      return state.SkipWithError("KV cache too small");
    }
  }
  auto fill = [&](StepBatch& b, int first, int count) {
    b = StepBatch{};
    b.max_blocks_per_seq = static_cast<int32_t>(tables[0].size());
    for (int s = 0; s < batch; ++s) {
      b.query_start.push_back(b.num_tokens());
      for (int p = first; p < first + count; ++p) {
        b.token_ids.push_back((s * 31 + p * 7) % static_cast<int32_t>(m->config.vocab_size));
        b.positions.push_back(p);
        b.slot_mapping.push_back(static_cast<int64_t>(tables[s][p / 16]) * 16 + p % 16);
      }
      b.seq_lens.push_back(first + count);
      b.logits_rows.push_back(b.num_tokens() - 1);
      b.block_tables.insert(b.block_tables.end(), tables[s].begin(), tables[s].end());
    }
    b.query_start.push_back(b.num_tokens());
  };
  fill(prefill, 0, kContext);
  fill(decode, kContext, 1);
  std::vector<float> logits;
  if (auto st = (*backend)->Step(prefill, &logits); !st.ok()) {
    return state.SkipWithError(st.ToString().c_str());
  }
  const auto t0 = std::chrono::steady_clock::now();
  for (auto _ : state) {
    if (auto st = (*backend)->Step(decode, &logits); !st.ok()) {
      return state.SkipWithError(st.ToString().c_str());
    }
    benchmark::DoNotOptimize(logits.data());
  }
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const double bytes = static_cast<double>(WeightBytes(*m));
  // Fraction of the roofline: weight bytes streamed per second vs memcpy's bandwidth.
  if (double bw = MemcpyBandwidth()[name]; bw > 0) {
    state.counters["roofline_pct"] = 100.0 * state.iterations() * bytes / secs / bw;
  }
  state.counters["tokens_per_s"] = benchmark::Counter(
      static_cast<double>(state.iterations()) * batch, benchmark::Counter::kIsRate);
  state.counters["weight_bytes_per_s"] = benchmark::Counter(
      static_cast<double>(state.iterations()) * bytes, benchmark::Counter::kIsRate);
}

void RegisterAll() {
  const std::vector<std::string> names =
      ModelPath().empty() ? std::vector<std::string>{"tinystories", "15m"}
                          : std::vector<std::string>{std::filesystem::path(ModelPath()).stem()};
  for (const std::string& name : names) {
    benchmark::RegisterBenchmark(("BM_Memcpy/" + name).c_str(), BM_Memcpy, name)
        ->UseRealTime()
        ->MinTime(0.3);
    benchmark::RegisterBenchmark(("BM_Decode/" + name).c_str(), BM_Decode, name)
        ->Arg(1)
        ->Arg(8)
        ->Arg(32)
        ->UseRealTime()
        ->MinTime(0.5);
  }
}

}  // namespace
}  // namespace ptxserve

// --model=PATH is ours; the rest is Google Benchmark's.
int main(int argc, char** argv) {
  std::vector<char*> rest;
  for (int i = 0; i < argc; ++i) {
    if (std::strncmp(argv[i], "--model=", 8) == 0) {
      ptxserve::ModelPath() = argv[i] + 8;
    } else {
      rest.push_back(argv[i]);
    }
  }
  argc = static_cast<int>(rest.size());
  argv = rest.data();
  benchmark::Initialize(&argc, argv);
  ptxserve::RegisterAll();
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
