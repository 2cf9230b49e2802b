#include "engine/cpu/isa.h"

#include <cpuid.h>

#include <atomic>

namespace ptxserve::cpu {
namespace {

// The GEMM's choice; read on every panel, so an atomic rather than a lock.
std::atomic<Isa>& GemmChoice() {
  static std::atomic<Isa> choice{DetectIsa()};
  return choice;
}

// cpuid leaf 7, subleaf 1, EAX bit 5: AVX512-BF16, read from cpuid itself rather than relying on
// each compiler's __builtin_cpu_supports list to know this newer leaf. The OS's saving of the
// AVX-512 registers is already established by __builtin_cpu_supports("avx512f"), which checks
// XCR0.
bool HasAvx512Bf16() {
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (__get_cpuid_count(7, 1, &eax, &ebx, &ecx, &edx) == 0) return false;
  return (eax & (1u << 5)) != 0;
}

}  // namespace

const char* IsaName(Isa isa) {
  switch (isa) {
    case Isa::kAvx2:
      return "avx2";
    case Isa::kAvx512:
      return "avx512";
    case Isa::kAvx512Vnni:
      return "avx512_vnni";
    case Isa::kAvx512Bf16:
      return "avx512_bf16";
  }
  return "unknown";
}

Isa DetectIsa() {
  static const Isa isa = [] {
    if (!__builtin_cpu_supports("avx512f") || !__builtin_cpu_supports("avx512vl")) {
      return Isa::kAvx2;
    }
    if (!__builtin_cpu_supports("avx512vnni")) return Isa::kAvx512;
    // Every CPU with AVX512-BF16 has BW (its masked 16-bit loads); checked all the same.
    return __builtin_cpu_supports("avx512bw") && HasAvx512Bf16() ? Isa::kAvx512Bf16
                                                                 : Isa::kAvx512Vnni;
  }();
  return isa;
}

Isa GemmIsa() { return GemmChoice().load(std::memory_order_relaxed); }

bool SetGemmIsa(Isa isa) {
  if (isa > DetectIsa()) return false;
  GemmChoice().store(isa, std::memory_order_relaxed);
  return true;
}

}  // namespace ptxserve::cpu
