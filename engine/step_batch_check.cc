#include "engine/step_batch_check.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace ptxserve {
namespace {

template <typename... Args>
absl::Status Bad(const absl::FormatSpec<Args...>& f, const Args&... args) {
  return absl::InvalidArgumentError(absl::StrCat("StepBatch.", absl::StrFormat(f, args...)));
}

}  // namespace

absl::Status ValidateStepBatch(const StepBatch& b, const ModelConfig& config,
                               const KvCacheConfig& kv) {
  const int64_t num_tokens = static_cast<int64_t>(b.token_ids.size());
  const int64_t num_seqs = static_cast<int64_t>(b.seq_lens.size());
  if (num_tokens == 0) return Bad("token_ids is empty");
  if (num_seqs == 0) return Bad("seq_lens is empty");
  if (static_cast<int64_t>(b.positions.size()) != num_tokens) {
    return Bad("positions has %d entries, token_ids %d", b.positions.size(), num_tokens);
  }
  if (static_cast<int64_t>(b.slot_mapping.size()) != num_tokens) {
    return Bad("slot_mapping has %d entries, token_ids %d", b.slot_mapping.size(), num_tokens);
  }
  if (static_cast<int64_t>(b.query_start.size()) != num_seqs + 1) {
    return Bad("query_start has %d entries, expected num_seqs + 1 = %d", b.query_start.size(),
               num_seqs + 1);
  }
  if (b.max_blocks_per_seq <= 0) {
    return Bad("max_blocks_per_seq = %d must be positive", b.max_blocks_per_seq);
  }
  if (static_cast<int64_t>(b.block_tables.size()) != num_seqs * b.max_blocks_per_seq) {
    return Bad("block_tables has %d entries, expected num_seqs * max_blocks_per_seq = %d",
               b.block_tables.size(), num_seqs * b.max_blocks_per_seq);
  }
  if (b.query_start[0] != 0) return Bad("query_start[0] = %d, expected 0", b.query_start[0]);
  if (b.query_start[num_seqs] != num_tokens) {
    return Bad("query_start[%d] = %d, expected num_tokens = %d", num_seqs, b.query_start[num_seqs],
               num_tokens);
  }
  for (int64_t t = 0; t < num_tokens; ++t) {
    if (b.token_ids[t] < 0 || b.token_ids[t] >= config.vocab_size) {
      return Bad("token_ids[%d] = %d out of range [0, %d)", t, b.token_ids[t], config.vocab_size);
    }
  }
  for (int64_t i = 0; i < static_cast<int64_t>(b.block_tables.size()); ++i) {
    if (b.block_tables[i] < 0 || b.block_tables[i] >= kv.num_blocks) {
      return Bad("block_tables[%d] = %d out of range [0, %d)", i, b.block_tables[i], kv.num_blocks);
    }
  }
  const int64_t capacity = static_cast<int64_t>(b.max_blocks_per_seq) * kv.block_size;
  for (int64_t s = 0; s < num_seqs; ++s) {
    if (b.query_start[s + 1] < b.query_start[s]) {
      return Bad("query_start[%d] = %d is below query_start[%d] = %d", s + 1, b.query_start[s + 1],
                 s, b.query_start[s]);
    }
  }
  for (int64_t s = 0; s < num_seqs; ++s) {
    const int64_t begin = b.query_start[s];
    const int64_t end = b.query_start[s + 1];
    const int64_t len = b.seq_lens[s];
    if (len < end - begin || len > capacity) {
      return Bad("seq_lens[%d] = %d out of range [%d rows, max_blocks_per_seq * block_size = %d]",
                 s, len, end - begin, capacity);
    }
    const int32_t* table = b.block_tables.data() + s * b.max_blocks_per_seq;
    for (int64_t t = begin; t < end; ++t) {
      const int64_t p = b.positions[t];
      if (p < 0 || p >= len) {
        return Bad("positions[%d] = %d out of range [0, seq_lens[%d] = %d)", t, p, s, len);
      }
      const int64_t slot =
          static_cast<int64_t>(table[p / kv.block_size]) * kv.block_size + p % kv.block_size;
      if (b.slot_mapping[t] != slot) {
        return Bad(
            "slot_mapping[%d] = %d, but position %d maps to slot %d through block_tables "
            "row %d",
            t, b.slot_mapping[t], p, slot, s);
      }
    }
  }
  for (size_t i = 0; i < b.logits_rows.size(); ++i) {
    if (b.logits_rows[i] < 0 || b.logits_rows[i] >= num_tokens) {
      return Bad("logits_rows[%d] = %d out of range [0, %d)", i, b.logits_rows[i], num_tokens);
    }
  }
  return absl::OkStatus();
}

}  // namespace ptxserve
