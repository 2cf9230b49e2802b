// Whole-file reads for configuration inputs (keys, certificates, templates).
#pragma once

#include <string>

#include "absl/status/statusor.h"

namespace ptxserve {

// The file's bytes; NotFound naming the path when it cannot be read.
absl::StatusOr<std::string> ReadFileToString(const std::string& path);

}  // namespace ptxserve
