#include "tests/kernels/ptxas_util.h"

#include <cstdlib>
#include <string>

namespace ptxserve::kernels::testing {

bool InCi() {
  const char* ci = std::getenv("CI");
  return ci != nullptr && std::string(ci) == "true";
}

}  // namespace ptxserve::kernels::testing
