// Flags several subcommands share, and what they resolve to.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/flags/declare.h"
#include "absl/status/statusor.h"

ABSL_DECLARE_FLAG(std::string, model);
ABSL_DECLARE_FLAG(std::string, model_cache_dir);
ABSL_DECLARE_FLAG(uint64_t, seed);
ABSL_DECLARE_FLAG(std::string, out);
ABSL_DECLARE_FLAG(int32_t, kv_blocks);
ABSL_DECLARE_FLAG(int32_t, block_size);
ABSL_DECLARE_FLAG(std::string, backend);
ABSL_DECLARE_FLAG(std::string, emulated_device);
ABSL_DECLARE_FLAG(bool, cuda_graphs);

namespace ptxserve::cli {

// The model directory to load: --model when given, else the synthetic default model
// ("tiny" preset, seed 0, f32), written once under --model-cache-dir.
absl::StatusOr<std::string> ResolveModelDir();

// Parses argv for a subcommand: sets the usage text, handles --help, and returns the
// positional arguments left over (argv[0] included). Exits on bad flags.
std::vector<char*> ParseSubcommandFlags(int argc, char** argv, const char* usage);

}  // namespace ptxserve::cli
