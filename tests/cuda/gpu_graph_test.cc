// CUDA graphs in the GPU backend (emulated device): decode-only steps run as padded graph
// replays that give the same bits as launch-by-launch steps, one capture per key (bucket,
// block-table stride, attention split), kernel-cache and transfer accounting unchanged,
// everything else launch by launch, stale graphs recaptured after buffers grow, and
// injected faults inside a replayed graph failing only their step.
#include <cstring>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "engine/cuda/emulated_driver.h"
#include "engine/cuda/gpu_backend.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/cuda/gpu_test_util.h"

namespace ptxserve::cuda {
namespace {

using testing::GenRequest;
using ::testing::HasSubstr;
using testing::Prompt;

constexpr KvCacheConfig kKv{128, 16, DType::kF32};
constexpr int kBlocksPerSeq = 4;  // Decode(): sequence s owns blocks 4s .. 4s + 3

int64_t Total(const std::map<std::string, int64_t>& m) {
  int64_t n = 0;
  for (const auto& [k, v] : m) n += v;
  return n;
}

// A decode step: sequence s has context lens[s] (<= 64), its new token at lens[s] - 1;
// the block-table stride is the longest table's.
StepBatch Decode(const std::vector<int32_t>& lens, int64_t vocab) {
  StepBatch b;
  b.query_start.push_back(0);
  int32_t stride = 1;
  for (int32_t len : lens) stride = std::max(stride, (len + 15) / 16);
  b.max_blocks_per_seq = stride;
  for (size_t s = 0; s < lens.size(); ++s) {
    const int32_t p = lens[s] - 1;
    const int32_t first = static_cast<int32_t>(kBlocksPerSeq * s);
    b.token_ids.push_back(static_cast<int32_t>(3 + (s * 31 + p * 7) % (vocab - 3)));
    b.positions.push_back(p);
    b.slot_mapping.push_back(int64_t{first + p / 16} * 16 + p % 16);
    b.query_start.push_back(static_cast<int32_t>(s + 1));
    b.seq_lens.push_back(lens[s]);
    for (int32_t j = 0; j < stride; ++j) b.block_tables.push_back(first + j);
    b.logits_rows.push_back(static_cast<int32_t>(s));
  }
  return b;
}

bool SameBits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() &&
         (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
}

class GpuGraphTest : public ::testing::Test {
 protected:
  void SetUp() override {
    SetEmulatedFault({});
    auto m = testing::SyntheticModel("tiny", DType::kF32);
    ASSERT_TRUE(m.ok()) << m.status();
    model_ = std::make_unique<Model>(*std::move(m));
    vocab_ = model_->config.vocab_size;
  }
  void TearDown() override { SetEmulatedFault({}); }

  // Options capturing a key at its first step (most tests count captures that way).
  static GpuBackendOptions FirstUse() {
    GpuBackendOptions o;
    o.cuda_graph_eager_runs = 0;
    return o;
  }
  std::unique_ptr<GpuBackend> Make(bool graphs, GpuBackendOptions o = FirstUse(),
                                   const std::string& kind = "emulated") {
    o.cuda_graphs = graphs;
    o.log_progress = false;
    auto b = kind == "emulated" ? testing::EmulatedBackend(*model_, kKv, o)
                                : CreateGpuBackend(*model_, kKv, kind, o);
    EXPECT_TRUE(b.ok()) << b.status();
    return b.ok() ? *std::move(b) : nullptr;
  }
  // Kernel launches of one unsplit step of the tiny model of `tokens` rows (padded) and
  // `rows` logits rows (see gpu_backend_test.cc), and the rmsnorm launches (two per layer,
  // the final one) where the GEMM after them does not fuse them (beyond 4 rows,
  // kernel_set.cc WithNorm).
  int64_t LaunchesPerStep(int64_t tokens, int64_t rows) const {
    return 1 + (tokens <= 4 ? 7 : 9) * model_->config.num_layers + (rows <= 4 ? 2 : 3);
  }

  std::unique_ptr<Model> model_;
  int64_t vocab_ = 0;
};

TEST(CudaGraphBucketTest, PowersOfTwoToEightThenMultiplesOfEight) {
  const std::map<int64_t, int64_t> want = {{0, 0},   {1, 1},   {2, 2},   {3, 4},    {4, 4},
                                           {5, 8},   {8, 8},   {9, 16},  {16, 16},  {17, 24},
                                           {33, 40}, {63, 64}, {65, 72}, {256, 256}};
  for (const auto& [seqs, bucket] : want) EXPECT_EQ(CudaGraphBucket(seqs, 256), bucket) << seqs;
  EXPECT_EQ(CudaGraphBucket(257, 256), 0) << "past the largest graph batch";
  EXPECT_EQ(CudaGraphBucket(9, 8), 0);
}

// Staggered arrivals and different lengths: the batch grows and shrinks through decode
// steps of 1, 3 and 5 sequences (buckets 1, 4, 8) between prefill and mixed steps. Greedy
// tokens and every logit are bit-identical with and without graphs, on both the logits
// path (Step) and device sampling (StepSampled); only decode-only steps replay graphs.
// On the emulated device and, where there is one, a real GPU.
class GpuGraphDevices : public GpuGraphTest, public ::testing::WithParamInterface<std::string> {};

INSTANTIATE_TEST_SUITE_P(Devices, GpuGraphDevices, ::testing::Values("emulated", "cuda"),
                         [](const ::testing::TestParamInfo<std::string>& i) { return i.param; });

TEST_P(GpuGraphDevices, GraphStepsGiveTheSameBitsAsLaunchByLaunch) {
  const std::string kind = GetParam();
  if (std::string why = testing::Unavailable(kind); !why.empty()) GTEST_SKIP() << why;
  // Steps (chunks of 8 prompt tokens): 0 prefill; 1-2 decode 1; 3-4 mixed; 5 decode 3;
  // 6-7 mixed; 8 decode 5; then 3 and 1 sequences as they finish.
  const std::vector<GenRequest> reqs = {{Prompt(5, vocab_, 1), 0, 11},
                                        {Prompt(9, vocab_, 2), 3, 6},
                                        {Prompt(17, vocab_, 3), 3, 4},
                                        {Prompt(3, vocab_, 4), 6, 3},
                                        {Prompt(11, vocab_, 5), 6, 3}};
  // The default options: each key's first step runs launch by launch, then it is captured.
  auto eager = Make(false, GpuBackendOptions{}, kind);
  auto graphed = Make(true, GpuBackendOptions{}, kind);
  ASSERT_TRUE(eager && graphed);
  for (bool sampled : {false, true}) {
    // The second run finds the first's keys (run once, or captured) and rewrites the same
    // K/V: every one of its decode-only steps replays a graph.
    SCOPED_TRACE(sampled ? "StepSampled" : "Step");
    const int64_t replays = graphed->graph_stats().replays;
    auto run = [&](GpuBackend& b) {
      return testing::Generate(b, reqs, /*chunk=*/8, /*block_seed=*/3,
                               sampled ? testing::DeviceGreedy(b) : nullptr);
    };
    absl::StatusOr<testing::GenResult> want = run(*eager);
    absl::StatusOr<testing::GenResult> got = run(*graphed);
    ASSERT_TRUE(want.ok()) << want.status();
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_EQ(got->tokens, want->tokens);
    ASSERT_EQ(got->logits.size(), want->logits.size());
    for (size_t i = 0; i < got->logits.size(); ++i) {
      EXPECT_TRUE(SameBits(got->logits[i], want->logits[i])) << "step " << i;
    }
    // Which steps were decode-only, and at which batch sizes.
    int64_t decode_steps = 0;
    std::set<int32_t> sizes;
    std::set<int64_t> buckets;
    for (const StepBatch& b : got->batches) {
      if (b.num_tokens() != b.num_seqs()) continue;
      ++decode_steps;
      sizes.insert(b.num_seqs());
      buckets.insert(CudaGraphBucket(b.num_seqs(), 256));
    }
    EXPECT_LT(decode_steps, static_cast<int64_t>(got->batches.size())) << "prefill steps too";
    for (int32_t n : {1, 3, 5}) EXPECT_EQ(sizes.count(n), 1u) << "a decode step of " << n;
    const GraphStats g = graphed->graph_stats();
    if (sampled) {
      EXPECT_EQ(g.replays - replays, decode_steps) << "every decode-only step, and only those";
      EXPECT_GE(g.captures, static_cast<int64_t>(buckets.size()));
    } else {
      EXPECT_GT(g.replays - replays, 0);
      EXPECT_LT(g.replays - replays, decode_steps) << "a key's first step runs launch by launch";
    }
    EXPECT_LT(g.captures, decode_steps) << "graphs are reused";
    EXPECT_EQ(g.live, g.captures - g.dropped);
    if (kind == "emulated") {
      EXPECT_EQ(GetEmulatedDeviceCounters().live_graph_execs, g.live);
    }
    EXPECT_EQ(eager->graph_stats().captures, 0);
    EXPECT_EQ(eager->graph_stats().replays, 0);
  }
}

// One capture per key; per step the kernel cache counts every replayed kernel as a
// launch and a hit, and transfers stay one copy each way of the real rows' size.
TEST_F(GpuGraphTest, CapturedOncePerBucketAndCountedPerKernel) {
  auto b = Make(true);
  ASSERT_NE(b, nullptr);
  const int64_t misses = b->cache_stats().misses;
  std::vector<float> logits;
  std::vector<int32_t> ids;
  struct Case {
    std::vector<int32_t> lens;
    int64_t captures;  // total after the step
  };
  // 3 and 4 sequences share bucket 4; contexts 5..32 share stride 2 (next power of two
  // of 2 blocks); 33 needs 3 blocks, stride 4: a new key. 5 sequences: bucket 8.
  const std::vector<Case> cases = {
      {{20, 5, 31}, 1}, {{21, 6, 32}, 1},         {{22, 7, 17, 9}, 1},     {{23, 8, 33, 10}, 2},
      {{24, 9, 34}, 2}, {{25, 10, 20, 11, 3}, 3}, {{26, 11, 21, 12, 4}, 3}};
  int64_t replays = 0;
  for (const Case& c : cases) {
    const int64_t B = static_cast<int64_t>(c.lens.size());
    for (bool sampled : {false, true}) {
      const KernelCacheStats k0 = b->cache_stats();
      const TransferStats t0 = b->transfer_stats();
      const StepBatch batch = Decode(c.lens, vocab_);
      if (sampled) {
        const absl::Status st = b->StepSampled(batch, std::vector<RowSampling>(B), &ids);
        ASSERT_TRUE(st.ok()) << st;
        EXPECT_EQ(ids.size(), static_cast<size_t>(B));
      } else {
        ASSERT_TRUE(b->Step(batch, &logits).ok());
        EXPECT_EQ(logits.size(), static_cast<size_t>(B * vocab_));
      }
      ++replays;
      const KernelCacheStats k1 = b->cache_stats();
      const TransferStats t1 = b->transfer_stats();
      const int64_t padded = B <= 4 ? 4 : 8;  // the graph's bucket (CudaGraphBucket)
      const int64_t launches = LaunchesPerStep(padded, padded) + (sampled ? 1 : 0);  // + argmax
      EXPECT_EQ(k1.misses, misses);
      EXPECT_EQ(k1.hits - k0.hits, launches) << "B=" << B;
      EXPECT_EQ(Total(k1.launches) - Total(k0.launches), launches) << "B=" << B;
      EXPECT_EQ(k1.launches.at("gemm") - k0.launches.at("gemm"), 4 * model_->config.num_layers + 1);
      EXPECT_EQ(t1.h2d_count - t0.h2d_count, 1);
      EXPECT_EQ(t1.d2h_count - t0.d2h_count, 1);
      EXPECT_EQ(t1.d2h_bytes - t0.d2h_bytes, sampled ? 4 * B : B * vocab_ * 4) << "B=" << B;
      const GraphStats g = b->graph_stats();
      EXPECT_EQ(g.captures, c.captures) << "B=" << B << " lens[0]=" << c.lens[0];
      EXPECT_EQ(g.replays, replays);
    }
  }
  EXPECT_EQ(b->graph_stats().dropped, 0);
}

// Prefill and mixed steps run launch by launch and leave the graphs alone.
TEST_F(GpuGraphTest, StepsThatAreNotDecodeOnlyRunWithoutAGraph) {
  auto b = Make(true);
  ASSERT_NE(b, nullptr);
  std::vector<float> logits;
  ASSERT_TRUE(b->Step(Decode({9, 4}, vocab_), &logits).ok());
  EXPECT_EQ(b->graph_stats().replays, 1);
  StepBatch prefill;
  prefill.query_start = {0};
  prefill.max_blocks_per_seq = 1;
  for (int32_t p = 0; p < 6; ++p) {
    prefill.token_ids.push_back(3 + p);
    prefill.positions.push_back(p);
    prefill.slot_mapping.push_back(100 * 16 + p);
  }
  prefill.query_start.push_back(6);
  prefill.seq_lens.push_back(6);
  prefill.block_tables.push_back(100);
  prefill.logits_rows.push_back(5);
  const KernelCacheStats k0 = b->cache_stats();
  ASSERT_TRUE(b->Step(prefill, &logits).ok());
  EXPECT_EQ(b->cache_stats().hits - k0.hits, LaunchesPerStep(6, 1));
  // One token per sequence but not every row's logits: launch by launch as well.
  StepBatch partial = Decode({9, 4}, vocab_);
  partial.logits_rows = {1};
  ASSERT_TRUE(b->Step(partial, &logits).ok());
  EXPECT_EQ(logits.size(), static_cast<size_t>(vocab_));
  const GraphStats g = b->graph_stats();
  EXPECT_EQ(g.captures, 1);
  EXPECT_EQ(g.replays, 1);
}

// A fixed attention partition splits these contexts 2 to 4 ways: graphs keyed by the
// split count, bit-identical with launch-by-launch steps.
TEST_F(GpuGraphTest, SplitAttentionStepsAreKeyedBySplitCount) {
  GpuBackendOptions o = FirstUse();
  o.attention_partition = 16;
  auto eager = Make(false, o);
  auto graphed = Make(true, o);
  ASSERT_TRUE(eager && graphed);
  std::vector<float> want, got;
  // The largest split first: its partial buffers then hold every later step's (a buffer
  // that grows would drop the graphs, see below).
  const std::vector<std::vector<int32_t>> steps = {{40, 17, 60}, {41, 18, 61}, {20, 30}, {21, 31},
                                                   {33, 2},      {34, 3},      {22, 32}};
  for (const auto& lens : steps) {
    const StepBatch batch = Decode(lens, vocab_);
    ASSERT_TRUE(eager->Step(batch, &want).ok());
    ASSERT_TRUE(graphed->Step(batch, &got).ok());
    EXPECT_TRUE(SameBits(got, want)) << "first context " << lens[0];
  }
  // Keys (rows, stride, splits): (4, 4, 4), (2, 2, 2), (2, 4, 3); the last step reuses
  // the second.
  const GraphStats g = graphed->graph_stats();
  EXPECT_EQ(g.captures, 3);
  EXPECT_EQ(g.dropped, 0);
  EXPECT_EQ(g.replays, static_cast<int64_t>(steps.size()));
}

// A buffer that grows makes every graph stale: they are dropped and recaptured, and the
// results stay right.
TEST_F(GpuGraphTest, GraphsAreRecapturedAfterBuffersGrow) {
  GpuBackendOptions o = FirstUse();
  o.max_tokens = 2;
  o.max_seqs = 1;
  auto eager = Make(false, o);
  auto graphed = Make(true, o);
  ASSERT_TRUE(eager && graphed);
  std::vector<float> want, got;
  const std::vector<std::vector<int32_t>> steps = {{7}, {8}, {9, 5, 6, 7, 8}, {10}, {11}};
  for (const auto& lens : steps) {
    const StepBatch batch = Decode(lens, vocab_);
    ASSERT_TRUE(eager->Step(batch, &want).ok());
    ASSERT_TRUE(graphed->Step(batch, &got).ok());
    EXPECT_TRUE(SameBits(got, want)) << "B=" << lens.size();
  }
  const GraphStats g = graphed->graph_stats();
  EXPECT_EQ(g.captures, 3) << "bucket 1, bucket 8 after growing, bucket 1 again";
  EXPECT_EQ(g.dropped, 1);
  EXPECT_EQ(g.live, 2);
  EXPECT_EQ(g.replays, 5);
}

// Beyond cuda_graph_limit the least recently used graph goes.
TEST_F(GpuGraphTest, TheLeastRecentlyUsedGraphGoesPastTheLimit) {
  GpuBackendOptions o = FirstUse();
  o.cuda_graph_limit = 2;
  auto b = Make(true, o);
  ASSERT_NE(b, nullptr);
  std::vector<float> logits;
  for (const auto& lens : std::vector<std::vector<int32_t>>{{5}, {6, 7}, {8}, {9, 9, 9}, {10}}) {
    ASSERT_TRUE(b->Step(Decode(lens, vocab_), &logits).ok());
  }
  // Buckets 1, 2, (1), 4 (drops 2), (1).
  GraphStats g = b->graph_stats();
  EXPECT_EQ(g.captures, 3);
  EXPECT_EQ(g.dropped, 1);
  EXPECT_EQ(g.live, 2);
  ASSERT_TRUE(b->Step(Decode({11, 12}, vocab_), &logits).ok());  // bucket 2 again: drops 4
  g = b->graph_stats();
  EXPECT_EQ(g.captures, 4);
  EXPECT_EQ(g.dropped, 2);
  EXPECT_EQ(g.replays, 6);
}

// By default a key's first step runs launch by launch (loading its kernels onto the
// device outside any capture), its second is captured and replayed.
TEST_F(GpuGraphTest, ByDefaultAKeyRunsOnceLaunchByLaunchBeforeItIsCaptured) {
  auto b = Make(true, GpuBackendOptions{});
  ASSERT_NE(b, nullptr);
  std::vector<float> logits;
  const std::vector<std::pair<int64_t, int64_t>> want = {{0, 0}, {1, 1}, {1, 2}};
  for (const auto& [captures, replays] : want) {
    ASSERT_TRUE(b->Step(Decode({9, 4}, vocab_), &logits).ok());
    EXPECT_EQ(b->graph_stats().captures, captures);
    EXPECT_EQ(b->graph_stats().replays, replays);
  }
}

// Without warm-up the first step of a key compiles its kernels launch by launch; the
// capture comes at its second step, and nothing compiles afterwards.
TEST_F(GpuGraphTest, WithoutWarmUpAKeyRunsOnceBeforeItIsCaptured) {
  GpuBackendOptions o = FirstUse();
  o.warmup = false;
  auto b = Make(true, o);
  ASSERT_NE(b, nullptr);
  std::vector<float> logits;
  ASSERT_TRUE(b->Step(Decode({5, 6}, vocab_), &logits).ok());
  const int64_t misses = b->cache_stats().misses;
  EXPECT_GT(misses, 0);
  EXPECT_EQ(b->graph_stats().captures, 0);
  EXPECT_EQ(b->graph_stats().replays, 0);
  for (int i = 0; i < 2; ++i) {
    const KernelCacheStats k0 = b->cache_stats();
    ASSERT_TRUE(b->Step(Decode({6 + i, 7 + i}, vocab_), &logits).ok());
    EXPECT_EQ(b->cache_stats().misses, misses);
    EXPECT_EQ(b->cache_stats().hits - k0.hits, LaunchesPerStep(2, 2));
  }
  EXPECT_EQ(b->graph_stats().captures, 1);
  EXPECT_EQ(b->graph_stats().replays, 2);
}

// A fault injected into a kernel of a replayed graph fails that step with INTERNAL naming
// the kernel, at the graph launch or at the step's synchronisation; the graph stays and
// the next steps are right.
TEST_F(GpuGraphTest, AFaultInAReplayedGraphFailsOnlyItsStep) {
  auto eager = Make(false);
  auto graphed = Make(true);
  ASSERT_TRUE(eager && graphed);
  std::vector<float> want, got;
  ASSERT_TRUE(graphed->Step(Decode({10, 4, 7}, vocab_), &got).ok());  // captured
  ASSERT_TRUE(eager->Step(Decode({10, 4, 7}, vocab_), &want).ok());
  EXPECT_EQ(graphed->graph_stats().captures, 1);

  EmulatedFault f;
  f.fail_launch = 2;  // the first layer's qkv projection
  SetEmulatedFault(f);
  absl::Status st = graphed->Step(Decode({11, 5, 8}, vocab_), &got);
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.code(), absl::StatusCode::kInternal);
  EXPECT_THAT(std::string(st.message()), HasSubstr("cuGraphLaunch (decode graph of 4 rows"));
  EXPECT_THAT(std::string(st.message()), HasSubstr("CUDA_ERROR_LAUNCH_FAILED"));
  EXPECT_THAT(std::string(st.message()), HasSubstr("injected failure of kernel gemm"));
  SetEmulatedFault({});
  ASSERT_TRUE(graphed->Step(Decode({11, 5, 8}, vocab_), &got).ok());
  ASSERT_TRUE(eager->Step(Decode({11, 5, 8}, vocab_), &want).ok());
  EXPECT_TRUE(SameBits(got, want));

  f.site = EmulatedFault::Site::kSync;
  f.fail_launch = 4;  // the first layer's attention
  SetEmulatedFault(f);
  std::vector<int32_t> ids;
  st = graphed->StepSampled(Decode({12, 6, 9}, vocab_), std::vector<RowSampling>(3), &ids);
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.code(), absl::StatusCode::kInternal);
  EXPECT_THAT(std::string(st.message()), HasSubstr("cuStreamSynchronize (step)"));
  EXPECT_THAT(std::string(st.message()), HasSubstr("injected failure of kernel decode_attention"));
  SetEmulatedFault({});
  ASSERT_TRUE(graphed->Step(Decode({12, 6, 9}, vocab_), &got).ok());
  ASSERT_TRUE(eager->Step(Decode({12, 6, 9}, vocab_), &want).ok());
  EXPECT_TRUE(SameBits(got, want));
  const GraphStats g = graphed->graph_stats();
  EXPECT_EQ(g.captures, 1) << "the graph survives the faults";
  EXPECT_EQ(g.replays, 4) << "the failed launch-site replay is not counted";
}

}  // namespace
}  // namespace ptxserve::cuda
