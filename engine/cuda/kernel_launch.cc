#include "engine/cuda/kernel_launch.h"

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

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

absl::Status CompileKernelSet(KernelSet& set, KernelCache& cache, int threads, bool log_progress) {
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<KernelSlot*> slots = set.All();
  std::atomic<size_t> next{0};
  std::vector<absl::Status> errors(slots.size());
  auto work = [&] {
    for (size_t i = next.fetch_add(1); i < slots.size(); i = next.fetch_add(1)) {
      absl::StatusOr<const CompiledKernel*> r = cache.Get(slots[i]->spec);
      if (r.ok()) {
        slots[i]->kernel = *r;
      } else {
        errors[i] = r.status();
      }
    }
  };
  std::vector<std::thread> pool;
  for (int t = 1; t < threads; ++t) pool.emplace_back(work);
  work();
  for (std::thread& t : pool) t.join();
  for (const absl::Status& e : errors) {
    if (!e.ok()) return e;
  }
  if (log_progress) {
    const KernelCacheStats st = cache.stats();
    PTX_LOG(INFO) << "kernels ready: " << st.modules << " modules for " << slots.size()
                  << " uses in "
                  << std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count()
                  << " s (" << st.compile_seconds << " s compiling)";
  }
  return absl::OkStatus();
}

}  // namespace ptxserve::cuda
