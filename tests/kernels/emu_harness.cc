#include "tests/kernels/emu_harness.h"

#include <cmath>
#include <sstream>

namespace ptxserve::kernels::testing {

EmuHarness::EmuHarness(emu::EmulatorOptions opts) : emu_(opts) {}

uint64_t EmuHarness::UploadBytes(const void* data, size_t bytes) {
  const uint64_t d = Alloc(bytes);
  EXPECT_TRUE(emu_.CopyHtoD(d, data, bytes).ok());
  return d;
}

uint64_t EmuHarness::Alloc(size_t bytes) {
  absl::StatusOr<uint64_t> d = emu_.Alloc(std::max<size_t>(bytes, 4));
  EXPECT_TRUE(d.ok()) << d.status();
  return d.ok() ? *d : 0;
}

void EmuHarness::DownloadBytes(void* dst, uint64_t d, size_t bytes) {
  const absl::Status st = emu_.CopyDtoH(dst, d, bytes);
  EXPECT_TRUE(st.ok()) << st;
}

absl::Status EmuHarness::Run(const std::string& ptx, const char* entry, const LaunchDims& dims,
                             const std::vector<emu::KernelArg>& args) {
  absl::StatusOr<emu::ModuleHandle> m = emu_.LoadModule(ptx);
  if (!m.ok()) return m.status();
  absl::StatusOr<emu::FunctionHandle> f = emu_.GetFunction(*m, entry);
  if (!f.ok()) return f.status();
  const absl::Status st =
      emu_.Launch(*f, {dims.grid[0], dims.grid[1], dims.grid[2]},
                  {dims.block[0], dims.block[1], dims.block[2]}, dims.shared_bytes, args);
  (void)emu_.UnloadModule(*m);
  return st;
}

std::vector<float> RandomFloats(std::mt19937& rng, size_t n, float lo, float hi) {
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

::testing::AssertionResult Near(const std::vector<float>& got, const std::vector<float>& want,
                                float atol, float rtol) {
  if (got.size() != want.size()) {
    return ::testing::AssertionFailure() << "size " << got.size() << " vs " << want.size();
  }
  std::ostringstream misses;
  int bad = 0;
  double worst = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double err = std::fabs(static_cast<double>(got[i]) - want[i]);
    const double tol = atol + rtol * std::fabs(want[i]);
    if (!(err <= tol)) {  // NaN fails too
      if (bad < 8) misses << "\n  [" << i << "] got " << got[i] << " want " << want[i];
      ++bad;
    }
    if (err > worst || std::isnan(err)) worst = err;
  }
  if (bad == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << bad << " of " << got.size() << " elements out of tolerance (worst " << worst << ")"
         << misses.str();
}

DType ToDType(ElemType t) {
  return t == ElemType::kF32 ? DType::kF32 : (t == ElemType::kF16 ? DType::kF16 : DType::kBF16);
}

std::vector<float> DownloadAs(EmuHarness& h, ElemType t, uint64_t d, size_t n) {
  if (t == ElemType::kF32) return h.Download<float>(d, n);
  const std::vector<uint8_t> bytes = h.Download<uint8_t>(d, n * 2);
  std::vector<float> v(n);
  ConvertToFloat(ToDType(t), bytes.data(), n, v.data());
  return v;
}

float UnitRoundoff(ElemType t) {
  return t == ElemType::kF32 ? 0.0f : t == ElemType::kF16 ? 0x1p-11f : 0x1p-8f;
}

}  // namespace ptxserve::kernels::testing
