#include "tests/cli/cli_run.h"

#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "gtest/gtest.h"

namespace ptxserve::cli_test {

std::string Slurp(const std::string& path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

CliRun RunPtxserve(const std::string& args) {
  const auto dir =
      std::filesystem::temp_directory_path() / ("ptxserve-cli-test-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const std::string out = (dir / "out").string(), err = (dir / "err").string();
  const std::string cmd = kBinary + " " + args + " >" + out + " 2>" + err;
  const int status = std::system(cmd.c_str());
  CliRun r;
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  r.out = Slurp(out);
  r.err = Slurp(err);
  return r;
}

double Perplexity(const std::string& args) {
  const CliRun r = RunPtxserve("perplexity " + args);
  EXPECT_EQ(r.exit_code, 0) << args << ": " << r.err;
  const size_t at = r.out.find("perplexity ");
  return at == std::string::npos ? 0 : std::atof(r.out.c_str() + at + 11);
}

}  // namespace ptxserve::cli_test
