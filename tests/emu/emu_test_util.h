// Helpers for the PTX emulator tests: loading the hand-written kernels in tests/emu/ptx,
// device buffers, and launching with typed arguments.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/emu/emulator.h"

namespace ptxserve::emu::testing {

// Text of tests/emu/ptx/<name>.ptx (fails the test when missing).
std::string ReadPtx(const std::string& name);
// Every .ptx file under tests/emu/ptx.
std::vector<std::string> AllPtxFiles();

// Loads <file>.ptx and returns the .entry `entry` (default: same name as the file).
FunctionHandle Load(Emulator& emu, const std::string& file, const std::string& entry = "");

// Line of the first occurrence of `needle` in tests/emu/ptx/<file>.ptx after `after`.
int LineOf(const std::string& file, const std::string& needle, const std::string& after = "");
// "PTX line <n>", as error messages name a line.
std::string Line(int n);

template <class T>
uint64_t Upload(Emulator& emu, const std::vector<T>& v) {
  auto d = emu.Alloc(v.size() * sizeof(T));
  EXPECT_TRUE(d.ok()) << d.status();
  EXPECT_TRUE(emu.CopyHtoD(*d, v.data(), v.size() * sizeof(T)).ok());
  return *d;
}

template <class T>
std::vector<T> Download(Emulator& emu, uint64_t d, size_t n) {
  std::vector<T> v(n);
  auto st = emu.CopyDtoH(v.data(), d, n * sizeof(T));
  EXPECT_TRUE(st.ok()) << st;
  return v;
}

inline KernelArg Ptr(uint64_t p) { return KernelArg::Of(p); }
inline KernelArg U32(uint32_t v) { return KernelArg::Of(v); }
inline KernelArg F32(float v) { return KernelArg::Of(v); }

}  // namespace ptxserve::emu::testing
