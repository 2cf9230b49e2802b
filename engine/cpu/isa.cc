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

const char* IsaName(Isa isa) { return isa == Isa::kAvx512 ? "avx512" : "avx2"; }

Isa DetectIsa() {
  static const Isa isa = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl")
                             ? Isa::kAvx512
                             : Isa::kAvx2;
  return isa;
}

Isa GemmIsa() { return GemmChoice().load(std::memory_order_relaxed); }

bool SetGemmIsa(Isa isa) {
  if (isa == Isa::kAvx512 && DetectIsa() != Isa::kAvx512) return false;
  GemmChoice().store(isa, std::memory_order_relaxed);
  return true;
}

}  // namespace ptxserve::cpu
