// The kernel ops' cases (op_cases.h).
#include "tests/cuda/op_cases.h"

#include "absl/strings/str_cat.h"

namespace ptxserve::cuda {
namespace {

constexpr const char* kFormNames[] = {"", "_fma_tiled", "_mma_narrow", "_mma_wide"};

}  // namespace

std::vector<OpCase> AllCases() {
  std::vector<OpCase> cases;
  for (ElemType t : {ElemType::kF32, ElemType::kF16, ElemType::kBF16}) {
    cases.push_back(RmsNormCase{3, 64, t});
    cases.push_back(RmsNormCase{2, 1000, t});
    cases.push_back(GemmCase{1, 96, 256, t, false, false});  // GEMV
    cases.push_back(GemmCase{5, 72, 128, t, true, false});   // GEMV, a partial row tile
    cases.push_back(GemmCase{3, 64, 96, t, false, true});    // fused residual add
    cases.push_back(GemmCase{1, 96, 2048, t, false, false, GemmForm::kGemv, true});
    cases.push_back(GemmCase{5, 40, 200, t, true, false, GemmForm::kGemv, true});  // partial K
    cases.push_back(GemmCase{20, 80, 136, t, true, true, GemmForm::kFmaTiled});    // partial tiles
    if (t != ElemType::kF32) {
      cases.push_back(GemmCase{20, 80, 136, t, true, true, GemmForm::kMmaNarrow});
      cases.push_back(GemmCase{70, 72, 64, t, false, false, GemmForm::kMmaWide});
    }
    cases.push_back(EmbeddingCase{6, 50, 96, t});
  }
  cases.push_back(SiluMulCase{1000});
  cases.push_back(SiluMulCase{4096});
  cases.push_back(ArgmaxCase{3, 1000});
  cases.push_back(ArgmaxCase{2, 32000});
  for (ElemType t : {ElemType::kF32, ElemType::kF16, ElemType::kBF16}) {
    cases.push_back(RopeKvCase{5, 8, 2, 64, kernels::RopeLayout::kRotateHalf, t});
    cases.push_back(RopeKvCase{3, 4, 4, 128, kernels::RopeLayout::kInterleaved, t});
    cases.push_back(DecodeAttentionCase{3, 8, 2, 64, 16, t, 0});    // GQA 4:1
    cases.push_back(DecodeAttentionCase{2, 4, 4, 128, 16, t, 32});  // split, merged
    if (t != ElemType::kF32) {
      cases.push_back(FlashAttentionCase{8, 2, 64, t});   // GQA 4:1
      cases.push_back(FlashAttentionCase{8, 8, 128, t});  // GQA 1:1
    }
  }
  return cases;
}

std::string Name(const OpCase& c) {
  struct Namer {
    std::string operator()(const RmsNormCase& c) const {
      return absl::StrCat("rmsnorm_r", c.rows, "_d", c.dim, "_", kernels::ElemTypeName(c.weights));
    }
    std::string operator()(const GemmCase& c) const {
      return absl::StrCat("gemm_m", c.m, "_n", c.n, "_k", c.k, "_",
                          kernels::ElemTypeName(c.weights), c.bias ? "_bias" : "",
                          c.accumulate ? "_acc" : "", kFormNames[static_cast<int>(c.form)],
                          c.norm ? "_norm" : "");
    }
    std::string operator()(const SiluMulCase& c) const { return absl::StrCat("silu_mul_n", c.n); }
    std::string operator()(const EmbeddingCase& c) const {
      return absl::StrCat("embedding_t", c.tokens, "_d", c.dim, "_",
                          kernels::ElemTypeName(c.table));
    }
    std::string operator()(const ArgmaxCase& c) const {
      return absl::StrCat("argmax_r", c.rows, "_v", c.vocab);
    }
    std::string operator()(const RopeKvCase& c) const {
      return absl::StrCat("rope_kv_h", c.heads, "_kv", c.kv_heads, "_d", c.head_dim,
                          c.layout == kernels::RopeLayout::kRotateHalf ? "_half" : "_interleaved",
                          "_", kernels::ElemTypeName(c.kv));
    }
    std::string operator()(const DecodeAttentionCase& c) const {
      return absl::StrCat("decode_attention_s", c.seqs, "_h", c.heads, "_kv", c.kv_heads, "_d",
                          c.head_dim, "_", kernels::ElemTypeName(c.kv),
                          c.partition > 0 ? absl::StrCat("_split", c.partition) : "");
    }
    std::string operator()(const FlashAttentionCase& c) const {
      return absl::StrCat("flash_attention_h", c.heads, "_kv", c.kv_heads, "_d", c.head_dim, "_",
                          kernels::ElemTypeName(c.kv));
    }
  };
  return std::visit(Namer{}, c);
}
}  // namespace ptxserve::cuda
