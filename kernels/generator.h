// What every kernel generator writes with: the PTX builder, its names brought into
// namespace kernels (so a generator reads like the PTX it emits), and the typed launch
// arguments it declares its parameters from.
#pragma once

#include "kernels/kernel_params.h"
#include "kernels/ptx/builder.h"

namespace ptxserve::kernels {

using ptx::CacheOp;
using ptx::Cmp;
using ptx::KernelBuilder;
using ptx::Label;
using ptx::Op;
using ptx::Operand;
using ptx::Reg;
using ptx::Round;
using ptx::Space;
using ptx::SReg;
using ptx::Type;

}  // namespace ptxserve::kernels
