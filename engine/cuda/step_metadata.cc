#include "engine/cuda/step_metadata.h"

#include <cstring>

#include "kernels/penalties.h"

namespace ptxserve::cuda {
namespace {

size_t Align16(size_t n) { return (n + 15) / 16 * 16; }

template <class T>
void CopyInto(uint8_t* base, size_t offset, const std::vector<T>& v) {
  if (!v.empty()) std::memcpy(base + offset, v.data(), v.size() * sizeof(T));
}

template <class T>
void Store(uint8_t* base, size_t offset, int64_t index, const T& value) {
  std::memcpy(base + offset + sizeof(T) * static_cast<size_t>(index), &value, sizeof(T));
}

}  // namespace

MetaLayout LayoutMeta(int64_t tokens, int64_t seqs, int64_t max_blocks, int64_t rows,
                      int64_t penalty_entries) {
  MetaLayout m;
  size_t off = 0;
  auto take = [&](size_t* field, int64_t bytes) {
    *field = off;
    off += Align16(static_cast<size_t>(bytes));
  };
  take(&m.token_ids, tokens * 4);
  take(&m.positions, tokens * 4);
  take(&m.slots, tokens * 8);
  take(&m.query_start, (seqs + 1) * 4);
  take(&m.seq_lens, seqs * 4);
  take(&m.block_tables, seqs * max_blocks * 4);
  take(&m.logits_rows, rows * 4);
  take(&m.top_n, rows * 4);
  take(&m.temperature, rows * 4);
  take(&m.top_k, rows * 4);
  take(&m.top_p, rows * 4);
  take(&m.min_p, rows * 4);
  take(&m.uniform, rows * 8);
  take(&m.repetition, rows * 4);
  take(&m.presence, rows * 4);
  take(&m.frequency, rows * 4);
  take(&m.pen_offsets, (rows + 1) * 4);
  take(&m.pen_entries, penalty_entries * static_cast<int64_t>(sizeof(kernels::PenaltyEntryWords)));
  m.total = off;
  return m;
}

int64_t DecodeRowsLast(const StepBatch& batch, StepBatch* out) {
  StepBatch& o = *out;
  const int64_t seqs = batch.num_seqs(), mb = batch.max_blocks_per_seq;
  o.token_ids.clear();
  o.positions.clear();
  o.slot_mapping.clear();
  o.query_start.assign(1, 0);
  o.seq_lens.clear();
  o.block_tables.clear();
  o.max_blocks_per_seq = batch.max_blocks_per_seq;
  std::vector<int32_t>& new_row = o.logits_rows;  // old token row -> new, then remapped
  new_row.assign(batch.token_ids.size(), 0);
  int64_t moved = 0;
  for (const bool decode : {false, true}) {
    for (int64_t s = 0; s < seqs; ++s) {
      const int32_t begin = batch.query_start[s], end = batch.query_start[s + 1];
      if ((end - begin == 1) != decode) continue;
      moved += decode ? 1 : 0;
      for (int32_t t = begin; t < end; ++t) {
        new_row[t] = o.num_tokens();
        o.token_ids.push_back(batch.token_ids[t]);
        o.positions.push_back(batch.positions[t]);
        o.slot_mapping.push_back(batch.slot_mapping[t]);
      }
      o.query_start.push_back(o.num_tokens());
      o.seq_lens.push_back(batch.seq_lens[s]);
      o.block_tables.insert(o.block_tables.end(), batch.block_tables.begin() + s * mb,
                            batch.block_tables.begin() + (s + 1) * mb);
    }
  }
  std::vector<int32_t> rows(batch.logits_rows.size());
  for (size_t i = 0; i < rows.size(); ++i) rows[i] = new_row[batch.logits_rows[i]];
  o.logits_rows = std::move(rows);
  return moved;
}

int64_t PenaltyEntries(const std::vector<RowSampling>* rows) {
  int64_t entries = 0;
  if (rows != nullptr) {
    for (const RowSampling& rs : *rows) entries += static_cast<int64_t>(rs.penalties.size());
  }
  return entries;
}

size_t PackStepMetadata(const StepBatch& batch, const std::vector<RowSampling>* rows,
                        const MetaLayout& m, uint8_t* h, CUdeviceptr d, DeviceStep* step) {
  DeviceStep& p = *step;
  CopyInto(h, m.token_ids, batch.token_ids);
  CopyInto(h, m.positions, batch.positions);
  CopyInto(h, m.slots, batch.slot_mapping);
  CopyInto(h, m.query_start, batch.query_start);
  CopyInto(h, m.seq_lens, batch.seq_lens);
  CopyInto(h, m.block_tables, batch.block_tables);
  CopyInto(h, m.logits_rows, batch.logits_rows);
  p.sample = rows != nullptr;
  p.greedy = true;
  p.logprobs = false;
  p.penalties = PenaltyEntries(rows) > 0;
  if (rows != nullptr) {
    static_assert(sizeof(PenaltyEntry) == sizeof(kernels::PenaltyEntryWords));
    // A graph step's padding rows are never sampled, so their sections stay unwritten.
    const int64_t sampled = static_cast<int64_t>(rows->size());
    int32_t offset = 0;
    for (int64_t r = 0; r < sampled; ++r) {
      const RowSampling& rs = (*rows)[r];
      Store(h, m.top_n, r, rs.logprobs);
      if (rs.logprobs > 0) p.logprobs = true;
      Store(h, m.temperature, r, rs.temperature);
      Store(h, m.top_k, r, rs.top_k);
      Store(h, m.top_p, r, rs.top_p);
      Store(h, m.min_p, r, rs.min_p);
      Store(h, m.uniform, r, rs.uniform);
      if (rs.temperature > 0 && rs.top_k != 1) p.greedy = false;
      if (!p.penalties) continue;
      Store(h, m.repetition, r, rs.repetition_penalty);
      Store(h, m.presence, r, rs.presence_penalty);
      Store(h, m.frequency, r, rs.frequency_penalty);
      Store(h, m.pen_offsets, r, offset);
      CopyInto(h, m.pen_entries + sizeof(PenaltyEntry) * static_cast<size_t>(offset), rs.penalties);
      offset += static_cast<int32_t>(rs.penalties.size());
    }
    if (p.penalties) Store(h, m.pen_offsets, sampled, offset);
  }
  p.token_ids = d + m.token_ids;
  p.positions = d + m.positions;
  p.slots = d + m.slots;
  p.query_start = d + m.query_start;
  p.seq_lens = d + m.seq_lens;
  p.block_tables = d + m.block_tables;
  p.logits_rows = d + m.logits_rows;
  p.top_n = d + m.top_n;
  p.temperature = d + m.temperature;
  p.top_k = d + m.top_k;
  p.top_p = d + m.top_p;
  p.min_p = d + m.min_p;
  p.uniform = d + m.uniform;
  p.repetition = d + m.repetition;
  p.presence = d + m.presence;
  p.frequency = d + m.frequency;
  p.pen_offsets = d + m.pen_offsets;
  p.pen_entries = d + m.pen_entries;
  // Only the sampling sections the step does not read are left out: all of them for Step
  // and greedy rows, all but top_n for greedy rows with log-probs, the penalties when no
  // row has entries.
  return !p.sample     ? m.top_n
         : p.penalties ? m.total
         : !p.greedy   ? m.repetition
         : p.logprobs  ? m.temperature
                       : m.top_n;
}

}  // namespace ptxserve::cuda
