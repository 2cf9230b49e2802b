// What a backend's creator chooses for it, whichever kind it is (engine/backend_factory.h);
// each kind reads the fields that apply to it. The GPU backend's own knobs extend these
// (cuda::GpuBackendOptions).
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "absl/strings/string_view.h"

namespace ptxserve {

struct BackendOptions {
  // Token rows and sequences per step the GPU's activation and metadata buffers are first
  // sized for; a larger step grows them once (an allocation inside that step). max_seqs
  // also sizes unsized host K/V pools (DefaultHostKvBlocks).
  int32_t max_tokens = 512;
  int32_t max_seqs = 64;
  // CUDA graphs for decode-only steps (cuda/gpu_backend.h); false runs every step launch
  // by launch (vLLM's --enforce-eager).
  bool cuda_graphs = true;
  // When KvCacheConfig::num_blocks <= 0, a real GPU sizes its K/V pools to this fraction
  // of the device memory free after weights and activations (serve --kv_memory_fraction).
  double kv_memory_fraction = 0.9;
  // The emulated device's profile (small, a100 or h100; serve --emulated_device); only
  // the emulated kind reads it.
  std::string emulated_device = "small";
  // Called after each kernel compilation (key, seconds): the compile-seconds histogram.
  std::function<void(absl::string_view key, double seconds)> on_compile;
  bool log_progress = true;  // weight upload and warm-up progress at INFO
};

}  // namespace ptxserve
