// Embedding gather: out[t, :] = f32(table[ids[t], :]).
//
// Contract (device pointers, row-major, non-aliasing): EmbeddingArgs, in .param order.
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kernels/common.h"
#include "kernels/config_fields.h"
#include "kernels/kernel_params.h"
#include "kernels/ptx/types.h"

namespace ptxserve::kernels {

inline constexpr char kEmbeddingEntry[] = "embedding";

struct EmbeddingConfig : KernelConfig<EmbeddingConfig, kEmbeddingEntry> {
  int dim = 4096;
  ElemType table_dtype = ElemType::kF32;
  ptx::Target target;
  int Threads() const;  // per CTA
  static constexpr auto kFields =
      std::make_tuple(Field("dim", &EmbeddingConfig::dim).Key("dim").Range(1, 1 << 20),
                      Field("table_dtype", &EmbeddingConfig::table_dtype).Key(""));
};

struct EmbeddingArgs {
  // table_dtype [vocab][dim]
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
