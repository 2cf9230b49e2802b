// Compiled kernels by Config key: PTX generation plus cuModuleLoadDataEx happen once per
// key (concurrent requests for one key compile it once; the others wait and share the
// result, failures included). Get() is for warm-up and first use; the launch path uses the
// returned CompiledKernel directly, so a launch does no PTX generation, no string
// formatting and no hashing: it bumps two atomic counters and calls cuLaunchKernel.
//
// The driver's own JIT cache makes later processes fast: cuModuleLoadDataEx keys compiled
// SASS by PTX text, GPU and driver version under CUDA_CACHE_PATH (default
// ~/.nv/ComputeCache), bounded by CUDA_CACHE_MAXSIZE (bytes; raise it above the default
// for many kernels), disabled by CUDA_CACHE_DISABLE=1. The generator is deterministic, so a
// restart with the same model and driver JITs nothing: "compile seconds" is then PTX
// generation plus a cache lookup. The emulated device parses PTX every time.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "engine/cuda/device.h"
#include "kernels/common.h"

namespace ptxserve::cuda {

// What to compile: the cache key (the kernel Config's Key()), the PTX .entry name (also
// the kernel label of the launch metrics), the generator, and whether the kernel waits on
// griddepcontrol.wait (its Config's kernels::GridDependent): launched as a programmatic
// dependent launch.
struct KernelSpec {
  std::string key;
  const char* entry = "";
  std::function<absl::StatusOr<std::string>()> generate;
  bool grid_dependent = false;
};

// A compiled kernel. Lives as long as the cache; its address is stable.
struct CompiledKernel {
  std::string key;
  const char* entry = "";
  CUfunction fn = nullptr;
  std::atomic<int64_t>* launches = nullptr;  // the counter of kernel `entry`
  // The dynamic shared memory its launches may ask for now (the driver's
  // CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES); Launch raises it on demand.
  mutable std::atomic<uint32_t> max_dynamic_shared{0};
  // KernelSpec::grid_dependent: launched as a programmatic dependent launch.
  bool grid_dependent = false;
};

// What one replay of a captured graph launches: per kernel counter, how many times; and the
// total (KernelCache::Tally builds it from a recording; CountReplay adds it).
struct LaunchTally {
  std::vector<std::pair<std::atomic<int64_t>*, int64_t>> per_kernel;
  int64_t total = 0;
};

struct KernelCacheStats {
  int64_t hits = 0;            // Get calls answered from the cache + launches of cached kernels
  int64_t misses = 0;          // Get calls that compiled (successfully or not)
  int64_t failures = 0;        // compilations that failed
  double compile_seconds = 0;  // total PTX generation + JIT time
  int64_t modules = 0;         // compiled kernels held
  std::map<std::string, int64_t> launches;  // by entry name
};

class KernelCache {
 public:
  // `on_compile(key, seconds)` is called after each compilation (success or failure) on
  // the compiling thread; it must be quick (a histogram observation).
  explicit KernelCache(Device* device,
                       std::function<void(absl::string_view key, double seconds)> on_compile = {});
  ~KernelCache();  // unloads every module
  KernelCache(const KernelCache&) = delete;
  KernelCache& operator=(const KernelCache&) = delete;

  // The compiled kernel for spec.key, compiling it on a miss. Errors name the key and the
  // failing step (generation, JIT with its log, function lookup); a failed key keeps
  // failing (generation is deterministic). Thread-safe.
  absl::StatusOr<const CompiledKernel*> Get(const KernelSpec& spec);

  // Launches `k` on the device's stream and counts a hit and a launch; while recording,
  // appends `k` to the recording instead of counting (a captured launch runs nothing).
  // A launch asking for more dynamic shared memory than the kernel allows so far (48 KiB
  // less its static shared memory at first) raises the kernel's limit first, once, as
  // the driver requires (cuFuncSetAttribute).
  absl::Status Launch(const CompiledKernel& k, const kernels::LaunchDims& dims, void** params) {
    if (dims.shared_bytes > k.max_dynamic_shared.load(std::memory_order_relaxed)) {
      if (absl::Status st = RaiseDynamicShared(k, dims.shared_bytes); !st.ok()) return st;
    }
    absl::Status st = device_->Launch(k.fn, k.key, dims, params, k.grid_dependent);
    if (st.ok()) {
      if (recording_ != nullptr) {
        recording_->push_back(&k);
      } else {
        hits_.fetch_add(1, std::memory_order_relaxed);
        k.launches->fetch_add(1, std::memory_order_relaxed);
      }
    }
    return st;
  }

  // CUDA graphs: between StartRecording and StopRecording (around a stream capture) the
  // launches are listed, not counted; each replay of the graph then counts them with
  // CountReplay(Tally(list)), so the launch and hit counters stay per kernel executed.
  // Only the thread that owns the device's stream may record (as only it launches).
  void StartRecording() { recording_ = &recorded_; }
  std::vector<const CompiledKernel*> StopRecording();
  static LaunchTally Tally(const std::vector<const CompiledKernel*>& launches);
  void CountReplay(const LaunchTally& tally) {
    hits_.fetch_add(tally.total, std::memory_order_relaxed);
    for (const auto& [counter, n] : tally.per_kernel) {
      counter->fetch_add(n, std::memory_order_relaxed);
    }
  }

  KernelCacheStats stats() const;  // thread-safe snapshot

 private:
  struct Entry;
  absl::Status Compile(const KernelSpec& spec, Entry* e);
  absl::Status RaiseDynamicShared(const CompiledKernel& k, uint32_t bytes);
  std::atomic<int64_t>* LaunchCounter(const char* entry);

  Device* device_;
  std::function<void(absl::string_view, double)> on_compile_;
  std::atomic<int64_t> hits_{0};
  std::vector<const CompiledKernel*>* recording_ = nullptr;  // &recorded_ while recording
  std::vector<const CompiledKernel*> recorded_;
  mutable absl::Mutex mu_;
  std::map<std::string, std::unique_ptr<Entry>, std::less<>> entries_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, std::unique_ptr<std::atomic<int64_t>>, std::less<>> launch_counters_
      ABSL_GUARDED_BY(mu_);
  int64_t misses_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t failures_ ABSL_GUARDED_BY(mu_) = 0;
  double compile_seconds_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace ptxserve::cuda
