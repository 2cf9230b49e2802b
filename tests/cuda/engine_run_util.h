// Test helpers for running the Engine over a GPU backend: a recorder of the backend's
// counters after every step, and a collector of every request's tokens and log-probs.
// Header-only (the tests that use it link the engine; ptxserve_gpu_test_util does not).
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "engine/cuda/gpu_backend.h"
#include "engine/engine.h"
#include "engine/sampler.h"

namespace ptxserve::cuda::testing {

// The backend's counters right after one engine step.
struct Snapshot {
  StepObservation step;
  TransferStats transfers;
  KernelCacheStats cache;
};

// Snapshots the GPU backend's counters after every engine step (on the engine thread).
// Read steps() after Engine::Stop: the engine reports a step after handing its outputs out.
class StepRecorder : public EngineObserver {
 public:
  explicit StepRecorder(const GpuBackend* gpu) : gpu_(gpu) {}
  void OnStep(const StepObservation& s) override {
    absl::MutexLock lock(&mu_);
    steps_.push_back({s, gpu_->transfer_stats(), gpu_->cache_stats()});
  }
  std::vector<Snapshot> steps() {
    absl::MutexLock lock(&mu_);
    return steps_;
  }

 private:
  const GpuBackend* gpu_;
  absl::Mutex mu_;
  std::vector<Snapshot> steps_ ABSL_GUARDED_BY(mu_);
};

// Launches of `kernel` (a family name such as "sampling") counted in `s`.
inline int64_t Launches(const KernelCacheStats& s, const std::string& kernel) {
  auto it = s.launches.find(kernel);
  return it == s.launches.end() ? 0 : it->second;
}

struct RunResult {
  std::vector<std::vector<int32_t>> tokens;         // per request
  std::vector<std::vector<SampleResult>> logprobs;  // per request, one per token asked
};

// Enqueues `reqs` together and collects every output until each request finished;
// a request that ends with an error fails the test.
inline RunResult RunEngine(Engine& engine, std::vector<EngineRequest> reqs) {
  const size_t n = reqs.size();
  RunResult r;
  r.tokens.resize(n);
  r.logprobs.resize(n);
  auto stream = std::make_shared<ResultStream>();
  EXPECT_TRUE(engine.Enqueue(std::move(reqs), stream).ok());
  size_t done = 0;
  std::vector<EngineOutput> outs;
  while (done < n && stream->WaitPopAll(&outs)) {
    for (EngineOutput& o : outs) {
      auto& t = r.tokens[o.index];
      t.insert(t.end(), o.token_ids.begin(), o.token_ids.end());
      auto& l = r.logprobs[o.index];
      l.insert(l.end(), o.logprobs.begin(), o.logprobs.end());
      if (o.final()) {
        ++done;
        EXPECT_TRUE(o.error.ok()) << o.error;
      }
    }
  }
  return r;
}

}  // namespace ptxserve::cuda::testing
