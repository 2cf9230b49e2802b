#include "engine/cuda/kernel_set.h"

#include <algorithm>

namespace ptxserve::cuda {
namespace {

template <class Config, class Generate>
KernelSlot MakeSlot(const Config& cfg, const char* entry, Generate generate) {
  KernelSlot s;
  s.spec.key = cfg.Key();
  s.spec.entry = entry;
  s.spec.generate = [cfg, generate]() { return generate(cfg); };
  return s;
}

GemmSlots MakeGemm(const ptx::Target& target, int64_t n, int64_t k, kernels::ElemType wt, bool bias,
                   bool accumulate) {
  kernels::GemmConfig base;
  base.n = static_cast<int>(n);
  base.k = static_cast<int>(k);
  base.weight_dtype = wt;
  base.has_bias = bias;
  base.accumulate = accumulate;
  base.target = target;
  GemmSlots g;
  constexpr int kRows[kGemmForms] = {1, 2, 4, 8, 64};
  for (int f = 0; f < kGemmForms; ++f) {
    g.cfg[f] = kernels::GemmConfigFor(base, kRows[f]);
    g.slot[f] = MakeSlot(g.cfg[f], kernels::kGemmEntry, kernels::GenerateGemm);
  }
  return g;
}

void AddGemm(GemmSlots& g, std::vector<KernelSlot*>* out) {
  for (KernelSlot& s : g.slot) {
    if (s.used()) out->push_back(&s);
  }
}

}  // namespace

kernels::ElemType ToElemType(DType t) {
  switch (t) {
    case DType::kF16:
      return kernels::ElemType::kF16;
    case DType::kBF16:
      return kernels::ElemType::kBF16;
    case DType::kF32:
      break;
  }
  return kernels::ElemType::kF32;
}

absl::StatusOr<ptx::Target> KernelTarget(int cc_major, int cc_minor, int ptx_version) {
  const int cc = cc_major * 10 + cc_minor;
  ptx::Target target;
  target.sm = cc >= 90 ? 90 : cc >= 89 ? 89 : cc >= 86 ? 86 : 80;
  target.ptx_version = ptx_version;
  if (absl::Status s = target.Validate(); !s.ok()) return s;
  return target;
}

std::vector<KernelSlot*> KernelSet::All() {
  std::vector<KernelSlot*> all = {&embed, &gather, &norm,     &rope,     &kv_scatter, &merge,
                                  &silu,  &argmax, &sampling, &logprobs, &penalties};
  for (auto& by_ragged : attn) {
    for (KernelSlot& s : by_ragged) all.push_back(&s);
  }
  for (GemmSlots* g : {&q, &k, &v, &o, &gate_up, &gate, &up, &down, &lm_head}) AddGemm(*g, &all);
  all.erase(std::remove_if(all.begin(), all.end(), [](KernelSlot* s) { return !s->used(); }),
            all.end());
  return all;
}

absl::StatusOr<KernelSet> BuildKernelSet(const ModelConfig& c, const WeightTypes& w,
                                         const KvCacheConfig& kv, const ptx::Target& target) {
  KernelSet k;
  const int64_t dp = PaddedHeadDim(c.head_dim);
  const int64_t H = c.hidden_size, I = c.intermediate_size, V = c.vocab_size;
  const int64_t qd = c.num_heads * dp, kd = c.num_kv_heads * dp;
  k.embed_cfg.dim = static_cast<int>(H);
  k.embed_cfg.table_dtype = w.embed;
  k.embed_cfg.target = target;
  k.embed = MakeSlot(k.embed_cfg, kernels::kEmbeddingEntry, kernels::GenerateEmbedding);
  // The logits-row gather is an embedding lookup into the f32 residual stream.
  k.gather_cfg = k.embed_cfg;
  k.gather_cfg.table_dtype = kernels::ElemType::kF32;
  k.gather = MakeSlot(k.gather_cfg, kernels::kEmbeddingEntry, kernels::GenerateEmbedding);
  k.norm_cfg.dim = static_cast<int>(H);
  k.norm_cfg.weight_dtype = kernels::ElemType::kF32;
  k.norm_cfg.target = target;
  k.norm = MakeSlot(k.norm_cfg, kernels::kRmsNormEntry, kernels::GenerateRmsNorm);

  const bool bias = c.attention_bias;
  k.q = MakeGemm(target, qd, H, w.q, bias, false);
  k.k = MakeGemm(target, kd, H, w.k, bias, false);
  k.v = MakeGemm(target, kd, H, w.v, bias, false);
  k.o = MakeGemm(target, H, qd, w.o, false, /*accumulate=*/true);
  k.fused_gate_up = I % 4 == 0;  // silu_mul's fused form reads 4-element chunks of a row
  if (k.fused_gate_up) {
    k.gate_up = MakeGemm(target, 2 * I, H, w.gate_up, false, false);
  } else {
    k.gate = MakeGemm(target, I, H, w.gate_up, false, false);
    k.up = k.gate;  // same shape and dtype: the same kernels
  }
  k.down = MakeGemm(target, H, I, w.down, false, /*accumulate=*/true);
  k.lm_head = MakeGemm(target, V, H, w.lm_head, false, false);

  k.rope_cfg.num_heads = static_cast<int>(c.num_heads);
  k.rope_cfg.num_kv_heads = static_cast<int>(c.num_kv_heads);
  k.rope_cfg.head_dim = static_cast<int>(dp);
  k.rope_cfg.layout = c.rope_style == RopeStyle::kRotateHalf ? kernels::RopeLayout::kRotateHalf
                                                             : kernels::RopeLayout::kInterleaved;
  k.rope_cfg.target = target;
  k.rope = MakeSlot(k.rope_cfg, kernels::kRopeEntry, kernels::GenerateRope);
  k.kv_cfg.num_kv_heads = static_cast<int>(c.num_kv_heads);
  k.kv_cfg.head_dim = static_cast<int>(dp);
  k.kv_cfg.block_size = kv.block_size;
  k.kv_cfg.kv_dtype = ToElemType(kv.dtype);
  k.kv_cfg.target = target;
  k.kv_scatter = MakeSlot(k.kv_cfg, kernels::kKvScatterEntry, kernels::GenerateKvScatter);
  for (int ragged = 0; ragged < 2; ++ragged) {
    for (int split = 0; split < 2; ++split) {
      kernels::DecodeAttentionConfig& a = k.attn_cfg[ragged][split];
      a.num_heads = static_cast<int>(c.num_heads);
      a.num_kv_heads = static_cast<int>(c.num_kv_heads);
      a.head_dim = static_cast<int>(dp);
      a.block_size = kv.block_size;
      a.kv_dtype = ToElemType(kv.dtype);
      a.split = split == 1;
      a.ragged = ragged == 1;
      a.target = target;
      absl::StatusOr<kernels::DecodeAttentionShape> shape = kernels::ShapeOf(a);
      if (!shape.ok()) return shape.status();
      k.attn_shape[ragged][split] = *shape;
      k.attn[ragged][split] =
          MakeSlot(a, kernels::kDecodeAttentionEntry, kernels::GenerateDecodeAttention);
    }
  }
  k.merge_cfg.num_heads = static_cast<int>(c.num_heads);
  k.merge_cfg.head_dim = static_cast<int>(dp);
  k.merge_cfg.target = target;
  k.merge = MakeSlot(k.merge_cfg, kernels::kAttentionMergeEntry, kernels::GenerateAttentionMerge);
  k.silu_cfg.fused_inter = k.fused_gate_up ? static_cast<int>(I) : 0;
  k.silu_cfg.target = target;
  k.silu = MakeSlot(k.silu_cfg, kernels::kSiluMulEntry, kernels::GenerateSiluMul);
  k.argmax_cfg.target = target;
  k.argmax = MakeSlot(k.argmax_cfg, kernels::kArgmaxEntry, kernels::GenerateArgmax);
  k.sampling_cfg.target = target;
  k.sampling = MakeSlot(k.sampling_cfg, kernels::kSamplingEntry, kernels::GenerateSampling);
  k.logprobs_cfg.max_top = kLogprobsTop;
  k.logprobs_cfg.target = target;
  k.logprobs = MakeSlot(k.logprobs_cfg, kernels::kLogprobsEntry, kernels::GenerateLogprobs);
  k.penalties_cfg.target = target;
  k.penalties = MakeSlot(k.penalties_cfg, kernels::kPenaltiesEntry, kernels::GeneratePenalties);
  return k;
}

}  // namespace ptxserve::cuda
