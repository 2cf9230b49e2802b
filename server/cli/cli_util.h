// Small helpers the server-side subcommands (serve, client, bench) share.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/util/file.h"

namespace ptxserve::cli {

using ::ptxserve::ReadFileToString;  // engine/util/file.h
// Prints `usage` and the flags of the files given to ShowFlagsInHelp, to stdout.
void PrintSubcommandHelp(const char* usage);
// The API key in `path`: the file's text without trailing whitespace; InvalidArgument
// when empty.
absl::StatusOr<std::string> ReadApiKey(const std::string& path);

// Makes --help list the flags defined in the files whose paths end with one of
// `files` (e.g. "server/cli/serve.cc"): a subcommand's own flags and those it shares.
// Call before ParseSubcommandFlags.
void ShowFlagsInHelp(std::vector<std::string> files);

}  // namespace ptxserve::cli
