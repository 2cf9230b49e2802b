// ptxas for the tests: kernels/ptx/ptxas.h, and whether CI requires it.
#pragma once

#include "kernels/ptx/ptxas.h"

namespace ptxserve::kernels::testing {

using ptx::AssembleAll;
using ptx::FindPtxas;
using ptx::PtxasEntryInfo;
using ptx::PtxasResult;
using ptx::PtxModule;

// True when the environment says CI=true (ptxas is then required, not optional).
bool InCi();

}  // namespace ptxserve::kernels::testing
