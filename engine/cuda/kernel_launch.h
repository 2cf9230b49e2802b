// Compiling and launching a kernel set's slots (kernel_set.h) through the kernel cache.
#pragma once

#include "absl/status/status.h"
#include "engine/cuda/kernel_cache.h"
#include "engine/cuda/kernel_set.h"
#include "kernels/kernel_params.h"

namespace ptxserve::cuda {

// Compiles every used slot of `set` (the cache compiles each key once even when several
// slots share it, e.g. q/k/v of equal shape) on up to `threads` threads; logs the time
// with `log_progress`.
absl::Status CompileKernelSet(KernelSet& set, KernelCache& cache, int threads, bool log_progress);

// Compiles `slot` on first use (a cache miss), then launches it.
absl::Status LaunchSlot(KernelCache& cache, KernelSlot& slot, const kernels::LaunchDims& dims,
                        void** params);
// The same with the kernel's typed arguments (kernels/kernel_params.h), packed in .param
// order.
template <class Args>
absl::Status LaunchSlot(KernelCache& cache, KernelSlot& slot, const kernels::LaunchDims& dims,
                        Args args) {
  auto params = kernels::PackParams(args);
  return LaunchSlot(cache, slot, dims, params.data());
}

}  // namespace ptxserve::cuda
