#include "engine/scheduler.h"

#include <algorithm>
#include <cassert>
#include <span>

namespace ptxserve {

void StepPlan::Clear() {
  // Keep the vectors' capacity: the engine reuses one plan for every step.
  batch.token_ids.clear();
  batch.positions.clear();
  batch.slot_mapping.clear();
  batch.query_start.clear();
  batch.seq_lens.clear();
  batch.block_tables.clear();
  batch.logits_rows.clear();
  batch.max_blocks_per_seq = 0;
  entries.clear();
  preempted.clear();
  admitted.clear();
}

bool Scheduler::Order::operator()(const SchedSequence* a, const SchedSequence* b) const {
  if (a->priority != b->priority) return a->priority > b->priority;
  if (a->arrival != b->arrival) return a->arrival < b->arrival;
  return a->id < b->id;
}

Scheduler::Scheduler(const SchedulerConfig& config, KvBlockManager* kv) : config_(config), kv_(kv) {
  config_.max_batch_size = std::max(config_.max_batch_size, 1);
  config_.max_batch_tokens = std::max(config_.max_batch_tokens, 1);
  config_.prefill_chunk = std::clamp(config_.prefill_chunk, 1, config_.max_batch_tokens);
  running_.reserve(config_.max_batch_size);
}

void Scheduler::Add(SchedSequence* seq) {
  seq->running = false;
  seq->block_hashes.clear();
  seq->num_offered_blocks = 0;
  waiting_.insert(seq);
}

void Scheduler::Remove(SchedSequence* seq) {
  if (seq->running) {
    auto it = std::find(running_.begin(), running_.end(), seq);
    if (it == running_.end()) return;
    running_.erase(it);
    seq->running = false;
  } else if (waiting_.erase(seq) == 0) {
    return;
  }
  OpenGate(seq);
  kv_->FreeSequence(&seq->blocks);
}

void Scheduler::OpenGate(SchedSequence* seq) {
  if (seq->opens == nullptr) return;
  seq->opens->open = true;
  seq->opens.reset();
}

int32_t Scheduler::NextChunk(const SchedSequence& seq, int64_t from) const {
  const int64_t remaining = static_cast<int64_t>(seq.tokens.size()) - from;
  return static_cast<int32_t>(std::min<int64_t>(remaining, config_.prefill_chunk));
}

void Scheduler::HashBlocks(SchedSequence* seq, int32_t n) const {
  const int32_t bs = kv_->block_size();
  std::vector<uint64_t>& h = seq->block_hashes;
  for (auto i = static_cast<int32_t>(h.size()); i < n; ++i) {
    const uint64_t parent = i > 0 ? h[i - 1] : kv_->root_hash();
    h.push_back(KvBlockManager::BlockHash(
        parent, std::span<const int32_t>(seq->tokens).subspan(static_cast<size_t>(i) * bs, bs)));
  }
}

void Scheduler::MatchPrefix(SchedSequence* seq, std::vector<int32_t>* blocks) const {
  if (!kv_->prefix_caching()) return;
  // Never the last token: it must run for the logits of the next one.
  const auto max_blocks =
      static_cast<int32_t>((static_cast<int64_t>(seq->tokens.size()) - 1) / kv_->block_size());
  HashBlocks(seq, max_blocks);
  kv_->MatchPrefix(seq->block_hashes, seq->tokens, max_blocks, blocks);
}

void Scheduler::OfferBlocks(SchedSequence* seq) {
  const int32_t bs = kv_->block_size();
  const auto full = static_cast<int32_t>(seq->num_computed / bs);
  if (full <= seq->num_offered_blocks) return;
  HashBlocks(seq, full);
  for (int32_t i = seq->num_offered_blocks; i < full; ++i) {
    const int32_t own = seq->blocks[i];
    const int32_t cached =
        kv_->Cache(own, seq->block_hashes[i], i > 0 ? seq->blocks[i - 1] : -1,
                   std::span<const int32_t>(seq->tokens).subspan(static_cast<size_t>(i) * bs, bs));
    if (cached >= 0 && cached != own) {
      // The same tokens were computed by another sequence too: keep one copy.
      kv_->Retain(cached);
      kv_->Release(own);
      seq->blocks[i] = cached;
    }
  }
  seq->num_offered_blocks = full;
}

void Scheduler::Preempt(SchedSequence* seq, StepPlan* plan) {
  // Recompute rather than swap: the CPU has no second tier worth copying to, and
  // recomputing a prompt is one batched prefill.
  assert(!running_.empty() && running_.back() == seq);
  running_.pop_back();
  OpenGate(seq);
  kv_->FreeSequence(&seq->blocks);
  seq->num_computed = 0;
  seq->num_offered_blocks = 0;
  seq->running = false;
  ++seq->num_preemptions;
  waiting_.insert(seq);
  plan->preempted.push_back(seq);
}

void Scheduler::AddEntry(SchedSequence* seq, int32_t n, StepPlan* plan) {
  StepPlan::Entry e;
  e.seq = seq;
  e.num_tokens = n;
  e.samples = seq->num_computed + n == static_cast<int64_t>(seq->tokens.size());
  plan->entries.push_back(e);
}

void Scheduler::Schedule(StepPlan* plan) {
  plan->Clear();
  int32_t budget = config_.max_batch_tokens;

  // 1. The running sequences keep going, oldest (and most important) first; the
  // newest give their blocks back when the cache is full.
  for (size_t i = 0; i < running_.size(); ++i) {
    SchedSequence* s = running_[i];
    const int32_t n = NextChunk(*s, s->num_computed);
    if (n <= 0 || n > budget) continue;  // a prefill chunk that waits for a lighter step
    const int64_t want = s->num_computed + n;
    bool self_preempted = false;
    while (kv_->BlocksNeeded(s->blocks, want) > kv_->free_blocks()) {
      SchedSequence* victim = running_.back();
      Preempt(victim, plan);
      if (victim == s) {
        self_preempted = true;
        break;
      }
    }
    if (self_preempted) break;  // s was the last one
    const absl::Status st = kv_->EnsureCapacity(&s->blocks, want);
    assert(st.ok());
    (void)st;
    AddEntry(s, n, plan);
    budget -= n;
  }

  // 2. Admission, only when memory is not already short.
  if (plan->preempted.empty()) {
    while (!waiting_.empty() && static_cast<int32_t>(running_.size()) < config_.max_batch_size &&
           budget > 0) {
      SchedSequence* s = *waiting_.begin();
      if (s->wait_for != nullptr && !s->wait_for->open) break;
      matched_.clear();
      MatchPrefix(s, &matched_);
      const int64_t start = static_cast<int64_t>(matched_.size()) * kv_->block_size();
      const int32_t n = NextChunk(*s, start);
      if (n > budget) break;
      const int64_t want = start + n;
      // Matched blocks that nobody references are counted as free until taken.
      int32_t revived = 0;
      for (int32_t b : matched_) revived += kv_->ref_count(b) == 0 ? 1 : 0;
      if (kv_->BlocksNeeded(matched_, want) + revived > kv_->free_blocks()) break;
      waiting_.erase(waiting_.begin());
      for (int32_t b : matched_) kv_->Retain(b);
      s->blocks.assign(matched_.begin(), matched_.end());
      s->num_computed = start;
      s->num_offered_blocks = static_cast<int32_t>(matched_.size());
      s->wait_for.reset();
      if (kv_->prefix_caching()) {
        prefix_query_tokens_ += static_cast<int64_t>(s->tokens.size());
        prefix_hit_tokens_ += start;
      }
      const absl::Status st = kv_->EnsureCapacity(&s->blocks, want);
      assert(st.ok());
      (void)st;
      s->running = true;
      running_.insert(std::upper_bound(running_.begin(), running_.end(), s, Order()), s);
      plan->admitted.push_back(s);
      AddEntry(s, n, plan);
      budget -= n;
    }
  }
  BuildBatch(plan);
}

void Scheduler::BuildBatch(StepPlan* plan) const {
  StepBatch& b = plan->batch;
  const int32_t bs = kv_->block_size();
  int32_t max_blocks = 0;
  for (const auto& e : plan->entries) {
    max_blocks = std::max(max_blocks, static_cast<int32_t>(e.seq->blocks.size()));
  }
  b.max_blocks_per_seq = max_blocks;
  b.block_tables.assign(plan->entries.size() * max_blocks, 0);
  b.query_start.push_back(0);
  for (size_t i = 0; i < plan->entries.size(); ++i) {
    const auto& e = plan->entries[i];
    const SchedSequence& s = *e.seq;
    for (int64_t p = s.num_computed; p < s.num_computed + e.num_tokens; ++p) {
      b.token_ids.push_back(s.tokens[p]);
      b.positions.push_back(static_cast<int32_t>(p));
      b.slot_mapping.push_back(static_cast<int64_t>(s.blocks[p / bs]) * bs + p % bs);
    }
    b.query_start.push_back(b.num_tokens());
    b.seq_lens.push_back(static_cast<int32_t>(s.num_computed + e.num_tokens));
    std::copy(s.blocks.begin(), s.blocks.end(), b.block_tables.begin() + i * max_blocks);
    if (e.samples) b.logits_rows.push_back(b.num_tokens() - 1);
  }
}

void Scheduler::Commit(const StepPlan& plan) {
  for (const auto& e : plan.entries) {
    e.seq->num_computed += e.num_tokens;
    if (kv_->prefix_caching()) OfferBlocks(e.seq);
    if (e.samples) OpenGate(e.seq);
  }
}

}  // namespace ptxserve
