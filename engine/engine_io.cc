#include "engine/engine_io.h"

#include <utility>

#include "absl/strings/str_cat.h"

namespace ptxserve {

// ---------------------------------------------------------------------------------------
// ResultStream

ResultStream::ResultStream(std::function<void()> on_ready) : on_ready_(std::move(on_ready)) {}

bool ResultStream::PopAll(std::vector<EngineOutput>* out) {
  out->clear();
  absl::MutexLock lock(&mu_);
  if (pending_.empty()) {
    armed_ = true;
    return false;
  }
  out->swap(pending_);
  open_.clear();
  return true;
}

bool ResultStream::WaitPopAll(std::vector<EngineOutput>* out) {
  out->clear();
  absl::MutexLock lock(&mu_);
  mu_.Await(absl::Condition(
      +[](ResultStream* s)
           ABSL_SHARED_LOCKS_REQUIRED(s->mu_) { return !s->pending_.empty() || s->closed_; },
      this));
  if (pending_.empty()) return false;
  out->swap(pending_);
  open_.clear();
  return true;
}

void ResultStream::Close() {
  absl::MutexLock lock(&mu_);
  closed_ = true;
  pending_.clear();
  open_.clear();
  // A notification already running may still touch its consumer: wait it out, so the
  // consumer can be destroyed once Close returns.
  mu_.Await(absl::Condition(
      +[](ResultStream* s) ABSL_SHARED_LOCKS_REQUIRED(s->mu_) { return s->notifying_ == 0; },
      this));
}

void ResultStream::Push(EngineOutput output) {
  {
    absl::MutexLock lock(&mu_);
    if (closed_) return;
    const std::pair<int32_t, int32_t> key(output.index, output.sample);
    auto it = open_.find(key);
    if (it != open_.end()) {
      // The consumer has not taken the previous piece yet: grow it instead of queueing,
      // so a slow reader costs one message per read, not one per step.
      EngineOutput& prev = pending_[it->second];
      prev.token_ids.insert(prev.token_ids.end(), output.token_ids.begin(), output.token_ids.end());
      prev.text += output.text;
      for (auto& lp : output.logprobs) prev.logprobs.push_back(std::move(lp));
      if (output.final()) {
        std::vector<int32_t> tokens = std::move(prev.token_ids);
        std::string text = std::move(prev.text);
        std::vector<SampleResult> logprobs = std::move(prev.logprobs);
        prev = std::move(output);
        prev.token_ids = std::move(tokens);
        prev.text = std::move(text);
        prev.logprobs = std::move(logprobs);
        open_.erase(it);
      }
    } else {
      if (!output.final()) open_[key] = pending_.size();
      pending_.push_back(std::move(output));
    }
    if (!armed_ || !on_ready_) return;
    armed_ = false;
    ++notifying_;
  }
  // Outside the lock: the consumer's callback may call PopAll.
  on_ready_();
  absl::MutexLock lock(&mu_);
  --notifying_;
}

// ---------------------------------------------------------------------------------------
// Validation

absl::Status ValidateEngineRequest(const EngineRequest& r, int64_t vocab_size,
                                   int64_t context_length, int64_t kv_capacity_tokens) {
  const int64_t n = static_cast<int64_t>(r.prompt.size());
  if (n == 0) return absl::InvalidArgumentError("prompt is empty");
  for (int64_t i = 0; i < n; ++i) {
    if (r.prompt[i] < 0 || r.prompt[i] >= vocab_size) {
      return absl::InvalidArgumentError(absl::StrCat("prompt token ids[", i, "] = ", r.prompt[i],
                                                     " is outside the vocabulary [0, ", vocab_size,
                                                     ")"));
    }
  }
  if (n >= context_length) {
    return absl::InvalidArgumentError(absl::StrCat(
        "prompt of ", n, " tokens does not fit the context of ", context_length, " tokens"));
  }
  if (auto st = ValidateSamplingParams(r.sampling); !st.ok()) return st;
  if (auto st = ValidateStoppingCriteria(r.stopping, static_cast<int32_t>(vocab_size)); !st.ok()) {
    return st;
  }
  const int64_t total = n + r.stopping.max_new_tokens;
  if (total > context_length) {
    return absl::InvalidArgumentError(
        absl::StrCat("stopping.max_new_tokens = ", r.stopping.max_new_tokens, " with a prompt of ",
                     n, " tokens exceeds the context of ", context_length, " tokens"));
  }
  // The last generated token is never fed back, so it needs no K/V row.
  if (total - 1 > kv_capacity_tokens) {
    return absl::InvalidArgumentError(absl::StrCat(
        "stopping.max_new_tokens = ", r.stopping.max_new_tokens, " with a prompt of ", n,
        " tokens exceeds the KV cache capacity of ", kv_capacity_tokens, " tokens"));
  }
  return absl::OkStatus();
}

absl::Status ServerFailure(const EngineOutput& out) {
  if (out.finish == FinishReason::kError) {
    return out.error.ok() ? absl::InternalError("the engine failed") : out.error;
  }
  if (out.finish == FinishReason::kCancelled && !out.error.ok() &&
      out.error.code() != absl::StatusCode::kCancelled) {
    return out.error;
  }
  return absl::OkStatus();
}

uint64_t SeedFromRequestId(std::string_view request_id) {
  uint64_t h = 0xcbf29ce484222325ULL;
  for (unsigned char c : request_id) {
    h ^= c;
    h *= 0x100000001b3ULL;
  }
  return h;
}

}  // namespace ptxserve
