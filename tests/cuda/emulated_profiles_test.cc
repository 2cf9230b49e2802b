// Device profiles of the emulated driver (issue 11): what each profile reports through the
// driver table and the Device layer, device memory that is reported but not reserved,
// the driver's 256-byte allocation alignment, and dynamic shared memory above 48 KiB, which
// a launch gets only after cuFuncSetAttribute (directly, or through the kernel cache's
// launch path), up to the profile's opt-in maximum.
#include <unistd.h>

#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "engine/cuda/device.h"
#include "engine/cuda/emulated_driver.h"
#include "engine/cuda/kernel_cache.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ptxserve::cuda {
namespace {

using ::testing::HasSubstr;

constexpr uint32_t kKiB = 1024;

std::unique_ptr<Device> Open(const std::string& profile) {
  absl::StatusOr<EmulatedDeviceOptions> o = EmulatedDeviceProfile(profile);
  EXPECT_TRUE(o.ok()) << o.status();
  if (!o.ok()) return nullptr;
  auto t = LoadEmulatedDriver(*o);
  EXPECT_TRUE(t.ok()) << t.status();
  auto d = Device::Open(*std::move(t));
  EXPECT_TRUE(d.ok()) << d.status();
  return d.ok() ? *std::move(d) : nullptr;
}

int Attribute(Device& d, CUdevice_attribute a) {
  int v = -1;
  EXPECT_EQ(d.driver().cuDeviceGetAttribute(&v, a, 0), CUDA_SUCCESS) << static_cast<int>(a);
  return v;
}

struct Expected {
  const char* profile;
  int cc_major, cc_minor, sms;
  size_t memory;
  int optin, per_sm;
};

TEST(EmulatedProfiles, EachProfileReportsItsGpu) {
  SetEmulatedFault({});
  const Expected cases[] = {
      {"small", 8, 0, 8, size_t{1} << 30, 227 * kKiB, 228 * kKiB},
      {"a100", 8, 0, 108, size_t{80} << 30, 163 * kKiB, 164 * kKiB},
      {"h100", 9, 0, 132, size_t{80} << 30, 227 * kKiB, 228 * kKiB},
  };
  for (const Expected& e : cases) {
    std::unique_ptr<Device> d = Open(e.profile);
    ASSERT_NE(d, nullptr) << e.profile;
    const DeviceInfo& i = d->info();
    EXPECT_EQ(i.cc_major, e.cc_major) << e.profile;
    EXPECT_EQ(i.cc_minor, e.cc_minor) << e.profile;
    EXPECT_EQ(i.num_sms, e.sms) << e.profile;
    EXPECT_EQ(i.total_memory, e.memory) << e.profile;
    EXPECT_EQ(i.max_shared_per_block, static_cast<int>(48 * kKiB)) << e.profile;
    EXPECT_EQ(i.max_shared_per_block_optin, e.optin) << e.profile;
    EXPECT_THAT(i.name, HasSubstr("emulated")) << e.profile;
    EXPECT_EQ(Attribute(*d, CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR), e.per_sm)
        << e.profile;
    EXPECT_EQ(Attribute(*d, CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_MULTIPROCESSOR), 65536)
        << e.profile;
    EXPECT_EQ(Attribute(*d, CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_BLOCK), 65536) << e.profile;
    EXPECT_EQ(Attribute(*d, CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR), 2048) << e.profile;
    EXPECT_EQ(Attribute(*d, CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK), 1024) << e.profile;
  }
  EXPECT_THAT(Open("h100")->info().name, HasSubstr("H100"));
}

TEST(EmulatedProfiles, AnUnknownProfileNamesTheValidOnes) {
  absl::StatusOr<EmulatedDeviceOptions> o = EmulatedDeviceProfile("h200");
  ASSERT_FALSE(o.ok());
  EXPECT_EQ(o.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(o.status().message()), HasSubstr("\"h200\""));
  EXPECT_THAT(std::string(o.status().message()), HasSubstr("small, a100 or h100"));
  EXPECT_FALSE(EmulatedDeviceProfile("").ok());
  EXPECT_FALSE(EmulatedDeviceProfile("H100").ok()) << "names are exact";
}

// Resident set size of this process, in bytes.
size_t Rss() {
  long pages = 0, resident = 0;  // NOLINT(runtime/int): statm's fields
  FILE* f = std::fopen("/proc/self/statm", "r");
  if (f == nullptr) return 0;
  if (std::fscanf(f, "%ld %ld", &pages, &resident) != 2) resident = 0;
  std::fclose(f);
  return static_cast<size_t>(resident) * static_cast<size_t>(sysconf(_SC_PAGESIZE));
}

// An 80 GB device costs host RAM only for what is allocated: free memory is the profile's
// total less the allocations, which is all a backend sizing its KV cache reads.
TEST(EmulatedProfiles, MemoryIsReportedNotReserved) {
  SetEmulatedFault({});
  const size_t rss0 = Rss();
  std::unique_ptr<Device> d = Open("h100");
  ASSERT_NE(d, nullptr);
  absl::StatusOr<std::pair<size_t, size_t>> mem = d->MemoryInfo();
  ASSERT_TRUE(mem.ok()) << mem.status();
  EXPECT_EQ(mem->second, size_t{80} << 30);
  EXPECT_EQ(mem->first, mem->second);
  const size_t bytes = (size_t{3} << 20) + 1;
  auto b = d->Alloc(bytes, "three MiB and a byte");
  ASSERT_TRUE(b.ok()) << b.status();
  mem = d->MemoryInfo();
  ASSERT_TRUE(mem.ok()) << mem.status();
  EXPECT_EQ(mem->first, (size_t{80} << 30) - bytes);
  EXPECT_LT(Rss(), rss0 + (size_t{64} << 20)) << "the device reserved host memory up front";
  b->Reset();
  mem = d->MemoryInfo();
  ASSERT_TRUE(mem.ok()) << mem.status();
  EXPECT_EQ(mem->first, mem->second) << "a free gives the memory back";
}

TEST(EmulatedProfiles, AllocationsAreAlignedAsTheDriversAre) {
  SetEmulatedFault({});
  std::unique_ptr<Device> d = Open("small");
  ASSERT_NE(d, nullptr);
  std::vector<DeviceBuffer> keep;
  for (size_t n : {1, 3, 255, 257, 1000, 4097, 65537}) {
    auto b = d->Alloc(n, "odd size");
    ASSERT_TRUE(b.ok()) << b.status();
    EXPECT_EQ(b->ptr() % 256, 0u) << n << " bytes at 0x" << std::hex << b->ptr();
    keep.push_back(*std::move(b));
  }
}

// One thread stores the dynamic shared size into the last word of dynamic shared memory,
// reads it back and writes it to out[0]: it touches all of the memory it asks for.
constexpr char kBigSharedPtx[] = R"(.version 7.8
.target sm_80
.address_size 64
.extern .shared .align 16 .b8 dsmem[];
.visible .entry big_shared(.param .u64 out, .param .u32 bytes)
{
    .reg .b32 %r<6>;
    .reg .b64 %rd<2>;
    ld.param.u64 %rd1, [out];
    ld.param.u32 %r1, [bytes];
    sub.u32 %r2, %r1, 4;
    mov.u32 %r3, dsmem;
    add.u32 %r4, %r3, %r2;
    st.shared.u32 [%r4], %r1;
    ld.shared.u32 %r5, [%r4];
    st.global.u32 [%rd1], %r5;
    ret;
}
)";

struct BigShared {
  ModuleHandle module;
  CUfunction fn = nullptr;
  DeviceBuffer out;
};

BigShared LoadBigShared(Device& d) {
  BigShared k;
  auto m = d.LoadModule(kBigSharedPtx, "big_shared");
  EXPECT_TRUE(m.ok()) << m.status();
  if (!m.ok()) return k;
  k.module = *std::move(m);
  auto fn = d.GetFunction(k.module, "big_shared", "big_shared");
  EXPECT_TRUE(fn.ok()) << fn.status();
  if (fn.ok()) k.fn = *fn;
  auto out = d.Alloc(4, "out");
  EXPECT_TRUE(out.ok()) << out.status();
  if (out.ok()) k.out = *std::move(out);
  return k;
}

// Launches big_shared with `bytes` of dynamic shared memory and returns what it wrote.
absl::StatusOr<uint32_t> RunBigShared(Device& d, BigShared& k, uint32_t bytes) {
  CUdeviceptr out = k.out.ptr();
  void* params[] = {&out, &bytes};
  kernels::LaunchDims dims;
  dims.shared_bytes = bytes;
  if (absl::Status st = d.Launch(k.fn, "big_shared", dims, params); !st.ok()) return st;
  uint32_t v = 0;
  if (absl::Status st = d.CopyToHost(&v, out, 4, "out"); !st.ok()) return st;
  if (absl::Status st = d.Synchronize("big_shared"); !st.ok()) return st;
  return v;
}

TEST(EmulatedProfiles, DynamicSharedAbove48KiBNeedsTheFunctionAttribute) {
  SetEmulatedFault({});
  std::unique_ptr<Device> d = Open("h100");
  ASSERT_NE(d, nullptr);
  BigShared k = LoadBigShared(*d);
  ASSERT_NE(k.fn, nullptr);
  absl::StatusOr<uint32_t> max = d->MaxDynamicShared(k.fn, "big_shared");
  ASSERT_TRUE(max.ok()) << max.status();
  EXPECT_EQ(*max, 48 * kKiB) << "no static shared memory: the whole default";
  absl::StatusOr<uint32_t> v = RunBigShared(*d, k, 48 * kKiB);
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(*v, 48 * kKiB);

  // 64 KiB without the attribute: refused at launch, as the driver does.
  v = RunBigShared(*d, k, 64 * kKiB);
  ASSERT_FALSE(v.ok());
  EXPECT_EQ(v.status().code(), absl::StatusCode::kInternal);
  EXPECT_THAT(std::string(v.status().message()), HasSubstr("cuLaunchKernel (kernel big_shared)"));
  EXPECT_THAT(std::string(v.status().message()), HasSubstr("CUDA_ERROR_INVALID_VALUE"));
  EXPECT_THAT(std::string(v.status().message()),
              HasSubstr("CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES of 49152"));
  EXPECT_FALSE(d->lost()) << "a refused launch is not a fault";

  // With it, the same launch runs and the kernel reaches its last shared word.
  ASSERT_TRUE(d->SetMaxDynamicShared(k.fn, 64 * kKiB, "big_shared").ok());
  max = d->MaxDynamicShared(k.fn, "big_shared");
  ASSERT_TRUE(max.ok()) << max.status();
  EXPECT_EQ(*max, 64 * kKiB);
  v = RunBigShared(*d, k, 64 * kKiB);
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(*v, 64 * kKiB);
  v = RunBigShared(*d, k, 64 * kKiB + 16);
  EXPECT_FALSE(v.ok()) << "the attribute is a limit, not a floor";

  // Up to the H100's 227 KiB opt-in maximum, not beyond.
  EXPECT_TRUE(d->SetMaxDynamicShared(k.fn, 227 * kKiB, "big_shared").ok());
  v = RunBigShared(*d, k, 227 * kKiB);
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(*v, 227 * kKiB);
  const absl::Status st = d->SetMaxDynamicShared(k.fn, 227 * kKiB + 4, "big_shared");
  ASSERT_FALSE(st.ok());
  EXPECT_THAT(std::string(st.message()), HasSubstr("cuFuncSetAttribute"));
  EXPECT_THAT(std::string(st.message()), HasSubstr("CUDA_ERROR_INVALID_VALUE"));
  EXPECT_THAT(std::string(st.message()), HasSubstr("at most 232448"));
}

TEST(EmulatedProfiles, TheA100OptsInTo163KiB) {
  SetEmulatedFault({});
  std::unique_ptr<Device> d = Open("a100");
  ASSERT_NE(d, nullptr);
  BigShared k = LoadBigShared(*d);
  ASSERT_NE(k.fn, nullptr);
  EXPECT_FALSE(d->SetMaxDynamicShared(k.fn, 200 * kKiB, "big_shared").ok());
  ASSERT_TRUE(d->SetMaxDynamicShared(k.fn, 163 * kKiB, "big_shared").ok());
  absl::StatusOr<uint32_t> v = RunBigShared(*d, k, 163 * kKiB);
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(*v, 163 * kKiB);
}

// The backend's launch path (KernelCache::Launch) raises a kernel's limit when a launch
// asks for more, once, and reports a request beyond the device's maximum.
TEST(EmulatedProfiles, TheKernelCacheOptsInForLargeLaunches) {
  SetEmulatedFault({});
  std::unique_ptr<Device> d = Open("h100");
  ASSERT_NE(d, nullptr);
  auto out = d->Alloc(4, "out");
  ASSERT_TRUE(out.ok()) << out.status();
  KernelCache cache(d.get());
  const KernelSpec spec{"big_shared:test", "big_shared",
                        [] { return absl::StatusOr<std::string>(kBigSharedPtx); }};
  absl::StatusOr<const CompiledKernel*> k = cache.Get(spec);
  ASSERT_TRUE(k.ok()) << k.status();
  for (uint32_t bytes : {16 * kKiB, 100 * kKiB, 64 * kKiB, 200 * kKiB}) {
    CUdeviceptr p = out->ptr();
    uint32_t n = bytes;
    void* params[] = {&p, &n};
    kernels::LaunchDims dims;
    dims.shared_bytes = bytes;
    ASSERT_TRUE(cache.Launch(**k, dims, params).ok()) << bytes;
    uint32_t v = 0;
    ASSERT_TRUE(d->CopyToHost(&v, p, 4, "out").ok());
    ASSERT_TRUE(d->Synchronize("big_shared").ok()) << bytes;
    EXPECT_EQ(v, bytes);
  }
  EXPECT_EQ((*k)->max_dynamic_shared.load(), 200 * kKiB);
  CUdeviceptr p = out->ptr();
  uint32_t n = 228 * kKiB;
  void* params[] = {&p, &n};
  kernels::LaunchDims dims;
  dims.shared_bytes = n;
  const absl::Status st = cache.Launch(**k, dims, params);
  ASSERT_FALSE(st.ok());
  EXPECT_THAT(std::string(st.message()), HasSubstr("cuFuncSetAttribute"));
  EXPECT_THAT(std::string(st.message()), HasSubstr("big_shared:test"));
  EXPECT_EQ(cache.stats().launches.at("big_shared"), 4);
}

}  // namespace
}  // namespace ptxserve::cuda
