// Every kernel of the server, listed once. The list drives the registry (`ptxserve ptx`),
// and the tests hold the ptxas matrix, the golden PTX files and the GPU backend's kernel
// set to it; GeneratePtx(cfg) is how code that holds a Config generates its kernel.
//
// A kernel is its header and source (a Config deriving from KernelConfig, an Args struct,
// a generator and a launch function) plus one line here.
#pragma once

#include <string>
#include <type_traits>

#include "absl/status/statusor.h"
#include "kernels/argmax.h"
#include "kernels/decode_attention.h"
#include "kernels/embedding.h"
#include "kernels/flash_attention.h"
#include "kernels/gemm.h"
#include "kernels/gemm_quant.h"
#include "kernels/gemm_reduce.h"
#include "kernels/logprobs.h"
#include "kernels/penalties.h"
#include "kernels/rmsnorm.h"
#include "kernels/rope_kv.h"
#include "kernels/sampling.h"
#include "kernels/silu_mul.h"

namespace ptxserve::kernels {

template <class Config>
Config ConfigOf(absl::StatusOr<std::string> (*generate)(const Config&));

// One kernel: its generator, and from it the Config (whose kEntry names the kernel).
template <auto kGenerate>
struct Kernel {
  using Config = decltype(ConfigOf(kGenerate));
  static constexpr const char* kName = Config::kEntry;
  static absl::StatusOr<std::string> Generate(const Config& cfg) { return kGenerate(cfg); }
};

template <class... K>
struct KernelList {
  // Calls f(K{}) for each kernel, in list order.
  template <class F>
  static void ForEach(F&& f) {
    (f(K{}), ...);
  }
  template <class Config>
  static constexpr bool kHas = (std::is_same_v<typename K::Config, Config> || ...);
};

using AllKernels =
    KernelList<Kernel<&GenerateArgmax>, Kernel<&GenerateDecodeAttention>,
               Kernel<&GenerateEmbedding>, Kernel<&GenerateFlashAttention>, Kernel<&GenerateGemm>,
               Kernel<&GenerateGemmReduce>, Kernel<&GenerateQuantGemm>, Kernel<&GenerateLogprobs>,
               Kernel<&GeneratePenalties>, Kernel<&GenerateRmsNorm>, Kernel<&GenerateRopeKv>,
               Kernel<&GenerateSampling>, Kernel<&GenerateSiluMul>>;

template <class F>
void ForEachKernel(F&& f) {
  AllKernels::ForEach(f);
}

// The PTX of `cfg`'s kernel, from the listed generator for its Config.
template <class Config>
absl::StatusOr<std::string> GeneratePtx(const Config& cfg) {
  static_assert(AllKernels::kHas<Config>, "a kernel the backend builds is in AllKernels");
  absl::StatusOr<std::string> ptx;
  ForEachKernel([&](auto kernel) {
    if constexpr (std::is_same_v<typename decltype(kernel)::Config, Config>) {
      ptx = kernel.Generate(cfg);
    }
  });
  return ptx;
}

// Whether `cfg`'s kernel is a programmatic dependent launch: its PTX waits on
// griddepcontrol.wait, so it must be launched as one (cuLaunchKernelEx with the
// programmatic stream serialization attribute) for its prologue to overlap the previous
// kernel. Config::GridDependent() where a kernel can be one (the GEMVs on sm_90), else
// never; kernels_generate_test holds every listed kernel's PTX to it.
template <class Config>
bool GridDependent(const Config& cfg) {
  if constexpr (requires { cfg.GridDependent(); }) {
    return cfg.GridDependent();
  } else {
    return false;
  }
}

}  // namespace ptxserve::kernels
