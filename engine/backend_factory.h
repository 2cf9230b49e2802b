// The one place that knows every backend kind (engine/cpu, engine/cuda): it chooses the
// backend the engine runs on and sizes its K/V pools, so server/ names a kind and includes
// neither backend.
#pragma once

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "engine/backend.h"
#include "engine/backend_options.h"
#include "engine/model/model.h"

namespace ptxserve {

// OK when `emulated_device` (--emulated_device) names a profile (small, a100 or h100) and
// is "small" unless `backend` (--backend) is "emulated" (another profile would be
// ignored); else InvalidArgument naming the flag and the valid values.
absl::Status CheckEmulatedDeviceFlag(absl::string_view backend, absl::string_view emulated_device);

// OK when `kind` names a backend (cpu, cuda, emulated or auto), else InvalidArgument
// naming --backend and the valid values.
absl::Status CheckBackendKind(absl::string_view kind);

// The server's --backend: "cpu", "cuda", "emulated" or "auto" (cuda when the driver
// loads and the backend comes up on device 0, else cpu). `*note` (may be null) receives,
// for auto, why the CUDA backend was not used (empty when it was). kv.num_blocks <= 0:
// a real GPU sizes the pools from options.kv_memory_fraction of its free memory; cpu and
// emulated (host memory, whatever memory the profile reports) take
// DefaultHostKvBlocks(config, kv, options.max_seqs). A profile other than "small" with a
// kind other than emulated is InvalidArgument (CheckEmulatedDeviceFlag).
absl::StatusOr<std::unique_ptr<Backend>> CreateBackend(absl::string_view kind, const Model& model,
                                                       const KvCacheConfig& kv,
                                                       BackendOptions options = {},
                                                       std::string* note = nullptr);

}  // namespace ptxserve
