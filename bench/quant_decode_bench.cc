// Single-sequence decode steps of the CPU backend over a model's matrices as stored
// (f16 for `ptxserve make-model --preset llama-3.2-1b --dtype f16`) and over copies
// quantized in memory to q8_0 and q4_0 (every linear weight, the embedding and the LM
// head; norms stay f32), until GGUF files can bring quantized weights in.
//
//   build/bench/quant_decode_bench --model=/tmp/m1b-f16
#include <benchmark/benchmark.h>

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "engine/cpu/cpu_backend.h"
#include "engine/model/model.h"
#include "engine/model/quant.h"
#include "engine/step_batch.h"

namespace ptxserve {
namespace {

constexpr int kContext = 32;  // prompt tokens before the timed decode steps
// Decode steps timed; fixed, so each case quantizes its model once.
constexpr int kSteps = 24;

std::string& ModelDir() {
  static std::string dir = "/tmp/m1b-f16";
  return dir;
}

const Model* Loaded() {
  static const auto* m = [] {
    auto r = LoadModel(ModelDir());
    return r.ok() ? new Model(*std::move(r)) : nullptr;
  }();
  return m;
}

// `m` with every matrix in format q; the bytes live in the returned model's storage.
Model Quantized(const Model& m, QuantType q) {
  Model out = m;
  auto buffers = std::make_shared<std::vector<std::vector<uint8_t>>>();
  auto convert = [&](Tensor& t) {
    const int64_t rows = t.shape[0], K = t.shape[1], row_bytes = QuantRowBytes(q, K);
    std::vector<float> row(K);
    std::vector<uint8_t>& b = buffers->emplace_back(rows * row_bytes);
    const size_t in_row = K * DTypeSize(t.dtype);
    for (int64_t r = 0; r < rows; ++r) {
      ConvertToFloat(t.dtype, static_cast<const uint8_t*>(t.data) + r * in_row, K, row.data());
      (void)QuantizeRow(q, row.data(), K, b.data() + r * row_bytes);
    }
    t.quant = q;
    t.data = b.data();
    t.nbytes = b.size();
  };
  const bool tied = m.tensors.lm_head.data == m.tensors.embed.data;
  convert(out.tensors.embed);
  if (tied) {
    out.tensors.lm_head = out.tensors.embed;
  } else {
    convert(out.tensors.lm_head);
  }
  for (LayerTensors& l : out.tensors.layers) {
    for (Tensor* t : {&l.wq, &l.wk, &l.wv, &l.wo, &l.w_gate, &l.w_up, &l.w_down}) convert(*t);
  }
  out.storage = std::make_shared<std::pair<std::shared_ptr<const void>, decltype(buffers)>>(
      m.storage, buffers);
  return out;
}

// One sequence: tokens [first, first + count) at their positions, in blocks 0, 1, ... of 16.
StepBatch Batch(int first, int count, int blocks, int64_t vocab) {
  StepBatch b;
  b.max_blocks_per_seq = blocks;
  b.query_start = {0, count};
  for (int p = first; p < first + count; ++p) {
    b.token_ids.push_back(static_cast<int32_t>((p * 7919) % vocab));
    b.positions.push_back(p);
    b.slot_mapping.push_back(p);
  }
  b.seq_lens = {first + count};
  b.logits_rows = {count - 1};
  for (int i = 0; i < blocks; ++i) b.block_tables.push_back(i);
  return b;
}

void BM_Decode(benchmark::State& state, QuantType q) {
  const Model* m = Loaded();
  if (!m) return state.SkipWithError(("cannot load " + ModelDir()).c_str());
  const Model model = q == QuantType::kNone ? *m : Quantized(*m, q);
  KvCacheConfig kv;
  kv.block_size = 16;
  kv.num_blocks = (kContext + 16) / 16 + 1;
  auto backend = CpuBackend::Create(model, kv);
  if (!backend.ok()) return state.SkipWithError(backend.status().ToString().c_str());
  const int64_t V = model.config.vocab_size;
  std::vector<float> logits;
  const StepBatch prefill = Batch(0, kContext, kv.num_blocks, V);
  const StepBatch decode = Batch(kContext, 1, kv.num_blocks, V);
  if (auto st = (*backend)->Step(prefill, &logits); !st.ok()) {
    return state.SkipWithError(st.ToString().c_str());
  }
  for (auto _ : state) {
    if (auto st = (*backend)->Step(decode, &logits); !st.ok()) {
      return state.SkipWithError(st.ToString().c_str());
    }
    benchmark::DoNotOptimize(logits.data());
  }
  const double bytes = static_cast<double>((*backend)->step_weight_bytes());
  state.counters["tokens_per_s"] =
      benchmark::Counter(1, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["weight_GB_per_s"] =
      benchmark::Counter(bytes * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["step_weight_MB"] = bytes / 1e6;
}

BENCHMARK_CAPTURE(BM_Decode, f16_as_stored, QuantType::kNone)
    ->Unit(benchmark::kMillisecond)
    ->Iterations(kSteps)
    ->UseRealTime();
BENCHMARK_CAPTURE(BM_Decode, q8_0, QuantType::kQ8_0)
    ->Unit(benchmark::kMillisecond)
    ->Iterations(kSteps)
    ->UseRealTime();
BENCHMARK_CAPTURE(BM_Decode, q4_0, QuantType::kQ4_0)
    ->Unit(benchmark::kMillisecond)
    ->Iterations(kSteps)
    ->UseRealTime();

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
