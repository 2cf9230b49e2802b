// GpuBackend on the emulated device: kernel-cache and transfer accounting per step,
// device-side sampling, injected driver failures, clean creation failures, buffer
// growth, the backend factory, and the engine running on it.
#include "engine/cuda/gpu_backend.h"

#include <cmath>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "engine/backend_factory.h"
#include "engine/cpu/cpu_backend.h"
#include "engine/cuda/emulated_driver.h"
#include "engine/engine.h"
#include "engine/kv_sizing.h"
#include "engine/model/gguf_export.h"
#include "engine/model/gguf_writer.h"
#include "engine/model/quant.h"
#include "engine/model/synthetic.h"
#include "engine/tokenizer/tokenizer.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/cuda/gpu_test_util.h"

namespace ptxserve::cuda {
namespace {

using testing::Generate;
using testing::GenRequest;
using ::testing::HasSubstr;
using testing::Prompt;
using testing::TwoBlockStep;

constexpr KvCacheConfig kKv{64, 16, DType::kF32};

int64_t Total(const std::map<std::string, int64_t>& m) {
  int64_t n = 0;
  for (const auto& [k, v] : m) n += v;
  return n;
}

class GpuBackendTest : public ::testing::Test {
 protected:
  void SetUp() override {
    SetEmulatedFault({});
    auto m = testing::SyntheticModel("tiny", DType::kF32);
    ASSERT_TRUE(m.ok()) << m.status();
    model_ = std::make_unique<Model>(*std::move(m));
  }
  void TearDown() override { SetEmulatedFault({}); }

  std::unique_ptr<GpuBackend> Make(GpuBackendOptions o = {}) {
    auto b = testing::EmulatedBackend(*model_, kKv, o);
    EXPECT_TRUE(b.ok()) << b.status();
    return b.ok() ? *std::move(b) : nullptr;
  }
  // Kernel launches of one step of the tiny model (up to 8 rows: the GEMV forms, which fuse
  // the RMSNorms before them): embedding; per layer qkv, rope_kv, attention, o, gate_up,
  // silu_mul, down; gather, LM head.
  int64_t LaunchesPerStep() const { return 1 + 7 * model_->config.num_layers + 2; }

  std::unique_ptr<Model> model_;
};

TEST_F(GpuBackendTest, WarmUpCompilesEverythingThenEveryLaunchIsAHit) {
  auto b = Make();
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(b->name(), "emulated");
  EXPECT_EQ(b->padded_head_dim(), 32);  // tiny's head_dim 16, padded
  const KernelCacheStats warm = b->cache_stats();
  EXPECT_GT(warm.misses, 10);
  EXPECT_EQ(warm.failures, 0);
  EXPECT_EQ(Total(warm.launches), 0);
  const int64_t vocab = model_->config.vocab_size;
  std::vector<float> logits;
  ASSERT_TRUE(b->Step(TwoBlockStep(3, 20, vocab, false), &logits).ok());
  KernelCacheStats before = b->cache_stats();
  EXPECT_EQ(before.misses, warm.misses);
  for (int i = 0; i < 2; ++i) {
    ASSERT_TRUE(b->Step(TwoBlockStep(3, 21 + i, vocab, true), &logits).ok());
    const KernelCacheStats after = b->cache_stats();
    EXPECT_EQ(after.misses, warm.misses) << "no compilation after warm-up";
    EXPECT_EQ(after.hits - before.hits, LaunchesPerStep());
    EXPECT_EQ(Total(after.launches) - Total(before.launches), LaunchesPerStep());
    // Four GEMMs per layer (qkv, o, gate_up, down) and the LM head.
    EXPECT_EQ(after.launches.at("gemm") - before.launches.at("gemm"),
              4 * model_->config.num_layers + 1);
    before = after;
  }
  // The engine-shaped snapshot carries the same counters.
  const KernelStats ks = b->kernel_stats();
  EXPECT_EQ(ks.cache_hits, before.hits);
  EXPECT_EQ(ks.cache_misses, before.misses);
  EXPECT_EQ(ks.launches, before.launches);
}

TEST_F(GpuBackendTest, WithoutWarmUpKernelsCompileOnFirstUse) {
  GpuBackendOptions o;
  o.warmup = false;
  auto b = Make(o);
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(b->cache_stats().misses, 0);
  const int64_t vocab = model_->config.vocab_size;
  std::vector<float> logits;
  ASSERT_TRUE(b->Step(TwoBlockStep(2, 5, vocab, true), &logits).ok());
  const int64_t first = b->cache_stats().misses;
  EXPECT_GT(first, 0);
  ASSERT_TRUE(b->Step(TwoBlockStep(2, 6, vocab, true), &logits).ok());
  EXPECT_EQ(b->cache_stats().misses, first);  // same shapes: nothing new
  ASSERT_TRUE(b->Step(TwoBlockStep(1, 12, vocab, false), &logits).ok());
  EXPECT_GT(b->cache_stats().misses, first);  // ragged attention, tiled GEMMs
}

// After warm-up a decode step moves one metadata copy host->device and one copy back:
// the logits rows (B x vocab x 4 bytes) for Step, the sampled ids (4 x B bytes) for
// StepSampled. Nothing else crosses.
TEST_F(GpuBackendTest, OneCopyEachWayPerStep) {
  auto b = Make();
  ASSERT_NE(b, nullptr);
  const int64_t vocab = model_->config.vocab_size;
  std::vector<float> logits;
  std::vector<int32_t> ids;
  ASSERT_TRUE(b->Step(TwoBlockStep(4, 10, vocab, false), &logits).ok());
  for (int B : {1, 3, 4}) {
    const TransferStats t0 = b->transfer_stats();
    ASSERT_TRUE(b->Step(TwoBlockStep(B, 11, vocab, true), &logits).ok());
    const TransferStats t1 = b->transfer_stats();
    EXPECT_EQ(t1.h2d_count - t0.h2d_count, 1) << "B=" << B;
    EXPECT_GT(t1.h2d_bytes - t0.h2d_bytes, 0);
    EXPECT_EQ(t1.d2h_count - t0.d2h_count, 1);
    EXPECT_EQ(t1.d2h_bytes - t0.d2h_bytes, B * vocab * 4);
    EXPECT_EQ(t1.d2d_count, t0.d2d_count);
    ASSERT_TRUE(
        b->StepSampled(TwoBlockStep(B, 11, vocab, true), std::vector<RowSampling>(B), &ids).ok());
    const TransferStats t2 = b->transfer_stats();
    EXPECT_EQ(t2.h2d_count - t1.h2d_count, 1) << "B=" << B;
    EXPECT_EQ(t2.d2h_count - t1.d2h_count, 1);
    EXPECT_EQ(t2.d2h_bytes - t1.d2h_bytes, 4 * B);
    // The engine-shaped counters agree.
    const KernelStats ks = b->kernel_stats();
    EXPECT_EQ(ks.d2h_bytes, t2.d2h_bytes);
    EXPECT_EQ(ks.h2d_transfers, t2.h2d_count);
  }
}

TEST_F(GpuBackendTest, DeviceSamplingAgreesWithTheLogits) {
  auto b = Make();
  ASSERT_NE(b, nullptr);
  const int64_t vocab = model_->config.vocab_size;
  std::vector<float> logits;
  std::vector<int32_t> ids;
  const StepBatch prefill = TwoBlockStep(3, 9, vocab, false);
  ASSERT_TRUE(b->Step(prefill, &logits).ok());
  // Re-running a step rewrites the same K/V, so the logits are the same.
  ASSERT_TRUE(b->StepSampled(prefill, std::vector<RowSampling>(3), &ids).ok());
  ASSERT_EQ(ids.size(), 3u);
  for (int r = 0; r < 3; ++r) EXPECT_EQ(ids[r], testing::ArgMax(logits.data() + r * vocab, vocab));
  // Temperature with top-k 4: the id is one of the row's 4 best.
  std::vector<RowSampling> rows(3);
  for (int r = 0; r < 3; ++r) rows[r] = {1.0f, 4, 1.0f, 0.25f * static_cast<float>(r + 1)};
  ASSERT_TRUE(b->StepSampled(prefill, rows, &ids).ok());
  for (int r = 0; r < 3; ++r) {
    const float* row = logits.data() + r * vocab;
    int better = 0;
    for (int64_t i = 0; i < vocab; ++i) better += row[i] > row[ids[r]];
    EXPECT_LT(better, 4) << "row " << r << " sampled id " << ids[r];
  }
  EXPECT_FALSE(b->StepSampled(prefill, std::vector<RowSampling>(2), &ids).ok());
}

// An injected launch failure fails that step with INTERNAL naming the call and the
// kernel; the backend lives on and the next steps are right.
TEST_F(GpuBackendTest, InjectedLaunchFailureFailsOnlyThatStep) {
  auto b = Make();
  ASSERT_NE(b, nullptr);
  auto cpu = CpuBackend::Create(*model_, kKv);
  ASSERT_TRUE(cpu.ok());
  const int64_t vocab = model_->config.vocab_size;
  std::vector<float> logits, want;
  EmulatedFault f;
  f.fail_launch = 3;  // the first layer's qkv projection (after its rmsnorm: 14 rows)
  SetEmulatedFault(f);
  absl::Status st = b->Step(TwoBlockStep(2, 7, vocab, false), &logits);
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.code(), absl::StatusCode::kInternal);
  EXPECT_THAT(std::string(st.message()), HasSubstr("cuLaunchKernel (kernel gemm:"));
  EXPECT_THAT(std::string(st.message()), HasSubstr("CUDA_ERROR_LAUNCH_FAILED"));
  // The same work again succeeds and matches the CPU backend.
  ASSERT_TRUE(b->Step(TwoBlockStep(2, 7, vocab, false), &logits).ok());
  ASSERT_TRUE((*cpu)->Step(TwoBlockStep(2, 7, vocab, false), &want).ok());
  ASSERT_EQ(logits.size(), want.size());
  EXPECT_LT(testing::RelErr(logits.data(), want.data(), logits.size()), 1e-4);

  // A fault reported asynchronously (at the step's synchronisation) is INTERNAL too.
  f.site = EmulatedFault::Site::kSync;
  f.fail_launch = 9;
  SetEmulatedFault(f);
  st = b->Step(TwoBlockStep(2, 8, vocab, true), &logits);
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.code(), absl::StatusCode::kInternal);
  EXPECT_THAT(std::string(st.message()), HasSubstr("cuStreamSynchronize (step)"));
  EXPECT_THAT(std::string(st.message()), HasSubstr("injected failure of kernel"));
  ASSERT_TRUE(b->Step(TwoBlockStep(2, 8, vocab, true), &logits).ok());
  ASSERT_TRUE((*cpu)->Step(TwoBlockStep(2, 8, vocab, true), &want).ok());
  EXPECT_LT(testing::RelErr(logits.data(), want.data(), logits.size()), 1e-4);
}

TEST_F(GpuBackendTest, CreationFailureLeaksNothing) {
  int64_t allocations = 0;
  {
    auto b = Make();
    ASSERT_NE(b, nullptr);
    allocations = GetEmulatedDeviceCounters().live_allocations;
  }
  EXPECT_EQ(GetEmulatedDeviceCounters().live_allocations, 0);
  ASSERT_GT(allocations, 20);
  // The first weight, another weight, an activation buffer and the last (a KV pool).
  for (int64_t nth : {int64_t{1}, int64_t{5}, allocations - 8, allocations}) {
    EmulatedFault f;
    f.fail_alloc = nth;
    SetEmulatedFault(f);
    auto b = testing::EmulatedBackend(*model_, kKv);
    ASSERT_FALSE(b.ok()) << "allocation " << nth;
    EXPECT_EQ(b.status().code(), absl::StatusCode::kResourceExhausted) << b.status();
    EXPECT_THAT(std::string(b.status().message()), HasSubstr("cuMemAlloc_v2"));
    const EmulatedDeviceCounters c = GetEmulatedDeviceCounters();
    EXPECT_FALSE(c.alive);
    EXPECT_EQ(c.live_allocations, 0);
    EXPECT_EQ(c.live_host_allocations, 0);
    EXPECT_EQ(c.live_modules, 0);
  }
}

// Block formats the quantized GEMV does not read (a GGUF's q4_k/q6_k super-blocks) are
// refused by name before anything is allocated.
TEST_F(GpuBackendTest, UnreadBlockFormatIsUnimplementedNamingTheTensor) {
  for (QuantType q : {QuantType::kQ4_K, QuantType::kQ6_K}) {
    Tensor& w_down = model_->tensors.layers[1].w_down;
    w_down.name = "blk.1.ffn_down.weight";
    w_down.quant = q;
    auto b = testing::EmulatedBackend(*model_, kKv);
    ASSERT_FALSE(b.ok());
    EXPECT_EQ(b.status().code(), absl::StatusCode::kUnimplemented) << b.status();
    EXPECT_THAT(
        std::string(b.status().message()),
        HasSubstr(absl::StrCat("tensor blk.1.ffn_down.weight is ", std::string(QuantName(q)),
                               "; the GPU backend serves f32/f16/bf16 and "
                               "q8_0/q4_0/fp8_e4m3/int4_g128 weights")));
    EXPECT_EQ(GetEmulatedDeviceCounters().live_allocations, 0);
  }
}

// q8_0/q4_0 blocks are uploaded as stored, so every layer's matrix of a role is in one format.
TEST_F(GpuBackendTest, BlockFormatsDifferingAcrossLayersAreRefusedNamingBoth) {
  Tensor& wq = model_->tensors.layers[0].wq;
  wq.name = "blk.0.attn_q.weight";
  wq.quant = QuantType::kQ4_0;
  model_->tensors.layers[1].wq.name = "blk.1.attn_q.weight";
  auto b = testing::EmulatedBackend(*model_, kKv);
  ASSERT_FALSE(b.ok());
  EXPECT_EQ(b.status().code(), absl::StatusCode::kUnimplemented) << b.status();
  EXPECT_THAT(std::string(b.status().message()),
              HasSubstr("tensor blk.1.attn_q.weight is f32 but blk.0.attn_q.weight is q4_0"));
  EXPECT_EQ(GetEmulatedDeviceCounters().live_allocations, 0);
}

TEST_F(GpuBackendTest, MalformedBatchIsInvalidArgument) {
  auto b = Make();
  ASSERT_NE(b, nullptr);
  StepBatch bad = TwoBlockStep(2, 5, model_->config.vocab_size, true);
  bad.token_ids[1] = static_cast<int32_t>(model_->config.vocab_size);
  std::vector<float> logits;
  const absl::Status st = b->Step(bad, &logits);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;
  EXPECT_TRUE(b->Step(TwoBlockStep(2, 5, model_->config.vocab_size, true), &logits).ok());
}

// Buffers sized for 4 tokens and 1 sequence grow for a 3 x 20-token prefill.
TEST_F(GpuBackendTest, BuffersGrowForLargerSteps) {
  GpuBackendOptions o;
  o.max_tokens = 4;
  o.max_seqs = 1;
  auto b = Make(o);
  ASSERT_NE(b, nullptr);
  auto cpu = CpuBackend::Create(*model_, kKv);
  ASSERT_TRUE(cpu.ok());
  std::vector<float> logits, want;
  const StepBatch big = TwoBlockStep(3, 20, model_->config.vocab_size, false);
  ASSERT_TRUE(b->Step(big, &logits).ok());
  ASSERT_TRUE((*cpu)->Step(big, &want).ok());
  ASSERT_EQ(logits.size(), want.size());
  EXPECT_LT(testing::RelErr(logits.data(), want.data(), logits.size()), 1e-4);
}

TEST_F(GpuBackendTest, BackendFactory) {
  BackendOptions o;
  o.log_progress = false;
  std::string note;
  auto e = CreateBackend("emulated", *model_, kKv, o, &note);
  ASSERT_TRUE(e.ok()) << e.status();
  EXPECT_EQ((*e)->name(), "emulated");
  EXPECT_TRUE(note.empty());
  e->reset();
  auto c = CreateBackend("cpu", *model_, kKv, o, &note);
  ASSERT_TRUE(c.ok());
  EXPECT_EQ((*c)->name(), "cpu");
  auto bad = CreateBackend("tpu", *model_, kKv, o, &note);
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  auto a = CreateBackend("auto", *model_, kKv, o, &note);
  ASSERT_TRUE(a.ok()) << a.status();
  if (!LoadCudaDriver().ok()) {
    EXPECT_EQ((*a)->name(), "cpu");
    EXPECT_THAT(note, HasSubstr("libcuda.so.1 not found"));
    EXPECT_THAT(note, HasSubstr("serving from the CPU backend"));
  }
}

TEST_F(GpuBackendTest, BackendFactoryChecksTheEmulatedDeviceProfile) {
  BackendOptions o;
  o.log_progress = false;
  o.emulated_device = "h200";
  auto bad = CreateBackend("emulated", *model_, kKv, o);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(bad.status().message()), HasSubstr("--emulated_device"));
  EXPECT_THAT(std::string(bad.status().message()), HasSubstr("small, a100 or h100"));
  o.emulated_device = "h100";
  auto cpu = CreateBackend("cpu", *model_, kKv, o);
  ASSERT_FALSE(cpu.ok()) << "a profile the cpu backend would ignore";
  EXPECT_EQ(cpu.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(cpu.status().message()),
              HasSubstr("--emulated_device=h100 applies to --backend=emulated only"));
  // Unsized, the emulated backend takes the host's default whatever memory the profile
  // reports: 80 GiB of KV pools would be 80 GiB of host RAM.
  KvCacheConfig unsized = kKv;
  unsized.num_blocks = 0;
  auto h100 = CreateBackend("emulated", *model_, unsized, o);
  ASSERT_TRUE(h100.ok()) << h100.status();
  EXPECT_EQ((*h100)->kv_config().num_blocks,
            DefaultHostKvBlocks(model_->config, unsized, o.max_seqs));
}

// The GPU sizing rule (kv_memory_fraction of the free memory) reads the profile's 80 GiB:
// a small fraction of it keeps the pools, and the host memory behind them, small.
TEST_F(GpuBackendTest, TheH100ProfileSizesKvPoolsFromItsFreeMemory) {
  GpuBackendOptions o;
  o.log_progress = false;
  o.warmup = false;
  o.emulated_device = "h100";
  o.kv_memory_fraction = 1e-4;  // of ~80 GiB: ~8 MiB
  KvCacheConfig unsized = kKv;
  unsized.num_blocks = 0;
  auto b = CreateGpuBackend(*model_, unsized, "emulated", o);
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ((*b)->device_info().num_sms, 132);
  const double free_before_kv = static_cast<double>(
      (*b)->device_info().total_memory - GetEmulatedDeviceCounters().live_bytes + (*b)->kv_bytes());
  const double budget = o.kv_memory_fraction * free_before_kv;
  const double per_block = static_cast<double>((*b)->kv_bytes()) / (*b)->kv_config().num_blocks;
  EXPECT_GT((*b)->kv_config().num_blocks, 1);
  // As many blocks as the budget holds (within one: buffers allocated after the pools
  // blur the free memory the backend saw by a few KiB).
  EXPECT_NEAR((*b)->kv_config().num_blocks, std::floor(budget / per_block), 1.0);
  EXPECT_LT(GetEmulatedDeviceCounters().live_bytes, int64_t{64} << 20);
}

// The engine on the emulated device generates what it generates on the CPU backend.
TEST_F(GpuBackendTest, EngineRunsOnTheEmulatedDevice) {
  auto tokenizer = Tokenizer::FromDir(model_->dir);
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
  auto run = [&](std::unique_ptr<Backend> backend) {
    EngineConfig cfg;
    cfg.prefill_chunk = 8;
    Engine engine(std::move(backend), **tokenizer, cfg);
    EXPECT_TRUE(engine.Start().ok());
    std::vector<EngineRequest> reqs(3);
    for (int i = 0; i < 3; ++i) {
      reqs[i].request_id = "r" + std::to_string(i);
      reqs[i].index = i;
      reqs[i].prompt = Prompt(5 + 6 * i, model_->config.vocab_size, 20 + i);
      reqs[i].sampling.temperature = 0;
      reqs[i].stopping.max_new_tokens = 5;
    }
    auto stream = std::make_shared<ResultStream>();
    EXPECT_TRUE(engine.Enqueue(std::move(reqs), stream).ok());
    std::vector<std::vector<int32_t>> tokens(3);
    int done = 0;
    std::vector<EngineOutput> outs;
    while (done < 3 && stream->WaitPopAll(&outs)) {
      for (EngineOutput& o : outs) {
        tokens[o.index].insert(tokens[o.index].end(), o.token_ids.begin(), o.token_ids.end());
        if (o.final()) {
          ++done;
          EXPECT_TRUE(o.error.ok()) << o.error;
        }
      }
    }
    return tokens;
  };
  auto gpu = testing::EmulatedBackend(*model_, kKv);
  ASSERT_TRUE(gpu.ok()) << gpu.status();
  auto cpu = CpuBackend::Create(*model_, kKv);
  ASSERT_TRUE(cpu.ok());
  const auto got = run(*std::move(gpu));
  const auto want = run(*std::move(cpu));
  EXPECT_EQ(got, want);
  EXPECT_EQ(got[0].size(), 5u);
}

// A failing step fails its requests with INTERNAL; the engine keeps serving.
TEST_F(GpuBackendTest, EngineFailsTheStepsRequestsAndLivesOn) {
  auto tokenizer = Tokenizer::FromDir(model_->dir);
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
  auto gpu = testing::EmulatedBackend(*model_, kKv);
  ASSERT_TRUE(gpu.ok()) << gpu.status();
  EngineConfig cfg;
  cfg.max_step_failures = 2;  // tolerate one failed step (the default fails the engine)
  Engine engine(*std::move(gpu), **tokenizer, cfg);
  ASSERT_TRUE(engine.Start().ok());
  auto one = [&](int seed) {
    EngineRequest r;
    r.request_id = "f" + std::to_string(seed);
    r.prompt = Prompt(6, model_->config.vocab_size, seed);
    r.sampling.temperature = 0;
    r.stopping.max_new_tokens = 3;
    auto stream = std::make_shared<ResultStream>();
    EXPECT_TRUE(engine.Enqueue({r}, stream).ok());
    std::vector<EngineOutput> outs;
    while (stream->WaitPopAll(&outs)) {
      for (EngineOutput& o : outs) {
        if (o.final()) return o;
      }
    }
    return EngineOutput{};
  };
  EmulatedFault f;
  f.fail_launch = 1;
  SetEmulatedFault(f);
  const EngineOutput failed = one(1);
  EXPECT_EQ(failed.finish, FinishReason::kError);
  EXPECT_EQ(failed.error.code(), absl::StatusCode::kInternal) << failed.error;
  EXPECT_THAT(std::string(failed.error.message()), HasSubstr("cuLaunchKernel"));
  SetEmulatedFault({});
  const EngineOutput ok = one(2);
  EXPECT_NE(ok.finish, FinishReason::kError) << ok.error;
  EXPECT_EQ(ok.generated_tokens, 3);
  EXPECT_FALSE(engine.Stats().failed);
}

// A q8_0/q4_0 GGUF's embedding is uploaded as its blocks and a tied LM head reads that one
// buffer: beyond the layers, the device holds the table's blocks and the final norm, not an
// f32 table beside a copy of the blocks.
TEST_F(GpuBackendTest, BlockEmbeddingIsUploadedAsStoredAndSharedWithTheTiedHead) {
  const std::string dir = testing::SharedModelsDir() + "/tinystories-656k";
  if (!std::filesystem::exists(dir + "/model.safetensors")) {
    GTEST_SKIP() << "test model absent: " << dir;
  }
  absl::StatusOr<Model> m = LoadModel(dir);
  ASSERT_TRUE(m.ok()) << m.status();
  for (const char* format : {"q8_0", "q4_0"}) {
    SCOPED_TRACE(format);
    GgufWriter w;
    ASSERT_TRUE(AddModelToGguf(*m, *ParseGgufWeightType(format), "tinystories", &w).ok());
    const std::string path = absl::StrCat(::testing::TempDir(), "/embed-blocks-", format, ".gguf");
    ASSERT_TRUE(w.Write(path).ok());
    absl::StatusOr<Model> q = LoadModel(path);
    ASSERT_TRUE(q.ok()) << q.status();
    const ModelConfig& c = q->config;
    ASSERT_EQ(QuantName(q->tensors.embed.quant), format);
    ASSERT_TRUE(c.tie_word_embeddings);
    auto b = testing::EmulatedBackend(*q, kKv);
    ASSERT_TRUE(b.ok()) << b.status();
    const size_t table =
        static_cast<size_t>(c.vocab_size * QuantRowBytes(q->tensors.embed.quant, c.hidden_size));
    EXPECT_EQ((*b)->weight_bytes() - c.num_layers * (*b)->layer_weight_bytes(),
              table + c.hidden_size * 4);
    std::filesystem::remove(path);
  }
}

}  // namespace
}  // namespace ptxserve::cuda
