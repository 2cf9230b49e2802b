// Prints the golden kernel manifest (kernel_manifest.h), or writes it to a file:
//   kernel_manifest [--test-model DIR] [--write FILE]
// DIR defaults to the test model beside the checkout (../shared/models/tinystories-656k).
// scripts/update-kernel-manifest runs it to rewrite tests/golden/kernel_manifest.txt.
#include <cstdio>
#include <fstream>
#include <string>

#include "tests/kernels/kernel_manifest.h"

int main(int argc, char** argv) {
  std::string test_model = std::string(PTXSERVE_SHARED_MODELS) + "/tinystories-656k";
  std::string write;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if ((arg == "--test-model" || arg == "--write") && i + 1 < argc) {
      (arg == "--write" ? write : test_model) = argv[++i];
    } else {
      std::fprintf(stderr, "usage: %s [--test-model DIR] [--write FILE]\n", argv[0]);
      return 2;
    }
  }
  absl::StatusOr<std::string> manifest = ptxserve::cuda::testing::KernelManifest(test_model);
  if (!manifest.ok()) {
    std::fprintf(stderr, "kernel_manifest: %s\n", manifest.status().ToString().c_str());
    return 1;
  }
  if (write.empty()) {
    std::fputs(manifest->c_str(), stdout);
    return 0;
  }
  std::ofstream out(write, std::ios::binary | std::ios::trunc);
  out << *manifest;
  out.close();
  if (!out) {
    std::fprintf(stderr, "kernel_manifest: cannot write %s\n", write.c_str());
    return 1;
  }
  std::fprintf(stderr, "kernel_manifest: wrote %s\n", write.c_str());
  return 0;
}
