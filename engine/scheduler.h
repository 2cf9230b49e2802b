// Iteration-level (continuous batching) scheduling policy: given the waiting and the
// running sequences and the KV block manager, plan the next step's batch. Pure and
// single-threaded: the engine thread owns it; tests drive it without threads.
//
// Policy of one Schedule() call:
//  1. Running sequences, in order (priority descending, then arrival), each get their
//     next tokens: 1 when decoding, else the next prefill chunk of
//     min(remaining, prefill_chunk) tokens, when the step's token budget
//     (max_batch_tokens) still holds the whole chunk (otherwise it waits a step).
//     When the KV cache has no room for them, the lowest-priority newest running
//     sequence is preempted: its blocks are freed, its computed count reset, and it
//     returns to the waiting queue to be recomputed later (possibly itself, last).
//  2. When nothing was preempted, waiting sequences are admitted in order (priority
//     descending, then arrival) while the batch has fewer than max_batch_size
//     sequences, the token budget holds their first chunk and free blocks hold it. The
//     head of the queue is never skipped for a smaller request behind it.
// Chunk boundaries are multiples of prefill_chunk from where computing starts whatever
// else runs, so a request's work does not depend on its neighbours.
//
// Prefix caching (when the KV block manager has it on): an admitted sequence starts with
// the longest run of cached blocks holding its leading tokens, shared by reference, and
// computes only the rest; never its last token, which must run to give logits (a prompt
// that ends on a block boundary leaves its last block out of the match). Commit offers
// every block that became full and computed to the cache; a block equal to one already
// cached is swapped for that one, so equal prefixes share memory. Shared blocks are
// full and never written again: a sequence writes only past its matched blocks, into
// blocks of its own. A sequence that waits for another's prompt (parallel samples, see
// SchedSequence::wait_for) is not admitted before that prompt is computed; as the head of
// the queue it holds back the sequences behind it meanwhile.
#pragma once

#include <cstdint>
#include <memory>
#include <set>
#include <vector>

#include "engine/kv_block_manager.h"
#include "engine/step_batch.h"

namespace ptxserve {

struct SchedulerConfig {
  int32_t max_batch_size = 64;      // sequences per step
  int32_t max_batch_tokens = 2048;  // token rows per step
  int32_t prefill_chunk = 512;      // prompt tokens of one sequence per step, <= max_batch_tokens
};

// Opened when a sequence's prompt has been computed, or when the sequence leaves the
// batch before that (finished, cancelled, preempted).
struct PromptGate {
  bool open = false;
};

// The scheduling state of one sequence. Owned by the caller; the scheduler keeps
// pointers between Add and Remove.
struct SchedSequence {
  uint64_t id = 0;
  int32_t priority = 0;         // higher first
  uint64_t arrival = 0;         // increasing with arrival; ties broken by id
  std::vector<int32_t> tokens;  // prompt followed by the generated tokens
  int64_t num_computed = 0;     // tokens whose K/V rows are in the cache
  std::vector<int32_t> blocks;  // block table
  bool running = false;         // in the batch (else waiting)
  int32_t num_preemptions = 0;
  // Prefix caching: the chain hashes of the leading full blocks of `tokens` (they depend
  // on the tokens only, so they survive preemption), and how many leading blocks of
  // `blocks` were offered to the cache.
  std::vector<uint64_t> block_hashes;
  int32_t num_offered_blocks = 0;
  // Parallel samples: a sequence with the prompt of an earlier one of the same priority
  // waits for that one's gate (`wait_for`, opened through its `opens`), then finds the
  // prompt's full blocks cached instead of computing them beside it.
  std::shared_ptr<PromptGate> opens;
  std::shared_ptr<const PromptGate> wait_for;
};

// One step's plan: the batch for the backend and which sequence owns which rows.
struct StepPlan {
  struct Entry {
    SchedSequence* seq = nullptr;
    int32_t num_tokens = 0;  // rows this step (tokens [num_computed, num_computed + n))
    bool samples = false;    // its last row's logits are wanted (prompt fully computed)
  };
  StepBatch batch;
  std::vector<Entry> entries;             // in batch order
  std::vector<SchedSequence*> preempted;  // sent back to waiting by this plan
  std::vector<SchedSequence*> admitted;   // moved from waiting to running by this plan

  bool empty() const { return entries.empty(); }
  void Clear();
};

class Scheduler {
 public:
  // `kv` must outlive the scheduler; its blocks back every sequence's table.
  Scheduler(const SchedulerConfig& config, KvBlockManager* kv);

  // Queues a new sequence (tokens set, num_computed 0, no blocks).
  void Add(SchedSequence* seq);
  // Drops a sequence from the waiting queue or the batch and frees its blocks. No-op
  // when the scheduler does not hold it.
  void Remove(SchedSequence* seq);

  // Plans the next step (see the file comment) into *plan, allocating the KV blocks
  // the planned tokens need. Empty when there is nothing to run.
  void Schedule(StepPlan* plan);
  // Records that the backend ran `plan`: advances each entry's num_computed and offers
  // the blocks that became full to the prefix cache.
  void Commit(const StepPlan& plan);

  int32_t num_waiting() const { return static_cast<int32_t>(waiting_.size()); }
  int32_t num_running() const { return static_cast<int32_t>(running_.size()); }
  bool empty() const { return waiting_.empty() && running_.empty(); }
  const SchedulerConfig& config() const { return config_; }
  const KvBlockManager& kv() const { return *kv_; }
  // Prefix-cache lookups since construction: prompt (and, after a preemption, generated)
  // tokens looked up at admission, and those found cached.
  int64_t prefix_query_tokens() const { return prefix_query_tokens_; }
  int64_t prefix_hit_tokens() const { return prefix_hit_tokens_; }

 private:
  struct Order {  // priority descending, then arrival, then id
    bool operator()(const SchedSequence* a, const SchedSequence* b) const;
  };
  // Tokens `seq` would run this step with `from` tokens computed: 1 when decoding, else
  // its next prefill chunk.
  int32_t NextChunk(const SchedSequence& seq, int64_t from) const;
  void Preempt(SchedSequence* seq, StepPlan* plan);
  // Opens seq's gate, if it has one.
  static void OpenGate(SchedSequence* seq);
  void AddEntry(SchedSequence* seq, int32_t n, StepPlan* plan);
  void BuildBatch(StepPlan* plan) const;
  // Extends seq->block_hashes to the first n full blocks of its tokens.
  void HashBlocks(SchedSequence* seq, int32_t n) const;
  // The cached blocks a waiting sequence would start from (see the file comment).
  void MatchPrefix(SchedSequence* seq, std::vector<int32_t>* blocks) const;
  // Offers seq's newly full, computed blocks to the cache (see the file comment).
  void OfferBlocks(SchedSequence* seq);

  SchedulerConfig config_;
  KvBlockManager* kv_;
  std::set<SchedSequence*, Order> waiting_;
  std::vector<SchedSequence*> running_;  // sorted by Order; the back is preempted first
  std::vector<int32_t> matched_;         // MatchPrefix's output, reused
  int64_t prefix_query_tokens_ = 0;
  int64_t prefix_hit_tokens_ = 0;
};

}  // namespace ptxserve
