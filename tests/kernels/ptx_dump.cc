// Developer tool: prints a registered kernel's PTX.
//   ptx_dump NAME [key=value ...]     ptx_dump --list
#include <cstdio>
#include <string>

#include "kernels/registry.h"

int main(int argc, char** argv) {
  using ptxserve::kernels::GeneratePtxByName;
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s NAME [key=value ...] | --list\n", argv[0]);
    return 2;
  }
  if (std::string(argv[1]) == "--list") {
    for (const std::string& n : ptxserve::kernels::KernelNames()) std::printf("%s\n", n.c_str());
    return 0;
  }
  ptxserve::kernels::KernelSettings settings;
  for (int i = 2; i < argc; ++i) {
    const std::string kv = argv[i];
    const size_t eq = kv.find('=');
    if (eq == std::string::npos) {
      std::fprintf(stderr, "bad setting '%s' (want key=value)\n", argv[i]);
      return 2;
    }
    settings[kv.substr(0, eq)] = kv.substr(eq + 1);
  }
  auto ptx = GeneratePtxByName(argv[1], settings);
  if (!ptx.ok()) {
    std::fprintf(stderr, "%s\n", std::string(ptx.status().message()).c_str());
    return 1;
  }
  std::fputs(ptx->c_str(), stdout);
  return 0;
}
