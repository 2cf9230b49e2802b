// The scheduling policy, driven step by step without threads or a backend.
#include "engine/scheduler.h"

#include <gtest/gtest.h>

#include <memory>
#include <numeric>
#include <vector>

namespace ptxserve {
namespace {

class SchedulerTest : public ::testing::Test {
 protected:
  SchedSequence* NewSeq(int32_t prompt_len, int32_t priority = 0) {
    auto s = std::make_unique<SchedSequence>();
    s->id = next_id_;
    s->arrival = next_id_++;
    s->priority = priority;
    s->tokens.resize(prompt_len);
    std::iota(s->tokens.begin(), s->tokens.end(), 100 * static_cast<int32_t>(s->id));
    seqs_.push_back(std::move(s));
    return seqs_.back().get();
  }
  // What the engine does after a step: commit, then append a token to every sampler.
  static void RunPlan(Scheduler& sched, const StepPlan& plan) {
    sched.Commit(plan);
    for (const auto& e : plan.entries) {
      if (e.samples) e.seq->tokens.push_back(7);
    }
  }
  static int32_t RowsOf(const StepPlan& plan, const SchedSequence* s) {
    for (const auto& e : plan.entries) {
      if (e.seq == s) return e.num_tokens;
    }
    return 0;
  }

  uint64_t next_id_ = 1;
  std::vector<std::unique_ptr<SchedSequence>> seqs_;
};

TEST_F(SchedulerTest, EmptyWhenIdle) {
  KvBlockManager kv(8, 4);
  Scheduler sched({4, 64, 16}, &kv);
  StepPlan plan;
  sched.Schedule(&plan);
  EXPECT_TRUE(plan.empty());
  EXPECT_TRUE(sched.empty());
}

TEST_F(SchedulerTest, BuildsARaggedBatchWithSlotsFromTheBlockTables) {
  KvBlockManager kv(16, 4);
  Scheduler sched({4, 64, 16}, &kv);
  SchedSequence* a = NewSeq(6);
  SchedSequence* b = NewSeq(3);
  sched.Add(a);
  sched.Add(b);
  StepPlan plan;
  sched.Schedule(&plan);
  ASSERT_EQ(plan.entries.size(), 2u);
  const StepBatch& batch = plan.batch;
  EXPECT_EQ(batch.num_tokens(), 9);
  EXPECT_EQ(batch.query_start, (std::vector<int32_t>{0, 6, 9}));
  EXPECT_EQ(batch.seq_lens, (std::vector<int32_t>{6, 3}));
  EXPECT_EQ(batch.logits_rows, (std::vector<int32_t>{5, 8}));
  EXPECT_EQ(batch.max_blocks_per_seq, 2);
  EXPECT_EQ(a->blocks.size(), 2u);
  EXPECT_EQ(b->blocks.size(), 1u);
  for (int32_t t = 0; t < 6; ++t) {
    EXPECT_EQ(batch.positions[t], t);
    EXPECT_EQ(batch.token_ids[t], a->tokens[t]);
    EXPECT_EQ(batch.slot_mapping[t], a->blocks[t / 4] * 4 + t % 4);
  }
  EXPECT_EQ(batch.block_tables[2], b->blocks[0]);
  EXPECT_EQ(batch.block_tables[3], 0);  // padding
  RunPlan(sched, plan);

  // Next step: both decode one token at the end of their context.
  sched.Schedule(&plan);
  EXPECT_EQ(plan.batch.num_tokens(), 2);
  EXPECT_EQ(plan.batch.positions, (std::vector<int32_t>{6, 3}));
  EXPECT_EQ(plan.batch.seq_lens, (std::vector<int32_t>{7, 4}));
  EXPECT_EQ(plan.batch.token_ids, (std::vector<int32_t>{7, 7}));
}

TEST_F(SchedulerTest, ChunksLongPromptsAndMixesThemWithDecodes) {
  KvBlockManager kv(64, 4);
  Scheduler sched({8, 64, 16}, &kv);
  SchedSequence* shortp = NewSeq(2);
  sched.Add(shortp);
  StepPlan plan;
  sched.Schedule(&plan);
  RunPlan(sched, plan);

  SchedSequence* longp = NewSeq(40);
  sched.Add(longp);
  std::vector<int32_t> chunks;
  for (int step = 0; step < 3; ++step) {
    sched.Schedule(&plan);
    EXPECT_EQ(RowsOf(plan, shortp), 1) << "the decode keeps running beside the prefill";
    chunks.push_back(RowsOf(plan, longp));
    const bool last = step == 2;
    EXPECT_EQ(plan.batch.logits_rows.size(), last ? 2u : 1u);
    RunPlan(sched, plan);
  }
  EXPECT_EQ(chunks, (std::vector<int32_t>{16, 16, 8}));
  EXPECT_EQ(longp->num_computed, 40);
  EXPECT_EQ(longp->tokens.size(), 41u);
}

TEST_F(SchedulerTest, AdmitsByPriorityThenArrivalUpToTheBatchSize) {
  KvBlockManager kv(64, 4);
  Scheduler sched({2, 64, 16}, &kv);
  SchedSequence* low = NewSeq(2, 0);
  SchedSequence* high = NewSeq(2, 5);
  SchedSequence* low2 = NewSeq(2, 0);
  sched.Add(low);
  sched.Add(high);
  sched.Add(low2);
  StepPlan plan;
  sched.Schedule(&plan);
  ASSERT_EQ(plan.entries.size(), 2u);
  EXPECT_EQ(plan.entries[0].seq, high);
  EXPECT_EQ(plan.entries[1].seq, low);
  EXPECT_EQ(sched.num_waiting(), 1);
  RunPlan(sched, plan);
  sched.Remove(high);  // finished
  sched.Schedule(&plan);
  EXPECT_EQ(RowsOf(plan, low2), 2) << "admitted the step a slot freed";
}

TEST_F(SchedulerTest, TokenBudgetDefersWholeChunks) {
  KvBlockManager kv(64, 4);
  Scheduler sched({8, 20, 16}, &kv);
  SchedSequence* a = NewSeq(16);
  SchedSequence* b = NewSeq(16);
  sched.Add(a);
  sched.Add(b);
  StepPlan plan;
  sched.Schedule(&plan);
  // 16 + 16 > 20: b's chunk is never cut to fit, it waits for the next step.
  EXPECT_EQ(RowsOf(plan, a), 16);
  EXPECT_EQ(RowsOf(plan, b), 0);
  EXPECT_LE(plan.batch.num_tokens(), 20);
  RunPlan(sched, plan);
  sched.Schedule(&plan);
  EXPECT_EQ(RowsOf(plan, a), 1);
  EXPECT_EQ(RowsOf(plan, b), 16);
}

TEST_F(SchedulerTest, HeadOfTheQueueIsNotSkippedWhenTheCacheIsShort) {
  KvBlockManager kv(4, 4);  // 16 tokens
  Scheduler sched({8, 64, 16}, &kv);
  SchedSequence* a = NewSeq(8);
  SchedSequence* big = NewSeq(12);
  SchedSequence* small = NewSeq(2);
  sched.Add(a);
  sched.Add(big);
  sched.Add(small);
  StepPlan plan;
  sched.Schedule(&plan);
  EXPECT_EQ(RowsOf(plan, a), 8);
  EXPECT_EQ(RowsOf(plan, big), 0);
  EXPECT_EQ(RowsOf(plan, small), 0) << "small must not overtake big";
  EXPECT_EQ(sched.num_waiting(), 2);
}

TEST_F(SchedulerTest, PreemptsTheNewestRunningSequenceWhenBlocksRunOut) {
  KvBlockManager kv(4, 4);  // 16 tokens
  Scheduler sched({8, 64, 16}, &kv);
  SchedSequence* old_seq = NewSeq(4);
  SchedSequence* new_seq = NewSeq(4);
  sched.Add(old_seq);
  sched.Add(new_seq);
  StepPlan plan;
  sched.Schedule(&plan);
  RunPlan(sched, plan);  // both hold 1 block, 5 tokens each
  // Each decode now needs a second block: 4 blocks in total, all available.
  sched.Schedule(&plan);
  EXPECT_EQ(plan.entries.size(), 2u);
  EXPECT_TRUE(plan.preempted.empty());
  RunPlan(sched, plan);
  EXPECT_EQ(kv.free_blocks(), 0);
  // Positions 5..7 fit; position 8 needs a third block each: the newer one gives way.
  for (int i = 0; i < 4; ++i) {
    sched.Schedule(&plan);
    RunPlan(sched, plan);
  }
  ASSERT_EQ(plan.preempted.size(), 1u);
  EXPECT_EQ(plan.preempted[0], new_seq);
  EXPECT_EQ(new_seq->num_computed, 0);
  EXPECT_TRUE(new_seq->blocks.empty());
  EXPECT_EQ(new_seq->num_preemptions, 1);
  EXPECT_EQ(RowsOf(plan, old_seq), 1);
  EXPECT_EQ(sched.num_waiting(), 1);
  const size_t new_len = new_seq->tokens.size();

  // Once the old one finishes, the preempted one is recomputed from its full history.
  sched.Remove(old_seq);
  EXPECT_EQ(kv.free_blocks(), 4);
  sched.Schedule(&plan);
  EXPECT_EQ(RowsOf(plan, new_seq), static_cast<int32_t>(new_len));
  EXPECT_EQ(plan.admitted.size(), 1u);
  EXPECT_TRUE(plan.entries[0].samples);
}

TEST_F(SchedulerTest, RemoveFreesBlocksWhereverTheSequenceIs) {
  KvBlockManager kv(16, 4);
  Scheduler sched({1, 64, 16}, &kv);
  SchedSequence* a = NewSeq(10);
  SchedSequence* b = NewSeq(10);
  sched.Add(a);
  sched.Add(b);
  StepPlan plan;
  sched.Schedule(&plan);
  EXPECT_EQ(kv.used_blocks(), 3);
  sched.Remove(b);  // waiting
  EXPECT_EQ(sched.num_waiting(), 0);
  sched.Remove(a);  // running
  EXPECT_EQ(kv.used_blocks(), 0);
  EXPECT_TRUE(sched.empty());
  sched.Remove(a);  // unknown now: no-op
  EXPECT_EQ(kv.used_blocks(), 0);
}

TEST_F(SchedulerTest, ChunkBoundariesDoNotDependOnNeighbours) {
  // The same prompt is cut the same way alone and beside a busy batch.
  auto chunks_of = [&](int neighbours) {
    KvBlockManager kv(256, 4);
    Scheduler sched({16, 40, 16}, &kv);
    for (int i = 0; i < neighbours; ++i) sched.Add(NewSeq(3));
    SchedSequence* target = NewSeq(50);
    sched.Add(target);
    std::vector<int32_t> chunks;
    StepPlan plan;
    while (target->num_computed < 50) {
      sched.Schedule(&plan);
      if (int32_t n = RowsOf(plan, target)) chunks.push_back(n);
      RunPlan(sched, plan);
    }
    return chunks;
  };
  EXPECT_EQ(chunks_of(0), chunks_of(12));
}

}  // namespace
}  // namespace ptxserve
