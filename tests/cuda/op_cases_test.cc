// The kernel ops as one list of small cases (llama.cpp's tests/test-backend-ops.cpp is the
// model): each case generates its kernel, runs it through cuda::Device and the kernel
// cache with its typed launch arguments, on the emulated driver and, where libcuda.so.1 and
// a GPU exist, on the real one (skipped with the reason otherwise), and compares the result
// with the CPU op (engine/cpu/ops.h) within the tolerance of its dtype. The CPU reference
// reads the same rounded f16/bf16 weights as the kernel, so the tolerance covers only the
// kernel's own arithmetic (its summation order, and approximate SFU functions on a GPU).
// The cases themselves, and their names, are listed in op_cases.h / op_cases.cc.
#include "tests/cuda/op_cases.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <variant>
#include <vector>

#include "absl/strings/str_cat.h"
#include "engine/cpu/ops.h"
#include "engine/cuda/device.h"
#include "engine/cuda/driver.h"
#include "engine/cuda/emulated_driver.h"
#include "engine/cuda/kernel_cache.h"
#include "engine/model/dtype.h"
#include "gtest/gtest.h"
#include "kernels/argmax.h"
#include "kernels/decode_attention.h"
#include "kernels/embedding.h"
#include "kernels/flash_attention.h"
#include "kernels/gemm.h"
#include "kernels/kernel_list.h"
#include "kernels/rmsnorm.h"
#include "kernels/rope_kv.h"
#include "kernels/silu_mul.h"
#include "tests/cuda/gpu_test_util.h"

namespace ptxserve::cuda {
namespace {

DType ToDType(ElemType t) {
  return t == ElemType::kF32 ? DType::kF32 : t == ElemType::kF16 ? DType::kF16 : DType::kBF16;
}

// Relative tolerance: f32 results differ from the CPU's only in summation order.
constexpr double kTolerance = 2e-5;

std::vector<float> Random(size_t n, uint32_t seed, float lo = -1, float hi = 1) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

// A device and its kernel cache; uploads, downloads and typed launches for the cases.
class OpRunner {
 public:
  explicit OpRunner(std::unique_ptr<Device> device)
      : device_(std::move(device)), cache_(device_.get()) {}

  // Uploads `v` converted to `t`; `rounded` receives the values as the device holds them.
  CUdeviceptr Upload(const std::vector<float>& v, DType t = DType::kF32,
                     std::vector<float>* rounded = nullptr) {
    std::vector<uint8_t> bytes(v.size() * DTypeSize(t));
    ConvertFromFloat(t, v.data(), v.size(), bytes.data());
    if (rounded != nullptr) {
      rounded->resize(v.size());
      ConvertToFloat(t, bytes.data(), v.size(), rounded->data());
    }
    return UploadBytes(bytes.data(), bytes.size());
  }
  CUdeviceptr UploadBytes(const void* data, size_t n) {
    absl::StatusOr<DeviceBuffer> b = device_->Alloc(std::max<size_t>(n, 4), "op input");
    EXPECT_TRUE(b.ok()) << b.status();
    if (!b.ok()) return 0;
    EXPECT_TRUE(device_->CopyToDevice(b->ptr(), data, n, "op input").ok());
    // The copy reads `data` until the stream is synchronised.
    EXPECT_TRUE(device_->Synchronize("op input").ok());
    buffers_.push_back(*std::move(b));
    return buffers_.back().ptr();
  }
  template <class T>
  std::vector<T> Download(CUdeviceptr p, size_t n) {
    std::vector<T> v(n);
    EXPECT_TRUE(device_->CopyToHost(v.data(), p, n * sizeof(T), "op output").ok());
    EXPECT_TRUE(device_->Synchronize("op").ok());
    return v;
  }
  // Generates the kernel of `cfg` and launches it with `args`.
  template <class Config, class Args>
  absl::Status Launch(const Config& cfg, const char* entry,
                      absl::StatusOr<std::string> (*generate)(const Config&),
                      const kernels::LaunchDims& dims, Args args) {
    KernelSpec spec{cfg.Key(), entry, [cfg, generate] { return generate(cfg); },
                    kernels::GridDependent(cfg)};
    absl::StatusOr<const CompiledKernel*> k = cache_.Get(spec);
    if (!k.ok()) return k.status();
    auto params = kernels::PackParams(args);
    return cache_.Launch(**k, dims, params.data());
  }
  ptx::Target target() const {
    const DeviceInfo& i = device_->info();
    ptx::Target t;
    t.sm = i.cc_major * 10 + i.cc_minor;
    return t;
  }

 private:
  std::unique_ptr<Device> device_;
  KernelCache cache_;
  std::vector<DeviceBuffer> buffers_;
};

void ExpectClose(const std::vector<float>& got, const std::vector<float>& want, double tol) {
  ASSERT_EQ(got.size(), want.size());
  EXPECT_LE(testing::RelErr(got.data(), want.data(), static_cast<int64_t>(got.size())), tol);
}

void RunCase(OpRunner& r, const RmsNormCase& c) {
  kernels::RmsNormConfig cfg;
  cfg.dim = c.dim;
  cfg.weight_dtype = c.weights;
  cfg.target = r.target();
  std::vector<float> w;
  const std::vector<float> x = Random(size_t{1} * c.rows * c.dim, 1);
  const CUdeviceptr dx = r.Upload(x),
                    dw = r.Upload(Random(c.dim, 2, 0.5f, 1.5f), ToDType(c.weights), &w);
  const CUdeviceptr dout = r.Upload(std::vector<float>(x.size()));
  const float eps = 1e-5f;
  ASSERT_TRUE(r.Launch(cfg, kernels::kRmsNormEntry, &kernels::GenerateRmsNorm,
                       kernels::RmsNormLaunch(cfg, c.rows),
                       kernels::RmsNormArgs{.x = dx,
                                            .w = dw,
                                            .out = dout,
                                            .num_rows = static_cast<uint32_t>(c.rows),
                                            .eps = eps})
                  .ok());
  std::vector<float> want(x.size());
  cpu::RmsNorm(x.data(), w.data(), c.rows, c.dim, eps, want.data());
  ExpectClose(r.Download<float>(dout, x.size()), want, kTolerance);
}

void RunCase(OpRunner& r, const GemmCase& c) {
  kernels::GemmConfig base;
  base.n = c.n;
  base.k = c.k;
  base.weight_dtype = c.weights;
  base.has_bias = c.bias;
  base.accumulate = c.accumulate;
  base.target = r.target();
  kernels::GemmConfig cfg = base;
  if (c.form == GemmForm::kGemv) {
    ASSERT_LE(c.m, 8);
    cfg = kernels::GemmConfigFor(base, c.m, /*sm_count=*/1);
  } else {
    cfg.tiled = true;
    cfg.tensor_cores = c.form != GemmForm::kFmaTiled;
    cfg.SetMmaTile(c.form == GemmForm::kMmaWide ? kernels::kMmaWideTile : kernels::kMmaNarrowTile);
  }
  std::vector<float> w;
  const std::vector<float> x = Random(size_t{1} * c.m * c.k, 3);
  const std::vector<float> bias = Random(c.n, 4);
  const std::vector<float> y0 = Random(size_t{1} * c.m * c.n, 5);
  const CUdeviceptr dx = r.Upload(x),
                    dw = r.Upload(Random(size_t{1} * c.n * c.k, 6), ToDType(c.weights), &w);
  const CUdeviceptr db = c.bias ? r.Upload(bias) : 0, dy = r.Upload(y0);
  std::vector<float> normed;  // the GEMM's input on the CPU: x, or its RMSNorm
  if (c.norm) {
    cfg.norm = true;
    const std::vector<float> norm_w = Random(c.k, 22, 0.5f, 1.5f);
    const float eps = 1e-5f;
    ASSERT_TRUE(r.Launch(cfg, kernels::kGemmEntry, &kernels::GenerateGemm,
                         kernels::GemmLaunch(cfg, c.m),
                         kernels::NormGemmArgs{.x = dx,
                                               .norm_w = r.Upload(norm_w),
                                               .w = dw,
                                               .bias = db,
                                               .y = dy,
                                               .m = static_cast<uint32_t>(c.m),
                                               .eps = eps})
                    .ok());
    normed.resize(x.size());
    cpu::RmsNorm(x.data(), norm_w.data(), c.m, c.k, eps, normed.data());
  } else {
    ASSERT_TRUE(
        r.Launch(cfg, kernels::kGemmEntry, &kernels::GenerateGemm, kernels::GemmLaunch(cfg, c.m),
                 kernels::GemmArgs{
                     .x = dx, .w = dw, .bias = db, .y = dy, .m = static_cast<uint32_t>(c.m)})
            .ok());
    normed = x;
  }
  std::vector<float> want(y0.size());
  cpu::Gemm(normed.data(), w.data(), c.bias ? bias.data() : nullptr, c.m, c.n, c.k, want.data());
  if (c.accumulate) cpu::AddInPlace(want.data(), y0.data(), static_cast<int64_t>(want.size()));
  // Tensor cores round the activations to the weights' type (unit roundoff u): each output
  // is off by at most u * sum |x w| (gemm_mma_test holds that bound element by element);
  // with random signs the norm-wise error stays below 2u. The fused RMSNorm scales the sums
  // once at the end instead of each input (f32 rounding order only: within kTolerance).
  const double u = c.weights == ElemType::kF16 ? 0x1p-11 : 0x1p-8;
  ExpectClose(r.Download<float>(dy, want.size()), want, cfg.tensor_cores ? 2 * u : kTolerance);
}

void RunCase(OpRunner& r, const SiluMulCase& c) {
  kernels::SiluMulConfig cfg;
  cfg.fused_inter = 0;
  cfg.target = r.target();
  const std::vector<float> gate = Random(c.n, 7, -6, 6), up = Random(c.n, 8);
  const CUdeviceptr dg = r.Upload(gate), du = r.Upload(up),
                    dout = r.Upload(std::vector<float>(c.n));
  ASSERT_TRUE(
      r.Launch(
           cfg, kernels::kSiluMulEntry, &kernels::GenerateSiluMul, kernels::SiluMulLaunch(cfg, c.n),
           kernels::SiluMulArgs{.gate = dg, .up = du, .out = dout, .n = static_cast<uint32_t>(c.n)})
          .ok());
  std::vector<float> want(c.n);
  cpu::SiluMul(gate.data(), up.data(), c.n, want.data());
  // The kernel's exp is ex2.approx on a GPU (about 2 ulp).
  ExpectClose(r.Download<float>(dout, c.n), want, 1e-6 * 4 + kTolerance);
}

void RunCase(OpRunner& r, const EmbeddingCase& c) {
  kernels::EmbeddingConfig cfg;
  cfg.dim = c.dim;
  cfg.table_dtype = c.table;
  cfg.target = r.target();
  std::vector<float> table;
  const CUdeviceptr dt = r.Upload(Random(size_t{1} * c.vocab * c.dim, 9), ToDType(c.table), &table);
  std::vector<int32_t> ids(c.tokens);
  for (int t = 0; t < c.tokens; ++t) ids[t] = (t * 17 + 3) % c.vocab;
  const CUdeviceptr di = r.UploadBytes(ids.data(), ids.size() * 4);
  const CUdeviceptr dout = r.Upload(std::vector<float>(size_t{1} * c.tokens * c.dim));
  ASSERT_TRUE(r.Launch(cfg, kernels::kEmbeddingEntry, &kernels::GenerateEmbedding,
                       kernels::EmbeddingLaunch(cfg, c.tokens),
                       kernels::EmbeddingArgs{.table = dt,
                                              .ids = di,
                                              .out = dout,
                                              .num_tokens = static_cast<uint32_t>(c.tokens),
                                              .vocab = static_cast<uint32_t>(c.vocab)})
                  .ok());
  std::vector<float> want(size_t{1} * c.tokens * c.dim);
  cpu::Embed({table.data(), DType::kF32}, ids.data(), c.tokens, c.dim, want.data());
  ExpectClose(r.Download<float>(dout, want.size()), want, 0);  // a copy: exact
}

void RunCase(OpRunner& r, const ArgmaxCase& c) {
  kernels::ArgmaxConfig cfg;
  cfg.threads = 256;
  cfg.target = r.target();
  const std::vector<float> logits = Random(size_t{1} * c.rows * c.vocab, 12, -20, 20);
  const CUdeviceptr dl = r.Upload(logits), dout = r.Upload(std::vector<float>(c.rows));
  ASSERT_TRUE(r.Launch(cfg, kernels::kArgmaxEntry, &kernels::GenerateArgmax,
                       kernels::ArgmaxLaunch(cfg, c.rows),
                       kernels::ArgmaxArgs{.logits = dl,
                                           .out = dout,
                                           .vocab = static_cast<uint32_t>(c.vocab),
                                           .num_rows = static_cast<uint32_t>(c.rows)})
                  .ok());
  const std::vector<int32_t> got = r.Download<int32_t>(dout, c.rows);
  for (int row = 0; row < c.rows; ++row) {
    EXPECT_EQ(got[row], testing::ArgMax(logits.data() + int64_t{row} * c.vocab, c.vocab));
  }
}

void RunCase(OpRunner& r, const RopeKvCase& c) {
  kernels::RopeKvConfig cfg;
  cfg.num_heads = c.heads;
  cfg.num_kv_heads = c.kv_heads;
  cfg.head_dim = c.head_dim;
  cfg.layout = c.layout;
  cfg.block_size = 16;
  cfg.kv_dtype = c.kv;
  cfg.target = r.target();
  const int num_blocks = 2;
  const size_t qd = size_t{1} * c.heads * c.head_dim, kd = size_t{1} * c.kv_heads * c.head_dim;
  const size_t pool = num_blocks * kd * cfg.block_size * kernels::ElemSize(c.kv);
  const std::vector<float> qkv = Random(c.tokens * (qd + 2 * kd), 21);
  std::vector<float> inv_freq(c.head_dim / 2);
  for (int i = 0; i < c.head_dim / 2; ++i) {
    inv_freq[i] = static_cast<float>(std::pow(10000.0, -2.0 * i / c.head_dim));
  }
  std::vector<int32_t> positions(c.tokens);
  std::vector<int64_t> slots(c.tokens);
  for (int t = 0; t < c.tokens; ++t) {
    positions[t] = t * 997 + 5;                                            // far positions too
    slots[t] = t == 1 ? -1 : (t * 7 + 3) % (num_blocks * cfg.block_size);  // -1: padding
  }
  std::vector<uint8_t> want_k(pool, 0), want_v(pool, 0);
  const CUdeviceptr dq = r.Upload(std::vector<float>(c.tokens * qd));
  const CUdeviceptr dkp = r.UploadBytes(want_k.data(), pool);
  const CUdeviceptr dvp = r.UploadBytes(want_v.data(), pool);
  ASSERT_TRUE(r.Launch(cfg, kernels::kRopeKvEntry, &kernels::GenerateRopeKv,
                       kernels::RopeKvLaunch(cfg, c.tokens),
                       kernels::RopeKvArgs{
                           .qkv = r.Upload(qkv),
                           .q = dq,
                           .positions = r.UploadBytes(positions.data(), positions.size() * 4),
                           .inv_freq = r.Upload(inv_freq),
                           .slot_mapping = r.UploadBytes(slots.data(), slots.size() * 8),
                           .k_pool = dkp,
                           .v_pool = dvp,
                           .num_tokens = static_cast<uint32_t>(c.tokens)})
                  .ok());
  // The CPU ops in sequence: split the rows, rotate q and k, scatter k and v (padding
  // skipped, as the CPU op never sees it).
  std::vector<float> q(c.tokens * qd), k(c.tokens * kd), v(c.tokens * kd);
  for (int t = 0; t < c.tokens; ++t) {
    const float* row = qkv.data() + t * (qd + 2 * kd);
    std::copy(row, row + qd, q.begin() + t * qd);
    std::copy(row + qd, row + qd + kd, k.begin() + t * kd);
    std::copy(row + qd + kd, row + qd + 2 * kd, v.begin() + t * kd);
  }
  cpu::Rope(q.data(), k.data(), positions.data(), c.tokens, c.heads, c.kv_heads, c.head_dim,
            inv_freq.data(),
            c.layout == kernels::RopeLayout::kRotateHalf ? RopeStyle::kRotateHalf
                                                         : RopeStyle::kInterleaved);
  for (int t = 0; t < c.tokens; ++t) {
    if (slots[t] < 0) continue;
    cpu::KvScatter(k.data() + t * kd, v.data() + t * kd, &slots[t], 1, c.kv_heads, c.head_dim,
                   cfg.block_size, ToDType(c.kv), want_k.data(), want_v.data());
  }
  ExpectClose(r.Download<float>(dq, q.size()), q, 1e-5);
  // v is a copy (the same conversion: byte for byte); k is rotated (rope's tolerance, and
  // in a half pool an element whose f32 rotation differs in its last bits may round to the
  // neighbouring half: at most one half ulp, 2^-11 or 2^-8 relative).
  EXPECT_EQ(r.Download<uint8_t>(dvp, pool), want_v);
  const size_t pool_elems = pool / kernels::ElemSize(c.kv);
  std::vector<float> got_k(pool_elems), ref_k(pool_elems);
  const std::vector<uint8_t> kb = r.Download<uint8_t>(dkp, pool);
  ConvertToFloat(ToDType(c.kv), kb.data(), pool_elems, got_k.data());
  ConvertToFloat(ToDType(c.kv), want_k.data(), pool_elems, ref_k.data());
  const double tol = c.kv == ElemType::kF32 ? 1e-5 : c.kv == ElemType::kF16 ? 0x1p-11 : 0x1p-8;
  ExpectClose(got_k, ref_k, tol);
}

void RunCase(OpRunner& r, const DecodeAttentionCase& c) {
  const bool split = c.partition > 0;
  kernels::DecodeAttentionConfig cfg;
  cfg.num_heads = c.heads;
  cfg.num_kv_heads = c.kv_heads;
  cfg.head_dim = c.head_dim;
  cfg.block_size = c.block_size;
  cfg.kv_dtype = c.kv;
  cfg.split = split;
  cfg.target = r.target();
  absl::StatusOr<kernels::DecodeAttentionShape> shape = kernels::ShapeOf(cfg);
  ASSERT_TRUE(shape.ok()) << shape.status();
  // Sequence s holds 21 + 30 s tokens; the block tables run back to front.
  const int max_blocks = 8, num_blocks = c.seqs * max_blocks;
  std::vector<int32_t> seq_lens(c.seqs), tables(size_t{1} * c.seqs * max_blocks);
  std::vector<int32_t> positions(c.seqs), query_start(c.seqs + 1, 0);
  int max_len = 0;
  for (int s = 0; s < c.seqs; ++s) {
    seq_lens[s] = 21 + 30 * s;
    max_len = std::max(max_len, seq_lens[s]);
    positions[s] = seq_lens[s] - 1;
    query_start[s + 1] = s + 1;
    for (int b = 0; b < max_blocks; ++b) {
      tables[s * max_blocks + b] = num_blocks - 1 - (s * max_blocks + b);
    }
  }
  const size_t pool_elems = size_t{1} * num_blocks * c.kv_heads * c.block_size * c.head_dim;
  const DType kv = ToDType(c.kv);
  std::vector<float> kf, vf;
  const CUdeviceptr dkp = r.Upload(Random(pool_elems, 15), kv, &kf);
  const CUdeviceptr dvp = r.Upload(Random(pool_elems, 16), kv, &vf);
  std::vector<uint8_t> kpool(pool_elems * DTypeSize(kv)), vpool(kpool.size());
  ConvertFromFloat(kv, kf.data(), pool_elems, kpool.data());
  ConvertFromFloat(kv, vf.data(), pool_elems, vpool.data());
  const std::vector<float> q = Random(size_t{1} * c.seqs * c.heads * c.head_dim, 17);
  const CUdeviceptr dq = r.Upload(q);
  const CUdeviceptr dt = r.UploadBytes(tables.data(), tables.size() * 4);
  const CUdeviceptr dl = r.UploadBytes(seq_lens.data(), seq_lens.size() * 4);
  const int splits = split ? (max_len + c.partition - 1) / c.partition : 1;
  const size_t out_elems = size_t{1} * c.seqs * c.heads * c.head_dim;
  const CUdeviceptr dpartial = r.Upload(std::vector<float>(out_elems * splits));
  const CUdeviceptr dlse = r.Upload(std::vector<float>(size_t{1} * c.seqs * c.heads * splits));
  const CUdeviceptr dout = r.Upload(std::vector<float>(out_elems));
  const kernels::LaunchDims dims =
      kernels::DecodeAttentionLaunch(*shape, c.kv_heads, c.seqs, splits);
  const std::vector<uint32_t> counts(size_t{dims.grid[0]} * dims.grid[1], 0);
  const CUdeviceptr dcount = r.UploadBytes(counts.data(), counts.size() * 4);
  const float scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
  ASSERT_TRUE(
      r.Launch(cfg, kernels::kDecodeAttentionEntry, &kernels::GenerateDecodeAttention, dims,
               kernels::DecodeAttentionArgs{.q = dq,
                                            .k_pool = dkp,
                                            .v_pool = dvp,
                                            .block_tables = dt,
                                            .seq_lens = dl,
                                            .query_start = 0,
                                            .positions = 0,
                                            .out = dout,
                                            .partial_out = split ? dpartial : 0,
                                            .partial_lse = split ? dlse : 0,
                                            .split_counters = split ? dcount : 0,
                                            .max_blocks_per_seq = max_blocks,
                                            .num_seqs = static_cast<uint32_t>(c.seqs),
                                            .num_rows = static_cast<uint32_t>(c.seqs),
                                            .scale = scale,
                                            .partition = static_cast<uint32_t>(c.partition)})
          .ok());
  std::vector<float> want(out_elems);
  cpu::PagedAttention(q.data(), positions.data(), query_start.data(), seq_lens.data(),
                      tables.data(), max_blocks, c.seqs, c.heads, c.kv_heads, c.head_dim,
                      c.block_size, kv, kpool.data(), vpool.data(), scale, want.data());
  // The online softmax's order and, on a GPU, ex2.approx: a few f32 roundings.
  ExpectClose(r.Download<float>(dout, out_elems), want, 1e-5);
}

void RunCase(OpRunner& r, const FlashAttentionCase& c) {
  kernels::FlashAttentionConfig cfg;
  cfg.num_heads = c.heads;
  cfg.num_kv_heads = c.kv_heads;
  cfg.head_dim = c.head_dim;
  cfg.kv_dtype = c.kv;
  cfg.target = r.target();
  const std::vector<int32_t> seq_lens = {37, 50, 60}, rows = {37, 1, 20};
  const int seqs = 3, max_blocks = 4, num_blocks = seqs * max_blocks;
  std::vector<int32_t> tables(size_t{1} * seqs * max_blocks), positions, query_start = {0};
  for (int s = 0; s < seqs; ++s) {
    for (int p = seq_lens[s] - rows[s]; p < seq_lens[s]; ++p) positions.push_back(p);
    query_start.push_back(query_start.back() + rows[s]);
    for (int b = 0; b < max_blocks; ++b) {  // back to front
      tables[s * max_blocks + b] = num_blocks - 1 - (s * max_blocks + b);
    }
  }
  const int num_rows = query_start.back();
  const size_t pool_elems = size_t{1} * num_blocks * c.kv_heads * 16 * c.head_dim;
  const DType kv = ToDType(c.kv);
  std::vector<float> kf, vf;
  const CUdeviceptr dkp = r.Upload(Random(pool_elems, 18), kv, &kf);
  const CUdeviceptr dvp = r.Upload(Random(pool_elems, 19), kv, &vf);
  std::vector<uint8_t> kpool(pool_elems * DTypeSize(kv)), vpool(kpool.size());
  ConvertFromFloat(kv, kf.data(), pool_elems, kpool.data());
  ConvertFromFloat(kv, vf.data(), pool_elems, vpool.data());
  const size_t out_elems = size_t{1} * num_rows * c.heads * c.head_dim;
  const std::vector<float> q = Random(out_elems, 20, -4, 4);
  const CUdeviceptr dout = r.Upload(std::vector<float>(out_elems));
  const float scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
  ASSERT_TRUE(r.Launch(cfg, kernels::kFlashAttentionEntry, &kernels::GenerateFlashAttention,
                       kernels::FlashAttentionLaunch(cfg, num_rows, seqs),
                       kernels::FlashAttentionArgs{
                           .q = r.Upload(q),
                           .k_pool = dkp,
                           .v_pool = dvp,
                           .block_tables = r.UploadBytes(tables.data(), tables.size() * 4),
                           .query_start = r.UploadBytes(query_start.data(), query_start.size() * 4),
                           .positions = r.UploadBytes(positions.data(), positions.size() * 4),
                           .out = dout,
                           .max_blocks_per_seq = max_blocks,
                           .num_seqs = seqs,
                           .num_rows = static_cast<uint32_t>(num_rows),
                           .scale = scale})
                  .ok());
  std::vector<float> want(out_elems);
  cpu::PagedAttention(q.data(), positions.data(), query_start.data(), seq_lens.data(),
                      tables.data(), max_blocks, seqs, c.heads, c.kv_heads, c.head_dim, 16, kv,
                      kpool.data(), vpool.data(), scale, want.data());
  // q and the softmax weights are rounded to the KV type for the tensor cores (unit
  // roundoff 2^-11 for f16, 2^-8 for bf16): a few of those of the largest output.
  ExpectClose(r.Download<float>(dout, out_elems), want, c.kv == ElemType::kF16 ? 2e-3 : 1.5e-2);
}

class OpCases : public ::testing::TestWithParam<std::tuple<std::string, OpCase>> {};

TEST_P(OpCases, MatchTheCpuOp) {
  const std::string& kind = std::get<0>(GetParam());
  if (const std::string why = testing::Unavailable(kind); !why.empty()) {
    GTEST_SKIP() << "no " << kind << " device: " << why;
  }
  absl::StatusOr<std::unique_ptr<DriverTable>> driver =
      kind == "cuda" ? LoadCudaDriver() : LoadEmulatedDriver();
  ASSERT_TRUE(driver.ok()) << driver.status();
  absl::StatusOr<std::unique_ptr<Device>> device = Device::Open(*std::move(driver));
  ASSERT_TRUE(device.ok()) << device.status();
  OpRunner runner(*std::move(device));
  std::visit([&](const auto& c) { RunCase(runner, c); }, std::get<1>(GetParam()));
}

INSTANTIATE_TEST_SUITE_P(Devices, OpCases,
                         ::testing::Combine(::testing::Values(std::string("emulated"),
                                                              std::string("cuda")),
                                            ::testing::ValuesIn(AllCases())),
                         [](const ::testing::TestParamInfo<OpCases::ParamType>& info) {
                           return absl::StrCat(std::get<0>(info.param), "_",
                                               Name(std::get<1>(info.param)));
                         });

}  // namespace
}  // namespace ptxserve::cuda
