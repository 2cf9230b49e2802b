// The kernel registry: every generator by name, configurable from key=value
// strings, for `ptxserve ptx --kernel NAME [--set key=value ...]` and `--all`.
//
// Each kernel has a default for every field, so an empty map yields a valid kernel.
// Common keys of all kernels: sm (80, 86, 89, 90) and ptx (ISA version, "7.8" or "78").
#pragma once

#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "kernels/ptx/types.h"

namespace ptxserve::kernels {

using KernelSettings = std::map<std::string, std::string>;

// Registered kernel names, sorted.
std::vector<std::string> KernelNames();
// Every key the kernel accepts with its default value; NotFound for an unknown kernel.
absl::StatusOr<KernelSettings> KernelDefaults(absl::string_view name);
// PTX of kernel `name` with `settings` applied over its defaults. Unknown kernels,
// unknown keys, unparsable values and unsupported configs are errors.
absl::StatusOr<std::string> GeneratePtxByName(absl::string_view name,
                                              const KernelSettings& settings);
// Writes <dir>/<name>.ptx for every kernel with default settings and `target`.
absl::Status WriteAllPtx(const std::string& dir, const ptx::Target& target);

}  // namespace ptxserve::kernels
