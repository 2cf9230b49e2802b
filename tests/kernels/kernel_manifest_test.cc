// The checked-in kernel manifest (tests/golden/kernel_manifest.txt) against the one the
// backend's kernel-set code generates now: any change to a generated kernel fails here
// with the changed lines, until the manifest is regenerated and the commit says why.
#include "tests/kernels/kernel_manifest.h"

#include <fstream>
#include <set>
#include <sstream>
#include <string>

#include "absl/strings/str_split.h"
#include "gtest/gtest.h"
#include "kernels/kernel_list.h"

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

// The manifest generated now (once per test process: it generates every kernel).
const absl::StatusOr<std::string>& Generated() {
  static const auto* generated = [] {
    const char* env = std::getenv("PTXSERVE_SHARED_MODELS");
    const std::string models = env != nullptr && *env != '\0' ? env : PTXSERVE_SHARED_MODELS;
    return new absl::StatusOr<std::string>(KernelManifest(models + "/tinystories-656k"));
  }();
  return *generated;
}

TEST(KernelManifestTest, MatchesTheCheckedInFile) {
  const absl::StatusOr<std::string>& generated = Generated();
  ASSERT_TRUE(generated.ok()) << generated.status();
  const std::string path = std::string(PTXSERVE_SOURCE_DIR) + "/" + kKernelManifestPath;
  std::ifstream in(path, std::ios::binary);
  ASSERT_TRUE(in) << "missing " << path << ": run " << kKernelManifestUpdateCommand;
  std::stringstream checked_in;
  checked_in << in.rdbuf();
  const std::string diff = KernelManifestDiff(checked_in.str(), *generated);
  if (!diff.empty()) ADD_FAILURE() << diff;
}

// The backend's kernel set builds every listed kernel (kernels/kernel_list.h) and no other.
TEST(KernelManifestTest, BackendBuildsEveryListedKernel) {
  const absl::StatusOr<std::string>& manifest = Generated();
  ASSERT_TRUE(manifest.ok()) << manifest.status();
  std::set<std::string> built, listed;
  for (absl::string_view line : absl::StrSplit(*manifest, '\n', absl::SkipEmpty())) {
    if (line[0] == '#') continue;
    const std::vector<std::string> cols = absl::StrSplit(line, ' ');
    ASSERT_EQ(cols.size(), 6u) << line;
    built.insert(cols[3]);
  }
  kernels::ForEachKernel([&](auto kernel) { listed.insert(kernel.kName); });
  EXPECT_EQ(built, listed);
}

}  // namespace
}  // namespace ptxserve::cuda::testing
