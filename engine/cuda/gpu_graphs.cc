// CUDA graphs for decode-only steps (the design is in gpu_backend.h): padding a decode
// batch to its bucket, the graph key, capture on first use, replay, and dropping graphs
// whose buffers moved.
#include <algorithm>
#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "engine/cuda/gpu_backend_internal.h"
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

GraphStats GpuBackend::graph_stats() const {
  GraphStats g;
  g.captures = graph_counters_.captures.load(std::memory_order_relaxed);
  g.replays = graph_counters_.replays.load(std::memory_order_relaxed);
  g.live = graph_counters_.live.load(std::memory_order_relaxed);
  g.dropped = graph_counters_.dropped.load(std::memory_order_relaxed);
  return g;
}

const StepBatch& GpuBackend::PadForGraph(const StepBatch& batch, StepPlan* plan) {
  plan->graph = false;
  if (!options_.cuda_graphs || (graphs_ != nullptr && graphs_->disabled) || !DecodeOnly(batch)) {
    return batch;
  }
  const int64_t seqs = batch.num_seqs();
  const int64_t bucket = CudaGraphBucket(seqs, options_.cuda_graph_max_batch);
  if (bucket == 0) return batch;
  if (graphs_ == nullptr) graphs_ = std::make_unique<Graphs>();
  const int64_t stride = NextPowerOfTwo(std::max<int64_t>(batch.max_blocks_per_seq, 1));
  // The scratch batch keeps its capacity from step to step: no allocation once warm.
  StepBatch& p = graphs_->padded;
  p.token_ids.assign(batch.token_ids.begin(), batch.token_ids.end());
  p.token_ids.resize(bucket, 0);
  p.positions.assign(batch.positions.begin(), batch.positions.end());
  p.positions.resize(bucket, 0);
  p.slot_mapping.assign(batch.slot_mapping.begin(), batch.slot_mapping.end());
  p.slot_mapping.resize(bucket, -1);  // kv_scatter skips negative slots
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
  plan->graph = true;
  plan->real_rows = seqs;
  return p;
}

void GpuBackend::RoundGraphPartition(StepPlan* plan) const {
  // A fixed partition (options) is one key already; the automatic one follows the
  // context length token by token, which would capture a graph per block.
  if (!plan->split || options_.attention_partition > 0) return;
  const int64_t bs = kv_.block_size;
  const int64_t blocks = (plan->partition + bs - 1) / bs;
  plan->partition = static_cast<int>(NextPowerOfTwo(blocks) * bs);
  // num_splits stays: num_splits x partition still covers the longest context, and the
  // partial buffers were sized for it.
}

absl::Status GpuBackend::RunForward(StepPlan* plan) {
  if (!plan->graph) return Forward(*plan);
  absl::Status s = ForwardGraph(*plan);
  plan->rows = plan->real_rows;
  return s;
}

absl::Status GpuBackend::CaptureGraph(const StepPlan& p) {
  const std::string what = absl::StrCat("decode graph of ", p.tokens, " rows");
  if (absl::Status s = device_->BeginCapture(what); !s.ok()) return s;
  cache_->StartRecording();
  const absl::Status forward = Forward(p);
  const std::vector<const CompiledKernel*> launches = cache_->StopRecording();
  // Always ended, so the stream leaves capture mode whatever happened.
  absl::StatusOr<Graph> graph = device_->EndCapture(what);
  if (!forward.ok()) return forward;
  if (!graph.ok()) return graph.status();
  absl::StatusOr<GraphExec> exec = device_->Instantiate(*graph, what);
  if (!exec.ok()) return exec.status();
  Graphs::Entry& e = graphs_->by_key[Graphs::Key::Of(p)];
  e.exec = *std::move(exec);
  e.tally = KernelCache::Tally(launches);
  e.name = absl::StrCat(what, ", ", launches.size(), " kernels");
  graph_counters_.captures.fetch_add(1, std::memory_order_relaxed);
  graph_counters_.live.fetch_add(1, std::memory_order_relaxed);
  return absl::OkStatus();
}

absl::Status GpuBackend::ForwardGraph(const StepPlan& p) {
  Graphs& g = *graphs_;
  const Buffers& b = *buf_;
  const Graphs::Addresses now = {b.x.ptr(),   b.h.ptr(),      b.q.ptr(),       b.k.ptr(),
                                 b.v.ptr(),   b.attn.ptr(),   b.gate_up.ptr(), b.act.ptr(),
                                 b.hr.ptr(),  b.logits.ptr(), b.partial.ptr(), b.lse.ptr(),
                                 b.meta.ptr()};
  if (now != g.addresses) {
    // A buffer grew (Reserve): the graphs' parameters point at freed memory.
    graph_counters_.dropped.fetch_add(static_cast<int64_t>(g.by_key.size()),
                                      std::memory_order_relaxed);
    g.by_key.clear();
    graph_counters_.live.store(0, std::memory_order_relaxed);
    g.addresses = now;
  }
  const Graphs::Key key = Graphs::Key::Of(p);
  auto it = g.by_key.find(key);
  if (it == g.by_key.end()) {
    // A key's first steps run launch by launch, outside any capture: they compile the
    // kernels when warm-up was off, and load their modules onto the device. With lazy
    // module loading (the default since CUDA 12.2), drivers before 12.3 cannot load a
    // kernel during a capture, which would turn graphs off for good.
    const int32_t eager = std::max(options_.cuda_graph_eager_runs, options_.warmup ? 0 : 1);
    if (int32_t& runs = g.eager_runs[key]; runs < eager) {
      ++runs;
      return Forward(p);
    }
    if (static_cast<int64_t>(g.by_key.size()) >= std::max(options_.cuda_graph_limit, 1)) {
      auto lru = std::min_element(
          g.by_key.begin(), g.by_key.end(),
          [](const auto& a, const auto& c) { return a.second.last_used < c.second.last_used; });
      g.by_key.erase(lru);
      graph_counters_.dropped.fetch_add(1, std::memory_order_relaxed);
      graph_counters_.live.fetch_sub(1, std::memory_order_relaxed);
    }
    if (absl::Status s = CaptureGraph(p); !s.ok()) {
      // Whatever failed (the capture calls, a launch while captured, instantiation), the
      // step runs launch by launch, and so does every later one: a launch that fails for
      // itself fails there again and names its kernel.
      PTX_LOG(WARNING) << "CUDA graphs off from now on: " << s.message();
      g.disabled = true;
      graph_counters_.dropped.fetch_add(static_cast<int64_t>(g.by_key.size()),
                                        std::memory_order_relaxed);
      g.by_key.clear();
      graph_counters_.live.store(0, std::memory_order_relaxed);
      return Forward(p);
    }
    it = g.by_key.find(key);
  }
  Graphs::Entry& e = it->second;
  e.last_used = ++g.clock;
  if (absl::Status s = device_->LaunchGraph(e.exec, e.name); !s.ok()) return s;
  cache_->CountReplay(e.tally);
  graph_counters_.replays.fetch_add(1, std::memory_order_relaxed);
  return absl::OkStatus();
}

}  // namespace ptxserve::cuda
