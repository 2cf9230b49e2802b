// The checked-in kernel manifest (tests/golden/kernel_manifest.txt) against the one the
// backend's kernel-set code generates now: any change to a generated kernel fails here
// with the changed lines, until the manifest is regenerated and the commit says why.
#include "tests/kernels/kernel_manifest.h"

#include <fstream>
#include <sstream>
#include <string>

#include "gtest/gtest.h"

namespace ptxserve::cuda::testing {
namespace {

TEST(KernelManifestTest, DiffShowsChangedLinesTogether) {
  const std::string old_text = "# header\na small k1 e 10 00\nb small k2 e 20 01\n";
  const std::string new_text =
      "# header\na small k1 e 12 02\nb small k2 e 20 01\nc h100 k3 e 5 03\n";
  EXPECT_EQ(KernelManifestDiff(old_text, old_text), "");
  const std::string diff = KernelManifestDiff(old_text, new_text);
  EXPECT_NE(diff.find("(lines: 1 removed, 2 added)"), std::string::npos) << diff;
  EXPECT_NE(diff.find("-a small k1 e 10 00\n+a small k1 e 12 02\n+c h100 k3 e 5 03\n"),
            std::string::npos)
      << diff;
  EXPECT_NE(diff.find(kKernelManifestUpdateCommand), std::string::npos) << diff;
}

TEST(KernelManifestTest, MatchesTheCheckedInFile) {
  const char* env = std::getenv("PTXSERVE_SHARED_MODELS");
  const std::string models = env != nullptr && *env != '\0' ? env : PTXSERVE_SHARED_MODELS;
  absl::StatusOr<std::string> generated = KernelManifest(models + "/tinystories-656k");
  ASSERT_TRUE(generated.ok()) << generated.status();
  const std::string path = std::string(PTXSERVE_SOURCE_DIR) + "/" + kKernelManifestPath;
  std::ifstream in(path, std::ios::binary);
  ASSERT_TRUE(in) << "missing " << path << ": run " << kKernelManifestUpdateCommand;
  std::stringstream checked_in;
  checked_in << in.rdbuf();
  const std::string diff = KernelManifestDiff(checked_in.str(), *generated);
  if (!diff.empty()) ADD_FAILURE() << diff;
}

}  // namespace
}  // namespace ptxserve::cuda::testing
