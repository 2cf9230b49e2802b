// Embedding gather: out[t, :] = f32(table[ids[t], :]), the table in elements or in GGML
// blocks (q8_0, q4_0) as a GGUF stores it, decoded in registers.
//
// Contract (device pointers, row-major, non-aliasing): EmbeddingArgs, in .param order. A
// block table is vocab rows of dim / 32 blocks (kernels/gemm_quant.h's layouts, rows only
// 2-byte aligned); each element is f32(d) * f32(code), exact, so the rows equal the CPU's
// DequantizeRow (engine/model/quant.h) bit for bit.
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kernels/common.h"
#include "kernels/config_fields.h"
#include "kernels/gemm_quant.h"
#include "kernels/kernel_params.h"
#include "kernels/ptx/types.h"

namespace ptxserve::kernels {

inline constexpr char kEmbeddingEntry[] = "embedding";

struct EmbeddingConfig : KernelConfig<EmbeddingConfig, kEmbeddingEntry> {
  int dim = 4096;
  ElemType table_dtype = ElemType::kF32;  // unused with `blocks`
  bool blocks = false;                    // the table is rows of `block_format` blocks
  BlockFormat block_format = BlockFormat::kQ8_0;
  ptx::Target target;
  int Threads() const;  // per CTA
  using C = EmbeddingConfig;
  static constexpr auto kFields = std::make_tuple(
      Field("dim", &C::dim).Key("dim").Range(1, 1 << 20),
      Field("table_dtype", &C::table_dtype).Key("", &C::blocks), Field("blocks", &C::blocks),
      Field("block_format", &C::block_format).KeyWhen("", &C::blocks));
  // A block table is in a format the gather decodes, its rows whole blocks.
  absl::Status CheckAcrossFields() const;
};

struct EmbeddingArgs {
  // [vocab][dim] of table_dtype, or [vocab][dim / 32] blocks of block_format
  DevicePtr table;
  // s32 [num_tokens]; ids outside [0, vocab) produce zero rows
  DevicePtr ids;
  // f32 [num_tokens][dim]
  DevicePtr out;
  uint32_t num_tokens = 0;
  uint32_t vocab = 0;
  PTXSERVE_PARAMS(EmbeddingArgs, table, ids, out, num_tokens, vocab);
};

absl::StatusOr<std::string> GenerateEmbedding(const EmbeddingConfig& cfg);
// One CTA per token.
inline constexpr auto EmbeddingLaunch = &RowLaunchFor<EmbeddingConfig>;

}  // namespace ptxserve::kernels
