// `ptxserve ptx`: write generated PTX so anyone can read it or assemble it with ptxas.
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "kernels/registry.h"
#include "server/cli/cli_util.h"
#include "server/cli/common_flags.h"
#include "server/cli/subcommands.h"

ABSL_FLAG(std::string, kernel, "", "ptx: the kernel to generate (--list names them)");
ABSL_FLAG(bool, all, false, "ptx: write every kernel with default settings into --out DIR");
ABSL_FLAG(bool, list, false, "ptx: list the kernels and their settings with defaults");
ABSL_FLAG(int32_t, sm, 80, "ptx --all: target SM (80, 86, 89, 90)");
ABSL_FLAG(std::string, isa, "7.8", "ptx --all: PTX ISA version");

namespace ptxserve::cli {
namespace {

constexpr char kUsage[] =
    "ptxserve ptx --kernel NAME [--set key=value ...] [--out FILE]\n"
    "ptxserve ptx --all --out DIR [--sm 80|86|89|90] [--isa 7.8]\n"
    "ptxserve ptx --list";

int Fail(const std::string& msg) {
  std::fprintf(stderr, "ptx: %s\n", msg.c_str());
  return 1;
}

}  // namespace

int RunPtx(int argc, char** argv) {
  // --set may repeat: take it out of argv before Abseil parses the rest (Abseil keeps
  // only the last value of a repeated flag).
  kernels::KernelSettings settings;
  std::vector<char*> rest = {argv[0]};
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    std::string value;
    if (a == "--set") {
      if (i + 1 >= argc) return Fail("--set needs key=value");
      value = argv[++i];
    } else if (a.rfind("--set=", 0) == 0) {
      value = a.substr(6);
    } else {
      rest.push_back(argv[i]);
      continue;
    }
    const size_t eq = value.find('=');
    if (eq == std::string::npos || eq == 0) return Fail("--set wants key=value, got " + value);
    settings[value.substr(0, eq)] = value.substr(eq + 1);
  }
  SetSubcommandFlags({"server/cli/ptx.cc", "out"});
  ParseSubcommandFlags(static_cast<int>(rest.size()), rest.data(), kUsage);
  const std::string out = absl::GetFlag(FLAGS_out);

  if (absl::GetFlag(FLAGS_list)) {
    for (const std::string& name : kernels::KernelNames()) {
      auto defaults = kernels::KernelDefaults(name);
      std::vector<std::string> kv;
      for (const auto& [k, v] : *defaults) kv.push_back(k + "=" + v);
      std::printf("%s  %s\n", name.c_str(), absl::StrJoin(kv, " ").c_str());
    }
    return 0;
  }
  if (absl::GetFlag(FLAGS_all)) {
    if (out.empty()) return Fail("--all needs --out DIR");
    ptx::Target target;
    target.sm = absl::GetFlag(FLAGS_sm);
    const std::string isa = absl::StrReplaceAll(absl::GetFlag(FLAGS_isa), {{".", ""}});
    if (!absl::SimpleAtoi(isa, &target.ptx_version)) return Fail("--isa wants a version like 7.8");
    if (auto st = target.Validate(); !st.ok()) return Fail(std::string(st.message()));
    std::error_code ec;
    std::filesystem::create_directories(out, ec);
    if (ec) return Fail("cannot create " + out + ": " + ec.message());
    if (auto st = kernels::WriteAllPtx(out, target); !st.ok()) {
      return Fail(std::string(st.message()));
    }
    std::fprintf(stderr, "ptx: wrote %zu kernels to %s\n", kernels::KernelNames().size(),
                 out.c_str());
    return 0;
  }
  const std::string name = absl::GetFlag(FLAGS_kernel);
  if (name.empty()) return Fail(std::string("--kernel, --all or --list is required\n") + kUsage);
  auto text = kernels::GeneratePtxByName(name, settings);
  if (!text.ok()) return Fail(std::string(text.status().message()));
  if (out.empty()) {
    std::fputs(text->c_str(), stdout);
    return 0;
  }
  if (const auto parent = std::filesystem::path(out).parent_path(); !parent.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(parent, ec);
  }
  std::ofstream f(out, std::ios::binary);
  f << *text;
  if (!f.good()) return Fail("cannot write " + out);
  return 0;
}

}  // namespace ptxserve::cli
