#include "engine/cpu/isa.h"

#include <atomic>

namespace ptxserve::cpu {
namespace {

// The GEMM's choice; read on every panel, so an atomic rather than a lock.
std::atomic<Isa>& GemmChoice() {
  static std::atomic<Isa> choice{DetectIsa()};
  return choice;
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
  }
  return "unknown";
}

Isa DetectIsa() {
  static const Isa isa = [] {
    if (!__builtin_cpu_supports("avx512f") || !__builtin_cpu_supports("avx512vl")) {
      return Isa::kAvx2;
    }
    return __builtin_cpu_supports("avx512vnni") ? Isa::kAvx512Vnni : Isa::kAvx512;
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
