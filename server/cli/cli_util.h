// Small helpers the server-side subcommands (serve, client, bench) share.
#pragma once

#include <string>
#include <vector>

#include "absl/flags/commandlineflag.h"
#include "absl/status/statusor.h"
#include "engine/util/file.h"

namespace ptxserve::cli {

using ::ptxserve::ReadFileToString;  // engine/util/file.h
// Prints `usage` and the flags given to SetSubcommandFlags, to stdout.
void PrintSubcommandHelp(const char* usage);
// The API key in `path`: the file's text without trailing whitespace; InvalidArgument
// when empty.
absl::StatusOr<std::string> ReadApiKey(const std::string& path);

// The flags a subcommand accepts and --help lists: every flag defined in a file whose path
// ends with an entry that ends in ".cc" (e.g. "server/cli/serve.cc"), each flag an entry
// names (e.g. "model", shared from common_flags.cc), and --log-level and --log-format.
// Call before ParseSubcommandFlags, which refuses any other flag set on the command line.
void SetSubcommandFlags(std::vector<std::string> sources);
// Whether `flag` is one of them.
bool IsSubcommandFlag(const absl::CommandLineFlag& flag);

}  // namespace ptxserve::cli
