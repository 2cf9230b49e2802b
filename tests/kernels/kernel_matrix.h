// The config matrix the kernel tests sweep: every generator over the shapes that
// matter (head_dim 64/128, GQA 1/4/8, block size 16/32, f32/f16/bf16 storage, split
// and ragged variants), each with a label naming its config; and the test kernel
// residual_add.h, which the driver tests load.
#pragma once

#include <vector>

#include "kernels/ptx/types.h"
#include "tests/kernels/ptxas_util.h"

namespace ptxserve::kernels::testing {

// Generates every module of the matrix for `target`; a generator error is returned as
// a module whose ptx is empty and whose label starts with "ERROR".
// `full` = false keeps one config per kernel variant (for extra targets).
std::vector<PtxModule> MatrixModules(const ptx::Target& target, bool full = true);

// The matrix's modules with what each config says of its kernel beside the PTX: whether it
// is a programmatic dependent launch (kernels::GridDependent).
struct MatrixKernel {
  PtxModule module;
  bool grid_dependent = false;
};
std::vector<MatrixKernel> MatrixKernels(const ptx::Target& target, bool full = true);

}  // namespace ptxserve::kernels::testing
