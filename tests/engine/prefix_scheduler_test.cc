// The scheduler with prefix caching on, step by step without threads or a backend: where
// a sequence starts, which blocks it shares and writes, and the KV accounting around
// preemption, removal mid-prefill and eviction.
#include <gtest/gtest.h>

#include <algorithm>
#include <initializer_list>
#include <memory>
#include <numeric>
#include <vector>

#include "engine/scheduler.h"

namespace ptxserve {
namespace {

constexpr int32_t kBs = 4;

class PrefixSchedulerTest : public ::testing::Test {
 protected:
  SchedSequence* NewSeq(std::vector<int32_t> tokens) {
    auto s = std::make_unique<SchedSequence>();
    s->id = next_id_;
    s->arrival = next_id_++;
    s->tokens = std::move(tokens);
    seqs_.push_back(std::move(s));
    return seqs_.back().get();
  }
  static std::vector<int32_t> Tokens(int32_t n, int32_t first = 100) {
    std::vector<int32_t> v(n);
    std::iota(v.begin(), v.end(), first);
    return v;
  }
  // What the engine does after a step: commit, then append a token to every sampler.
  static void RunPlan(Scheduler& sched, const StepPlan& plan) {
    sched.Commit(plan);
    for (const auto& e : plan.entries) {
      if (e.samples) e.seq->tokens.push_back(7);
    }
  }
  static const StepPlan::Entry* EntryOf(const StepPlan& plan, const SchedSequence* s) {
    for (const auto& e : plan.entries) {
      if (e.seq == s) return &e;
    }
    return nullptr;
  }
  // Runs `s` alone until its prompt is computed and then finishes it.
  static void RunToEnd(Scheduler& sched, SchedSequence* s) {
    const auto prompt = static_cast<int64_t>(s->tokens.size());
    sched.Add(s);
    StepPlan plan;
    while (s->num_computed < prompt) {
      sched.Schedule(&plan);
      RunPlan(sched, plan);
    }
    sched.Remove(s);
  }
  // Queues `s` and plans a step: s's entry, null when it was not scheduled.
  static const StepPlan::Entry* AddAndSchedule(Scheduler& sched, SchedSequence* s, StepPlan* plan) {
    sched.Add(s);
    sched.Schedule(plan);
    return EntryOf(*plan, s);
  }
  // Slots the batch writes for sequence entry i.
  static std::vector<int64_t> SlotsOf(const StepPlan& plan, size_t i) {
    const StepBatch& b = plan.batch;
    return std::vector<int64_t>(b.slot_mapping.begin() + b.query_start[i],
                                b.slot_mapping.begin() + b.query_start[i + 1]);
  }
  // Commits `plan`, removes `done` (finished), and checks the pool is idle again.
  static void FinishAll(Scheduler& sched, const StepPlan& plan,
                        std::initializer_list<SchedSequence*> done) {
    RunPlan(sched, plan);
    for (SchedSequence* s : done) sched.Remove(s);
    ExpectIdleAccounting(sched.kv());
  }
  static void ExpectIdleAccounting(const KvBlockManager& kv) {
    EXPECT_EQ(kv.used_blocks(), 0);
    EXPECT_EQ(kv.free_blocks(), kv.num_blocks()) << "cached + empty = the pool";
  }

  uint64_t next_id_ = 1;
  std::vector<std::unique_ptr<SchedSequence>> seqs_;
};

TEST_F(PrefixSchedulerTest, ASharedPrefixIsComputedOnce) {
  KvBlockManager kv(32, kBs, true, 1);
  Scheduler sched({8, 64, 16}, &kv);
  std::vector<int32_t> prefix = Tokens(10);  // 2 full blocks and 2 tokens
  std::vector<int32_t> a_tokens = prefix, b_tokens = prefix;
  a_tokens.insert(a_tokens.end(), {1, 2, 3});
  b_tokens.insert(b_tokens.end(), {4, 5, 6, 7, 8});
  SchedSequence* a = NewSeq(a_tokens);
  RunToEnd(sched, a);
  EXPECT_EQ(kv.cached_blocks(), 3) << "the 13 computed tokens filled 3 blocks";

  SchedSequence* b = NewSeq(b_tokens);
  StepPlan plan;
  const StepPlan::Entry* e = AddAndSchedule(sched, b, &plan);
  ASSERT_NE(e, nullptr);
  EXPECT_EQ(b->num_computed, 8) << "the two full blocks of the prefix are reused";
  EXPECT_EQ(e->num_tokens, 7);
  EXPECT_TRUE(e->samples);
  EXPECT_EQ(kv.ref_count(b->blocks[0]), 1);
  EXPECT_EQ(plan.batch.positions.front(), 8);
  EXPECT_EQ(plan.batch.seq_lens[0], 15);
  for (int64_t slot : SlotsOf(plan, 0)) {
    EXPECT_GE(slot / kBs, 0);
    EXPECT_NE(slot / kBs, b->blocks[0]) << "a shared block is never written";
    EXPECT_NE(slot / kBs, b->blocks[1]);
  }
  EXPECT_EQ(sched.prefix_query_tokens(), 13 + 15);
  EXPECT_EQ(sched.prefix_hit_tokens(), 8);
  FinishAll(sched, plan, {b});
}

TEST_F(PrefixSchedulerTest, AFullyCachedPromptStillComputesItsLastToken) {
  KvBlockManager kv(32, kBs, true, 1);
  Scheduler sched({8, 64, 16}, &kv);
  RunToEnd(sched, NewSeq(Tokens(12)));  // ends on a block boundary
  ASSERT_EQ(kv.cached_blocks(), 3);
  SchedSequence* again = NewSeq(Tokens(12));
  StepPlan plan;
  const StepPlan::Entry* e = AddAndSchedule(sched, again, &plan);
  ASSERT_NE(e, nullptr);
  EXPECT_EQ(again->num_computed, 8) << "the last block is left out of the match";
  EXPECT_EQ(e->num_tokens, 4);
  EXPECT_TRUE(e->samples);
  const int32_t written = again->blocks[2];
  EXPECT_FALSE(kv.is_cached(written)) << "it is recomputed into a block of its own";
  RunPlan(sched, plan);
  // Once computed it equals the cached block, which replaces it: one copy of the prompt.
  EXPECT_TRUE(kv.is_cached(again->blocks[2]));
  EXPECT_NE(again->blocks[2], written);
  EXPECT_EQ(kv.used_blocks(), 3);

  // Off a boundary (13 tokens), all 3 full blocks match and only the 13th token runs.
  SchedSequence* longer = NewSeq(Tokens(13));
  const StepPlan::Entry* last = AddAndSchedule(sched, longer, &plan);
  ASSERT_NE(last, nullptr);
  EXPECT_EQ(longer->num_computed, 12);
  EXPECT_EQ(last->num_tokens, 1);
  FinishAll(sched, plan, {again, longer});
}

TEST_F(PrefixSchedulerTest, ADivergenceInsideABlockSharesOnlyTheBlocksBeforeIt) {
  KvBlockManager kv(32, kBs, true, 1);
  Scheduler sched({8, 64, 16}, &kv);
  RunToEnd(sched, NewSeq(Tokens(16)));
  std::vector<int32_t> other = Tokens(16);
  other[9] = 5;  // inside the third block
  SchedSequence* s = NewSeq(other);
  StepPlan plan;
  const StepPlan::Entry* e = AddAndSchedule(sched, s, &plan);
  ASSERT_NE(e, nullptr);
  EXPECT_EQ(s->num_computed, 8);
  EXPECT_EQ(e->num_tokens, 8);
  const std::vector<int64_t> slots = SlotsOf(plan, 0);
  EXPECT_EQ(slots.front(), int64_t{s->blocks[2]} * kBs) << "its own block from the divergence";
  FinishAll(sched, plan, {s});
}

TEST_F(PrefixSchedulerTest, SequencesRunningTogetherShareTheirEqualBlocks) {
  KvBlockManager kv(32, kBs, true, 1);
  Scheduler sched({8, 64, 16}, &kv);
  SchedSequence* a = NewSeq(Tokens(10));
  SchedSequence* b = NewSeq(Tokens(10));
  sched.Add(a);
  sched.Add(b);
  StepPlan plan;
  sched.Schedule(&plan);
  ASSERT_EQ(plan.entries.size(), 2u) << "arriving together, both compute the prompt";
  EXPECT_EQ(kv.used_blocks(), 6);
  RunPlan(sched, plan);
  EXPECT_EQ(a->blocks[0], b->blocks[0]) << "after the step the copies are merged";
  EXPECT_EQ(a->blocks[1], b->blocks[1]);
  EXPECT_NE(a->blocks[2], b->blocks[2]) << "the partial last block stays private";
  EXPECT_EQ(kv.ref_count(a->blocks[0]), 2);
  EXPECT_EQ(kv.used_blocks(), 4);

  // A third one admitted later starts from them, its own private tail after them.
  SchedSequence* c = NewSeq(Tokens(10));
  ASSERT_NE(AddAndSchedule(sched, c, &plan), nullptr);
  EXPECT_EQ(c->num_computed, 8);
  EXPECT_EQ(kv.ref_count(a->blocks[0]), 3);
  for (int i = 0; i < 6; ++i) {
    RunPlan(sched, plan);
    sched.Schedule(&plan);
  }
  // Decoding filled each one's third block with its own tokens (all 7s here): equal
  // blocks, merged; their parents are the shared blocks, so the chain holds.
  EXPECT_EQ(a->blocks[2], b->blocks[2]);
  sched.Remove(a);
  sched.Remove(b);
  sched.Remove(c);
  ExpectIdleAccounting(kv);
}

TEST_F(PrefixSchedulerTest, APreemptedSequenceResumesFromItsCachedBlocks) {
  KvBlockManager kv(6, kBs, true, 1);  // 24 tokens
  Scheduler sched({8, 64, 16}, &kv);
  SchedSequence* old_seq = NewSeq(Tokens(8, 100));
  SchedSequence* new_seq = NewSeq(Tokens(8, 200));
  sched.Add(old_seq);
  sched.Add(new_seq);
  StepPlan plan;
  bool preempted = false;
  for (int step = 0; step < 8 && !preempted; ++step) {
    sched.Schedule(&plan);
    preempted = !plan.preempted.empty();
    RunPlan(sched, plan);
  }
  ASSERT_TRUE(preempted);
  EXPECT_EQ(new_seq->num_preemptions, 1);
  EXPECT_TRUE(new_seq->blocks.empty());
  EXPECT_EQ(kv.evictions(), 1) << "old_seq's next block";
  const auto len = static_cast<int64_t>(new_seq->tokens.size());
  sched.Remove(old_seq);
  sched.Schedule(&plan);
  // Its 12 computed tokens were 3 cached blocks when it was preempted; the block old_seq
  // grew into was its deepest (released first, evicted first): it resumes after the
  // other two and recomputes only the rest.
  const StepPlan::Entry* e = EntryOf(plan, new_seq);
  ASSERT_NE(e, nullptr);
  EXPECT_EQ(new_seq->num_computed, 8);
  EXPECT_EQ(e->num_tokens, len - new_seq->num_computed);
  EXPECT_GT(sched.prefix_hit_tokens(), 0);
  FinishAll(sched, plan, {new_seq});
}

TEST_F(PrefixSchedulerTest, OnlyComputedBlocksAreCached) {
  KvBlockManager kv(32, kBs, true, 1);
  Scheduler sched({8, 64, 8}, &kv);  // prefill chunks of 8 tokens
  SchedSequence* s = NewSeq(Tokens(20));
  sched.Add(s);
  StepPlan plan;
  sched.Schedule(&plan);
  RunPlan(sched, plan);   // tokens 0..7 computed
  sched.Schedule(&plan);  // plans 8..15, as a step that then fails or is cancelled
  EXPECT_EQ(s->blocks.size(), 4u);
  sched.Remove(s);
  EXPECT_EQ(kv.cached_blocks(), 2) << "the blocks of the planned chunk were never computed";
  ExpectIdleAccounting(kv);
  SchedSequence* again = NewSeq(Tokens(20));
  AddAndSchedule(sched, again, &plan);
  EXPECT_EQ(again->num_computed, 8);
}

TEST_F(PrefixSchedulerTest, CachedBlocksGiveWayToARequestThatFitsThePool) {
  KvBlockManager kv(8, kBs, true, 1);  // 32 tokens
  Scheduler sched({8, 64, 32}, &kv);
  RunToEnd(sched, NewSeq(Tokens(16, 100)));
  RunToEnd(sched, NewSeq(Tokens(16, 200)));
  ASSERT_EQ(kv.cached_blocks(), 8) << "the whole pool holds cached blocks";
  // Needs every block: admitted at once, evicting all the cached ones.
  SchedSequence* big = NewSeq(Tokens(32, 300));
  StepPlan plan;
  ASSERT_NE(AddAndSchedule(sched, big, &plan), nullptr);
  EXPECT_EQ(kv.used_blocks(), 8);
  EXPECT_EQ(kv.evictions(), 8);
  FinishAll(sched, plan, {big});
}

TEST_F(PrefixSchedulerTest, AParallelSampleWaitsForThePromptThenStartsFromItsBlocks) {
  KvBlockManager kv(32, kBs, true, 1);
  Scheduler sched({8, 64, 8}, &kv);  // prefill chunks of 8: the prompt takes 3 steps
  SchedSequence* lead = NewSeq(Tokens(18));
  SchedSequence* sample = NewSeq(Tokens(18));
  lead->opens = std::make_shared<PromptGate>();
  sample->wait_for = lead->opens;
  SchedSequence* behind = NewSeq(Tokens(3, 500));
  sched.Add(lead);
  sched.Add(sample);
  sched.Add(behind);
  StepPlan plan;
  for (int step = 0; step < 3; ++step) {
    sched.Schedule(&plan);
    EXPECT_EQ(plan.entries.size(), 1u) << "step " << step << ": the others wait";
    RunPlan(sched, plan);
  }
  EXPECT_TRUE(sample->wait_for->open);
  sched.Schedule(&plan);
  const StepPlan::Entry* e = EntryOf(plan, sample);
  ASSERT_NE(e, nullptr);
  EXPECT_EQ(sample->num_computed, 16) << "the prompt's four full blocks, shared";
  EXPECT_EQ(e->num_tokens, 2);
  EXPECT_EQ(sample->blocks[3], lead->blocks[3]);
  EXPECT_NE(EntryOf(plan, behind), nullptr);
  FinishAll(sched, plan, {lead, sample, behind});
}

TEST_F(PrefixSchedulerTest, AParallelSampleStopsWaitingWhenTheFirstLeaves) {
  KvBlockManager kv(32, kBs, true, 1);
  Scheduler sched({8, 64, 8}, &kv);
  SchedSequence* lead = NewSeq(Tokens(18));
  SchedSequence* sample = NewSeq(Tokens(18));
  lead->opens = std::make_shared<PromptGate>();
  sample->wait_for = lead->opens;
  sched.Add(lead);
  sched.Add(sample);
  StepPlan plan;
  sched.Schedule(&plan);
  RunPlan(sched, plan);
  sched.Remove(lead);  // cancelled after its first chunk
  sched.Schedule(&plan);
  ASSERT_NE(EntryOf(plan, sample), nullptr);
  EXPECT_EQ(sample->num_computed, 8) << "from the two blocks the first one computed";
  FinishAll(sched, plan, {sample});
}

TEST_F(PrefixSchedulerTest, OffMeansNoSharing) {
  KvBlockManager kv(32, kBs);
  Scheduler sched({8, 64, 16}, &kv);
  RunToEnd(sched, NewSeq(Tokens(12)));
  EXPECT_EQ(kv.cached_blocks(), 0);
  SchedSequence* again = NewSeq(Tokens(12));
  StepPlan plan;
  const StepPlan::Entry* e = AddAndSchedule(sched, again, &plan);
  ASSERT_NE(e, nullptr);
  EXPECT_EQ(e->num_tokens, 12);
  EXPECT_EQ(sched.prefix_query_tokens(), 0);
}

}  // namespace
}  // namespace ptxserve
