// The kernel ops' cases for op_cases_test.cc: one struct per op holding the shape and dtypes
// a case runs at, the list of cases, and each case's name (in test names and failure
// messages). A new case is one more line in AllCases; a new op, one more struct here and its
// RunCase in op_cases_test.cc.
#pragma once

#include <ostream>
#include <string>
#include <type_traits>
#include <variant>
#include <vector>

#include "kernels/common.h"
#include "kernels/rope_kv.h"

namespace ptxserve::cuda {

using kernels::ElemType;

// One case per op: the shape and dtypes it runs at.
struct RmsNormCase {
  int rows, dim;
  ElemType weights;
};
// The GEMM's forms (kernels/gemm.h): GEMV for up to 8 rows, the f32 FMA tiled form, and
// the tensor-core form in its narrow (k over warps) and wide tiles.
enum class GemmForm { kGemv, kFmaTiled, kMmaNarrow, kMmaWide };
struct GemmCase {
  int m, n, k;
  ElemType weights;
  bool bias, accumulate;
  GemmForm form = GemmForm::kGemv;
  bool norm = false;  // the GEMV with its input's RMSNorm fused, against rmsnorm then gemm
};
struct SiluMulCase {
  int n;
};
struct EmbeddingCase {
  int tokens, vocab, dim;
  ElemType table;
};
struct ArgmaxCase {
  int rows, vocab;
};
// RoPE and the KV write in one launch, from the stacked q/k/v rows.
struct RopeKvCase {
  int tokens, heads, kv_heads, head_dim;
  kernels::RopeLayout layout;
  ElemType kv;
};
// Decode mode: one query row per sequence; split: partitions of `partition` tokens merged
// by the last CTA of each group.
struct DecodeAttentionCase {
  int seqs, heads, kv_heads, head_dim, block_size;
  ElemType kv;
  int partition;  // 0: not split
};
// Flash attention over a ragged step: a whole 37-token prompt, a decode row at 50 and a
// 20-token chunk after 40 cached tokens.
struct FlashAttentionCase {
  int heads, kv_heads, head_dim;
  ElemType kv;
};
using OpCase = std::variant<RmsNormCase, GemmCase, SiluMulCase, EmbeddingCase, ArgmaxCase,
                            DecodeAttentionCase, FlashAttentionCase, RopeKvCase>;

// Every case, each op at each dtype it supports.
std::vector<OpCase> AllCases();

// The case's name: op, shape, dtype and form, e.g. gemm_m5_n72_k128_f16_bias.
std::string Name(const OpCase& c);

// Each case by its name, not its bytes (padding), in test names and failure messages.
template <class C, class V>
struct IsCaseOf : std::false_type {};
template <class C, class... T>
struct IsCaseOf<C, std::variant<T...>> : std::bool_constant<(std::is_same_v<C, T> || ...)> {};
template <class C>
requires IsCaseOf<C, OpCase>::value void PrintTo(const C& c, std::ostream* os) {
  *os << Name(OpCase(c));
}

}  // namespace ptxserve::cuda
