// Every hand-written test kernel must be real PTX: it is assembled with ptxas for its
// .target, and for sm_90 as well, when ptxas is installed (on PATH or /usr/local/cuda/bin).
// Without ptxas the test skips, except under CI=true, where it fails.
#include <array>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <regex>

#include "tests/emu/emu_test_util.h"

namespace ptxserve::emu::testing {
namespace {

std::string FindPtxas() {
  if (const char* path = std::getenv("PATH")) {
    std::string p(path);
    size_t start = 0;
    while (start <= p.size()) {
      const size_t end = p.find(':', start);
      const std::string dir = p.substr(start, end == std::string::npos ? end : end - start);
      if (!dir.empty() && std::filesystem::exists(dir + "/ptxas")) return dir + "/ptxas";
      if (end == std::string::npos) break;
      start = end + 1;
    }
  }
  if (std::filesystem::exists("/usr/local/cuda/bin/ptxas")) return "/usr/local/cuda/bin/ptxas";
  return "";
}

// Runs `cmd`, returning its exit status and combined output.
int RunCommand(const std::string& cmd, std::string* output) {
  FILE* p = popen((cmd + " 2>&1").c_str(), "r");
  if (p == nullptr) return -1;
  std::array<char, 512> buf;
  while (fgets(buf.data(), buf.size(), p) != nullptr) *output += buf.data();
  return pclose(p);
}

TEST(EmuPtxas, EveryTestKernelAssembles) {
  const std::string ptxas = FindPtxas();
  if (ptxas.empty()) {
    const char* ci = std::getenv("CI");
    if (ci != nullptr && std::string(ci) == "true") {
      FAIL() << "ptxas not found (PATH, /usr/local/cuda/bin) and CI=true";
    }
    GTEST_SKIP() << "ptxas not found on PATH or in /usr/local/cuda/bin: the test kernels "
                    "are not checked against the real assembler";
  }
  const auto files = AllPtxFiles();
  ASSERT_GE(files.size(), 10u);
  const std::regex target(R"(\.target\s+(sm_\d+a?))");
  for (const std::string& file : files) {
    const std::string name = std::filesystem::path(file).stem().string();
    const std::string text = ReadPtx(name);
    std::smatch m;
    ASSERT_TRUE(std::regex_search(text, m, target)) << file << ": no .target";
    std::vector<std::string> archs = {m[1].str()};
    if (archs[0] != "sm_90") archs.push_back("sm_90");
    for (const std::string& arch : archs) {
      std::string out;
      const int rc = RunCommand(ptxas + " -arch=" + arch + " " + file + " -o /dev/null", &out);
      EXPECT_EQ(rc, 0) << file << " for " << arch << ":\n" << out;
    }
  }
}

}  // namespace
}  // namespace ptxserve::emu::testing
