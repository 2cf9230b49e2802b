// A step's metadata on the device: the StepBatch (and the sampling rows) packed into one
// host buffer and uploaded in one copy, and the DeviceStep the kernels run with.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "engine/backend.h"
#include "engine/cuda/device.h"
#include "engine/step_batch.h"

namespace ptxserve::cuda {

// What one step runs with: its sizes, the attention plan, which sampling kernels run,
// and device pointers into the uploaded metadata.
struct DeviceStep {
  int64_t tokens = 0, seqs = 0, rows = 0, max_blocks = 0;
  bool ragged = false;  // not every sequence decodes exactly one token
  bool flash = false;   // ragged, and run by flash_attention (KernelSet::flash)
  // flash: the step's last decode_rows sequences decode one token each, and their rows
  // (the last decode_rows) run in the decode kernel, apart from flash attention's launch.
  int64_t decode_rows = 0;
  bool split = false;  // flash-decoding (of the decode kernel's rows): attention split over
                       // partitions, then merged
  int num_splits = 1;
  int partition = 0;       // tokens per split
  bool sample = false;     // StepSampled
  bool greedy = true;      // every sampled row greedy (argmax kernel)
  bool logprobs = false;   // some sampled row wants log-probs (logprobs kernel)
  bool penalties = false;  // some sampled row has penalty entries (penalties kernel)
  bool graph = false;      // a padded decode step run as a CUDA graph (decode_graphs.h)
  int64_t real_rows = 0;   // graph steps: the caller's rows, the first of `rows`
  CUdeviceptr token_ids = 0, positions = 0, slots = 0, query_start = 0, seq_lens = 0,
              block_tables = 0, logits_rows = 0;
  CUdeviceptr top_n = 0, temperature = 0, top_k = 0, top_p = 0, min_p = 0, uniform = 0;
  CUdeviceptr repetition = 0, presence = 0, frequency = 0, pen_offsets = 0, pen_entries = 0;
};

// Byte offsets of the packed StepBatch in the metadata buffer (16-byte aligned sections):
// token_ids, positions s32 [T]; slot_mapping s64 [T]; query_start s32 [S + 1];
// seq_lens s32 [S]; block_tables s32 [S * MB]; logits_rows s32 [R]; then the sampling
// rows: top_n s32 (log-probs wanted), temperature f32, top_k s32, top_p f32, min_p f32,
// uniform f64, each [R]; then the penalties: repetition, presence, frequency f32 [R],
// pen_offsets s32 [R + 1] and pen_entries kernels::PenaltyEntryWords [E] (the rows' lists
// one after another, a CSR). The order lets a step upload a prefix: up to logits_rows
// (Step, greedy StepSampled), up to top_n (greedy with log-probs), up to repetition (no
// penalty entries), or everything.
struct MetaLayout {
  size_t token_ids = 0, positions = 0, slots = 0, query_start = 0, seq_lens = 0, block_tables = 0,
         logits_rows = 0, top_n = 0, temperature = 0, top_k = 0, top_p = 0, min_p = 0, uniform = 0;
  size_t repetition = 0, presence = 0, frequency = 0, pen_offsets = 0, pen_entries = 0;
  size_t total = 0;
};
MetaLayout LayoutMeta(int64_t tokens, int64_t seqs, int64_t max_blocks, int64_t rows,
                      int64_t penalty_entries = 0);

// `batch` with its sequences that decode one token moved behind the others (each group in
// its order), into `out`: logits_rows name the same tokens at their new rows, in the same
// output order, so the step's results do not change. Returns how many sequences moved.
int64_t DecodeRowsLast(const StepBatch& batch, StepBatch* out);

// Penalty entries of `rows` (null: none).
int64_t PenaltyEntries(const std::vector<RowSampling>* rows);

// Packs `batch` and, when given, the sampling `rows` (for a graph step only the real rows,
// which are all sampling reads) into `host` as `m` lays out, points `step`'s device
// pointers into `device_meta` and sets its sampling flags. Returns the bytes to copy: the
// prefix holding every section the step reads.
size_t PackStepMetadata(const StepBatch& batch, const std::vector<RowSampling>* rows,
                        const MetaLayout& m, uint8_t* host, CUdeviceptr device_meta,
                        DeviceStep* step);

}  // namespace ptxserve::cuda
