#include "tests/emu/emu_test_util.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace ptxserve::emu::testing {

namespace {
std::filesystem::path PtxDir() {
  return std::filesystem::path(PTXSERVE_SOURCE_DIR) / "tests" / "emu" / "ptx";
}
}  // namespace

std::string ReadPtx(const std::string& name) {
  const auto path = PtxDir() / (name + ".ptx");
  std::ifstream in(path);
  EXPECT_TRUE(in.good()) << "cannot read " << path;
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::vector<std::string> AllPtxFiles() {
  std::vector<std::string> out;
  for (const auto& e : std::filesystem::directory_iterator(PtxDir())) {
    if (e.path().extension() == ".ptx") out.push_back(e.path().string());
  }
  std::sort(out.begin(), out.end());
  return out;
}

FunctionHandle Load(Emulator& emu, const std::string& file, const std::string& entry) {
  auto m = emu.LoadModule(ReadPtx(file));
  EXPECT_TRUE(m.ok()) << m.status();
  if (!m.ok()) return {};
  auto f = emu.GetFunction(*m, entry.empty() ? file : entry);
  EXPECT_TRUE(f.ok()) << f.status();
  return f.ok() ? *f : FunctionHandle{};
}

int LineOf(const std::string& file, const std::string& needle, const std::string& after) {
  const std::string text = ReadPtx(file);
  size_t start = after.empty() ? 0 : text.find(after);
  EXPECT_NE(start, std::string::npos) << after;
  const size_t pos = text.find(needle, start);
  EXPECT_NE(pos, std::string::npos) << needle;
  return 1 + static_cast<int>(std::count(text.begin(), text.begin() + pos, '\n'));
}

std::string Line(int n) { return "PTX line " + std::to_string(n); }

}  // namespace ptxserve::emu::testing
