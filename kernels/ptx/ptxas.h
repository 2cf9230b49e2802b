// Runs NVIDIA's ptxas, when the machine has it, on PTX text (via popen on temp files): the
// tests assemble every generated kernel with it, and the GPU estimate asks it for each
// kernel's registers. Nothing at serving time needs it.
#pragma once

#include <string>
#include <vector>

namespace ptxserve::ptx {

// ptxas on PATH, else /usr/local/cuda/bin/ptxas; "" when neither exists.
std::string FindPtxas();

struct PtxModule {
  std::string label;  // for messages (config key)
  std::string ptx;
};

struct PtxasEntryInfo {
  std::string label;
  int registers = -1;
  int spill_stores = -1;
  int spill_loads = -1;
};

struct PtxasResult {
  bool ok = false;
  std::string log;                      // ptxas' combined output (errors name the module)
  std::vector<PtxasEntryInfo> entries;  // per module, when ok
};

// Assembles all modules (same .version/.target) for `arch` ("sm_80") with -v. The
// modules are merged into one file per batch (entries renamed) to amortise process
// start; a failing batch is re-run module by module so the log names the culprit.
PtxasResult AssembleAll(const std::string& ptxas, const std::vector<PtxModule>& modules,
                        const std::string& arch);

}  // namespace ptxserve::ptx
