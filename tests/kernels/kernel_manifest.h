// The golden kernel manifest (tests/golden/kernel_manifest.txt): every kernel the GPU
// backend builds (BuildKernelSet, KernelSet::All()) for the test model and every synthetic
// preset, on each emulated device profile, with the length and a hash of its PTX. A change
// to any generated kernel changes a line, so the diff of this file shows what a commit did
// to the PTX. Built from model configs alone: no device, no weights.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace ptxserve::cuda::testing {

// Where the file lives in the source tree, and the command that rewrites it.
inline constexpr char kKernelManifestPath[] = "tests/golden/kernel_manifest.txt";
inline constexpr char kKernelManifestUpdateCommand[] = "scripts/update-kernel-manifest";

// The manifest: comment lines saying what it covers and how to regenerate it, then one
// line per distinct kernel of each model and profile, sorted:
//   <model> <profile> <config key> <entry> <ptx bytes> <fnv1a64 of the ptx, 16 hex digits>
// `test_model_dir` holds the test model (only its config.json is read).
absl::StatusOr<std::string> KernelManifest(const std::string& test_model_dir);

// "" when `checked_in` and `generated` are the same text; else a report: the lines only
// in one of them, as a unified diff's - and + lines (in sorted order, so a kernel's old
// and new lines sit together; at most `max_lines` of them), and how to regenerate.
std::string KernelManifestDiff(std::string_view checked_in, std::string_view generated,
                               int max_lines = 200);

}  // namespace ptxserve::cuda::testing
