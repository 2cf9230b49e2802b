#include "engine/backend_factory.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "engine/cpu/cpu_backend.h"
#include "engine/cuda/emulated_driver.h"
#include "engine/cuda/gpu_backend.h"
#include "engine/kv_sizing.h"
#include "engine/util/log.h"

namespace ptxserve {
namespace {

// A GPU backend of `kind` with `options`; its own knobs (cuda::GpuBackendOptions beyond
// BackendOptions) keep their defaults.
absl::StatusOr<std::unique_ptr<cuda::GpuBackend>> CreateGpu(const Model& model,
                                                            const KvCacheConfig& kv,
                                                            absl::string_view kind,
                                                            BackendOptions options) {
  cuda::GpuBackendOptions gpu;
  static_cast<BackendOptions&>(gpu) = std::move(options);
  return cuda::CreateGpuBackend(model, kv, kind, std::move(gpu));
}

}  // namespace

absl::Status CheckEmulatedDeviceFlag(absl::string_view backend, absl::string_view emulated_device) {
  if (!cuda::EmulatedDeviceProfile(std::string(emulated_device)).ok()) {
    return absl::InvalidArgumentError(absl::StrCat("--emulated_device=", emulated_device, ": want ",
                                                   cuda::EmulatedDeviceProfileNames()));
  }
  if (backend != "emulated" && emulated_device != "small") {
    return absl::InvalidArgumentError(absl::StrCat("--emulated_device=", emulated_device,
                                                   " applies to --backend=emulated only, not ",
                                                   backend));
  }
  return absl::OkStatus();
}

absl::Status CheckBackendKind(absl::string_view kind) {
  if (kind == "cpu" || kind == "cuda" || kind == "emulated" || kind == "auto") {
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError(
      absl::StrCat("--backend=", kind, ": want cpu, cuda, emulated or auto"));
}

absl::StatusOr<std::unique_ptr<Backend>> CreateBackend(absl::string_view kind, const Model& model,
                                                       const KvCacheConfig& kv,
                                                       BackendOptions options, std::string* note) {
  if (note != nullptr) note->clear();
  if (absl::Status st = CheckBackendKind(kind); !st.ok()) return st;
  // Unsized pools: host memory (cpu, and the emulated device, whose "device memory" is
  // host memory) gets DefaultHostKvBlocks; a real GPU sizes its pools from the memory
  // free after weights and activations (options.kv_memory_fraction).
  KvCacheConfig host_kv = kv;
  if (host_kv.num_blocks <= 0) {
    host_kv.num_blocks = DefaultHostKvBlocks(model.config, kv, options.max_seqs);
  }
  if (absl::Status st = CheckEmulatedDeviceFlag(kind, options.emulated_device); !st.ok()) {
    return st;
  }
  if (kind == "cpu") return CreateCpuBackend(model, host_kv);
  if (kind == "cuda" || kind == "emulated") {
    auto b = CreateGpu(model, kind == "cuda" ? kv : host_kv, kind, std::move(options));
    if (!b.ok()) return b.status();
    return std::unique_ptr<Backend>(*std::move(b));
  }
  // kind == "auto"
  auto b = CreateGpu(model, kv, "cuda", std::move(options));
  if (b.ok()) return std::unique_ptr<Backend>(*std::move(b));
  const std::string why = absl::StrCat("CUDA backend unavailable (", b.status().message(),
                                       "); serving from the CPU backend");
  PTX_LOG(WARNING) << why;
  if (note != nullptr) *note = why;
  return CreateCpuBackend(model, host_kv);
}

}  // namespace ptxserve
