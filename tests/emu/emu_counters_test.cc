// The emulator's per-launch counters (kernels/emu/counters.h) on hand-written kernels whose
// figures follow from the hardware's rules by hand: coalesced and strided global access,
// vector width, shared-memory bank conflicts and broadcast, DRAM sectors counted once per
// launch across warps, blocks and host threads, the instruction mix and tensor FLOPs.
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "kernels/emu/cta_sample.h"
#include "tests/emu/emu_test_util.h"

namespace ptxserve::emu::testing {
namespace {

constexpr char kHeader[] = ".version 7.8\n.target sm_80\n.address_size 64\n";

// out[i] = in[i * stride] for the global thread index i (f32).
constexpr char kStridedCopy[] = R"(
.visible .entry strided_copy(.param .u64 in, .param .u64 out, .param .u32 stride)
{
    .reg .b32 %r<6>;
    .reg .f32 %f<2>;
    .reg .b64 %rd<8>;
    ld.param.u64 %rd1, [in];
    ld.param.u64 %rd2, [out];
    ld.param.u32 %r1, [stride];
    mov.u32 %r2, %ctaid.x;
    mov.u32 %r3, %ntid.x;
    mov.u32 %r4, %tid.x;
    mad.lo.s32 %r5, %r2, %r3, %r4;
    mul.lo.u32 %r1, %r5, %r1;
    mul.wide.u32 %rd3, %r1, 4;
    add.s64 %rd4, %rd1, %rd3;
    ld.global.f32 %f1, [%rd4];
    mul.wide.u32 %rd5, %r5, 4;
    add.s64 %rd6, %rd2, %rd5;
    st.global.f32 [%rd6], %f1;
    ret;
}
)";

// out[i] = in[i] with 16-byte loads and stores (4 floats per thread).
constexpr char kCopyV4[] = R"(
.visible .entry copy_v4(.param .u64 in, .param .u64 out)
{
    .reg .b32 %r<2>;
    .reg .f32 %f<4>;
    .reg .b64 %rd<6>;
    ld.param.u64 %rd1, [in];
    ld.param.u64 %rd2, [out];
    mov.u32 %r1, %tid.x;
    mul.wide.u32 %rd3, %r1, 16;
    add.s64 %rd4, %rd1, %rd3;
    add.s64 %rd5, %rd2, %rd3;
    ld.global.v4.f32 {%f0, %f1, %f2, %f3}, [%rd4];
    st.global.v4.f32 [%rd5], {%f0, %f1, %f2, %f3};
    ret;
}
)";

// Every thread of every block reads in[tid.x % 32]: 128 bytes however large the grid.
constexpr char kSameRow[] = R"(
.visible .entry same_row(.param .u64 in, .param .u64 out)
{
    .reg .b32 %r<7>;
    .reg .f32 %f<2>;
    .reg .b64 %rd<6>;
    ld.param.u64 %rd1, [in];
    ld.param.u64 %rd2, [out];
    mov.u32 %r1, %tid.x;
    and.b32 %r2, %r1, 31;
    mul.wide.u32 %rd3, %r2, 4;
    add.s64 %rd4, %rd1, %rd3;
    ld.global.f32 %f1, [%rd4];
    mov.u32 %r3, %ctaid.x;
    mov.u32 %r4, %ntid.x;
    mad.lo.s32 %r5, %r3, %r4, %r1;
    mul.wide.u32 %rd5, %r5, 4;
    add.s64 %rd5, %rd2, %rd5;
    st.global.f32 [%rd5], %f1;
    ret;
}
)";

// One warp: thread t stores word t of a shared array (conflict-free), then loads word
// t * stride (stride 0: all lanes one word, a broadcast) and writes it to out[t].
constexpr char kBankStride[] = R"(
.visible .entry bank_stride(.param .u64 out, .param .u32 stride)
{
    .shared .align 16 .b8 buf[4096];
    .reg .b32 %r<10>;
    .reg .b64 %rd<4>;
    ld.param.u64 %rd1, [out];
    ld.param.u32 %r1, [stride];
    mov.u32 %r2, %tid.x;
    mov.u32 %r3, buf;
    shl.b32 %r4, %r2, 2;
    add.s32 %r5, %r3, %r4;
    st.shared.u32 [%r5], %r2;
    bar.sync 0;
    mul.lo.u32 %r6, %r2, %r1;
    shl.b32 %r7, %r6, 2;
    add.s32 %r8, %r3, %r7;
    ld.shared.u32 %r9, [%r8];
    mul.wide.u32 %rd2, %r2, 4;
    add.s64 %rd3, %rd1, %rd2;
    st.global.u32 [%rd3], %r9;
    ret;
}
)";

// One warp: 16-byte shared loads, lane l at byte 16 * l * stride.
constexpr char kBankV4[] = R"(
.visible .entry bank_v4(.param .u64 out, .param .u32 stride)
{
    .shared .align 16 .b8 buf[4096];
    .reg .b32 %r<8>;
    .reg .f32 %f<4>;
    .reg .b64 %rd<4>;
    ld.param.u64 %rd1, [out];
    ld.param.u32 %r1, [stride];
    mov.u32 %r2, %tid.x;
    mul.lo.u32 %r3, %r2, %r1;
    shl.b32 %r4, %r3, 4;
    mov.u32 %r5, buf;
    add.s32 %r6, %r5, %r4;
    ld.shared.v4.f32 {%f0, %f1, %f2, %f3}, [%r6];
    add.f32 %f0, %f0, %f1;
    fma.rn.f32 %f0, %f2, %f3, %f0;
    mul.wide.u32 %rd2, %r2, 4;
    add.s64 %rd3, %rd1, %rd2;
    st.global.f32 [%rd3], %f0;
    ret;
}
)";

class CountersTest : public ::testing::Test {
 protected:
  explicit CountersTest(int host_threads = 1) {
    EmulatorOptions o;
    o.collect_counters = true;
    o.num_threads = host_threads;
    emu_ = std::make_unique<Emulator>(o);
  }

  // Runs `entry` of `body` once and returns its counters.
  KernelCounters Run(const std::string& body, const std::string& entry, Dim3 grid, Dim3 block,
                     const std::vector<KernelArg>& args) {
    auto m = emu_->LoadModule(absl::StrCat(kHeader, body));
    EXPECT_TRUE(m.ok()) << m.status();
    auto f = emu_->GetFunction(*m, entry);
    EXPECT_TRUE(f.ok()) << f.status();
    const absl::Status st = emu_->Launch(*f, grid, block, 0, args);
    EXPECT_TRUE(st.ok()) << st;
    std::vector<KernelCounters> c = emu_->TakeCounters();
    EXPECT_EQ(c.size(), 1u);
    return c.empty() ? KernelCounters{} : c.back();
  }

  uint64_t Buffer(size_t bytes) {
    auto d = emu_->Alloc(bytes);
    EXPECT_TRUE(d.ok()) << d.status();
    return *d;
  }

  std::unique_ptr<Emulator> emu_;
};

TEST_F(CountersTest, CoalescedF32CopyTakesFourSectorsPerRequest) {
  const uint64_t in = Buffer(4096), out = Buffer(4096);
  // 2 blocks of 128 threads: 8 warps, each 32 consecutive floats (128 bytes).
  const KernelCounters c =
      Run(kStridedCopy, "strided_copy", {2, 1, 1}, {128, 1, 1}, {Ptr(in), Ptr(out), U32(1)});
  EXPECT_EQ(c.kernel, "strided_copy");
  EXPECT_EQ(c.ctas, 2u);
  EXPECT_EQ(c.global_load.requests, 8u);
  EXPECT_EQ(c.global_load.sectors, 32u);
  EXPECT_EQ(c.global_load.ideal_sectors, 32u);
  EXPECT_DOUBLE_EQ(c.global_load.SectorsPerRequest(), 4.0);
  EXPECT_EQ(c.global_store.requests, 8u);
  EXPECT_EQ(c.global_store.sectors, 32u);
  EXPECT_EQ(c.dram_read_bytes, 1024u);
  EXPECT_EQ(c.dram_write_bytes, 1024u);
  ASSERT_NE(c.Buffer(in), nullptr);
  EXPECT_EQ(c.Buffer(in)->dram_read_bytes, 1024u);
  EXPECT_EQ(c.Buffer(in)->dram_write_bytes, 0u);
  EXPECT_EQ(c.Buffer(in)->access.requests, 8u);
  EXPECT_EQ(c.Buffer(out + 100)->dram_write_bytes, 1024u);
  // The instruction mix of the 15 instructions above, per warp.
  EXPECT_EQ(c.warp_instructions, 8u * 15);
  EXPECT_EQ(c.thread_instructions, 256u * 15);
  EXPECT_EQ(c.Instructions(InstrClass::kParam), 8u * 3);
  EXPECT_EQ(c.Instructions(InstrClass::kLoadGlobal), 8u);
  EXPECT_EQ(c.Instructions(InstrClass::kStoreGlobal), 8u);
  EXPECT_EQ(c.Instructions(InstrClass::kControl), 8u);
  EXPECT_EQ(c.Instructions(InstrClass::kInt), 8u * 9);
  EXPECT_EQ(c.fp32_flops, 0u);
}

TEST_F(CountersTest, StridedAccessTakesOneSectorPerLane) {
  const uint64_t in = Buffer(32 * 128 * 4), out = Buffer(128);
  // Lane l reads float 32 * l: 128 bytes apart, a sector each.
  const KernelCounters c =
      Run(kStridedCopy, "strided_copy", {1, 1, 1}, {32, 1, 1}, {Ptr(in), Ptr(out), U32(32)});
  EXPECT_EQ(c.global_load.requests, 1u);
  EXPECT_EQ(c.global_load.sectors, 32u);
  EXPECT_EQ(c.global_load.ideal_sectors, 4u);
  EXPECT_EQ(c.global_store.sectors, 4u);
  EXPECT_EQ(c.Buffer(in)->dram_read_bytes, 32u * 32);  // whole sectors for 4-byte reads
}

TEST_F(CountersTest, SixteenByteAccessesTakeSixteenSectorsPerRequest) {
  const uint64_t in = Buffer(512), out = Buffer(512);
  const KernelCounters c = Run(kCopyV4, "copy_v4", {1, 1, 1}, {32, 1, 1}, {Ptr(in), Ptr(out)});
  EXPECT_EQ(c.global_load.requests, 1u);
  EXPECT_EQ(c.global_load.sectors, 16u);
  EXPECT_EQ(c.global_load.ideal_sectors, 16u);
  EXPECT_EQ(c.global_store.sectors, 16u);
  EXPECT_EQ(c.dram_read_bytes, 512u);
}

TEST_F(CountersTest, PartialWarpsRequestOnlyWhatTheyTouch) {
  const uint64_t in = Buffer(64), out = Buffer(64);
  // 10 threads: 40 bytes, two sectors; the ideal rounds 40 bytes up to two sectors too.
  const KernelCounters c =
      Run(kStridedCopy, "strided_copy", {1, 1, 1}, {10, 1, 1}, {Ptr(in), Ptr(out), U32(1)});
  EXPECT_EQ(c.global_load.sectors, 2u);
  EXPECT_EQ(c.global_load.ideal_sectors, 2u);
  EXPECT_EQ(c.thread_instructions, 10u * 15);
}

class CountersTwoThreadsTest : public CountersTest {
 protected:
  CountersTwoThreadsTest() : CountersTest(2) {}
};

TEST_F(CountersTwoThreadsTest, DramCountsEachSectorOncePerLaunch) {
  const uint64_t in = Buffer(128), out = Buffer(16 * 64 * 4);
  // 16 blocks of 2 warps on two host threads, every warp reading the same 128 bytes.
  const KernelCounters c = Run(kSameRow, "same_row", {16, 1, 1}, {64, 1, 1}, {Ptr(in), Ptr(out)});
  EXPECT_EQ(c.ctas, 16u);
  EXPECT_EQ(c.global_load.requests, 32u);
  EXPECT_EQ(c.global_load.sectors, 32u * 4);
  EXPECT_EQ(c.Buffer(in)->access.sectors, 32u * 4);  // what the cache hierarchy sees
  EXPECT_EQ(c.Buffer(in)->dram_read_bytes, 128u);    // what DRAM sees
  EXPECT_EQ(c.dram_write_bytes, 16u * 64 * 4);
  // A second launch counts its sectors afresh.
  EXPECT_EQ(Run(kSameRow, "same_row", {1, 1, 1}, {32, 1, 1}, {Ptr(in), Ptr(out)}).dram_read_bytes,
            128u);
}

struct BankCase {
  uint32_t stride;  // in 4-byte words between lanes
  uint64_t wavefronts;
};

TEST_F(CountersTest, SharedBankConflictsAndBroadcast) {
  const uint64_t out = Buffer(128);
  for (const BankCase& bc : {BankCase{0, 1},     // one word for all lanes: a broadcast
                             BankCase{1, 1},     // 32 words in 32 banks
                             BankCase{2, 2},     // 2-way: banks 0, 2, .. hold two words each
                             BankCase{32, 32}})  // 32-way: every word in bank 0
  {
    SCOPED_TRACE(bc.stride);
    const KernelCounters c =
        Run(kBankStride, "bank_stride", {1, 1, 1}, {32, 1, 1}, {Ptr(out), U32(bc.stride)});
    EXPECT_EQ(c.shared_store.requests, 1u);
    EXPECT_EQ(c.shared_store.BankConflicts(), 0u);
    EXPECT_EQ(c.shared_load.requests, 1u);
    EXPECT_EQ(c.shared_load.wavefronts, bc.wavefronts);
    EXPECT_EQ(c.shared_load.ideal_wavefronts, 1u);
    EXPECT_EQ(c.shared_load.BankConflicts(), bc.wavefronts - 1);
    EXPECT_EQ(c.Instructions(InstrClass::kBarrier), 1u);
  }
}

TEST_F(CountersTest, SixteenByteSharedLoadsNeedFourWavefronts) {
  const uint64_t out = Buffer(128);
  // Contiguous: 512 bytes are four wavefronts at best, so no conflict.
  KernelCounters c = Run(kBankV4, "bank_v4", {1, 1, 1}, {32, 1, 1}, {Ptr(out), U32(1)});
  EXPECT_EQ(c.shared_load.wavefronts, 4u);
  EXPECT_EQ(c.shared_load.BankConflicts(), 0u);
  EXPECT_EQ(c.fp32_flops, 32u * (1 + 2));  // an add and an fma per lane
  EXPECT_EQ(c.Instructions(InstrClass::kFp32), 2u);
  // 32 bytes apart: half the banks, each holding 8 of the 128 words.
  c = Run(kBankV4, "bank_v4", {1, 1, 1}, {32, 1, 1}, {Ptr(out), U32(2)});
  EXPECT_EQ(c.shared_load.wavefronts, 8u);
  EXPECT_EQ(c.shared_load.BankConflicts(), 4u);
}

TEST_F(CountersTest, MmaTileCountsTensorFlopsAndLdmatrixPhases) {
  Emulator& emu = *emu_;
  const FunctionHandle f = Load(emu, "mma_tile");
  const std::vector<uint16_t> a(16 * 16, 0x3c00), b(16 * 8, 0x3c00);  // f16 ones
  const std::vector<float> cmat(16 * 8, 0.0f);
  const uint64_t da = Upload(emu, a), db = Upload(emu, b), dc = Upload(emu, cmat);
  const uint64_t d16 = Buffer(16 * 8 * 4), d8 = Buffer(16 * 8 * 4);
  ASSERT_TRUE(
      emu.Launch(f, {1, 1, 1}, {32, 1, 1}, 0, {Ptr(da), Ptr(db), Ptr(dc), Ptr(d16), Ptr(d8)}).ok());
  EXPECT_EQ(Download<float>(emu, d16, 1)[0], 16.0f);
  const std::vector<KernelCounters> all = emu.TakeCounters();
  ASSERT_EQ(all.size(), 1u);
  const KernelCounters& c = all[0];
  // One m16n8k16 and two m16n8k8.
  EXPECT_EQ(c.tensor_flops, 2u * 16 * 8 * 16 + 2 * (2u * 16 * 8 * 8));
  EXPECT_EQ(c.Instructions(InstrClass::kTensor), 3u + 2);
  // A's rows are 32 bytes apart, so each 8x8 matrix of the .x4 spans 256 bytes: two
  // wavefronts instead of one (4 extra for the four matrices); B's .x2.trans rows are
  // contiguous (2 matrices, 2 wavefronts).
  EXPECT_EQ(c.shared_load.requests, 2u);
  EXPECT_EQ(c.shared_load.wavefronts, 8u + 2);
  EXPECT_EQ(c.shared_load.ideal_wavefronts, 4u + 2);
  // cp.async reads A (512 bytes, 16 sectors) and B (16 lanes, 256 bytes); C's fragment
  // loads are 8 bytes per lane over 8 rows of 32 bytes (8 sectors each).
  EXPECT_EQ(c.Instructions(InstrClass::kAsyncCopy), 2u + 2);
  EXPECT_EQ(c.global_load.requests, 4u);
  EXPECT_EQ(c.global_load.sectors, 16u + 8 + 8 + 8);
  EXPECT_EQ(c.global_load.ideal_sectors, 16u + 8 + 8 + 8);
  EXPECT_EQ(c.Buffer(da)->dram_read_bytes, 512u);
  EXPECT_EQ(c.Buffer(db)->dram_read_bytes, 256u);
  EXPECT_EQ(c.Buffer(dc)->dram_read_bytes, 512u);
  EXPECT_EQ(c.dram_write_bytes, 2u * 512);
}

// Four loads per thread, all issued before the first is used: one latency to wait out.
constexpr char kFourIndependentLoads[] = R"(
.visible .entry four_independent(.param .u64 in, .param .u64 out)
{
    .reg .b32 %r<2>;
    .reg .f32 %f<8>;
    .reg .b64 %rd<6>;
    ld.param.u64 %rd1, [in];
    ld.param.u64 %rd2, [out];
    mov.u32 %r1, %tid.x;
    mul.wide.u32 %rd3, %r1, 4;
    add.s64 %rd4, %rd1, %rd3;
    add.s64 %rd5, %rd2, %rd3;
    ld.global.f32 %f0, [%rd4];
    ld.global.f32 %f1, [%rd4+128];
    ld.global.f32 %f2, [%rd4+256];
    ld.global.f32 %f3, [%rd4+384];
    add.f32 %f4, %f0, %f1;
    add.f32 %f5, %f2, %f3;
    add.f32 %f6, %f4, %f5;
    st.global.f32 [%rd5], %f6;
    ret;
}
)";

// Four loads per thread, each address depending on the previous load's value (masked to
// 0, so every thread reads in[tid]): four latencies to wait out, one after the other.
constexpr char kFourDependentLoads[] = R"(
.visible .entry four_dependent(.param .u64 in, .param .u64 out)
{
    .reg .b32 %r<4>;
    .reg .b64 %rd<7>;
    ld.param.u64 %rd1, [in];
    ld.param.u64 %rd2, [out];
    mov.u32 %r1, %tid.x;
    mul.wide.u32 %rd3, %r1, 4;
    add.s64 %rd4, %rd1, %rd3;
    add.s64 %rd5, %rd2, %rd3;
    ld.global.u32 %r2, [%rd4];
    and.b32 %r3, %r2, 0;
    cvt.u64.u32 %rd6, %r3;
    add.s64 %rd4, %rd4, %rd6;
    ld.global.u32 %r2, [%rd4];
    and.b32 %r3, %r2, 0;
    cvt.u64.u32 %rd6, %r3;
    add.s64 %rd4, %rd4, %rd6;
    ld.global.u32 %r2, [%rd4];
    and.b32 %r3, %r2, 0;
    cvt.u64.u32 %rd6, %r3;
    add.s64 %rd4, %rd4, %rd6;
    ld.global.u32 %r2, [%rd4];
    st.global.u32 [%rd5], %r2;
    ret;
}
)";

TEST_F(CountersTest, LoadsIssuedBeforeTheirUseWaitOneLatencyTogether) {
  const uint64_t in = Buffer(1024), out = Buffer(1024);
  // Two warps: each waits for its last load, issued just before the first add, for one
  // latency less the step of the first add.
  const KernelCounters c =
      Run(kFourIndependentLoads, "four_independent", {1, 1, 1}, {64, 1, 1}, {Ptr(in), Ptr(out)});
  EXPECT_EQ(c.global_load.requests, 8u);
  EXPECT_EQ(c.load_wait_steps, 2 * (kLoadLatencySteps - 1));
  EXPECT_NEAR(c.LoadLatenciesPerWarp(), 1.0, 0.02);
}

TEST_F(CountersTest, DependentLoadsWaitOneLatencyEach) {
  const uint64_t in = Buffer(1024), out = Buffer(1024);
  const KernelCounters c =
      Run(kFourDependentLoads, "four_dependent", {1, 1, 1}, {64, 1, 1}, {Ptr(in), Ptr(out)});
  EXPECT_EQ(c.global_load.requests, 8u);
  // Each of the four loads is used by the next instruction (the store for the last).
  EXPECT_EQ(c.load_wait_steps, 2 * 4 * kLoadLatencySteps);
  EXPECT_NEAR(c.LoadLatenciesPerWarp(), 4.0, 0.02);
  // Both warps alike: the longest chain is either's, its 21 issues and four latencies.
  EXPECT_EQ(c.longest_warp_wait_steps, 4 * kLoadLatencySteps);
  EXPECT_EQ(c.longest_warp_steps, 21 + 4 * kLoadLatencySteps);
  EXPECT_NE(c.ToString().find("longest warp"), std::string::npos);
  EXPECT_NE(c.ToString().find("load waits"), std::string::npos);
  EXPECT_NE(c.ToJson().find(R"("load_wait_steps":)"), std::string::npos);
}

TEST_F(CountersTest, TextAndJsonNameEveryFigure) {
  const uint64_t in = Buffer(4096), out = Buffer(4096);
  const KernelCounters c =
      Run(kStridedCopy, "strided_copy", {1, 1, 1}, {32, 1, 1}, {Ptr(in), Ptr(out), U32(1)});
  const std::string text = c.ToString();
  EXPECT_NE(text.find("kernel strided_copy"), std::string::npos) << text;
  EXPECT_NE(text.find("sectors/request 4.00 (ideal 4.00)"), std::string::npos) << text;
  const std::string json = c.ToJson();
  EXPECT_EQ(json.front(), '{');
  EXPECT_EQ(json.back(), '}');
  for (const char* key : {R"("kernel":"strided_copy")", R"("grid":[1,1,1])", R"("load_global":1)",
                          R"("global_load":{"requests":1,"sectors":4,"ideal_sectors":4)",
                          R"("dram_read_bytes":128)", R"("bank_conflicts":0)"}) {
    EXPECT_NE(json.find(key), std::string::npos) << key << " in " << json;
  }
}

TEST(CountersOffTest, NothingIsKeptWhenCountersAreOff) {
  Emulator emu;
  const FunctionHandle f = Load(emu, "vector_add");
  const uint64_t a = Upload(emu, std::vector<float>(64, 1.0f));
  ASSERT_TRUE(emu.Launch(f, {1, 1, 1}, {64, 1, 1}, 0, {Ptr(a), Ptr(a), Ptr(a), U32(64)}).ok());
  EXPECT_TRUE(emu.TakeCounters().empty());
}

TEST_F(CountersTest, FailedLaunchesLeaveNoCounters) {
  const uint64_t in = Buffer(64), out = Buffer(64);
  auto m = emu_->LoadModule(absl::StrCat(kHeader, kStridedCopy));
  ASSERT_TRUE(m.ok());
  // 32 threads reading 64 bytes: out of bounds.
  EXPECT_FALSE(emu_->Launch(*emu_->GetFunction(*m, "strided_copy"), {1, 1, 1}, {32, 1, 1}, 0,
                            {Ptr(in), Ptr(out), U32(1)})
                   .ok());
  EXPECT_TRUE(emu_->TakeCounters().empty());
}

TEST_F(CountersTest, MisalignedSharedAccessFailsTheLaunchAndLeavesNoCounters) {
  // Counting sees the addresses before the handler rejects them: 16 bytes at byte 2 span
  // five words, one more than an aligned access.
  constexpr char kMisaligned[] = R"(
.visible .entry misaligned_v4()
{
    .shared .align 16 .b8 buf[1024];
    .reg .b32 %r<4>;
    .reg .f32 %f<4>;
    mov.u32 %r1, %tid.x;
    shl.b32 %r2, %r1, 4;
    mov.u32 %r3, buf;
    add.s32 %r2, %r2, %r3;
    ld.shared.v4.f32 {%f0, %f1, %f2, %f3}, [%r2+2];
    ret;
}
)";
  auto m = emu_->LoadModule(absl::StrCat(kHeader, kMisaligned));
  ASSERT_TRUE(m.ok()) << m.status();
  const absl::Status st =
      emu_->Launch(*emu_->GetFunction(*m, "misaligned_v4"), {1, 1, 1}, {32, 1, 1}, 0, {});
  EXPECT_NE(st.message().find("misaligned"), absl::string_view::npos) << st;
  EXPECT_TRUE(emu_->TakeCounters().empty());
}

TEST(PtxHash, IsFnv1a64) {
  // The published FNV-1a 64 test vectors: the manifest's hashes and the counters'
  // ptx_hash must not drift.
  EXPECT_EQ(PtxHash(""), 0xcbf29ce484222325ull);
  EXPECT_EQ(PtxHash("a"), 0xaf63dc4c8601ec8cull);
  EXPECT_EQ(PtxHash("foobar"), 0x85944171f73967e8ull);
}

TEST(CtaSample, CutsTheLongestAxisIntoThreeRuns) {
  const CtaSample whole({4, 3, 2}, 0);
  EXPECT_TRUE(whole.whole());
  EXPECT_EQ(whole.size(), 24u);
  EXPECT_EQ(whole.LinearBlock(23), 23u);
  EXPECT_EQ(CtaSample({0, 3, 1}, 8).size(), 0u);

  // 100 CTAs along x cut to 24: runs 0..7, 46..53 and 92..99.
  const CtaSample x({100, 1, 1}, 24);
  ASSERT_EQ(x.size(), 24u);
  EXPECT_EQ(x.LinearBlock(0), 0u);
  EXPECT_EQ(x.LinearBlock(7), 7u);
  EXPECT_EQ(x.LinearBlock(8), 46u);
  EXPECT_EQ(x.LinearBlock(16), 92u);
  EXPECT_EQ(x.LinearBlock(23), 99u);
  const uint16_t yz = (1u << 3) | (1u << 6);  // the one run of y and of z
  EXPECT_EQ(x.RunBits(0), 1u | yz);
  EXPECT_EQ(x.RunBits(8), 2u | yz);
  EXPECT_EQ(x.RunBits(23), 4u | yz);
  EXPECT_DOUBLE_EQ(x.CtaScale(), 100.0 / 24);
  EXPECT_DOUBLE_EQ(x.SectorScale(1u | yz), 100.0 / 24);  // one run: private, scaled
  EXPECT_DOUBLE_EQ(x.SectorScale(3u | yz), 1.0);         // two runs: shared along x

  // The longest axis is cut first, to what the budget leaves it: y 300 -> 8.
  const CtaSample y({4, 300, 2}, 64);
  EXPECT_EQ(y.size(), 64u);
  EXPECT_DOUBLE_EQ(y.CtaScale(), 2400.0 / 64);
  // No axis is cut below 6 values, and z not at all, so a budget can be exceeded.
  EXPECT_EQ(CtaSample({10, 10, 10}, 8).size(), 360u);
  // A split decode attention at batch 1 (8 KV heads, 16 splits): every split of a sampled
  // (row, head) group runs, so the last of them merges the group.
  const CtaSample split({8, 1, 16}, 64);
  EXPECT_EQ(split.size(), 96u);
  for (uint64_t i = 0; i < split.size(); i += 6) {
    EXPECT_EQ(split.LinearBlock(i) % 8, split.LinearBlock(0) % 8) << i;  // the same x ...
    EXPECT_EQ(split.LinearBlock(i) / 8, i / 6);                          // ... every z
  }
}

TEST_F(CountersTest, SampledLaunchScalesPrivateAndSharedSectorsToTheGrid) {
  // 1000 blocks of 64 threads: each reads the same 128 bytes and writes its own 256.
  const uint64_t in = Buffer(128), out = Buffer(1000 * 64 * 4);
  const KernelCounters full =
      Run(kSameRow, "same_row", {1000, 1, 1}, {64, 1, 1}, {Ptr(in), Ptr(out)});
  emu_->SetCollectCounters(true, 24);
  const KernelCounters c = Run(kSameRow, "same_row", {1000, 1, 1}, {64, 1, 1}, {Ptr(in), Ptr(out)});
  EXPECT_EQ(c.ctas, 1000u);
  EXPECT_EQ(c.sampled_ctas, 24u);
  EXPECT_EQ(full.sampled_ctas, 1000u);
  EXPECT_EQ(c.warp_instructions, full.warp_instructions);
  EXPECT_EQ(c.global_load.requests, full.global_load.requests);
  EXPECT_EQ(c.dram_read_bytes, 128u);  // read by all three runs: counted once
  EXPECT_EQ(c.dram_write_bytes, 1000u * 64 * 4);
  EXPECT_NE(c.ToString().find("24 run, counts scaled to the grid"), std::string::npos);
}

}  // namespace
}  // namespace ptxserve::emu::testing
