// Sticky faults (issue 11): after a kernel's illegal address the context is lost, as on a
// GPU. The emulated driver fails every later call with CUDA_ERROR_ILLEGAL_ADDRESS; the
// Device layer stops calling the driver; the GPU backend fails every later step without
// launching anything; the engine fails the step's requests with INTERNAL and then fails
// for good at once, whatever max_step_failures would tolerate. Closing the device ends the
// lost context, and the next one works.
#include <memory>
#include <string>
#include <vector>

#include "engine/cuda/device.h"
#include "engine/cuda/emulated_driver.h"
#include "engine/cuda/gpu_backend.h"
#include "engine/engine.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/cuda/gpu_test_util.h"
#include "tests/kernels/residual_add.h"

namespace ptxserve::cuda {
namespace {

using ::testing::HasSubstr;

constexpr KvCacheConfig kKv{64, 16, DType::kF32};

std::unique_ptr<Device> OpenEmulated(const EmulatedDeviceOptions& o = {}) {
  auto t = LoadEmulatedDriver(o);
  EXPECT_TRUE(t.ok()) << t.status();
  auto d = Device::Open(*std::move(t));
  EXPECT_TRUE(d.ok()) << d.status();
  return d.ok() ? *std::move(d) : nullptr;
}

// residual_add over n = 1024 elements of 16-float buffers: a genuine out-of-bounds access,
// found by the emulator when the stream runs.
struct OutOfBounds {
  ModuleHandle module;
  CUfunction fn = nullptr;
  DeviceBuffer x, y;
  CUdeviceptr px = 0, py = 0;
  uint32_t n = 1024;
  void* params[3] = {&px, &py, &n};
  kernels::LaunchDims dims = kernels::testing::ResidualAddLaunch({}, 1024);
};

void Prepare(Device& d, OutOfBounds* k) {
  absl::StatusOr<std::string> ptx = kernels::testing::GenerateResidualAdd({});
  ASSERT_TRUE(ptx.ok()) << ptx.status();
  auto m = d.LoadModule(*ptx, "residual_add");
  ASSERT_TRUE(m.ok()) << m.status();
  k->module = *std::move(m);
  auto fn = d.GetFunction(k->module, kernels::testing::kResidualAddEntry, "residual_add");
  ASSERT_TRUE(fn.ok()) << fn.status();
  k->fn = *fn;
  auto x = d.Alloc(64, "x");
  auto y = d.Alloc(64, "y");
  ASSERT_TRUE(x.ok() && y.ok());
  k->x = *std::move(x);
  k->y = *std::move(y);
  k->px = k->x.ptr();
  k->py = k->y.ptr();
  ASSERT_TRUE(d.Memset(k->px, 0, 64, "x").ok());
  ASSERT_TRUE(d.Memset(k->py, 0, 64, "y").ok());
}

// Runs the out-of-bounds kernel and expects its synchronisation to report the illegal
// address.
void Fault(Device& d, OutOfBounds& k) {
  ASSERT_TRUE(d.Launch(k.fn, "residual_add", k.dims, k.params).ok());
  const absl::Status st = d.Synchronize("the faulting step");
  ASSERT_FALSE(st.ok());
  EXPECT_THAT(std::string(st.message()), HasSubstr("CUDA_ERROR_ILLEGAL_ADDRESS"));
}

class StickyFaults : public ::testing::Test {
 protected:
  void SetUp() override { SetEmulatedFault({}); }
  void TearDown() override { SetEmulatedFault({}); }
};

TEST_F(StickyFaults, AnIllegalAddressLosesTheContextForEveryLaterCall) {
  {
    std::unique_ptr<Device> d = OpenEmulated();
    ASSERT_NE(d, nullptr);
    OutOfBounds k;
    Prepare(*d, &k);
    if (HasFatalFailure()) return;
    Fault(*d, k);
    if (HasFatalFailure()) return;
    EXPECT_TRUE(d->lost());

    // The driver: every call on the context returns the fault (this thread has it current).
    const DriverTable& t = d->driver();
    CUdeviceptr p = 0;
    size_t free_bytes = 0, total = 0;
    EXPECT_EQ(t.cuMemAlloc_v2(&p, 64), CUDA_ERROR_ILLEGAL_ADDRESS);
    EXPECT_THAT(std::string(t.ErrorDetail()), HasSubstr("lost to an earlier kernel fault"));
    EXPECT_EQ(t.cuMemGetInfo_v2(&free_bytes, &total), CUDA_ERROR_ILLEGAL_ADDRESS);
    EXPECT_EQ(t.cuLaunchKernel(k.fn, 1, 1, 1, 32, 1, 1, 0, nullptr, k.params, nullptr),
              CUDA_ERROR_ILLEGAL_ADDRESS);
    EXPECT_EQ(t.cuStreamSynchronize(nullptr), CUDA_ERROR_ILLEGAL_ADDRESS);
    EXPECT_EQ(t.cuCtxSynchronize(), CUDA_ERROR_ILLEGAL_ADDRESS);
    EXPECT_EQ(t.cuMemsetD8Async(k.px, 0, 64, nullptr), CUDA_ERROR_ILLEGAL_ADDRESS);

    // The Device: every method fails with the first fault, without calling the driver.
    const int64_t launches = GetEmulatedDeviceCounters().launches;
    for (const absl::Status& later :
         {d->Launch(k.fn, "residual_add", k.dims, k.params), d->Synchronize("later"),
          d->Memset(k.px, 0, 64, "x"), d->Alloc(64, "later").status(), d->MemoryInfo().status()}) {
      ASSERT_FALSE(later.ok());
      EXPECT_EQ(later.code(), absl::StatusCode::kInternal);
      EXPECT_THAT(std::string(later.message()), HasSubstr("context is lost"));
      EXPECT_THAT(std::string(later.message()),
                  HasSubstr("cuStreamSynchronize (the faulting step)"));
      EXPECT_THAT(std::string(later.message()), HasSubstr("CUDA_ERROR_ILLEGAL_ADDRESS"));
    }
    EXPECT_EQ(GetEmulatedDeviceCounters().launches, launches);
  }
  // Closing the device ends the lost context with everything it held...
  const EmulatedDeviceCounters c = GetEmulatedDeviceCounters();
  EXPECT_FALSE(c.alive);
  EXPECT_EQ(c.live_allocations, 0);
  EXPECT_EQ(c.live_modules, 0);
  // ...and the next one works.
  std::unique_ptr<Device> d = OpenEmulated();
  ASSERT_NE(d, nullptr);
  auto b = d->Alloc(64, "fresh");
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_TRUE(d->Memset(b->ptr(), 0, 64, "fresh").ok());
  EXPECT_TRUE(d->Synchronize("fresh").ok());
  EXPECT_FALSE(d->lost());
}

TEST_F(StickyFaults, WithoutStickyFaultsTheContextLivesOn) {
  EmulatedDeviceOptions o;
  o.sticky_faults = false;
  std::unique_ptr<Device> d = OpenEmulated(o);
  ASSERT_NE(d, nullptr);
  OutOfBounds k;
  Prepare(*d, &k);
  if (HasFatalFailure()) return;
  Fault(*d, k);
  if (HasFatalFailure()) return;
  EXPECT_FALSE(d->lost());
  EXPECT_TRUE(d->Memset(k.px, 0, 64, "x").ok());
  EXPECT_TRUE(d->Synchronize("after recovery").ok());
}

TEST_F(StickyFaults, InjectedFaultsAreTransientUnlessPlantedSticky) {
  std::unique_ptr<Device> d = OpenEmulated();
  ASSERT_NE(d, nullptr);
  OutOfBounds k;
  Prepare(*d, &k);
  if (HasFatalFailure()) return;
  k.n = 16;  // in bounds: only injected faults fail
  EmulatedFault f;
  f.fail_launch = 1;
  f.site = EmulatedFault::Site::kSync;
  SetEmulatedFault(f);
  ASSERT_TRUE(d->Launch(k.fn, "residual_add", k.dims, k.params).ok());
  EXPECT_FALSE(d->Synchronize("transient").ok());
  EXPECT_FALSE(d->lost());
  ASSERT_TRUE(d->Launch(k.fn, "residual_add", k.dims, k.params).ok());
  EXPECT_TRUE(d->Synchronize("after a transient fault").ok());

  f.launch_code = CUDA_ERROR_ILLEGAL_ADDRESS;
  f.sticky = true;
  SetEmulatedFault(f);
  ASSERT_TRUE(d->Launch(k.fn, "residual_add", k.dims, k.params).ok());
  const absl::Status st = d->Synchronize("planted");
  ASSERT_FALSE(st.ok());
  EXPECT_THAT(std::string(st.message()), HasSubstr("CUDA_ERROR_ILLEGAL_ADDRESS"));
  EXPECT_TRUE(d->lost());
}

class StickyBackend : public StickyFaults {
 protected:
  void SetUp() override {
    StickyFaults::SetUp();
    auto m = testing::SyntheticModelWithTokenizer("tiny", DType::kF32);
    ASSERT_TRUE(m.ok()) << m.status();
    m_ = *std::move(m);
  }
  // The next launch's kernel faults with an illegal address, reported at the step's
  // synchronisation, and the context is lost (as a kernel with a bad pointer would do).
  static void PlantIllegalAddress(int64_t launch) {
    EmulatedFault f;
    f.fail_launch = launch;
    f.site = EmulatedFault::Site::kSync;
    f.launch_code = CUDA_ERROR_ILLEGAL_ADDRESS;
    f.sticky = true;
    SetEmulatedFault(f);
  }
  testing::ModelWithTokenizer m_;
};

TEST_F(StickyBackend, StepsAfterTheFaultFailWithoutTouchingTheDevice) {
  {
    auto b = testing::EmulatedBackend(*m_.model, kKv);
    ASSERT_TRUE(b.ok()) << b.status();
    const int64_t vocab = m_.model->config.vocab_size;
    const StepBatch batch = testing::PrefillBatch(2, vocab, 5, 1, kKv.block_size);
    std::vector<float> logits;
    ASSERT_TRUE((*b)->Step(batch, &logits).ok());
    EXPECT_TRUE((*b)->usable());
    PlantIllegalAddress(3);
    absl::Status st = (*b)->Step(batch, &logits);
    ASSERT_FALSE(st.ok());
    EXPECT_EQ(st.code(), absl::StatusCode::kInternal);
    EXPECT_THAT(std::string(st.message()), HasSubstr("CUDA_ERROR_ILLEGAL_ADDRESS"));
    EXPECT_FALSE((*b)->usable());
    const int64_t launches = GetEmulatedDeviceCounters().launches;
    for (int i = 0; i < 3; ++i) {
      st = (*b)->Step(batch, &logits);
      ASSERT_FALSE(st.ok());
      EXPECT_EQ(st.code(), absl::StatusCode::kInternal);
      EXPECT_THAT(std::string(st.message()), HasSubstr("context is lost"));
      std::vector<int32_t> ids;
      EXPECT_FALSE((*b)->StepSampled(batch, std::vector<RowSampling>(2), &ids).ok());
    }
    EXPECT_EQ(GetEmulatedDeviceCounters().launches, launches) << "no launch on a lost context";
  }
  const EmulatedDeviceCounters c = GetEmulatedDeviceCounters();
  EXPECT_FALSE(c.alive);
  EXPECT_EQ(c.live_allocations, 0);
  EXPECT_EQ(c.live_host_allocations, 0);
  SetEmulatedFault({});
  auto fresh = testing::EmulatedBackend(*m_.model, kKv);
  ASSERT_TRUE(fresh.ok()) << fresh.status();
  std::vector<float> logits;
  EXPECT_TRUE(
      (*fresh)
          ->Step(testing::PrefillBatch(2, m_.model->config.vocab_size, 5, 1, kKv.block_size),
                 &logits)
          .ok());
}

TEST_F(StickyBackend, TheEngineFailsTheStepsRequestsAndStopsAtOnce) {
  auto gpu = testing::EmulatedBackend(*m_.model, kKv);
  ASSERT_TRUE(gpu.ok()) << gpu.status();
  EngineConfig cfg;
  cfg.max_step_failures = 3;  // would retry a transient failure; a lost device is not one
  Engine engine(*std::move(gpu), *m_.tokenizer, cfg);
  ASSERT_TRUE(engine.Start().ok());
  PlantIllegalAddress(3);
  std::vector<EngineRequest> reqs(3);
  for (int i = 0; i < 3; ++i) {
    reqs[i].request_id = "r" + std::to_string(i);
    reqs[i].prompt = testing::Prompt(5 + i, m_.model->config.vocab_size, i);
    reqs[i].sampling.temperature = 0;
    reqs[i].stopping.max_new_tokens = 4;
  }
  auto stream = std::make_shared<ResultStream>();
  ASSERT_TRUE(engine.Enqueue(reqs, stream).ok());
  std::vector<EngineOutput> finals, outs;
  while (finals.size() < reqs.size() && stream->WaitPopAll(&outs)) {
    for (EngineOutput& o : outs) {
      if (o.final()) finals.push_back(std::move(o));
    }
  }
  ASSERT_EQ(finals.size(), reqs.size());
  for (const EngineOutput& o : finals) {
    EXPECT_EQ(o.finish, FinishReason::kError);
    EXPECT_EQ(o.error.code(), absl::StatusCode::kInternal) << o.error;
    EXPECT_THAT(std::string(o.error.message()), HasSubstr("CUDA_ERROR_ILLEGAL_ADDRESS"));
    EXPECT_EQ(o.generated_tokens, 0);
  }
  const EngineStats s = engine.Stats();
  EXPECT_TRUE(s.failed) << "one failed step of a lost device fails the engine";
  EXPECT_EQ(s.step_failures_total, 1);
  const int64_t launches = GetEmulatedDeviceCounters().launches;
  auto again = engine.Enqueue({reqs[0]}, std::make_shared<ResultStream>());
  EXPECT_EQ(again.status().code(), absl::StatusCode::kUnavailable) << again.status();
  engine.Stop();
  EXPECT_EQ(GetEmulatedDeviceCounters().launches, launches);
}

}  // namespace
}  // namespace ptxserve::cuda
