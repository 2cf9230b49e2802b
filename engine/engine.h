// The serving engine: one thread that owns the scheduler, the KV block manager and the
// backend, and runs one step after another over every live sequence (continuous
// batching). Other threads talk to it only through Enqueue / Cancel / Stats and read
// results from ResultStreams; neither side ever waits on the other's work.
//
// Every accepted request gets exactly one final EngineOutput (finish != kNone), whatever
// happens: finished, cancelled, failed, or the engine stopped.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "engine/backend.h"
#include "engine/engine_io.h"
#include "engine/engine_stats.h"
#include "engine/kv_block_manager.h"
#include "engine/request.h"
#include "engine/sampler.h"
#include "engine/scheduler.h"
#include "engine/tokenizer/tokenizer.h"

namespace ptxserve {

struct EngineConfig {
  int32_t max_batch_size = 64;      // sequences per step
  int32_t max_batch_tokens = 2048;  // token rows per step (decodes + prefill chunks)
  int32_t prefill_chunk = 512;      // prompt tokens of one sequence per step
  int32_t max_queued = 1024;        // waiting requests beyond which Enqueue refuses
  // Consecutive failed backend steps after which the engine gives up (fails for good and
  // health turns NOT_SERVING). 1: the first failed step (a device error leaves the device
  // in an unknown state, so serving on would risk wrong tokens). A backend that reports
  // itself unusable (Backend::usable) fails the engine at its first failed step.
  int32_t max_step_failures = 1;
  // Keep the K/V of full blocks after their sequences end and start new sequences from
  // the longest cached run of their leading tokens (scheduler.h, kv_block_manager.h).
  bool prefix_caching = true;
};

class Engine {
 public:
  // `tokenizer` detokenizes and matches stop strings; it must outlive the engine. The
  // KV block manager is sized from backend->kv_config(). `observer` (may be null) must
  // outlive the engine.
  Engine(std::unique_ptr<Backend> backend, const Tokenizer& tokenizer, EngineConfig config,
         EngineObserver* observer = nullptr);
  ~Engine();  // Stop()
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // Runs a warm-up step (one token) through the backend, then starts the engine
  // thread. On error the engine is failed and accepts nothing.
  absl::Status Start();

  // Queues requests, all or none; their outputs go to `stream`, tagged with each
  // request's index. Returns one id per request (for Cancel). InvalidArgument (naming
  // requests[i] and the field), ResourceExhausted (more than max_queued would wait),
  // Unavailable (not started, draining, stopped or failed). Any thread.
  absl::StatusOr<std::vector<uint64_t>> Enqueue(std::vector<EngineRequest> requests,
                                                std::shared_ptr<ResultStream> stream);
  // Finishes a request with kCancelled within one step and frees its KV blocks; no-op
  // for unknown or finished ids. Any thread.
  void Cancel(uint64_t id);
  // Cancels every live request (reason reported in the final outputs' error).
  void CancelAll(const absl::Status& reason);
  // Refuses new requests (Unavailable) from now on; live ones keep running.
  void StopAccepting();
  // Starts stopping without waiting: after the current step, everything live is
  // cancelled and the thread ends.
  void RequestStop();
  // RequestStop, then joins the engine thread. Idempotent.
  void Stop();

  // Snapshot of counters and gauges. Any thread.
  EngineStats Stats() const;
  // Live requests (queued, waiting or running). Any thread.
  int32_t num_live() const { return live_.load(std::memory_order_relaxed); }

  const ModelConfig& model_config() const { return backend_->config(); }
  const KvCacheConfig& kv_config() const { return backend_->kv_config(); }
  std::string backend_name() const { return backend_->name(); }
  const EngineConfig& config() const { return config_; }
  int64_t kv_capacity_tokens() const {
    return static_cast<int64_t>(kv_config().num_blocks) * kv_config().block_size;
  }

 private:
  struct Sequence;

  // Parallel samples (a prompt more than once in one call, as OpenAI's `n` asks): each
  // later one waits for the first one's prompt to be computed and then starts from its
  // cached blocks (SchedSequence::wait_for). Same priority only, so the first one is
  // always admitted first.
  void LinkParallelSamples(const std::vector<std::unique_ptr<Sequence>>& seqs);
  void Loop();
  // Moves new requests and cancellations into the scheduler; false when stopping.
  bool DrainInbox(bool wait);

  // One step over the running sequences, in the shape of vLLM's engine core (schedule,
  // execute the model, update_from_output): PrepareStep plans the batch and where its
  // rows are sampled, RunBackend runs it, CheckBackendOutput refuses what the backend
  // returned when it cannot be right, then UpdateFromOutput applies the sampled tokens
  // to the sequences, or FailStep errors the step's requests.
  struct SamplingPlan;
  struct PreparedStep;
  void RunStep();
  // Schedules the step into plan_ and records who was preempted or scheduled for the
  // first time. False when nothing could be planned (then every request was failed).
  bool PrepareStep(PreparedStep* step);
  // Where the step's sampling rows are drawn; fills sample_rows_ when on the device.
  SamplingPlan PlanSampling();
  // The forward pass of plan_.batch into output_: logits, or the device's samples.
  absl::Status RunBackend(const SamplingPlan& sampling);
  // An error when output_ does not fit the step (row counts, ids outside the vocabulary,
  // log-probs of another token): such output must not reach the sequences.
  absl::Status CheckBackendOutput(const SamplingPlan& sampling) const;
  // The step failed: its requests end with `st` (their KV blocks return to the pool), and
  // so does everything else when the failure is fatal (EngineConfig::max_step_failures,
  // Backend::usable).
  void FailStep(const absl::Status& st);
  // The post-step update (vLLM's update_from_output): commits the plan to the scheduler,
  // appends each sampling row's token to its sequence, then counts the step and emits
  // the outputs, finishing the sequences whose stop condition was met.
  void UpdateFromOutput(const PreparedStep& step);
  // Sampling row `row`'s token: the device's, recorded in the sampler's history as Sample
  // would record it, or drawn now on the host from the row's logits.
  SampleResult SampleRow(const SamplingPlan& sampling, int32_t row, SequenceSampler& sampler);
  // Appends the token to `seq`, runs its stop checks and queues its output in
  // step_outputs_.
  void AppendSampledToken(Sequence* seq, SampleResult sample);
  // Removes `seq` (freeing its blocks), counts it, and pushes its final output, which
  // starts from *last when given (the finishing step's tokens).
  void FinishSequence(Sequence* seq, FinishReason reason, absl::Status error,
                      EngineOutput* last = nullptr);
  void FailAll(const absl::Status& st);
  void PublishGauges();

  std::unique_ptr<Backend> backend_;
  const Tokenizer& tokenizer_;
  const EngineConfig config_;
  EngineObserver* observer_;
  const int32_t eos_id_;

  // Engine-thread state.
  KvBlockManager kv_;
  Scheduler scheduler_;
  absl::flat_hash_map<uint64_t, std::unique_ptr<Sequence>> seqs_;
  // The step's vectors live across steps so that they keep their capacity: the plan (and
  // its batch), the device's sampling rows, what the backend returned, and the outputs.
  StepPlan plan_;
  // Device sampling (Backend::StepSampled): one row per sampling sequence.
  std::vector<RowSampling> sample_rows_;
  // What the backend returned for a step's sampling rows, in row order: the logits
  // ([rows x vocab], Backend::Step) when the host samples, else the device's ids and,
  // when some row wants log-probs, one SampleResult per row.
  struct BackendOutput {
    std::vector<float> logits;
    std::vector<int32_t> sampled_ids;
    std::vector<SampleResult> sampled_logprobs;
  };
  BackendOutput output_;
  // One sequence's output of the step, emitted (or finishing it) once the step is counted.
  struct StepOutput {
    Sequence* seq;
    EngineOutput out;
    FinishReason finish;
  };
  std::vector<StepOutput> step_outputs_;
  std::array<int64_t, kNumOutcomes> finished_since_publish_{};
  int32_t consecutive_failures_ = 0;

  // Shared state.
  mutable absl::Mutex mu_;
  std::vector<std::unique_ptr<Sequence>> inbox_ ABSL_GUARDED_BY(mu_);
  std::vector<uint64_t> cancels_ ABSL_GUARDED_BY(mu_);
  absl::Status cancel_all_ ABSL_GUARDED_BY(mu_);  // non-OK: cancel everything with it
  bool accepting_ ABSL_GUARDED_BY(mu_) = false;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  bool started_ ABSL_GUARDED_BY(mu_) = false;
  bool failed_ ABSL_GUARDED_BY(mu_) = false;
  std::string failure_ ABSL_GUARDED_BY(mu_);
  EngineStats stats_ ABSL_GUARDED_BY(mu_);  // counters; gauges filled by PublishGauges
  uint64_t next_id_ ABSL_GUARDED_BY(mu_) = 1;
  int32_t waiting_ ABSL_GUARDED_BY(mu_) = 0;  // inbox + scheduler's waiting queue
  std::atomic<int32_t> live_{0};
  std::atomic<int64_t> last_progress_ns_{0};  // steady clock
  std::atomic<bool> busy_{false};             // work queued or running
  std::thread thread_;
};

}  // namespace ptxserve
