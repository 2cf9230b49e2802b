// Stand-ins for the gRPC subcommands in builds without the server
// (-DPTXSERVE_BUILD_SERVER=OFF, e.g. the sanitizer build).
#include <cstdio>

#include "server/cli/subcommands.h"

namespace ptxserve::cli {
namespace {

int NotBuilt(const char* name) {
  std::fprintf(stderr,
               "ptxserve %s: this build has no gRPC server (configured with "
               "-DPTXSERVE_BUILD_SERVER=OFF)\n",
               name);
  return 2;
}

}  // namespace

int RunServe(int, char**) { return NotBuilt("serve"); }
int RunClient(int, char**) { return NotBuilt("client"); }
int RunBench(int, char**) { return NotBuilt("bench"); }

}  // namespace ptxserve::cli
