// Values of PTX special registers (%tid, %ctaid, %laneid, %lanemask_*, ...) for one thread;
// they fill pre-allocated register slots when a block starts.
#include "kernels/emu/executor.h"

namespace ptxserve::emu {

uint64_t SpecialValue(Special sp, const SpecialInputs& in, uint32_t t) {
  const uint32_t l = t % kWarpSize;
  const uint64_t lm = uint64_t{1} << l;
  uint64_t v = 0;
  switch (sp) {
    case Special::kTidX:
      v = t % in.block.x;
      break;
    case Special::kTidY:
      v = (t / in.block.x) % in.block.y;
      break;
    case Special::kTidZ:
      v = t / (in.block.x * in.block.y);
      break;
    case Special::kNtidX:
      v = in.block.x;
      break;
    case Special::kNtidY:
      v = in.block.y;
      break;
    case Special::kNtidZ:
      v = in.block.z;
      break;
    case Special::kCtaidX:
      v = in.block_idx.x;
      break;
    case Special::kCtaidY:
      v = in.block_idx.y;
      break;
    case Special::kCtaidZ:
      v = in.block_idx.z;
      break;
    case Special::kNctaidX:
      v = in.grid.x;
      break;
    case Special::kNctaidY:
      v = in.grid.y;
      break;
    case Special::kNctaidZ:
      v = in.grid.z;
      break;
    case Special::kLaneId:
      v = l;
      break;
    case Special::kWarpId:
      v = t / kWarpSize;
      break;
    case Special::kNWarpId:
      v = in.nwarps;
      break;
    case Special::kSmId:
    case Special::kGridId:
      v = 0;
      break;
    case Special::kNSmId:
      v = 1;
      break;
    case Special::kLanemaskEq:
      v = lm;
      break;
    case Special::kLanemaskLe:
      v = (lm << 1) - 1;
      break;
    case Special::kLanemaskLt:
      v = lm - 1;
      break;
    case Special::kLanemaskGe:
      v = ~(lm - 1);
      break;
    case Special::kLanemaskGt:
      v = ~((lm << 1) - 1);
      break;
    case Special::kDynamicSmemSize:
      v = in.dynamic_shared;
      break;
    case Special::kTotalSmemSize:
      v = in.total_shared;
      break;
  }

  return v & 0xffffffffu;
}

}  // namespace ptxserve::emu
