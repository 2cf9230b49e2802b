// The ragged batch one decode step runs: what the scheduler hands the backend.
// Layout contract (shared by the CPU backend and the GPU kernels):
//   tokens are grouped by sequence: sequence s owns token rows
//   [query_start[s], query_start[s+1]); its new tokens sit at positions
//   seq_lens[s] - n_s .. seq_lens[s] - 1 where n_s is its row count.
#pragma once

#include <cstdint>
#include <vector>

namespace ptxserve {

struct StepBatch {
  std::vector<int32_t> token_ids;     // [num_tokens]
  std::vector<int32_t> positions;     // [num_tokens] absolute position of each token
  std::vector<int64_t> slot_mapping;  // [num_tokens] block * block_size + offset for its K/V row
  std::vector<int32_t> query_start;   // [num_seqs + 1] token row offsets, query_start[0] = 0
  std::vector<int32_t> seq_lens;      // [num_seqs] context length after this step's tokens
  // [num_seqs * max_blocks_per_seq] block ids, row s holds sequence s's table, padded with 0.
  std::vector<int32_t> block_tables;
  int32_t max_blocks_per_seq = 0;
  // Token rows whose logits are wanted, in output order (usually the last row of
  // each sequence that finishes its prompt or decodes).
  std::vector<int32_t> logits_rows;

  int32_t num_tokens() const { return static_cast<int32_t>(token_ids.size()); }
  int32_t num_seqs() const { return static_cast<int32_t>(seq_lens.size()); }
};

}  // namespace ptxserve
