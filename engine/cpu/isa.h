// The instruction sets the CPU backend's hot kernels may use beyond the x86-64-v3 build
// target (AVX2, FMA, F16C), found by cpuid at run time, so one binary runs every
// x86-64-v3 machine and uses AVX-512 where the CPU has it.
#pragma once

namespace ptxserve::cpu {

// Each level includes the ones before it, so `GemmIsa() >= Isa::kAvx512` asks for a feature.
enum class Isa {
  kAvx2,        // the build target's AVX2/FMA/F16C
  kAvx512,      // + AVX-512 F and VL (512-bit FMAs, 32 vector registers)
  kAvx512Vnni,  // + AVX512-VNNI (vpdpbusd: 4 u8 x s8 products summed into each int32)
  kAvx512Bf16,  // + AVX512-BF16 and BW (vdpbf16ps: 2 bf16 x bf16 products added to each f32)
};

const char* IsaName(Isa isa);

// The best Isa this CPU supports (cpuid, read once).
Isa DetectIsa();

// The Isa the GEMM kernels (f32/f16/bf16, the bf16 dot-product one, and the q8_0/q4_0 integer
// one) use: DetectIsa()
// unless SetGemmIsa chose another.
Isa GemmIsa();

// Makes the GEMM kernels use `isa` from the next call on, for tests and benchmarks that
// compare variants; false (nothing changed) when the CPU lacks it (isa > DetectIsa()). Not for use
// while another thread runs a GEMM.
bool SetGemmIsa(Isa isa);

}  // namespace ptxserve::cpu
