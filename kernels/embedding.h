// Embedding gather: out[t, :] = f32(table[ids[t], :]).
//
// Contract (device pointers, row-major, non-aliasing); parameters in this order:
//   table       table_dtype [vocab][dim]
//   ids         s32 [num_tokens]; ids outside [0, vocab) produce zero rows
//   out         f32 [num_tokens][dim]
//   num_tokens, vocab  u32
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kernels/common.h"
#include "kernels/ptx/types.h"

namespace ptxserve::kernels {

inline constexpr char kEmbeddingEntry[] = "embedding";

struct EmbeddingConfig {
  int dim = 4096;
  ElemType table_dtype = ElemType::kF32;
  ptx::Target target;

  absl::Status Validate() const;
  std::string Key() const;
};

absl::StatusOr<std::string> GenerateEmbedding(const EmbeddingConfig& cfg);
// One CTA per token.
LaunchDims EmbeddingLaunch(const EmbeddingConfig& cfg, int64_t num_tokens);

}  // namespace ptxserve::kernels
