// Running the real `ptxserve` executable from a test, shared by the CLI tests.
#pragma once

#include <string>

namespace ptxserve::cli_test {

inline const std::string kBinary = std::string(PTXSERVE_BINARY_DIR) + "/server/ptxserve";
inline const std::string kTinyStories = std::string(PTXSERVE_SHARED_MODELS) + "/tinystories-656k";

struct CliRun {
  int exit_code = -1;
  std::string out, err;
};

// The whole file at `path` ("" when unreadable).
std::string Slurp(const std::string& path);

// Runs `ptxserve args` with stdout and stderr captured in files under a temp dir.
CliRun RunPtxserve(const std::string& args);

// The perplexity printed by `ptxserve perplexity ARGS` (0 when absent; an EXPECT failure
// when it exits non-zero).
double Perplexity(const std::string& args);

}  // namespace ptxserve::cli_test
