#include "engine/cuda/decode_graphs.h"

#include <algorithm>
#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "engine/util/log.h"

namespace ptxserve::cuda {
namespace {

int64_t NextPowerOfTwo(int64_t n) {
  int64_t p = 1;
  while (p < n) p *= 2;
  return p;
}

// Decode-only in the sense graphs need: every sequence one token, one logits row per
// sequence, in sequence order (what the engine's decode steps are).
bool DecodeOnly(const StepBatch& b) {
  const int64_t seqs = b.num_seqs();
  if (seqs == 0 || b.num_tokens() != seqs || static_cast<int64_t>(b.logits_rows.size()) != seqs) {
    return false;
  }
  for (int64_t s = 0; s < seqs; ++s) {
    if (b.query_start[s + 1] != s + 1 || b.logits_rows[s] != s) return false;
  }
  return true;
}

}  // namespace

int64_t CudaGraphBucket(int64_t seqs, int32_t max_batch) {
  if (seqs <= 0) return 0;
  const int64_t bucket = seqs <= 8 ? NextPowerOfTwo(seqs) : (seqs + 7) / 8 * 8;
  return bucket <= max_batch ? bucket : 0;
}

GraphStats DecodeGraphs::stats() const {
  GraphStats g;
  g.captures = captures_.load(std::memory_order_relaxed);
  g.replays = replays_.load(std::memory_order_relaxed);
  g.live = live_.load(std::memory_order_relaxed);
  g.dropped = dropped_.load(std::memory_order_relaxed);
  return g;
}

const StepBatch& DecodeGraphs::Pad(const StepBatch& batch, DeviceStep* step) {
  step->graph = false;
  if (disabled_ || !DecodeOnly(batch)) return batch;
  const int64_t seqs = batch.num_seqs();
  const int64_t bucket = CudaGraphBucket(seqs, options_.max_batch);
  if (bucket == 0) return batch;
  const int64_t stride = NextPowerOfTwo(std::max<int64_t>(batch.max_blocks_per_seq, 1));
  // The scratch batch keeps its capacity from step to step: no allocation once warm.
  StepBatch& p = padded_;
  p.token_ids.assign(batch.token_ids.begin(), batch.token_ids.end());
  p.token_ids.resize(bucket, 0);
  p.positions.assign(batch.positions.begin(), batch.positions.end());
  p.positions.resize(bucket, 0);
  p.slot_mapping.assign(batch.slot_mapping.begin(), batch.slot_mapping.end());
  p.slot_mapping.resize(bucket, -1);  // rope_kv writes no K/V at negative slots
  p.query_start.resize(bucket + 1);
  p.logits_rows.resize(bucket);
  for (int64_t s = 0; s <= bucket; ++s) p.query_start[s] = static_cast<int32_t>(s);
  for (int64_t s = 0; s < bucket; ++s) p.logits_rows[s] = static_cast<int32_t>(s);
  p.seq_lens.assign(batch.seq_lens.begin(), batch.seq_lens.end());
  p.seq_lens.resize(bucket, 1);  // attends to slot 0 of block 0: any valid K/V row
  p.max_blocks_per_seq = static_cast<int32_t>(stride);
  p.block_tables.assign(static_cast<size_t>(bucket * stride), 0);
  const int64_t mb = batch.max_blocks_per_seq;
  for (int64_t s = 0; s < seqs; ++s) {
    std::copy_n(batch.block_tables.begin() + s * mb, mb, p.block_tables.begin() + s * stride);
  }
  step->graph = true;
  step->real_rows = seqs;
  return p;
}

void DecodeGraphs::RoundPartition(DeviceStep* step) const {
  // A fixed partition (options) is one key already; the automatic one follows the
  // context length token by token, which would capture a graph per block.
  if (!step->split || options_.fixed_partition > 0) return;
  const int64_t bs = block_size_;
  const int64_t blocks = (step->partition + bs - 1) / bs;
  step->partition = static_cast<int>(NextPowerOfTwo(blocks) * bs);
  // num_splits stays: num_splits x partition still covers the longest context, and the
  // partial buffers were sized for it.
}

absl::Status DecodeGraphs::Run(DeviceStep* step, const StepBuffers& buffers, Forward forward) {
  if (!step->graph) return forward(*step);
  absl::Status s = RunGraph(*step, buffers, forward);
  step->rows = step->real_rows;
  return s;
}

void DecodeGraphs::DropAll() {
  dropped_.fetch_add(static_cast<int64_t>(by_key_.size()), std::memory_order_relaxed);
  by_key_.clear();
  live_.store(0, std::memory_order_relaxed);
}

absl::Status DecodeGraphs::Capture(const DeviceStep& p, Forward forward) {
  const std::string what = absl::StrCat("decode graph of ", p.tokens, " rows");
  if (absl::Status s = device_->BeginCapture(what); !s.ok()) return s;
  cache_->StartRecording();
  const absl::Status forward_status = forward(p);
  const std::vector<const CompiledKernel*> launches = cache_->StopRecording();
  // Always ended, so the stream leaves capture mode whatever happened.
  absl::StatusOr<Graph> graph = device_->EndCapture(what);
  if (!forward_status.ok()) return forward_status;
  if (!graph.ok()) return graph.status();
  absl::StatusOr<GraphExec> exec = device_->Instantiate(*graph, what);
  if (!exec.ok()) return exec.status();
  Entry& e = by_key_[Key::Of(p)];
  e.exec = *std::move(exec);
  e.tally = KernelCache::Tally(launches);
  e.name = absl::StrCat(what, ", ", launches.size(), " kernels");
  captures_.fetch_add(1, std::memory_order_relaxed);
  live_.fetch_add(1, std::memory_order_relaxed);
  return absl::OkStatus();
}

absl::Status DecodeGraphs::RunGraph(const DeviceStep& p, const StepBuffers& buffers,
                                    Forward forward) {
  if (const Addresses now = buffers.forward_addresses(); now != addresses_) {
    // A buffer grew (StepBuffers::Reserve): the graphs' parameters point at freed memory.
    DropAll();
    addresses_ = now;
  }
  const Key key = Key::Of(p);
  auto it = by_key_.find(key);
  if (it == by_key_.end()) {
    // A key's first steps run launch by launch, outside any capture: they compile the
    // kernels when warm-up was off, and load their modules onto the device. With lazy
    // module loading (the default since CUDA 12.2), drivers before 12.3 cannot load a
    // kernel during a capture, which would turn graphs off for good.
    if (int32_t& runs = eager_runs_[key]; runs < options_.eager_runs) {
      ++runs;
      return forward(p);
    }
    if (static_cast<int64_t>(by_key_.size()) >= std::max(options_.limit, 1)) {
      auto lru = std::min_element(by_key_.begin(), by_key_.end(), [](const auto& a, const auto& c) {
        return a.second.last_used < c.second.last_used;
      });
      by_key_.erase(lru);
      dropped_.fetch_add(1, std::memory_order_relaxed);
      live_.fetch_sub(1, std::memory_order_relaxed);
    }
    if (absl::Status s = Capture(p, forward); !s.ok()) {
      // Whatever failed (the capture calls, a launch while captured, instantiation), the
      // step runs launch by launch, and so does every later one: a launch that fails for
      // itself fails there again and names its kernel.
      PTX_LOG(WARNING) << "CUDA graphs off from now on: " << s.message();
      disabled_ = true;
      DropAll();
      return forward(p);
    }
    it = by_key_.find(key);
  }
  Entry& e = it->second;
  e.last_used = ++clock_;
  if (absl::Status s = device_->LaunchGraph(e.exec, e.name); !s.ok()) return s;
  cache_->CountReplay(e.tally);
  replays_.fetch_add(1, std::memory_order_relaxed);
  return absl::OkStatus();
}

}  // namespace ptxserve::cuda
