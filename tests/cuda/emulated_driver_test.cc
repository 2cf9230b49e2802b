// The emulated driver and the Device layer over it: context rules, deferred stream
// semantics, JIT error logs, faults found in kernels, injected failures, error text, and
// teardown releasing everything.
#include "engine/cuda/emulated_driver.h"

#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "engine/cuda/device.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/kernels/residual_add.h"

namespace ptxserve::cuda {
namespace {

using ::testing::HasSubstr;

std::unique_ptr<Device> OpenEmulated() {
  auto t = LoadEmulatedDriver();
  EXPECT_TRUE(t.ok()) << t.status();
  auto d = Device::Open(*std::move(t));
  EXPECT_TRUE(d.ok()) << d.status();
  return d.ok() ? *std::move(d) : nullptr;
}

class EmulatedDriver : public ::testing::Test {
 protected:
  void SetUp() override {
    SetEmulatedFault({});
    device_ = OpenEmulated();
    ASSERT_NE(device_, nullptr);
  }
  void TearDown() override { SetEmulatedFault({}); }

  // x[i] += y[i], i < n: a real generated kernel.
  absl::StatusOr<CUfunction> ResidualAdd(ModuleHandle* module) {
    absl::StatusOr<std::string> ptx = kernels::testing::GenerateResidualAdd({});
    if (!ptx.ok()) return ptx.status();
    absl::StatusOr<ModuleHandle> m = device_->LoadModule(*ptx, "residual_add");
    if (!m.ok()) return m.status();
    *module = *std::move(m);
    return device_->GetFunction(*module, kernels::testing::kResidualAddEntry, "residual_add");
  }

  std::unique_ptr<Device> device_;
};

TEST_F(EmulatedDriver, ReportsItselfAsADevice) {
  const DeviceInfo& i = device_->info();
  EXPECT_TRUE(i.emulated);
  EXPECT_EQ(i.driver, "emulated");
  EXPECT_THAT(i.name, HasSubstr("emulated"));
  EXPECT_EQ(i.cc_major, 8);
  EXPECT_GT(i.num_sms, 0);
  EXPECT_GT(i.total_memory, size_t{0});
  EXPECT_TRUE(GetEmulatedDeviceCounters().alive);
}

TEST_F(EmulatedDriver, CallsNeedACurrentContextOnTheCallingThread) {
  const DriverTable& t = device_->driver();
  CUresult raw = CUDA_SUCCESS;
  std::thread([&] {
    CUdeviceptr p = 0;
    raw = t.cuMemAlloc_v2(&p, 64);  // this thread never made the context current
  }).join();
  EXPECT_EQ(raw, CUDA_ERROR_INVALID_CONTEXT);
  // The Device layer binds the context on whichever thread calls it.
  absl::Status st;
  std::thread([&] { st = device_->Alloc(64, "from another thread").status(); }).join();
  EXPECT_TRUE(st.ok()) << st;
}

TEST_F(EmulatedDriver, StreamWorkRunsAtSynchronisation) {
  auto dev = device_->Alloc(16, "buffer");
  ASSERT_TRUE(dev.ok()) << dev.status();
  auto host = device_->AllocPinned(16, "host");
  ASSERT_TRUE(host.ok()) << host.status();
  int32_t* h = reinterpret_cast<int32_t*>(host->data());
  for (int i = 0; i < 4; ++i) h[i] = i + 1;
  ASSERT_TRUE(device_->CopyToDevice(dev->ptr(), h, 16, "up").ok());
  // Like a DMA engine, the copy reads its source when it runs, not when it is enqueued.
  h[0] = 100;
  std::vector<int32_t> back(4, -1);
  ASSERT_TRUE(device_->CopyToHost(back.data(), dev->ptr(), 16, "down").ok());
  EXPECT_EQ(back, std::vector<int32_t>(4, -1)) << "a device->host copy is not done before sync";
  ASSERT_TRUE(device_->Synchronize("test").ok());
  EXPECT_EQ(back, (std::vector<int32_t>{100, 2, 3, 4}));
  const TransferStats ts = device_->transfers();
  EXPECT_EQ(ts.h2d_count, 1);
  EXPECT_EQ(ts.h2d_bytes, 16);
  EXPECT_EQ(ts.d2h_count, 1);
  EXPECT_EQ(ts.d2h_bytes, 16);
}

TEST_F(EmulatedDriver, KernelParametersAreCopiedAtLaunch) {
  ModuleHandle module;
  auto fn = ResidualAdd(&module);
  ASSERT_TRUE(fn.ok()) << fn.status();
  std::vector<float> xs(8, 1.0f), ys(8, 2.0f);
  auto x = device_->Alloc(32, "x");
  auto y = device_->Alloc(32, "y");
  ASSERT_TRUE(x.ok() && y.ok());
  ASSERT_TRUE(device_->CopyToDevice(x->ptr(), xs.data(), 32, "x").ok());
  ASSERT_TRUE(device_->CopyToDevice(y->ptr(), ys.data(), 32, "y").ok());
  CUdeviceptr px = x->ptr(), py = y->ptr();
  uint32_t n = 4;
  void* params[] = {&px, &py, &n};
  ASSERT_TRUE(
      device_->Launch(*fn, "residual_add", kernels::testing::ResidualAddLaunch({}, n), params)
          .ok());
  n = 8;  // too late: the launch already holds n = 4
  ASSERT_TRUE(device_->CopyToHost(xs.data(), x->ptr(), 32, "x").ok());
  ASSERT_TRUE(device_->Synchronize("test").ok());
  EXPECT_EQ(xs, (std::vector<float>{3, 3, 3, 3, 1, 1, 1, 1}));
}

TEST_F(EmulatedDriver, BadPtxFailsWithTheJitLog) {
  auto m = device_->LoadModule(
      ".version 7.8\n.target sm_80\n.address_size 64\n"
      ".visible .entry k()\n{\n  bogus.instruction;\n  ret;\n}\n",
      "broken_kernel");
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().code(), absl::StatusCode::kInternal);
  const std::string msg(m.status().message());
  EXPECT_THAT(msg, HasSubstr("cuModuleLoadDataEx (kernel broken_kernel)"));
  EXPECT_THAT(msg, HasSubstr("CUDA_ERROR_INVALID_PTX"));
  EXPECT_THAT(msg, HasSubstr("JIT log:"));
  EXPECT_THAT(msg, HasSubstr("6"));  // the PTX line of the bad instruction
}

TEST_F(EmulatedDriver, OutOfBoundsKernelFailsAtSynchronisation) {
  ModuleHandle module;
  auto fn = ResidualAdd(&module);
  ASSERT_TRUE(fn.ok()) << fn.status();
  auto x = device_->Alloc(64, "x");
  auto y = device_->Alloc(64, "y");
  ASSERT_TRUE(x.ok() && y.ok());
  ASSERT_TRUE(device_->Memset(x->ptr(), 0, 64, "x").ok());
  ASSERT_TRUE(device_->Memset(y->ptr(), 0, 64, "y").ok());
  CUdeviceptr px = x->ptr(), py = y->ptr();
  uint32_t n = 1024;  // 16 floats allocated
  void* params[] = {&px, &py, &n};
  // Accepted at launch, like an asynchronous GPU fault...
  ASSERT_TRUE(
      device_->Launch(*fn, "residual_add", kernels::testing::ResidualAddLaunch({}, n), params)
          .ok());
  // ...and reported by the next synchronisation, with the emulator's account of it.
  const absl::Status st = device_->Synchronize("after an out-of-bounds kernel");
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.code(), absl::StatusCode::kInternal);
  EXPECT_THAT(std::string(st.message()), HasSubstr("cuStreamSynchronize"));
  EXPECT_THAT(std::string(st.message()), HasSubstr("CUDA_ERROR_ILLEGAL_ADDRESS"));
  EXPECT_THAT(std::string(st.message()), HasSubstr("residual_add"));
  // Sticky, as on a GPU (sticky_fault_test.cc has the rest).
  EXPECT_TRUE(device_->lost());
  EXPECT_FALSE(device_->Memset(x->ptr(), 0, 64, "x").ok());
}

TEST_F(EmulatedDriver, InjectedLaunchFailureAtLaunchAndAtSync) {
  ModuleHandle module;
  auto fn = ResidualAdd(&module);
  ASSERT_TRUE(fn.ok()) << fn.status();
  auto x = device_->Alloc(16, "x");
  ASSERT_TRUE(x.ok());
  ASSERT_TRUE(device_->Memset(x->ptr(), 0, 16, "x").ok());
  CUdeviceptr px = x->ptr();
  uint32_t n = 4;
  void* params[] = {&px, &px, &n};
  const kernels::LaunchDims dims = kernels::testing::ResidualAddLaunch({}, n);

  EmulatedFault f;
  f.fail_launch = 2;
  SetEmulatedFault(f);
  EXPECT_TRUE(device_->Launch(*fn, "residual_add:k", dims, params).ok());
  absl::Status st = device_->Launch(*fn, "residual_add:k", dims, params);
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.code(), absl::StatusCode::kInternal);
  EXPECT_THAT(std::string(st.message()), HasSubstr("cuLaunchKernel (kernel residual_add:k)"));
  EXPECT_THAT(std::string(st.message()), HasSubstr("CUDA_ERROR_LAUNCH_FAILED"));
  EXPECT_TRUE(device_->Launch(*fn, "residual_add:k", dims, params).ok());  // only the 2nd
  EXPECT_TRUE(device_->Synchronize("test").ok());

  f.site = EmulatedFault::Site::kSync;
  f.fail_launch = 1;
  SetEmulatedFault(f);
  EXPECT_TRUE(device_->Launch(*fn, "residual_add:k", dims, params).ok());
  st = device_->Synchronize("test");
  ASSERT_FALSE(st.ok());
  EXPECT_THAT(std::string(st.message()), HasSubstr("cuStreamSynchronize"));
  EXPECT_THAT(std::string(st.message()), HasSubstr("injected failure of kernel residual_add"));
}

TEST_F(EmulatedDriver, InjectedOutOfMemory) {
  EmulatedFault f;
  f.fail_alloc = 1;
  SetEmulatedFault(f);
  auto b = device_->Alloc(1024, "KV pool of layer 0");
  ASSERT_FALSE(b.ok());
  EXPECT_EQ(b.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(b.status().message()),
              HasSubstr("cuMemAlloc_v2 of 1024 bytes for KV pool of layer 0"));
  EXPECT_TRUE(device_->Alloc(1024, "again").ok());
}

TEST_F(EmulatedDriver, ErrorNamesAndStrings) {
  const DriverTable& t = device_->driver();
  EXPECT_EQ(DescribeResult(t, CUDA_ERROR_LAUNCH_FAILED),
            "CUDA_ERROR_LAUNCH_FAILED: unspecified launch failure");
  EXPECT_EQ(DescribeResult(t, static_cast<CUresult>(12345)), "CUresult 12345");
  std::string name(64, '\0');
  EXPECT_EQ(t.cuDeviceGetName(name.data(), 5, 0), CUDA_SUCCESS);
  EXPECT_EQ(std::strlen(name.c_str()), 4u);  // truncated to len - 1 plus NUL
}

TEST_F(EmulatedDriver, UnsupportedLaunchFormsAreRefused) {
  ModuleHandle module;
  auto fn = ResidualAdd(&module);
  ASSERT_TRUE(fn.ok()) << fn.status();
  const DriverTable& t = device_->driver();
  void* extra[] = {nullptr};
  EXPECT_EQ(t.cuLaunchKernel(*fn, 1, 1, 1, 32, 1, 1, 0, nullptr, nullptr, extra),
            CUDA_ERROR_NOT_SUPPORTED);
  EXPECT_EQ(t.cuLaunchKernel(*fn, 1, 1, 1, 2048, 1, 1, 0, nullptr, nullptr, nullptr),
            CUDA_ERROR_INVALID_VALUE);  // > 1024 threads
  EXPECT_EQ(t.cuLaunchKernel(nullptr, 1, 1, 1, 32, 1, 1, 0, nullptr, nullptr, nullptr),
            CUDA_ERROR_INVALID_HANDLE);
}

TEST_F(EmulatedDriver, EventsTimeStreamWork) {
  auto ms = device_->TimeMs([&] { return device_->Memset(0, 0, 0, "nothing"); });
  ASSERT_TRUE(ms.ok()) << ms.status();
  EXPECT_GE(*ms, 0.0f);
}

// ---- Stream capture and graphs ----

// x[i] += y[i] twice per graph launch; the capture itself runs nothing.
TEST_F(EmulatedDriver, CaptureRecordsLaunchesThatEveryGraphLaunchRuns) {
  ModuleHandle module;
  auto fn = ResidualAdd(&module);
  ASSERT_TRUE(fn.ok()) << fn.status();
  std::vector<float> xs(8, 1.0f), ys(8, 2.0f);
  auto x = device_->Alloc(32, "x");
  auto y = device_->Alloc(32, "y");
  ASSERT_TRUE(x.ok() && y.ok());
  ASSERT_TRUE(device_->CopyToDevice(x->ptr(), xs.data(), 32, "x").ok());
  ASSERT_TRUE(device_->CopyToDevice(y->ptr(), ys.data(), 32, "y").ok());
  ASSERT_TRUE(device_->Synchronize("setup").ok());
  const int64_t launches0 = GetEmulatedDeviceCounters().launches;
  CUdeviceptr px = x->ptr(), py = y->ptr();
  uint32_t n = 4;
  void* params[] = {&px, &py, &n};
  const kernels::LaunchDims dims = kernels::testing::ResidualAddLaunch({}, n);
  ASSERT_TRUE(device_->BeginCapture("test graph").ok());
  ASSERT_TRUE(device_->Launch(*fn, "residual_add", dims, params).ok());
  ASSERT_TRUE(device_->Launch(*fn, "residual_add", dims, params).ok());
  n = 8;  // too late: the capture holds n = 4
  absl::StatusOr<Graph> graph = device_->EndCapture("test graph");
  ASSERT_TRUE(graph.ok()) << graph.status();
  EXPECT_EQ(GetEmulatedDeviceCounters().launches, launches0) << "captured launches run nothing";
  absl::StatusOr<GraphExec> exec = device_->Instantiate(*graph, "test graph");
  ASSERT_TRUE(exec.ok()) << exec.status();
  graph->Reset();  // the exec does not need its graph
  EXPECT_EQ(GetEmulatedDeviceCounters().live_graphs, 0);
  EXPECT_EQ(GetEmulatedDeviceCounters().live_graph_execs, 1);
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(device_->LaunchGraph(*exec, "test graph").ok());
  ASSERT_TRUE(device_->CopyToHost(xs.data(), x->ptr(), 32, "x").ok());
  ASSERT_TRUE(device_->Synchronize("after the graphs").ok());
  EXPECT_EQ(xs, (std::vector<float>{13, 13, 13, 13, 1, 1, 1, 1}));  // 1 + 3 x 2 x 2
  const EmulatedDeviceCounters c = GetEmulatedDeviceCounters();
  EXPECT_EQ(c.launches - launches0, 6);
  EXPECT_EQ(c.graph_launches, 3);
  exec->Reset();
  EXPECT_EQ(GetEmulatedDeviceCounters().live_graph_execs, 0);
}

TEST_F(EmulatedDriver, CopiesAndUnsafeCallsInvalidateACapture) {
  auto x = device_->Alloc(16, "x");
  ASSERT_TRUE(x.ok());
  std::vector<int32_t> h(4, 7);
  ASSERT_TRUE(device_->BeginCapture("g").ok());
  absl::Status st = device_->CopyToDevice(x->ptr(), h.data(), 16, "metadata");
  EXPECT_THAT(std::string(st.message()), HasSubstr("CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED"));
  EXPECT_THAT(std::string(st.message()), HasSubstr("captures kernel launches only"));
  absl::StatusOr<Graph> g = device_->EndCapture("g");
  ASSERT_FALSE(g.ok());
  EXPECT_THAT(std::string(g.status().message()), HasSubstr("cuStreamEndCapture (g)"));
  EXPECT_THAT(std::string(g.status().message()),
              HasSubstr("CUDA_ERROR_STREAM_CAPTURE_INVALIDATED"));
  EXPECT_THAT(std::string(g.status().message()), HasSubstr("cuMemcpyHtoDAsync_v2"));
  // The stream is back to normal.
  ASSERT_TRUE(device_->CopyToDevice(x->ptr(), h.data(), 16, "metadata").ok());
  ASSERT_TRUE(device_->Synchronize("after the capture").ok());

  // THREAD_LOCAL: the capturing thread may not allocate or synchronise; others may.
  ASSERT_TRUE(device_->BeginCapture("g").ok());
  absl::Status other;
  std::thread([&] { other = device_->Alloc(64, "from another thread").status(); }).join();
  EXPECT_TRUE(other.ok()) << other;
  auto mine = device_->Alloc(64, "during a capture");
  ASSERT_FALSE(mine.ok());
  EXPECT_THAT(std::string(mine.status().message()),
              HasSubstr("CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED"));
  EXPECT_FALSE(device_->EndCapture("g").ok());
  ASSERT_TRUE(device_->BeginCapture("g").ok());
  st = device_->Synchronize("during a capture");
  EXPECT_THAT(std::string(st.message()), HasSubstr("CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED"));
  EXPECT_FALSE(device_->EndCapture("g").ok());
  EXPECT_TRUE(device_->Synchronize("after the capture").ok());
  EXPECT_EQ(GetEmulatedDeviceCounters().live_graphs, 0);
}

TEST_F(EmulatedDriver, CaptureCallsCheckTheirArguments) {
  const DriverTable& t = device_->driver();
  CUstream s = nullptr;
  ASSERT_EQ(t.cuStreamCreate(&s, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
  CUgraph g = nullptr;
  CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_ACTIVE;
  EXPECT_EQ(t.cuStreamIsCapturing(s, &status), CUDA_SUCCESS);
  EXPECT_EQ(status, CU_STREAM_CAPTURE_STATUS_NONE);
  EXPECT_EQ(t.cuStreamEndCapture(s, &g), CUDA_ERROR_ILLEGAL_STATE);
  EXPECT_EQ(t.cuStreamBeginCapture_v2(nullptr, CU_STREAM_CAPTURE_MODE_GLOBAL),
            CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
  ASSERT_EQ(t.cuStreamBeginCapture_v2(s, CU_STREAM_CAPTURE_MODE_GLOBAL), CUDA_SUCCESS);
  EXPECT_EQ(t.cuStreamIsCapturing(s, &status), CUDA_SUCCESS);
  EXPECT_EQ(status, CU_STREAM_CAPTURE_STATUS_ACTIVE);
  EXPECT_EQ(t.cuStreamBeginCapture_v2(s, CU_STREAM_CAPTURE_MODE_GLOBAL), CUDA_ERROR_ILLEGAL_STATE);
  // GLOBAL: even another thread may not allocate, and that invalidates the capture.
  CUresult from_other = CUDA_SUCCESS;
  std::thread([&] {
    CUcontext ctx = nullptr;
    (void)t.cuDevicePrimaryCtxRetain(&ctx, 0);
    (void)t.cuCtxSetCurrent(ctx);
    CUdeviceptr p = 0;
    from_other = t.cuMemAlloc_v2(&p, 64);
    (void)t.cuDevicePrimaryCtxRelease_v2(0);
  }).join();
  EXPECT_EQ(from_other, CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
  EXPECT_EQ(t.cuStreamIsCapturing(s, &status), CUDA_SUCCESS);
  EXPECT_EQ(status, CU_STREAM_CAPTURE_STATUS_INVALIDATED);
  EXPECT_EQ(t.cuStreamEndCapture(s, &g), CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
  EXPECT_EQ(g, nullptr);
  // An empty capture is a graph; only flags 0 instantiate.
  ASSERT_EQ(t.cuStreamBeginCapture_v2(s, CU_STREAM_CAPTURE_MODE_RELAXED), CUDA_SUCCESS);
  ASSERT_EQ(t.cuStreamEndCapture(s, &g), CUDA_SUCCESS);
  CUgraphExec e = nullptr;
  EXPECT_EQ(t.cuGraphInstantiateWithFlags(&e, g, 1), CUDA_ERROR_INVALID_VALUE);
  ASSERT_EQ(t.cuGraphInstantiateWithFlags(&e, g, 0), CUDA_SUCCESS);
  EXPECT_EQ(t.cuGraphLaunch(e, s), CUDA_SUCCESS);
  EXPECT_EQ(t.cuStreamSynchronize(s), CUDA_SUCCESS);
  EXPECT_EQ(t.cuGraphExecDestroy(e), CUDA_SUCCESS);
  EXPECT_EQ(t.cuGraphExecDestroy(e), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(t.cuGraphDestroy(g), CUDA_SUCCESS);
  EXPECT_EQ(t.cuGraphDestroy(g), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(t.cuStreamDestroy_v2(s), CUDA_SUCCESS);
}

// Injected faults meet the kernels of a graph launch, not the captured launches.
TEST_F(EmulatedDriver, InjectedFaultsHitGraphLaunches) {
  ModuleHandle module;
  auto fn = ResidualAdd(&module);
  ASSERT_TRUE(fn.ok()) << fn.status();
  auto x = device_->Alloc(16, "x");
  ASSERT_TRUE(x.ok());
  ASSERT_TRUE(device_->Memset(x->ptr(), 0, 16, "x").ok());
  CUdeviceptr px = x->ptr();
  uint32_t n = 4;
  void* params[] = {&px, &px, &n};
  const kernels::LaunchDims dims = kernels::testing::ResidualAddLaunch({}, n);
  EmulatedFault f;
  f.fail_launch = 2;
  SetEmulatedFault(f);
  ASSERT_TRUE(device_->BeginCapture("g").ok());
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(device_->Launch(*fn, "residual_add", dims, params).ok());
  absl::StatusOr<Graph> graph = device_->EndCapture("g");
  ASSERT_TRUE(graph.ok()) << graph.status();
  absl::StatusOr<GraphExec> exec = device_->Instantiate(*graph, "g");
  ASSERT_TRUE(exec.ok()) << exec.status();
  // The second kernel of the first graph launch fails at launch: nothing is queued.
  absl::Status st = device_->LaunchGraph(*exec, "g");
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.code(), absl::StatusCode::kInternal);
  EXPECT_THAT(std::string(st.message()), HasSubstr("cuGraphLaunch (g)"));
  EXPECT_THAT(std::string(st.message()), HasSubstr("CUDA_ERROR_LAUNCH_FAILED"));
  EXPECT_THAT(std::string(st.message()),
              HasSubstr("injected failure of kernel residual_add (node 1 of 3"));
  EXPECT_TRUE(device_->Synchronize("after").ok());
  EXPECT_TRUE(device_->LaunchGraph(*exec, "g").ok()) << "only that launch fails";
  EXPECT_TRUE(device_->Synchronize("after").ok());

  f.site = EmulatedFault::Site::kSync;
  f.fail_launch = 6;  // the third kernel of the second launch from now
  SetEmulatedFault(f);
  EXPECT_TRUE(device_->LaunchGraph(*exec, "g").ok());
  EXPECT_TRUE(device_->LaunchGraph(*exec, "g").ok());
  st = device_->Synchronize("after two graphs");
  ASSERT_FALSE(st.ok());
  EXPECT_THAT(std::string(st.message()), HasSubstr("cuStreamSynchronize (after two graphs)"));
  EXPECT_THAT(std::string(st.message()),
              HasSubstr("injected failure of kernel residual_add (node 2 of 3"));
  EXPECT_TRUE(device_->LaunchGraph(*exec, "g").ok());
  EXPECT_TRUE(device_->Synchronize("after recovery").ok());
}

TEST(EmulatedDriverTeardown, ClosingTheDeviceReleasesEverything) {
  SetEmulatedFault({});
  {
    std::unique_ptr<Device> d = OpenEmulated();
    ASSERT_NE(d, nullptr);
    auto a = d->Alloc(100, "a");
    auto h = d->AllocPinned(100, "h");
    ASSERT_TRUE(a.ok() && h.ok());
    // A graph and an exec never destroyed (raw handles) go with the device.
    const DriverTable& t = d->driver();
    CUstream s = nullptr;
    CUgraph g = nullptr;
    CUgraphExec e = nullptr;
    ASSERT_EQ(t.cuStreamCreate(&s, 0), CUDA_SUCCESS);
    ASSERT_EQ(t.cuStreamBeginCapture_v2(s, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL), CUDA_SUCCESS);
    ASSERT_EQ(t.cuStreamEndCapture(s, &g), CUDA_SUCCESS);
    ASSERT_EQ(t.cuGraphInstantiateWithFlags(&e, g, 0), CUDA_SUCCESS);
    EmulatedDeviceCounters c = GetEmulatedDeviceCounters();
    EXPECT_EQ(c.live_allocations, 1);
    EXPECT_EQ(c.live_host_allocations, 1);
    EXPECT_EQ(c.live_graphs, 1);
    EXPECT_EQ(c.live_graph_execs, 1);
  }
  const EmulatedDeviceCounters c = GetEmulatedDeviceCounters();
  EXPECT_FALSE(c.alive);
  EXPECT_EQ(c.live_allocations, 0);
  EXPECT_EQ(c.live_host_allocations, 0);
  EXPECT_EQ(c.live_graphs, 0);
  EXPECT_EQ(c.live_graph_execs, 0);
}

}  // namespace
}  // namespace ptxserve::cuda
