// Bugs the emulator must report as errors naming kernel, block, thread, PTX line and
// address: barrier misuse, out-of-bounds and misaligned accesses, uninitialised registers,
// bad shuffle masks, runaway loops, and malformed or unsupported PTX.
#include <gmock/gmock.h>

#include <cstring>
#include <random>
#include <regex>
#include <sstream>

#include "tests/emu/emu_test_util.h"

namespace ptxserve::emu::testing {
namespace {

using ::testing::HasSubstr;

TEST(EmuErrors, EarlyExitBeforeBarrierIsReportedNotAHang) {
  Emulator emu;
  const FunctionHandle f = Load(emu, "block_reduce", "early_exit_barrier");
  const std::vector<float> in(256, 1.0f);
  const uint64_t din = Upload(emu, in), out = *emu.Alloc(256 * 4);
  const absl::Status st = emu.Launch(f, {1, 1, 1}, {256, 1, 1}, 0, {Ptr(din), Ptr(out), U32(200)});
  ASSERT_FALSE(st.ok());
  EXPECT_THAT(st.message(), HasSubstr("early_exit_barrier"));
  EXPECT_THAT(st.message(), HasSubstr("block (0,0,0)"));
  EXPECT_THAT(st.message(), HasSubstr("200 of 256 threads wait"));
  EXPECT_THAT(st.message(),
              HasSubstr("at line " + std::to_string(LineOf("block_reduce", "bar.sync 0",
                                                           "early_exit_barrier("))));
  EXPECT_THAT(st.message(), HasSubstr("56 threads exited"));
  EXPECT_THAT(st.message(), HasSubstr("thread (200,0,0)"));
  EXPECT_THAT(st.message(),
              HasSubstr(Line(LineOf("block_reduce", "@%p1 exit", "early_exit_barrier("))));
  // With every thread in range the same kernel is fine.
  EXPECT_TRUE(emu.Launch(f, {1, 1, 1}, {256, 1, 1}, 0, {Ptr(din), Ptr(out), U32(256)}).ok());
}

TEST(EmuErrors, BarrierInsideDivergedWarp) {
  Emulator emu;
  const uint64_t out = *emu.Alloc(64 * 4);
  const absl::Status st = emu.Launch(Load(emu, "block_reduce", "diverged_barrier"), {1, 1, 1},
                                     {64, 1, 1}, 0, {Ptr(out)});
  ASSERT_FALSE(st.ok());
  EXPECT_THAT(st.message(), HasSubstr("diverged warp"));
  EXPECT_THAT(st.message(),
              HasSubstr(Line(LineOf("block_reduce", "bar.sync 0", "diverged_barrier("))));
}

TEST(EmuErrors, OutOfBoundsGlobalLoadNamesLineAndAddress) {
  Emulator emu;
  const FunctionHandle f = Load(emu, "errors", "copy_unguarded");
  const uint64_t in = *emu.Alloc(100 * 4), out = *emu.Alloc(128 * 4);
  const absl::Status st = emu.Launch(f, {1, 1, 1}, {128, 1, 1}, 0, {Ptr(in), Ptr(out)});
  ASSERT_FALSE(st.ok());
  EXPECT_THAT(st.message(), HasSubstr("kernel copy_unguarded"));
  EXPECT_THAT(st.message(), HasSubstr("thread (100,0,0)"));
  EXPECT_THAT(st.message(), HasSubstr(Line(LineOf("errors", "ld.global.f32 %f1"))));
  char addr[32];
  std::snprintf(addr, sizeof(addr), "0x%llx", static_cast<unsigned long long>(in + 400));
  EXPECT_THAT(st.message(), HasSubstr(addr));
  EXPECT_THAT(st.message(), HasSubstr("out-of-bounds global load of 4 bytes"));
  EXPECT_THAT(st.message(), HasSubstr("past the end of the allocation"));
}

TEST(EmuErrors, SharedOutOfBounds) {
  Emulator emu;
  const uint64_t out = *emu.Alloc(4);
  const absl::Status st =
      emu.Launch(Load(emu, "errors", "shared_overflow"), {1, 1, 1}, {128, 1, 1}, 0, {Ptr(out)});
  ASSERT_FALSE(st.ok());
  EXPECT_THAT(st.message(), HasSubstr("thread (64,0,0)"));
  EXPECT_THAT(st.message(),
              HasSubstr("out-of-bounds shared store of 4 bytes at shared address 0x100"));
  EXPECT_THAT(st.message(), HasSubstr("256 bytes of shared memory"));
  EXPECT_THAT(st.message(), HasSubstr(Line(LineOf("errors", "st.shared.f32 [%r4]"))));
}

TEST(EmuErrors, UninitialisedRegisterRead) {
  Emulator emu;
  const uint64_t out = *emu.Alloc(32 * 4);
  const absl::Status st =
      emu.Launch(Load(emu, "errors", "uninit_read"), {1, 1, 1}, {32, 1, 1}, 0, {Ptr(out)});
  ASSERT_FALSE(st.ok());
  EXPECT_THAT(st.message(), HasSubstr("register %r3"));
  EXPECT_THAT(st.message(), HasSubstr("never wrote"));
  EXPECT_THAT(st.message(), HasSubstr("thread (8,0,0)"));  // lanes 0..7 wrote it
  EXPECT_THAT(st.message(), HasSubstr(Line(LineOf("errors", "add.s32 %r4, %r3, %r1"))));
}

TEST(EmuErrors, MisalignedVectorLoad) {
  Emulator emu;
  const uint64_t in = *emu.Alloc(64), out = *emu.Alloc(64);
  const absl::Status st = emu.Launch(Load(emu, "errors", "misaligned_v4"), {1, 1, 1}, {1, 1, 1}, 0,
                                     {Ptr(in), Ptr(out)});
  ASSERT_FALSE(st.ok());
  EXPECT_THAT(st.message(), HasSubstr("misaligned load"));
  EXPECT_THAT(st.message(), HasSubstr("not 16-byte aligned"));
  EXPECT_THAT(st.message(), HasSubstr(Line(LineOf("errors", "ld.global.v4.f32 {%f1"))));
}

TEST(EmuErrors, ShuffleMaskNamingLanesThatDoNotExecute) {
  Emulator emu;
  const uint64_t out = *emu.Alloc(32 * 4);
  const absl::Status st =
      emu.Launch(Load(emu, "errors", "shfl_diverged"), {1, 1, 1}, {32, 1, 1}, 0, {Ptr(out)});
  ASSERT_FALSE(st.ok());
  EXPECT_THAT(st.message(), HasSubstr("shfl.sync: membermask 0xffffffff names lanes"));
  EXPECT_THAT(st.message(), HasSubstr("missing 0xffff0000"));
  EXPECT_THAT(st.message(), HasSubstr(Line(LineOf("errors", "shfl.sync.bfly"))));
}

TEST(EmuErrors, FullMaskShuffleInPartialWarp) {
  // 48 threads: the second warp has 16 lanes, so a full-mask shuffle names missing lanes.
  Emulator emu;
  const std::vector<float> in(64, 1.0f);
  const uint64_t din = Upload(emu, in), out = *emu.Alloc(64 * 4);
  const absl::Status st = emu.Launch(Load(emu, "warp_reduce", "warp_sum_broadcast"), {1, 1, 1},
                                     {48, 1, 1}, 0, {Ptr(din), Ptr(out)});
  ASSERT_FALSE(st.ok());
  EXPECT_THAT(st.message(), HasSubstr("thread (32,0,0)"));
  EXPECT_THAT(st.message(), HasSubstr("membermask 0xffffffff"));
}

TEST(EmuErrors, DivergentBraUni) {
  Emulator emu;
  const uint64_t out = *emu.Alloc(32 * 4);
  const absl::Status st =
      emu.Launch(Load(emu, "errors", "divergent_bra_uni"), {1, 1, 1}, {32, 1, 1}, 0, {Ptr(out)});
  ASSERT_FALSE(st.ok());
  EXPECT_THAT(st.message(), HasSubstr("bra.uni taken by lanes 0x0000001f but not by 0xffffffe0"));
  EXPECT_THAT(st.message(), HasSubstr(Line(LineOf("errors", "@%p1 bra.uni $L_skip"))));
}

TEST(EmuErrors, RunawayLoopHitsTheInstructionLimit) {
  EmulatorOptions opts;
  opts.max_warp_instructions = 100000;
  Emulator emu(opts);
  const uint64_t out = *emu.Alloc(4);
  const absl::Status st =
      emu.Launch(Load(emu, "errors", "infinite_loop"), {1, 1, 1}, {32, 1, 1}, 0, {Ptr(out)});
  ASSERT_FALSE(st.ok());
  EXPECT_THAT(st.message(), HasSubstr("instruction limit"));
}

TEST(EmuErrors, LaunchArgumentsAreChecked) {
  Emulator emu;
  const FunctionHandle f = Load(emu, "vector_add");
  const uint64_t p = *emu.Alloc(16);
  absl::Status st = emu.Launch(f, {1, 1, 1}, {32, 1, 1}, 0, {Ptr(p), Ptr(p), Ptr(p)});
  EXPECT_THAT(st.message(), HasSubstr("3 arguments given, the kernel has 4"));
  st = emu.Launch(f, {1, 1, 1}, {32, 1, 1}, 0, {Ptr(p), Ptr(p), Ptr(p), Ptr(p)});
  EXPECT_THAT(st.message(), HasSubstr("argument 3 (n) has 8 bytes, the parameter needs 4"));
  st = emu.Launch(f, {1, 1, 1}, {1025, 1, 1}, 0, {Ptr(p), Ptr(p), Ptr(p), U32(1)});
  EXPECT_THAT(st.message(), HasSubstr("invalid block"));
  st = emu.Launch(f, {0, 1, 1}, {32, 1, 1}, 0, {Ptr(p), Ptr(p), Ptr(p), U32(1)});
  EXPECT_THAT(st.message(), HasSubstr("invalid grid"));
  st = emu.Launch(f, {1, 1, 1}, {32, 1, 1}, 300 * 1024, {Ptr(p), Ptr(p), Ptr(p), U32(1)});
  EXPECT_THAT(st.message(), HasSubstr("shared memory"));
  EXPECT_FALSE(emu.GetFunction(ModuleHandle{999}, "x").ok());
}

absl::Status LoadText(const std::string& body, const std::string& decls = "") {
  Emulator emu;
  const std::string ptx = ".version 7.8\n.target sm_80\n.address_size 64\n" + decls +
                          ".visible .entry k(.param .u64 p)\n{\n.reg .b32 %r<4>;\n"
                          ".reg .f32 %f<4>;\n.reg .pred %p<2>;\n.reg .b64 %rd<2>;\n" +
                          body + "\nret;\n}\n";
  return emu.LoadModule(ptx).status();
}

TEST(EmuErrors, ParseAndDecodeErrorsNameTheLine) {
  // Line 10 is the first line of `body`.
  absl::Status st = LoadText("frobnicate.b32 %r1, %r2;");
  EXPECT_THAT(st.message(), HasSubstr("PTX line 10"));
  EXPECT_THAT(st.message(), HasSubstr("unknown or unsupported instruction 'frobnicate'"));
  st = LoadText("add.u32 %r1, %r2, %r3;\nadd.wrap.u32 %r1, %r2, %r3;");
  EXPECT_THAT(st.message(), HasSubstr("PTX line 11"));
  EXPECT_THAT(st.message(), HasSubstr("unknown modifier '.wrap'"));
  st = LoadText("add.rm.f32 %f1, %f2, %f3;");
  EXPECT_THAT(st.message(), HasSubstr("unsupported combination"));
  st = LoadText("mul.u32 %r1, %r2, %r3;");
  EXPECT_THAT(st.message(), HasSubstr("needs .lo, .hi or .wide"));
  st = LoadText("add.u32 %r1, %r9, %r3;");
  EXPECT_THAT(st.message(), HasSubstr("undeclared register"));
  st = LoadText("bra $L_nowhere;");
  EXPECT_THAT(st.message(), HasSubstr("unknown label '$L_nowhere'"));
  st = LoadText("cvt.rz.s32.f32 %r1, %f1;");
  EXPECT_THAT(st.message(), HasSubstr("needs .rni, .rzi, .rmi or .rpi"));
  st = LoadText("mov.f32 %f1, 1;");
  EXPECT_THAT(st.message(), HasSubstr("integer literal"));
  st = LoadText("ld.global.f32 %f1, [%rd1-4];");
  EXPECT_THAT(st.message(), HasSubstr("PTX line 10"));
  st = LoadText("shfl.down.b32 %r1, %r2, 1, 31;");
  EXPECT_THAT(st.message(), HasSubstr("use shfl.sync"));
  st = LoadText("ld.const.f32 %f1, [%rd1];");
  EXPECT_THAT(st.message(), HasSubstr(".const state space is not supported"));
  st = LoadText("add.u32 %r1, %r2, %r3 /* unterminated");
  EXPECT_THAT(st.message(), HasSubstr("unterminated /* comment"));
  st = LoadText("", ".func foo()\n{\nret;\n}\n");
  EXPECT_THAT(st.message(), HasSubstr(".func"));
  st = LoadText("mov.u32 %r1, %f1;");  // ptxas: "Arguments mismatch"
  EXPECT_THAT(st.message(), HasSubstr("register %f1 (.f32) cannot be a .u32 operand"));
  EXPECT_TRUE(LoadText("mov.b32 %r1, %f1;\nadd.f32 %f1, %r1, %f2;").ok());
  st = LoadText("mov.u64 %rd1, %r1;");
  EXPECT_THAT(st.message(), HasSubstr("cannot be a .u64 operand"));
  EXPECT_TRUE(LoadText("ld.param.u64 %rd1, [p];").ok());
  st = LoadText("ld.param.u64 %rd1, [q];");
  EXPECT_THAT(st.message(), HasSubstr("unknown parameter 'q'"));
}

}  // namespace
}  // namespace ptxserve::emu::testing

namespace ptxserve::emu::testing {
namespace {

// Deterministic mutations of the test kernels (dropped, duplicated, swapped or truncated
// lines, changed numbers): loading and launching must never crash or hang, and every
// failure must say where it happened.
TEST(EmuErrors, MutatedKernelsFailCleanly) {
  std::mt19937 rng(1234);
  const std::vector<std::string> files = {"vector_add", "block_reduce", "warp_reduce", "errors",
                                          "vec4",       "half",         "atomics",     "diverge"};
  int loaded = 0;
  for (int it = 0; it < 150; ++it) {
    std::vector<std::string> lines;
    {
      std::stringstream ss(ReadPtx(files[rng() % files.size()]));
      for (std::string l; std::getline(ss, l);) lines.push_back(l);
    }
    for (int k = 0; k < 2; ++k) {
      const size_t i = rng() % lines.size();
      switch (rng() % 5) {
        case 0:
          lines.erase(lines.begin() + static_cast<std::ptrdiff_t>(i));
          break;
        case 1:
          lines.insert(lines.begin() + static_cast<std::ptrdiff_t>(i), lines[rng() % lines.size()]);
          break;
        case 2:
          std::swap(lines[i], lines[rng() % lines.size()]);
          break;
        case 3:
          lines[i] = lines[i].substr(0, rng() % (lines[i].size() + 1));
          break;
        default:
          for (char& c : lines[i]) {
            if (c >= '0' && c <= '9') {
              c = static_cast<char>('0' + rng() % 10);
              break;
            }
          }
      }
    }
    std::string text;
    for (const auto& l : lines) text += l + "\n";
    EmulatorOptions opts;
    opts.max_warp_instructions = 100000;
    Emulator emu(opts);
    auto m = emu.LoadModule(text);
    if (!m.ok()) {
      EXPECT_THAT(m.status().message(), HasSubstr("PTX")) << m.status();
      continue;
    }
    ++loaded;
    const std::regex entry(R"(\.entry\s+([A-Za-z_$][A-Za-z0-9_$]*))");
    for (auto e = std::sregex_iterator(text.begin(), text.end(), entry);
         e != std::sregex_iterator(); ++e) {
      const std::string name = (*e)[1].str();
      auto f = emu.GetFunction(*m, name);
      if (!f.ok()) continue;
      const auto params = emu.GetParams(*f);
      ASSERT_TRUE(params.ok());
      std::vector<KernelArg> args;
      for (const ParamDesc& p : *params) {
        KernelArg a;
        a.bytes.resize(p.size);
        const uint64_t v = p.size == 8 ? *emu.Alloc(1 + rng() % 8192) : rng() % 300;
        std::memcpy(a.bytes.data(), &v, std::min<size_t>(p.size, 8));
        args.push_back(a);
      }
      const absl::Status st =
          emu.Launch(*f, {1 + static_cast<uint32_t>(rng() % 3), 1, 1},
                     {1 + static_cast<uint32_t>(rng() % 256), 1, 1}, 1024, args);
      if (!st.ok()) {
        EXPECT_THAT(st.message(), HasSubstr(name)) << st;
      }
    }
  }
  EXPECT_GT(loaded, 10);
}

}  // namespace
}  // namespace ptxserve::emu::testing

namespace ptxserve::emu::testing {
namespace {

// race.ptx's `entry` (a buffer and a 0 argument) on one block of two warps, in an emulator
// with `opts` (a race check turned off).
absl::Status LaunchRaceUnchecked(const EmulatorOptions& opts, const std::string& entry) {
  Emulator emu(opts);
  const uint64_t buf = *emu.Alloc(65 * 4);
  return emu.Launch(Load(emu, "race", entry), {1, 1, 1}, {64, 1, 1}, 0, {Ptr(buf), U32(0)});
}

TEST(EmuErrors, SharedMemoryRacesBetweenWarps) {
  Emulator emu;
  const uint64_t out = *emu.Alloc(64 * 4);
  const FunctionHandle raw = Load(emu, "race", "raw_race");
  absl::Status st = emu.Launch(raw, {1, 1, 1}, {64, 1, 1}, 0, {Ptr(out), U32(0)});
  ASSERT_FALSE(st.ok());
  EXPECT_THAT(st.message(), HasSubstr("shared-memory race: warp 1 reads shared address 0x0"));
  EXPECT_THAT(st.message(), HasSubstr("warp 0 wrote at PTX line " +
                                      std::to_string(LineOf("race", "@%p1 st.shared.u32"))));
  EXPECT_THAT(st.message(), HasSubstr("thread (32,0,0)"));
  EXPECT_THAT(st.message(), HasSubstr(Line(LineOf("race", "ld.shared.u32 %r6, [slot]"))));
  ASSERT_TRUE(emu.Launch(raw, {1, 1, 1}, {64, 1, 1}, 0, {Ptr(out), U32(1)}).ok());
  for (uint32_t v : Download<uint32_t>(emu, out, 64)) EXPECT_EQ(v, 0u);

  st = emu.Launch(Load(emu, "race", "war_race"), {1, 1, 1}, {64, 1, 1}, 0, {Ptr(out)});
  ASSERT_FALSE(st.ok());
  EXPECT_THAT(st.message(), HasSubstr("warp 1 writes shared address 0x4, which warp 0 read"));

  // Every reader of the epoch counts, not only the last one (warp 1 itself here).
  st = emu.Launch(Load(emu, "race", "war_many_readers"), {1, 1, 1}, {64, 1, 1}, 0, {Ptr(out)});
  ASSERT_FALSE(st.ok());
  EXPECT_THAT(st.message(), HasSubstr("thread (32,0,0), " +
                                      Line(LineOf("race", "@%p1 st.shared.u32 [slot], 7"))));
  EXPECT_THAT(st.message(),
              HasSubstr("warp 1 writes shared address 0x0, which warp 0 read at " +
                        Line(LineOf("race", "ld.shared.u32 %r2, [slot]", "war_many_readers("))));

  // Two warps storing different values: the result would depend on the warps' order.
  const FunctionHandle waw = Load(emu, "race", "waw_race");
  st = emu.Launch(waw, {1, 1, 1}, {64, 1, 1}, 0, {Ptr(out), U32(0)});
  ASSERT_FALSE(st.ok());
  EXPECT_THAT(st.message(), HasSubstr("thread (32,0,0)"));
  EXPECT_THAT(st.message(),
              HasSubstr("warp 1 writes shared address 0x0, which warp 0 wrote a different value "
                        "to at " +
                        Line(LineOf("race", "@%p1 st.shared.u32 [slot], %r5"))));
  // Storing the same value is benign.
  ASSERT_TRUE(emu.Launch(waw, {1, 1, 1}, {64, 1, 1}, 0, {Ptr(out), U32(1)}).ok());
  for (uint32_t v : Download<uint32_t>(emu, out, 64)) EXPECT_EQ(v, 1u);

  // The check can be turned off; the emulator then runs warps one after another.
  EmulatorOptions opts;
  opts.detect_shared_races = false;
  EXPECT_TRUE(LaunchRaceUnchecked(opts, "raw_race").ok());
}

TEST(EmuErrors, GlobalMemoryRacesBetweenWarpsOfABlock) {
  Emulator emu;
  const uint64_t buf = *emu.Alloc(65 * 4);
  const FunctionHandle raw = Load(emu, "race", "global_raw");
  absl::Status st = emu.Launch(raw, {1, 1, 1}, {64, 1, 1}, 0, {Ptr(buf), U32(0)});
  ASSERT_FALSE(st.ok());
  char addr[64];
  std::snprintf(addr, sizeof(addr), "warp 1 reads global address 0x%llx, which warp 0 wrote at ",
                static_cast<unsigned long long>(buf));
  EXPECT_THAT(st.message(), HasSubstr(addr + Line(LineOf("race", "@%p1 st.global.u32 [%rd1], 5"))));
  EXPECT_THAT(st.message(),
              HasSubstr("thread (32,0,0), " + Line(LineOf("race", "ld.global.u32 %r3, [%rd1]"))));
  ASSERT_TRUE(emu.Launch(raw, {2, 1, 1}, {64, 1, 1}, 0, {Ptr(buf), U32(1)}).ok());

  // Reads are not tracked: block 0 runs warp 0's read before warp 1's store and passes,
  // but block 1 runs its warps in the other order, where the read sees the store.
  st = emu.Launch(Load(emu, "race", "global_war"), {2, 1, 1}, {64, 1, 1}, 0, {Ptr(buf)});
  ASSERT_FALSE(st.ok());
  EXPECT_THAT(st.message(), HasSubstr("block (1,0,0), thread (0,0,0)"));
  EXPECT_THAT(st.message(), HasSubstr("warp 0 reads global address"));
  EXPECT_THAT(st.message(), HasSubstr("which warp 1 wrote at " +
                                      Line(LineOf("race", "@%p2 st.global.u32 [%rd1], 9"))));

  st = emu.Launch(Load(emu, "race", "global_waw"), {1, 1, 1}, {64, 1, 1}, 0, {Ptr(buf)});
  ASSERT_FALSE(st.ok());
  EXPECT_THAT(st.message(), HasSubstr("warp 1 writes global address"));
  EXPECT_THAT(st.message(), HasSubstr("which warp 0 wrote a different value to"));

  EmulatorOptions opts;
  opts.detect_global_races = false;
  EXPECT_TRUE(LaunchRaceUnchecked(opts, "global_raw").ok());
}

}  // namespace
}  // namespace ptxserve::emu::testing
