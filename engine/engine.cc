#include "engine/engine.h"

#include <pthread.h>

#include <algorithm>
#include <chrono>
#include <span>
#include <utility>

#include "absl/hash/hash.h"
#include "absl/random/random.h"
#include "absl/strings/str_cat.h"
#include "engine/engine_sequence.h"
#include "engine/stop_checker.h"
#include "engine/util/log.h"

namespace ptxserve {
namespace {

using engine_internal::Clock;
using engine_internal::NowNs;
using engine_internal::Seconds;

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

}  // namespace

// ---------------------------------------------------------------------------------------
// Engine (the step itself is in engine_step.cc)

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
