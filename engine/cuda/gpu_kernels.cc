// The backend's kernels: its kernel set (kernel_set.h) for the loaded model and the
// device's target, the warm-up that compiles them all, and the launch of one slot.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "engine/cuda/gpu_backend_internal.h"
#include "engine/util/log.h"

namespace ptxserve::cuda {

absl::Status LaunchSlot(KernelCache& cache, KernelSlot& slot, const kernels::LaunchDims& dims,
                        void** params) {
  if (slot.kernel == nullptr) {
    absl::StatusOr<const CompiledKernel*> k = cache.Get(slot.spec);
    if (!k.ok()) return k.status();
    slot.kernel = *k;
  }
  return cache.Launch(*slot.kernel, dims, params);
}

absl::Status GpuBackend::InitKernels() {
  const DeviceInfo& info = device_->info();
  absl::StatusOr<ptx::Target> target =
      KernelTarget(info.cc_major, info.cc_minor, options_.ptx_version);
  if (!target.ok()) return target.status();
  absl::StatusOr<KernelSet> set = BuildKernelSet(config_, w_->types, kv_, *target);
  if (!set.ok()) return set.status();
  k_ = std::make_unique<KernelSet>(*std::move(set));
  if (!options_.warmup) return absl::OkStatus();

  // Warm-up: compile everything, a few keys at a time (the cache compiles each key once
  // even when several slots share it, e.g. q/k/v of equal shape).
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<KernelSlot*> slots = k_->All();
  std::atomic<size_t> next{0};
  std::vector<absl::Status> errors(slots.size());
  auto work = [&] {
    for (size_t i = next.fetch_add(1); i < slots.size(); i = next.fetch_add(1)) {
      absl::StatusOr<const CompiledKernel*> r = cache_->Get(slots[i]->spec);
      if (r.ok()) {
        slots[i]->kernel = *r;
      } else {
        errors[i] = r.status();
      }
    }
  };
  const int threads = static_cast<int>(std::clamp<unsigned>(std::thread::hardware_concurrency(), 1,
                                                            device_->info().emulated ? 1 : 4));
  std::vector<std::thread> pool;
  for (int t = 1; t < threads; ++t) pool.emplace_back(work);
  work();
  for (std::thread& t : pool) t.join();
  for (const absl::Status& e : errors) {
    if (!e.ok()) return e;
  }
  if (options_.log_progress) {
    const KernelCacheStats st = cache_->stats();
    PTX_LOG(INFO) << "kernels ready: " << st.modules << " modules for " << slots.size()
                  << " uses in "
                  << std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count()
                  << " s (" << st.compile_seconds << " s compiling)";
  }
  return absl::OkStatus();
}

}  // namespace ptxserve::cuda
