#include "engine/engine.h"

#include <pthread.h>

#include <algorithm>
#include <chrono>
#include <span>
#include <utility>

#include "absl/hash/hash.h"
#include "absl/random/random.h"
#include "absl/strings/str_cat.h"
#include "engine/stop_checker.h"
#include "engine/util/log.h"

namespace ptxserve {
namespace {

using Clock = std::chrono::steady_clock;

double Seconds(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

// The root of the prefix cache's block hashes: what besides the tokens decides a block's
// K/V (one engine serves one model, but the hashes still say which), and a random part,
// so that nobody can craft prompts whose hashes take those of someone else's prompt.
uint64_t PrefixCacheSalt(const ModelConfig& m, const KvCacheConfig& kv) {
  const std::string id =
      absl::StrCat(m.architecture, "/", m.vocab_size, "/", m.hidden_size, "/", m.num_layers, "/",
                   m.num_kv_heads, "/", m.head_dim, "/", m.rope_theta, "/",
                   std::string(DTypeName(kv.dtype)), "/", kv.block_size);
  absl::BitGen gen;
  return absl::Hash<std::string>{}(id) ^ absl::Uniform<uint64_t>(gen);
}

int64_t NowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch())
      .count();
}

}  // namespace

// ---------------------------------------------------------------------------------------
// Engine

struct Engine::Sequence {
  SchedSequence sched;
  std::string request_id;
  int32_t index = 0;
  int32_t sample = 0;
  int32_t prompt_len = 0;
  int32_t cached_prompt_tokens = 0;
  bool want_logprobs = false;
  std::shared_ptr<ResultStream> stream;
  std::unique_ptr<SequenceSampler> sampler;
  std::unique_ptr<StopChecker> stop;
  Clock::time_point arrival;
  Clock::time_point scheduled;
  Clock::time_point first_token;
  Clock::time_point last_token;
  bool was_scheduled = false;
  int32_t generated = 0;
};

Engine::Engine(std::unique_ptr<Backend> backend, const Tokenizer& tokenizer, EngineConfig config,
               EngineObserver* observer)
    : backend_(std::move(backend)),
      tokenizer_(tokenizer),
      config_(config),
      observer_(observer),
      eos_id_(tokenizer.eos_id() >= 0 ? tokenizer.eos_id() : backend_->config().eos_token_id),
      kv_(backend_->kv_config().num_blocks, backend_->kv_config().block_size, config.prefix_caching,
          PrefixCacheSalt(backend_->config(), backend_->kv_config())),
      scheduler_(
          SchedulerConfig{config.max_batch_size, config.max_batch_tokens, config.prefill_chunk},
          &kv_) {}

Engine::~Engine() { Stop(); }

absl::Status Engine::Start() {
  // Warm-up: one token through every layer, so that a broken model or device is found
  // before the server says SERVING, and first-call costs (JIT, page faults) are paid.
  std::vector<int32_t> table;
  absl::Status st = kv_.EnsureCapacity(&table, 1);
  if (st.ok()) {
    StepBatch b;
    const int32_t tok = std::max(tokenizer_.bos_id(), 0);
    b.token_ids = {tok};
    b.positions = {0};
    b.slot_mapping = {static_cast<int64_t>(table[0]) * kv_.block_size()};
    b.query_start = {0, 1};
    b.seq_lens = {1};
    b.block_tables = {table[0]};
    b.max_blocks_per_seq = 1;
    b.logits_rows = {0};
    st = backend_->Step(b, &output_.logits);
    if (st.ok() && static_cast<int64_t>(output_.logits.size()) != backend_->config().vocab_size) {
      st = absl::InternalError(absl::StrCat("warm-up step returned ", output_.logits.size(),
                                            " logits, expected the vocabulary size ",
                                            backend_->config().vocab_size));
    }
  }
  kv_.FreeSequence(&table);
  absl::MutexLock lock(&mu_);
  if (!st.ok()) {
    failed_ = true;
    failure_ = absl::StrCat("warm-up step failed: ", st.message());
    return absl::Status(st.code(), failure_);
  }
  if (started_ || stop_) return absl::FailedPreconditionError("the engine was already started");
  started_ = true;
  accepting_ = true;
  stats_.kv_blocks_total = kv_.num_blocks();
  last_progress_ns_.store(NowNs());
  thread_ = std::thread([this] {
    pthread_setname_np(pthread_self(), "ptx-engine");  // for top -H, perf and /proc
    Loop();
  });
  return absl::OkStatus();
}

absl::StatusOr<std::vector<uint64_t>> Engine::Enqueue(std::vector<EngineRequest> requests,
                                                      std::shared_ptr<ResultStream> stream) {
  const ModelConfig& mc = backend_->config();
  for (size_t i = 0; i < requests.size(); ++i) {
    absl::Status st = ValidateEngineRequest(requests[i], mc.vocab_size, mc.max_position_embeddings,
                                            kv_capacity_tokens());
    if (!st.ok()) {
      if (requests.size() == 1) return st;
      return absl::InvalidArgumentError(absl::StrCat("requests[", i, "].", st.message()));
    }
  }
  if (requests.empty()) return absl::InvalidArgumentError("no requests");
  if (static_cast<int64_t>(requests.size()) > config_.max_queued) {
    // Never admissible, however empty the queue: a retrying client must not wait for it.
    return absl::InvalidArgumentError(
        absl::StrCat("the call has ", requests.size(),
                     " requests, more than --max-queued=", config_.max_queued, " can ever hold"));
  }
  const Clock::time_point now = Clock::now();
  std::vector<std::unique_ptr<Sequence>> seqs;
  seqs.reserve(requests.size());
  for (auto& r : requests) {
    auto s = std::make_unique<Sequence>();
    s->sched.priority = r.priority;
    s->sched.tokens = std::move(r.prompt);
    s->sched.tokens.reserve(s->sched.tokens.size() + r.stopping.max_new_tokens);
    s->prompt_len = static_cast<int32_t>(s->sched.tokens.size());
    s->index = r.index;
    s->sample = r.sample;
    s->want_logprobs = r.sampling.logprobs > 0;
    s->stream = stream;
    s->sampler = std::make_unique<SequenceSampler>(r.sampling, SeedFromRequestId(r.request_id));
    s->sampler->AddPromptTokens(s->sched.tokens);
    // Seeded with the prompt, so that the stream is the prompt's continuation (its first
    // token keeps its leading space). Created once: a preempted sequence is recomputed
    // from its tokens but keeps this checker, so its stream goes on where it was.
    s->stop = std::make_unique<StopChecker>(r.stopping, tokenizer_, eos_id_, s->sched.tokens);
    s->request_id = std::move(r.request_id);
    s->arrival = now;
    seqs.push_back(std::move(s));
  }
  if (config_.prefix_caching && seqs.size() > 1) LinkParallelSamples(seqs);

  std::vector<uint64_t> ids;
  ids.reserve(seqs.size());
  absl::MutexLock lock(&mu_);
  if (!accepting_) {
    if (failed_) return absl::UnavailableError(absl::StrCat("the engine failed: ", failure_));
    if (!started_) return absl::UnavailableError("the engine is not ready yet");
    return absl::UnavailableError("the server is shutting down");
  }
  const int64_t n = static_cast<int64_t>(seqs.size());
  if (waiting_ + n > config_.max_queued) {
    return absl::ResourceExhaustedError(
        absl::StrCat("queue full: ", waiting_, " requests waiting, ", n,
                     " more would pass --max-queued=", config_.max_queued));
  }
  for (auto& s : seqs) {
    s->sched.id = next_id_++;
    s->sched.arrival = s->sched.id;
    ids.push_back(s->sched.id);
    inbox_.push_back(std::move(s));
  }
  waiting_ += static_cast<int32_t>(n);
  live_.fetch_add(static_cast<int32_t>(n), std::memory_order_relaxed);
  return ids;
}

void Engine::LinkParallelSamples(const std::vector<std::unique_ptr<Sequence>>& seqs) {
  absl::flat_hash_map<size_t, SchedSequence*> first;  // (priority, prompt) hash -> first one
  for (const auto& s : seqs) {
    SchedSequence& q = s->sched;
    auto [it, inserted] = first.try_emplace(absl::HashOf(q.priority, q.tokens), &q);
    SchedSequence& lead = *it->second;
    if (inserted || lead.priority != q.priority || lead.tokens != q.tokens) continue;
    if (lead.opens == nullptr) lead.opens = std::make_shared<PromptGate>();
    q.wait_for = lead.opens;
  }
}

void Engine::Cancel(uint64_t id) {
  absl::MutexLock lock(&mu_);
  if (stop_) return;
  cancels_.push_back(id);
}

void Engine::CancelAll(const absl::Status& reason) {
  absl::MutexLock lock(&mu_);
  cancel_all_ = reason.ok() ? absl::CancelledError("cancelled") : reason;
}

void Engine::StopAccepting() {
  absl::MutexLock lock(&mu_);
  accepting_ = false;
}

void Engine::RequestStop() {
  absl::MutexLock lock(&mu_);
  accepting_ = false;
  stop_ = true;
}

void Engine::Stop() {
  RequestStop();
  if (thread_.joinable()) thread_.join();
}

EngineStats Engine::Stats() const {
  absl::MutexLock lock(&mu_);
  EngineStats s = stats_;
  s.started = started_;
  s.failed = failed_;
  s.failure = failure_;
  s.requests_waiting = waiting_;
  if (busy_.load(std::memory_order_relaxed)) {
    s.stalled_seconds = static_cast<double>(NowNs() - last_progress_ns_.load()) * 1e-9;
  }
  return s;
}

void Engine::Loop() {
  while (DrainInbox(/*wait=*/scheduler_.empty())) {
    if (!scheduler_.empty()) RunStep();
  }
  // Stopping: whatever is left ends as cancelled, so every consumer gets its final output.
  DrainInbox(/*wait=*/false);
  std::vector<Sequence*> left;
  for (auto& [id, s] : seqs_) left.push_back(s.get());
  for (Sequence* s : left) {
    FinishSequence(s, FinishReason::kCancelled, absl::CancelledError("the engine stopped"));
  }
  busy_.store(false);
  PublishGauges();
}

bool Engine::DrainInbox(bool wait) {
  std::vector<std::unique_ptr<Sequence>> inbox;
  std::vector<uint64_t> cancels;
  absl::Status cancel_all;
  bool stop;
  {
    absl::MutexLock lock(&mu_);
    if (wait) {
      busy_.store(false);
      mu_.Await(absl::Condition(
          +[](Engine* e) ABSL_SHARED_LOCKS_REQUIRED(e->mu_) {
            return !e->inbox_.empty() || !e->cancels_.empty() || !e->cancel_all_.ok() || e->stop_;
          },
          this));
    }
    inbox.swap(inbox_);
    cancels.swap(cancels_);
    cancel_all = std::exchange(cancel_all_, absl::OkStatus());
    stop = stop_;
  }
  for (auto& s : inbox) {
    Sequence* seq = s.get();
    seqs_.emplace(seq->sched.id, std::move(s));
    scheduler_.Add(&seq->sched);
    // max_new_tokens == 0: nothing to generate, finish without a step.
    if (seq->stop->finished()) FinishSequence(seq, seq->stop->finish(), absl::OkStatus());
  }
  for (uint64_t id : cancels) {
    auto it = seqs_.find(id);
    if (it == seqs_.end()) continue;
    FinishSequence(it->second.get(), FinishReason::kCancelled,
                   absl::CancelledError("cancelled by the client"));
  }
  if (!cancel_all.ok()) {
    std::vector<Sequence*> all;
    for (auto& [id, s] : seqs_) all.push_back(s.get());
    for (Sequence* s : all) FinishSequence(s, FinishReason::kCancelled, cancel_all);
  }
  if (!scheduler_.empty() && !busy_.load(std::memory_order_relaxed)) {
    last_progress_ns_.store(NowNs());
    busy_.store(true);
  }
  PublishGauges();
  return !stop;
}

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

void Engine::FinishSequence(Sequence* s, FinishReason reason, absl::Status error,
                            EngineOutput* last) {
  const Clock::time_point now = Clock::now();
  scheduler_.Remove(&s->sched);
  EngineOutput out;
  if (last) out = std::move(*last);
  out.index = s->index;
  out.sample = s->sample;
  out.finish = reason;
  if (reason == FinishReason::kCancelled || reason == FinishReason::kError) {
    out.text += s->stop->Flush();
    out.error = std::move(error);
  }
  out.request_id = s->request_id;
  out.prompt_tokens = s->prompt_len;
  out.cached_prompt_tokens = s->cached_prompt_tokens;
  out.generated_tokens = s->generated;
  out.queue_seconds = s->was_scheduled ? Seconds(s->arrival, s->scheduled) : 0.0;
  out.ttft_seconds = s->generated > 0 ? Seconds(s->arrival, s->first_token) : 0.0;
  out.total_seconds = Seconds(s->arrival, now);
  RequestObservation o;
  o.finish = reason;
  o.prompt_tokens = out.prompt_tokens;
  o.first_sample = s->sample == 0;
  o.generated_tokens = out.generated_tokens;
  o.queue_seconds = out.queue_seconds;
  o.total_seconds = out.total_seconds;
  o.scheduled = s->was_scheduled;
  ++finished_since_publish_[OutcomeIndex(reason)];
  PublishGauges();
  if (observer_) observer_->OnFinished(o);
  live_.fetch_sub(1, std::memory_order_relaxed);
  std::shared_ptr<ResultStream> stream = std::move(s->stream);
  seqs_.erase(s->sched.id);
  stream->Push(std::move(out));
}

void Engine::FailAll(const absl::Status& st) {
  {
    absl::MutexLock lock(&mu_);
    failed_ = true;
    accepting_ = false;
    failure_ = std::string(st.message());
  }
  PTX_LOG(ERROR) << "engine failed, refusing new requests: " << st;
  DrainInbox(/*wait=*/false);
  std::vector<Sequence*> all;
  for (auto& [id, s] : seqs_) all.push_back(s.get());
  for (Sequence* s : all) FinishSequence(s, FinishReason::kError, st);
  busy_.store(false);
  PublishGauges();
}

void Engine::PublishGauges() {
  absl::MutexLock lock(&mu_);
  for (int i = 0; i < kNumOutcomes; ++i) {
    stats_.finished[i] += std::exchange(finished_since_publish_[i], 0);
  }
  stats_.requests_running = scheduler_.num_running();
  stats_.kv_blocks_used = kv_.used_blocks();
  stats_.kv_blocks_cached = kv_.cached_blocks();
  stats_.kv_blocks_total = kv_.num_blocks();
  stats_.prefix_cache_query_tokens_total = scheduler_.prefix_query_tokens();
  stats_.prefix_cache_hit_tokens_total = scheduler_.prefix_hit_tokens();
  stats_.prefix_cache_evictions_total = kv_.evictions();
  waiting_ = static_cast<int32_t>(inbox_.size()) + scheduler_.num_waiting();
}

}  // namespace ptxserve
