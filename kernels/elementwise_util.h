// Shared skeleton of the flat elementwise kernels (silu_mul, and the test kernel
// tests/kernels/residual_add.h): each thread owns 4 consecutive elements, with 128-bit
// accesses when all 4 exist and a guarded scalar tail otherwise.
#pragma once

#include <functional>
#include <vector>

#include "kernels/common.h"

namespace ptxserve::kernels::gen {

inline constexpr int kElementwiseThreads = 256;

// Element-chunk index of this thread (ctaid.x * 256 + tid.x).
Reg ChunkIndex(KernelBuilder& kb);
// Calls body(first_element, count) once with count = 4 under "the chunk is whole"
// and 4 times with count = 1 for the partial last chunk, each guarded by its element
// being < n. `body` emits the loads, math and stores for `count` elements.
void ForChunk(KernelBuilder& kb, Reg chunk, Reg n,
              const std::function<void(Reg first, int count)>& body);
LaunchDims ElementwiseLaunch(int64_t n);

}  // namespace ptxserve::kernels::gen
