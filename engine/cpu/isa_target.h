// Compiling part of a file for more than the build target. The project builds for x86-64-v3
// (AVX2, FMA, F16C: CMake's PTXSERVE_MARCH), so one binary runs on every such machine; the
// AVX-512 kernels (gemm_avx512.cc, gemm_bf16.cc, gemm_quant_vnni.cc, gemm_quant_k_vnni.cc) are
// compiled for their instruction sets between PTXSERVE_TARGET_BEGIN and PTXSERVE_TARGET_END, and
// are only ever called after isa.cc's cpuid check (GemmIsa()) says the CPU has them.
//
// The pair goes after the file's includes, rather than compiling the file with -mavx512f:
// inline functions from headers (the standard library's too) are then still compiled for the
// baseline, so the linker cannot keep an AVX-512 copy of one of them for the whole program.
// Clang's form (an attribute pushed onto every function) does not reach into lambdas, so the
// kernels between the two use none.
//
// GCC 12's AVX-512 intrinsics start many results from _mm512_undefined_*(), a self-initialised
// variable that its (maybe-)uninitialized warnings flag once inlined into a kernel; they are
// off between the two (GCC judges an inlined warning by the settings where it was inlined:
// without this, gemm_avx512.cc gets dozens, with it none).
#pragma once

#define PTXSERVE_PRAGMA(...) _Pragma(#__VA_ARGS__)

// PTXSERVE_TARGET_BEGIN("avx512f,avx512vl") ... PTXSERVE_TARGET_END(): the functions defined
// between them are compiled for the instruction sets named (the target attribute's names,
// comma-separated).
#if defined(__clang__)
#define PTXSERVE_TARGET_BEGIN(isa) \
  PTXSERVE_PRAGMA(clang attribute push(__attribute__((target(isa))), apply_to = function))
#define PTXSERVE_TARGET_END() PTXSERVE_PRAGMA(clang attribute pop)
#else
#define PTXSERVE_TARGET_BEGIN(isa)                                \
  PTXSERVE_PRAGMA(GCC diagnostic push)                            \
  PTXSERVE_PRAGMA(GCC diagnostic ignored "-Wuninitialized")       \
  PTXSERVE_PRAGMA(GCC diagnostic ignored "-Wmaybe-uninitialized") \
  PTXSERVE_PRAGMA(GCC push_options)                               \
  PTXSERVE_PRAGMA(GCC target(isa))
#define PTXSERVE_TARGET_END() PTXSERVE_PRAGMA(GCC pop_options) PTXSERVE_PRAGMA(GCC diagnostic pop)
#endif
