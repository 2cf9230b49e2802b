// Helpers the fuzz targets share.
#pragma once

#include <stdlib.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include "absl/status/status.h"

namespace ptxserve::fuzz {

// A property the code under test must keep: abort (libFuzzer saves the input) when not.
inline void Check(bool ok, const char* what) {
  if (ok) return;
  std::fprintf(stderr, "fuzz check failed: %s\n", what);
  std::abort();
}

// With PTXSERVE_FUZZ_VERBOSE=1 in the environment, says how far an input got (for triage:
// `TARGET -runs=0 FILE`). Silent otherwise: fuzzing runs millions of inputs.
inline void Note(std::string_view stage, const absl::Status& status) {
  static const bool verbose = [] {
    const char* v = std::getenv("PTXSERVE_FUZZ_VERBOSE");
    return v != nullptr && std::string_view(v) == "1";
  }();
  if (verbose) {
    std::fprintf(stderr, "%.*s: %s\n", static_cast<int>(stage.size()), stage.data(),
                 status.ToString().c_str());
  }
}

// A fresh directory for this process's scratch files: in /dev/shm when writable (no disk
// writes per execution), else in $TMPDIR or /tmp.
inline std::string MakeScratchDir(const char* prefix) {
  const char* tmp = std::getenv("TMPDIR");
  std::string base = ::access("/dev/shm", W_OK) == 0  ? "/dev/shm"
                     : tmp != nullptr && *tmp != '\0' ? tmp
                                                      : "/tmp";
  std::string path = base + "/" + prefix + "-XXXXXX";
  Check(::mkdtemp(path.data()) != nullptr, "mkdtemp");
  return path;
}

}  // namespace ptxserve::fuzz
