// One decode step of the engine (Engine::RunStep and what it calls): plan the batch and
// where its rows are sampled, run the backend, check its output, apply the sampled tokens.
#include <algorithm>
#include <span>
#include <utility>

#include "absl/strings/str_cat.h"
#include "engine/engine.h"
#include "engine/engine_sequence.h"
#include "engine/stop_checker.h"
#include "engine/util/log.h"

namespace ptxserve {

using engine_internal::Clock;
using engine_internal::NowNs;
using engine_internal::Seconds;

// How a step's sampling rows are drawn: on the device when it can take every row (then
// only the ids, and log-prob records for rows that want them, come back), else on the host
// from Backend::Step's logits.
struct Engine::SamplingPlan {
  bool on_device = false;
  bool device_logprobs = false;  // some row wants log-probs from the device
};

// A planned step on its way to the backend. The batch is plan_.batch and, when sampling
// on the device, the rows are sample_rows_.
struct Engine::PreparedStep {
  Clock::time_point start;        // when scheduling began
  int64_t new_prompt_tokens = 0;  // prompts scheduled for the first time (once per prompt)
  SamplingPlan sampling;
};

void Engine::RunStep() {
  PreparedStep step;
  if (!PrepareStep(&step)) return;
  const Clock::time_point backend_start = Clock::now();
  absl::Status st = RunBackend(step.sampling);
  const Clock::time_point backend_end = Clock::now();
  if (st.ok()) st = CheckBackendOutput(step.sampling);
  if (!st.ok()) {
    FailStep(st);
    return;
  }
  consecutive_failures_ = 0;
  UpdateFromOutput(step);
  const Clock::time_point end = Clock::now();
  if (observer_) {
    StepObservation o;
    o.num_seqs = plan_.batch.num_seqs();
    o.num_tokens = plan_.batch.num_tokens();
    o.backend_seconds = Seconds(backend_start, backend_end);
    o.scheduler_seconds = Seconds(step.start, backend_start);
    o.sampling_seconds = Seconds(backend_end, end);
    observer_->OnStep(o);
  }
  last_progress_ns_.store(NowNs());
}

bool Engine::PrepareStep(PreparedStep* step) {
  step->start = Clock::now();
  scheduler_.Schedule(&plan_);
  if (plan_.empty()) {
    // Validation keeps every request within the cache, so this means a bug; fail the
    // waiting requests rather than spin.
    PTX_LOG(ERROR) << "scheduler planned an empty step with " << scheduler_.num_waiting()
                   << " waiting and " << scheduler_.num_running() << " running";
    FailAll(absl::InternalError("the scheduler could not place any request"));
    return false;
  }
  PublishGauges();  // admitted requests stop counting as waiting while the step runs
  for (SchedSequence* p : plan_.preempted) {
    if (observer_) observer_->OnPreemption();
    PTX_LOG(DEBUG) << "preempted sequence " << p->id;
  }
  for (SchedSequence* a : plan_.admitted) {
    Sequence* s = seqs_.at(a->id).get();
    if (s->was_scheduled) continue;
    s->was_scheduled = true;
    s->scheduled = step->start;
    s->cached_prompt_tokens = static_cast<int32_t>(a->num_computed);  // where it starts
    if (s->sample == 0) step->new_prompt_tokens += s->prompt_len;     // a prompt counts once
    if (observer_) observer_->OnScheduled(Seconds(s->arrival, step->start), s->prompt_len);
  }
  step->sampling = PlanSampling();
  return true;
}

Engine::SamplingPlan Engine::PlanSampling() {
  SamplingPlan plan;
  // A step without sampling rows (prompt chunks only) takes Step, which every backend has.
  plan.on_device = !plan_.batch.logits_rows.empty();
  for (const auto& e : plan_.entries) {
    if (plan.on_device && e.samples &&
        !backend_->CanSampleOnDevice(seqs_.at(e.seq->id)->sampler->params())) {
      plan.on_device = false;
    }
  }
  if (!plan.on_device) return plan;
  // The uniforms are drawn here from each sequence's own RNG, one per row as Sample
  // would, so a sequence's tokens do not depend on which path a step takes. Rows are
  // reused, not cleared, so their penalty lists keep their capacity.
  const int64_t vocab = backend_->config().vocab_size;
  size_t n = 0;
  for (const auto& e : plan_.entries) {
    if (!e.samples) continue;
    SequenceSampler& sampler = *seqs_.at(e.seq->id)->sampler;
    if (n == sample_rows_.size()) sample_rows_.emplace_back();
    RowSampling& r = sample_rows_[n++];
    const SamplingParams& sp = sampler.params();
    r.temperature = sp.temperature;
    r.top_k = sp.top_k;
    r.top_p = sp.top_p;
    r.min_p = sp.min_p;
    r.uniform = sampler.TakeUniform();
    r.logprobs = sp.logprobs;
    r.repetition_penalty = sp.repetition_penalty;
    r.presence_penalty = sp.presence_penalty;
    r.frequency_penalty = sp.frequency_penalty;
    // The history as of this step: the token sampled now is recorded by SampleRow.
    r.penalties.clear();
    if (sampler.has_penalties()) sampler.PenaltyEntries(static_cast<int32_t>(vocab), &r.penalties);
    plan.device_logprobs = plan.device_logprobs || r.logprobs > 0;
  }
  sample_rows_.resize(n);
  return plan;
}

absl::Status Engine::RunBackend(const SamplingPlan& sampling) {
  if (!sampling.on_device) return backend_->Step(plan_.batch, &output_.logits);
  return backend_->StepSampled(plan_.batch, sample_rows_, &output_.sampled_ids,
                               sampling.device_logprobs ? &output_.sampled_logprobs : nullptr);
}

absl::Status Engine::CheckBackendOutput(const SamplingPlan& sampling) const {
  const int64_t vocab = backend_->config().vocab_size;
  const size_t rows = plan_.batch.logits_rows.size();
  if (!sampling.on_device) {
    if (static_cast<int64_t>(output_.logits.size()) != static_cast<int64_t>(rows) * vocab) {
      return absl::InternalError(absl::StrCat("backend returned ", output_.logits.size(),
                                              " logits for ", rows, " rows of ", vocab));
    }
    return absl::OkStatus();
  }
  const std::vector<int32_t>& ids = output_.sampled_ids;
  if (ids.size() != rows) {
    return absl::InternalError(
        absl::StrCat("backend returned ", ids.size(), " sampled ids for ", rows, " rows"));
  }
  for (size_t i = 0; i < ids.size(); ++i) {
    if (ids[i] < 0 || ids[i] >= vocab) {
      return absl::InternalError(absl::StrCat("backend sampled id ", ids[i], " for row ", i,
                                              ", outside the vocabulary [0, ", vocab, ")"));
    }
  }
  if (!sampling.device_logprobs) return absl::OkStatus();
  const std::vector<SampleResult>& logprobs = output_.sampled_logprobs;
  if (logprobs.size() != rows) {
    return absl::InternalError(absl::StrCat("backend returned ", logprobs.size(),
                                            " log-prob results for ", rows, " rows"));
  }
  for (size_t i = 0; i < rows; ++i) {
    if (logprobs[i].token != ids[i]) {
      return absl::InternalError(absl::StrCat("backend log-probs of row ", i, " are for token ",
                                              logprobs[i].token, ", sampled ", ids[i]));
    }
  }
  return absl::OkStatus();
}

void Engine::FailStep(const absl::Status& st) {
  ++consecutive_failures_;
  PTX_LOG(ERROR) << "step failed (" << consecutive_failures_ << " in a row): " << st;
  const bool fatal = consecutive_failures_ >= config_.max_step_failures || !backend_->usable();
  {
    absl::MutexLock lock(&mu_);
    ++stats_.step_failures_total;
    stats_.preemptions_total += static_cast<int64_t>(plan_.preempted.size());
    if (fatal) {  // before any final output goes out, so consumers see the failure
      failed_ = true;
      accepting_ = false;
      failure_ = std::string(st.message());
    }
  }
  // The plan is not committed: finishing removes each sequence from the scheduler, which
  // returns its blocks, including those allocated for this step.
  std::vector<Sequence*> victims;
  for (const auto& e : plan_.entries) victims.push_back(seqs_.at(e.seq->id).get());
  for (Sequence* s : victims) FinishSequence(s, FinishReason::kError, st);
  if (fatal) FailAll(st);
  last_progress_ns_.store(NowNs());
}

void Engine::UpdateFromOutput(const PreparedStep& step) {
  // The batch's K/V rows are written: advance each sequence's computed tokens and offer
  // the blocks that became full to the prefix cache.
  scheduler_.Commit(plan_);
  step_outputs_.clear();
  int32_t row = 0;
  for (const auto& e : plan_.entries) {
    if (!e.samples) continue;
    Sequence* s = seqs_.at(e.seq->id).get();
    AppendSampledToken(s, SampleRow(step.sampling, row++, *s->sampler));
  }
  // Counters first, outputs last: a consumer that sees a final output also sees the
  // counters and the freed blocks that go with it.
  {
    absl::MutexLock lock(&mu_);
    ++stats_.steps_total;
    stats_.generated_tokens_total += static_cast<int64_t>(step_outputs_.size());
    stats_.prompt_tokens_total += step.new_prompt_tokens;
    stats_.preemptions_total += static_cast<int64_t>(plan_.preempted.size());
  }
  for (StepOutput& so : step_outputs_) {
    if (so.finish == FinishReason::kNone) {
      so.seq->stream->Push(std::move(so.out));
    } else {
      // Finishing erases the sequence (the plan still points to it: the plan is done).
      FinishSequence(so.seq, so.finish, absl::OkStatus(), &so.out);
    }
  }
  PublishGauges();
}

SampleResult Engine::SampleRow(const SamplingPlan& sampling, int32_t row,
                               SequenceSampler& sampler) {
  if (!sampling.on_device) {
    const int64_t vocab = backend_->config().vocab_size;
    return sampler.Sample(
        std::span<const float>(output_.logits.data() + static_cast<int64_t>(row) * vocab, vocab));
  }
  // Device log-probs arrive as the host sampler's SampleResult; Accept records the token
  // (penalty history) as Sample would.
  SampleResult r;
  if (sampling.device_logprobs) {
    r = std::move(output_.sampled_logprobs[row]);
  } else {
    r.token = output_.sampled_ids[row];
  }
  sampler.Accept(r.token);
  return r;
}

void Engine::AppendSampledToken(Sequence* s, SampleResult sample) {
  const Clock::time_point now = Clock::now();
  s->sched.tokens.push_back(sample.token);
  ++s->generated;
  if (observer_) {
    if (s->generated == 1) {
      observer_->OnFirstToken(Seconds(s->arrival, now));
    } else {
      observer_->OnInterToken(Seconds(s->last_token, now));
    }
  }
  if (s->generated == 1) s->first_token = now;
  s->last_token = now;
  StopChecker::Step step = s->stop->Push(sample.token);
  StepOutput& so = step_outputs_.emplace_back();
  so.seq = s;
  so.out.index = s->index;
  so.out.sample = s->sample;
  so.out.token_ids.push_back(sample.token);
  so.out.text = std::move(step.text);
  if (s->want_logprobs) so.out.logprobs.push_back(std::move(sample));
  so.finish = step.finish;
  if (so.finish == FinishReason::kNone &&
      static_cast<int64_t>(s->sched.tokens.size()) >= backend_->config().max_position_embeddings) {
    so.finish = FinishReason::kLength;  // the context is full
    so.out.text += s->stop->Flush();
  }
}

}  // namespace ptxserve
