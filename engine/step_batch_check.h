// Validation of a StepBatch against a model and a KV cache, shared by backends so a
// malformed batch becomes InvalidArgument naming the field instead of a crash.
#pragma once

#include "absl/status/status.h"
#include "engine/backend.h"
#include "engine/model/config.h"
#include "engine/step_batch.h"

namespace ptxserve {

// Checks every invariant Backend::Step relies on: array sizes, query_start monotone
// from 0 to num_tokens, token ids < vocab, 0 <= positions[t] < seq_lens[s] of its
// sequence, seq_lens covered by max_blocks_per_seq blocks, block ids < num_blocks,
// slot_mapping[t] equal to the slot its position maps to through the block table,
// and logits_rows inside [0, num_tokens). Errors name the field and the index.
absl::Status ValidateStepBatch(const StepBatch& batch, const ModelConfig& config,
                               const KvCacheConfig& kv);

}  // namespace ptxserve
