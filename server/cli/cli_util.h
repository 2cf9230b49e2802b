// Small helpers the server-side subcommands (serve, client, bench) share.
#pragma once

#include <string>

#include "absl/status/statusor.h"

namespace ptxserve::cli {

// The whole file, or NotFound naming it.
absl::StatusOr<std::string> ReadFileToString(const std::string& path);
// The API key in `path`: the file's text without trailing whitespace; InvalidArgument
// when empty.
absl::StatusOr<std::string> ReadApiKey(const std::string& path);

}  // namespace ptxserve::cli
