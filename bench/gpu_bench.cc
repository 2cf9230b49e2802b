// GPU backend benchmarks against the memory-bandwidth roofline, on a real GPU
// (--device=cuda, the default) or, as a smoke run, on the emulated device
// (--device=emulated: tiny shapes; its figures mean nothing).
//
// BM_CopyBandwidth: device-to-device cuMemcpyDtoDAsync of 1 GiB, timed with events; its
//   bandwidth (read + write bytes / s) is the roofline every other figure is set against.
// BM_Decode/B/graphs:G: decode steps of the Llama-3.2-1B-shaped synthetic preset in f16
//   (f16 KV cache), B sequences of kContext tokens each, device-side greedy sampling (only
//   the ids come back), launch by launch (G = 0, --enforce-eager) or as CUDA graph
//   replays (G = 1, the default). tokens_per_s = B / step time; roofline_pct = (weight
//   bytes + KV bytes read per step) / copy bandwidth / step time; replays_per_step = graph
//   launches per timed step (1 with graphs, 0 without). A table at the end sets the two
//   side by side.
// BM_Prefill: one sequence's kPrefillTokens-token prompt in one step (flash attention and
//   the tensor-core GEMMs), the last row's token sampled on the device; tokens_per_s.
// BM_Attention: batched decode attention alone (merged in the launch when split), batch 64, context
//   4096, 32 query / 8 KV heads, head_dim 128, f16 KV: K+V bytes / time as a fraction of
//   the copy bandwidth (target >= 85%).
// Estimate: beside BM_Decode's CUDA-graph steps and BM_Prefill, the times the cost model
//   estimates for the same shapes (engine/cuda/step_estimate.h: the step table of the
//   README, batches 1/16/64/256 at context ~1024 and a 2048-token prefill) on the GPU the
//   bench ran on (h100 or a100 by device name; an emulated profile stands for its GPU),
//   their ratio, and each one's share of the estimate's roofline (decode: bytes over DRAM
//   bandwidth; prefill: FLOPs over the tensor-core peak): how far the estimates are off
//   on real hardware.
// Start-up: the first GpuBackend::Create compiles every kernel (PTX generation + JIT);
//   a second one in the same process finds the driver's JIT cache (CUDA_CACHE_PATH)
//   warm. Both compile times are printed.
//
//   build/bench/gpu_bench                           # needs libcuda.so.1 and a GPU
//   build/bench/gpu_bench --device=emulated         # smoke run anywhere
//   build/bench/gpu_bench --emulated-device=h100    # emulated, reporting itself as an H100
#include <benchmark/benchmark.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/strings/ascii.h"
#include "engine/cuda/device.h"
#include "engine/cuda/driver.h"
#include "engine/cuda/emulated_driver.h"
#include "engine/cuda/gpu_backend.h"
#include "engine/cuda/kernel_cache.h"
#include "engine/cuda/step_estimate.h"
#include "engine/model/model.h"
#include "engine/model/synthetic.h"
#include "kernels/decode_attention.h"

namespace ptxserve::cuda {
namespace {

bool g_emulated = false;
EmulatedDeviceOptions g_profile;  // --emulated-device (small by default)
double g_copy_bytes_per_s = 0;    // measured by BM_CopyBandwidth (runs first)
// BM_Decode's tokens/s by batch, [0] launch by launch, [1] with CUDA graphs.
std::map<int, double> g_decode_tokens_per_s[2];
double g_prefill_step_s = 0;  // BM_Prefill's seconds per prompt (0 = not run)

std::unique_ptr<Device> OpenDevice() {
  auto t = g_emulated ? LoadEmulatedDriver(g_profile) : LoadCudaDriver();
  if (!t.ok()) return nullptr;
  auto d = Device::Open(*std::move(t));
  return d.ok() ? *std::move(d) : nullptr;
}

const char* Preset() { return g_emulated ? "tiny" : "llama-3.2-1b"; }
// The README's step table: decode at context 1024, a 2048-token prefill.
int Context() { return g_emulated ? 32 : 1024; }
int PrefillTokens() { return g_emulated ? 64 : 2048; }

const Model* BenchModel() {
  static std::unique_ptr<Model> model = [] {
    const std::string dir =
        (std::filesystem::temp_directory_path() / (std::string("ptxserve-gpubench-") + Preset()))
            .string();
    if (!std::filesystem::exists(dir + "/config.json")) {
      auto spec = SyntheticPreset(Preset());
      if (!spec.ok() || !WriteSyntheticModel(dir, *spec, 1, DType::kF16).ok()) {
        return std::unique_ptr<Model>();
      }
    }
    auto m = LoadModel(dir);
    return m.ok() ? std::make_unique<Model>(*std::move(m)) : std::unique_ptr<Model>();
  }();
  return model.get();
}

void BM_CopyBandwidth(benchmark::State& state) {
  std::unique_ptr<Device> d = OpenDevice();
  if (d == nullptr) return state.SkipWithError("no device");
  const size_t bytes = g_emulated ? (size_t{16} << 20) : (size_t{1} << 30);
  auto a = d->Alloc(bytes, "copy source");
  auto b = d->Alloc(bytes, "copy destination");
  if (!a.ok() || !b.ok()) return state.SkipWithError("allocation failed");
  (void)d->Memset(a->ptr(), 1, bytes, "source");
  double best = 0;
  for (auto _ : state) {
    auto ms = d->TimeMs([&] { return d->CopyOnDevice(b->ptr(), a->ptr(), bytes, "bench"); });
    if (!ms.ok()) return state.SkipWithError(std::string(ms.status().message()).c_str());
    state.SetIterationTime(*ms / 1e3);
    best = std::max(best, 2.0 * static_cast<double>(bytes) / (*ms / 1e3));
  }
  g_copy_bytes_per_s = best;
  state.counters["GB_per_s"] = best / 1e9;
}

// Runs `step` once per benchmark iteration, each timed on the host's clock (a step returns
// once its sampled ids are on the host); the mean seconds per step, or nothing after
// reporting the step's error.
template <class Step>
std::optional<double> TimeSteps(benchmark::State& state, const Step& step) {
  double seconds = 0;
  for (auto _ : state) {
    const auto t0 = std::chrono::steady_clock::now();
    if (absl::Status st = step(); !st.ok()) {
      state.SkipWithError(std::string(st.message()).c_str());
      return std::nullopt;
    }
    const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    state.SetIterationTime(dt);
    seconds += dt;
  }
  return seconds / static_cast<double>(state.iterations());
}

// B sequences of Context() tokens, prefilled, then timed decode steps.
void BM_Decode(benchmark::State& state) {
  const int batch = static_cast<int>(state.range(0));
  const bool graphs = state.range(1) != 0;
  const Model* model = BenchModel();
  if (model == nullptr) return state.SkipWithError("model not written");
  const ModelConfig& c = model->config;
  const int ctx = Context(), steps = 64, bs = 16;
  const int blocks_per_seq = (ctx + steps + 1 + bs - 1) / bs;
  KvCacheConfig kv{batch * blocks_per_seq, bs, DType::kF16};
  GpuBackendOptions o;
  o.max_tokens = std::max(batch, 2048);
  o.max_seqs = batch;
  o.log_progress = false;
  o.cuda_graphs = graphs;
  auto device = OpenDevice();
  if (device == nullptr) return state.SkipWithError("no device");
  auto backend = GpuBackend::Create(*model, kv, std::move(device), o);
  if (!backend.ok()) return state.SkipWithError(std::string(backend.status().message()).c_str());
  GpuBackend& b = **backend;

  auto table = [&](int s, StepBatch* sb) {
    for (int j = 0; j < blocks_per_seq; ++j) sb->block_tables.push_back(s * blocks_per_seq + j);
  };
  std::vector<int32_t> ids;
  // Prefill in chunks of whole sequences.
  const int per_chunk = std::max(1, 2048 / ctx);
  for (int s0 = 0; s0 < batch; s0 += per_chunk) {
    StepBatch sb;
    sb.query_start.push_back(0);
    sb.max_blocks_per_seq = blocks_per_seq;
    for (int s = s0; s < std::min(batch, s0 + per_chunk); ++s) {
      for (int p = 0; p < ctx; ++p) {
        sb.token_ids.push_back(static_cast<int32_t>(3 + (s * 131 + p * 7) % (c.vocab_size - 3)));
        sb.positions.push_back(p);
        sb.slot_mapping.push_back(int64_t{s * blocks_per_seq + p / bs} * bs + p % bs);
      }
      sb.query_start.push_back(sb.num_tokens());
      sb.seq_lens.push_back(ctx);
      table(s, &sb);
      sb.logits_rows.push_back(sb.num_tokens() - 1);
    }
    if (auto st = b.StepSampled(sb, std::vector<RowSampling>(sb.logits_rows.size()), &ids);
        !st.ok()) {
      return state.SkipWithError(std::string(st.message()).c_str());
    }
  }
  int pos = ctx;
  std::vector<int32_t> last(batch, 5);
  const auto step = [&]() -> absl::Status {
    StepBatch sb;
    sb.query_start.push_back(0);
    sb.max_blocks_per_seq = blocks_per_seq;
    for (int s = 0; s < batch; ++s) {
      sb.token_ids.push_back(last[s]);
      sb.positions.push_back(pos);
      sb.slot_mapping.push_back(int64_t{s * blocks_per_seq + pos / bs} * bs + pos % bs);
      sb.query_start.push_back(s + 1);
      sb.seq_lens.push_back(pos + 1);
      table(s, &sb);
      sb.logits_rows.push_back(s);
    }
    absl::Status st = b.StepSampled(sb, std::vector<RowSampling>(batch), &ids);
    if (st.ok()) last = ids;
    if (++pos >= ctx + steps) pos = ctx;  // rewrite the same slots: contexts stay ~ctx
    return st;
  };
  // The untimed step captures the graph (graphs on), as a server's first decode step does.
  if (auto st = step(); !st.ok()) return state.SkipWithError(std::string(st.message()).c_str());
  const int64_t replays0 = b.graph_stats().replays;
  const std::optional<double> timed = TimeSteps(state, step);
  if (!timed) return;
  const double step_s = *timed;
  const double kv_bytes =
      2.0 * batch * (ctx + steps / 2) * c.num_layers * c.num_kv_heads * b.padded_head_dim() * 2;
  const double bytes = static_cast<double>(b.step_weight_bytes()) + kv_bytes;
  state.counters["tokens_per_s"] = batch / step_s;
  state.counters["replays_per_step"] = static_cast<double>(b.graph_stats().replays - replays0) /
                                       static_cast<double>(state.iterations());
  g_decode_tokens_per_s[graphs ? 1 : 0][batch] = batch / step_s;
  state.counters["MB_per_step"] = bytes / 1e6;
  if (g_copy_bytes_per_s > 0) {
    state.counters["roofline_pct"] = 100.0 * (bytes / g_copy_bytes_per_s) / step_s;
  }
}

// One sequence's whole prompt in one step, as a server's first step for a long prompt.
void BM_Prefill(benchmark::State& state) {
  const Model* model = BenchModel();
  if (model == nullptr) return state.SkipWithError("model not written");
  const ModelConfig& c = model->config;
  const int tokens = PrefillTokens(), bs = 16, blocks = (tokens + bs - 1) / bs;
  GpuBackendOptions o;
  o.max_tokens = tokens;
  o.max_seqs = 1;
  o.log_progress = false;
  auto device = OpenDevice();
  if (device == nullptr) return state.SkipWithError("no device");
  auto backend =
      GpuBackend::Create(*model, KvCacheConfig{blocks, bs, DType::kF16}, std::move(device), o);
  if (!backend.ok()) return state.SkipWithError(std::string(backend.status().message()).c_str());
  StepBatch sb;
  sb.query_start = {0, tokens};
  sb.seq_lens = {tokens};
  sb.max_blocks_per_seq = blocks;
  sb.logits_rows = {tokens - 1};
  for (int b = 0; b < blocks; ++b) sb.block_tables.push_back(b);
  for (int p = 0; p < tokens; ++p) {
    sb.token_ids.push_back(static_cast<int32_t>(3 + (p * 7) % (c.vocab_size - 3)));
    sb.positions.push_back(p);
    sb.slot_mapping.push_back(p);
  }
  std::vector<int32_t> ids;
  const auto step = [&] { return (*backend)->StepSampled(sb, {RowSampling{}}, &ids); };
  if (auto st = step(); !st.ok()) return state.SkipWithError(std::string(st.message()).c_str());
  const std::optional<double> timed = TimeSteps(state, step);
  if (!timed) return;
  g_prefill_step_s = *timed;
  state.counters["tokens_per_s"] = tokens / g_prefill_step_s;
}

void BM_Attention(benchmark::State& state) {
  std::unique_ptr<Device> d = OpenDevice();
  if (d == nullptr) return state.SkipWithError("no device");
  const int rows = g_emulated ? 4 : 64, ctx = g_emulated ? 256 : 4096, bs = 16;
  kernels::DecodeAttentionConfig cfg;
  cfg.num_heads = 32;
  cfg.num_kv_heads = 8;
  cfg.head_dim = 128;
  cfg.block_size = bs;
  cfg.kv_dtype = kernels::ElemType::kF16;
  const kernels::AttentionPlan plan =
      kernels::PlanDecodeAttention(cfg, rows, ctx, d->info().num_sms);
  cfg.split = plan.split;
  auto shape = kernels::ShapeOf(cfg);
  if (!shape.ok()) return state.SkipWithError("shape");
  KernelCache cache(d.get());
  KernelSpec spec{cfg.Key(), kernels::kDecodeAttentionEntry,
                  [cfg] { return kernels::GenerateDecodeAttention(cfg); }};
  auto k = cache.Get(spec);
  if (!k.ok()) return state.SkipWithError("compile failed");
  const int blocks = rows * ctx / bs;
  const size_t pool = size_t{1} * blocks * 8 * bs * 128 * 2;
  auto kp = d->Alloc(pool, "K"), vp = d->Alloc(pool, "V");
  const int splits = plan.num_splits;
  auto q = d->Alloc(size_t{1} * rows * 32 * 128 * 4, "q");
  auto out = d->Alloc(size_t{1} * rows * 32 * 128 * 4 * splits, "out");
  auto lse = d->Alloc(size_t{1} * rows * 32 * splits * 4, "lse");
  auto fin = d->Alloc(size_t{1} * rows * 32 * 128 * 4, "final");
  auto counts = d->Alloc(size_t{1} * rows * 32 * 4, "split counters");
  std::vector<int32_t> tables(blocks), lens(rows, ctx);
  for (int i = 0; i < blocks; ++i) tables[i] = i;
  auto tb = d->Alloc(tables.size() * 4, "tables"), ln = d->Alloc(lens.size() * 4, "lens");
  if (!kp.ok() || !vp.ok() || !q.ok() || !out.ok() || !lse.ok() || !fin.ok() || !tb.ok() ||
      !ln.ok() || !counts.ok()) {
    return state.SkipWithError("allocation failed");
  }
  (void)d->Memset(kp->ptr(), 0, pool, "K");
  (void)d->Memset(vp->ptr(), 0, pool, "V");
  (void)d->Memset(q->ptr(), 0, size_t{1} * rows * 32 * 128 * 4, "q");
  (void)d->Memset(counts->ptr(), 0, size_t{1} * rows * 32 * 4, "split counters");
  (void)d->CopyToDevice(tb->ptr(), tables.data(), tables.size() * 4, "tables");
  (void)d->CopyToDevice(ln->ptr(), lens.data(), lens.size() * 4, "lens");
  (void)d->Synchronize("setup");
  kernels::DecodeAttentionArgs args{.q = q->ptr(),
                                    .k_pool = kp->ptr(),
                                    .v_pool = vp->ptr(),
                                    .block_tables = tb->ptr(),
                                    .seq_lens = ln->ptr(),
                                    .query_start = 0,
                                    .positions = 0,
                                    .out = fin->ptr(),
                                    .partial_out = out->ptr(),
                                    .partial_lse = lse->ptr(),
                                    .split_counters = counts->ptr(),
                                    .max_blocks_per_seq = static_cast<uint32_t>(ctx / bs),
                                    .num_seqs = static_cast<uint32_t>(rows),
                                    .num_rows = static_cast<uint32_t>(rows),
                                    .scale = 1.0f / std::sqrt(128.0f),
                                    .partition = static_cast<uint32_t>(plan.partition_tokens)};
  auto params = kernels::PackParams(args);
  const kernels::LaunchDims dims = kernels::DecodeAttentionLaunch(*shape, 8, rows, splits);
  double seconds = 0;
  for (auto _ : state) {
    auto ms = d->TimeMs([&]() { return cache.Launch(**k, dims, params.data()); });
    if (!ms.ok()) return state.SkipWithError(std::string(ms.status().message()).c_str());
    state.SetIterationTime(*ms / 1e3);
    seconds += *ms / 1e3;
  }
  const double launch_s = seconds / static_cast<double>(state.iterations());
  const double bytes = 2.0 * static_cast<double>(pool);
  state.counters["splits"] = splits;
  state.counters["GB_per_s"] = bytes / launch_s / 1e9;
  if (g_copy_bytes_per_s > 0) {
    state.counters["copy_bw_pct"] = 100.0 * bytes / launch_s / g_copy_bytes_per_s;
  }
}

// Cold and warm start: two backends in a row; the second finds the driver's JIT cache.
void PrintStartup() {
  const Model* model = BenchModel();
  if (model == nullptr) return;
  for (int i = 0; i < 2; ++i) {
    GpuBackendOptions o;
    o.log_progress = false;
    auto device = OpenDevice();
    if (device == nullptr) return;
    const auto t0 = std::chrono::steady_clock::now();
    auto b = GpuBackend::Create(*model, KvCacheConfig{64, 16, DType::kF16}, std::move(device), o);
    if (!b.ok()) {
      std::printf("start-up: %s\n", std::string(b.status().message()).c_str());
      return;
    }
    const KernelCacheStats s = (*b)->cache_stats();
    std::printf("start-up %d (%s): Create %.2f s, %lld kernels compiled in %.2f s\n", i + 1,
                i == 0 ? "JIT cache as found" : "JIT cache warm",
                std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(),
                static_cast<long long>(s.modules), s.compile_seconds);
  }
}

BENCHMARK(BM_CopyBandwidth)->UseManualTime()->Iterations(10)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_Attention)->UseManualTime()->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_Prefill)->UseManualTime()->Iterations(5)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_Decode)
    ->UseManualTime()
    ->ArgsProduct({{1, 16, 64, 256}, {0, 1}})
    ->ArgNames({"", "graphs"})
    ->Unit(benchmark::kMillisecond);

// Decode with and without CUDA graphs, side by side.
void PrintGraphComparison() {
  if (g_decode_tokens_per_s[0].empty() && g_decode_tokens_per_s[1].empty()) return;
  std::printf("\ndecode tokens/s    %12s %12s %8s\n", "eager", "cuda graphs", "speedup");
  for (const auto& [batch, eager] : g_decode_tokens_per_s[0]) {
    auto it = g_decode_tokens_per_s[1].find(batch);
    if (it == g_decode_tokens_per_s[1].end()) continue;
    std::printf("  batch %-10d %12.1f %12.1f %7.2fx\n", batch, eager, it->second,
                it->second / eager);
  }
}

// The cost model's name for the device the bench runs on ("h100", "a100"), or "".
std::string CostDevice(std::string* device_name) {
  std::unique_ptr<Device> d = OpenDevice();
  if (d == nullptr) return "";
  *device_name = d->info().name;
  for (const char* kind : {"H100", "A100"}) {
    if (device_name->find(kind) != std::string::npos) return absl::AsciiStrToLower(kind);
  }
  return "";
}

// Measured steps (decode with CUDA graphs, the prefill) beside the estimates for the same
// shapes, and each one's share of the estimate's roofline.
void PrintEstimateComparison() {
  const std::map<int, double>& measured = g_decode_tokens_per_s[1];
  const Model* model = BenchModel();
  if ((measured.empty() && g_prefill_step_s == 0) || model == nullptr) return;
  std::string device_name;
  const std::string kind = CostDevice(&device_name);
  if (kind.empty()) {
    std::printf(
        "\nno cost-model device for '%s' (h100, a100): no estimate beside the "
        "measurements\n",
        device_name.c_str());
    return;
  }
  StepEstimateOptions o;
  o.device = kind;
  o.decode_batches.clear();
  for (const auto& [batch, tokens_per_s] : measured) o.decode_batches.push_back(batch);
  o.context = Context() + 32;  // BM_Decode's contexts cycle over Context() .. + 64
  o.prefill_tokens = g_prefill_step_s > 0 ? PrefillTokens() : 0;
  absl::StatusOr<ModelEstimate> m = EstimateModelSteps(*model, Preset(), o);
  if (!m.ok()) {
    std::printf("\nestimate failed: %s\n", std::string(m.status().message()).c_str());
    return;
  }
  std::printf("\nsteps on %s (decode with CUDA graphs)\n  %-22s %12s %12s %9s %10s %10s\n",
              device_name.c_str(), "step", "measured ms", "estimated ms", "meas/est", "meas roof%",
              "est roof%");
  for (const StepEstimate& s : m->steps) {
    const bool prefill = s.phase == "prefill";
    if (!prefill && s.phase != "decode") continue;
    const double got = prefill ? g_prefill_step_s : s.batch / measured.at(s.batch);
    const std::string name =
        prefill ? "prefill " + std::to_string(s.tokens) : "decode batch " + std::to_string(s.batch);
    std::printf("  %-22s %12.3f %12.3f %8.2fx %9.1f%% %9.1f%%\n", name.c_str(), got * 1e3,
                s.seconds * 1e3, got / s.seconds, 100.0 * s.roofline_s / got, s.RooflinePct());
  }
  std::printf(
      "  (estimated: the cost model for %s from the emulator's counters; roof%%: the estimate's "
      "roofline time over the step's time)\n",
      m->device->description.c_str());
}

}  // namespace
}  // namespace ptxserve::cuda

int main(int argc, char** argv) {
  std::vector<char*> args;
  for (int i = 0; i < argc; ++i) {
    constexpr std::string_view kProfile = "--emulated-device=";
    if (std::strcmp(argv[i], "--device=emulated") == 0) {
      ptxserve::cuda::g_emulated = true;
    } else if (std::string_view(argv[i]).substr(0, kProfile.size()) == kProfile) {
      auto p = ptxserve::cuda::EmulatedDeviceProfile(argv[i] + kProfile.size());
      if (!p.ok()) {
        std::fprintf(stderr, "gpu_bench: --emulated-device: %s\n",
                     std::string(p.status().message()).c_str());
        return 2;
      }
      ptxserve::cuda::g_profile = *std::move(p);
      ptxserve::cuda::g_emulated = true;  // a profile is of the emulated device
    } else if (std::strcmp(argv[i], "--device=cuda") != 0) {
      args.push_back(argv[i]);
    }
  }
  if (!ptxserve::cuda::g_emulated) {
    auto t = ptxserve::cuda::LoadCudaDriver();
    if (!t.ok()) {
      std::printf("gpu_bench: skipped: %s (try --device=emulated)\n",
                  std::string(t.status().message()).c_str());
      return 0;
    }
  }
  int n = static_cast<int>(args.size());
  benchmark::Initialize(&n, args.data());
  ptxserve::cuda::PrintStartup();
  benchmark::RunSpecifiedBenchmarks();
  ptxserve::cuda::PrintGraphComparison();
  ptxserve::cuda::PrintEstimateComparison();
  benchmark::Shutdown();
  return 0;
}
