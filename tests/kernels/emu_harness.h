// Runs generated kernels on the PTX emulator (kernels/emu) for the numerical tests:
// device buffers, typed launch arguments, and the CPU-reference comparisons.
#pragma once

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "engine/model/dtype.h"
#include "gtest/gtest.h"
#include "kernels/common.h"
#include "kernels/emu/emulator.h"

namespace ptxserve::kernels::testing {

class EmuHarness {
 public:
  explicit EmuHarness(emu::EmulatorOptions opts = {});

  emu::Emulator& emu() { return emu_; }

  template <class T>
  uint64_t Upload(const std::vector<T>& v) {
    return UploadBytes(v.data(), v.size() * sizeof(T));
  }
  uint64_t UploadBytes(const void* data, size_t bytes);
  // An allocation left poisoned (0xff bytes: NaN floats), as device memory starts.
  uint64_t Alloc(size_t bytes);
  template <class T>
  std::vector<T> Download(uint64_t d, size_t n) {
    std::vector<T> v(n);
    DownloadBytes(v.data(), d, n * sizeof(T));
    return v;
  }
  void DownloadBytes(void* dst, uint64_t d, size_t bytes);

  // Loads `ptx` and runs its entry `entry` with `dims`; the status of the launch
  // (bounds violations, uninitialised reads and barrier misuse are errors).
  absl::Status Run(const std::string& ptx, const char* entry, const LaunchDims& dims,
                   const std::vector<emu::KernelArg>& args);

 private:
  emu::Emulator emu_;
};

inline emu::KernelArg Ptr(uint64_t p) { return emu::KernelArg::Of(p); }
inline emu::KernelArg U32(uint32_t v) { return emu::KernelArg::Of(v); }
inline emu::KernelArg F32(float v) { return emu::KernelArg::Of(v); }

std::vector<float> RandomFloats(std::mt19937& rng, size_t n, float lo = -1.0f, float hi = 1.0f);

// The model-side name of a kernel element type.
DType ToDType(ElemType t);
// The n values of type `t` at device address d, as f32.
std::vector<float> DownloadAs(EmuHarness& h, ElemType t, uint64_t d, size_t n);
// The unit roundoff a value of type `t` takes as it is stored (0 for f32: the tests' own f32
// tolerances cover it).
float UnitRoundoff(ElemType t);

// Element-wise |got - want| <= atol + rtol * |want|; reports the first few misses.
::testing::AssertionResult Near(const std::vector<float>& got, const std::vector<float>& want,
                                float atol, float rtol);

}  // namespace ptxserve::kernels::testing
