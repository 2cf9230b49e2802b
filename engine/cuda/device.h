// A thin RAII layer over a DriverTable: one device, its primary context and one stream.
// Every CUresult becomes an absl::Status naming the call, the kernel (for loads and
// launches) and the driver's error name and string, plus the emulator's detail on the
// emulated device. Codes: CUDA_ERROR_OUT_OF_MEMORY -> RESOURCE_EXHAUSTED, everything else
// INTERNAL (a failing step fails its sequences with INTERNAL).
//
// A sticky fault (IsStickyResult: an illegal address and its kin) corrupts the context for
// good on a GPU. When a call reports one and the context confirms it, the device is lost:
// every later method returns that first error (INTERNAL) without calling the driver again,
// and buffers, modules and graphs are dropped without freeing (they go with the context).
//
// All work goes to the device's one stream, in order; copies are asynchronous and only
// Synchronize waits. The stream can be captured into a CUDA graph (BeginCapture ..
// EndCapture: the launches in between are recorded, not run), instantiated once and
// launched many times (LaunchGraph). Thread-safety: any thread may call (the context is made
// current on the calling thread on demand), but the stream is shared, so one user at a time.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "engine/cuda/driver.h"
#include "kernels/common.h"

namespace ptxserve::cuda {

class Device;

struct DeviceInfo {
  std::string name;    // cuDeviceGetName
  std::string driver;  // DriverTable::name
  bool emulated = false;
  int driver_version = 0;  // e.g. 12040
  int ordinal = 0;
  int cc_major = 0, cc_minor = 0;
  int num_sms = 0;
  int max_shared_per_block = 0;        // without opting in
  int max_shared_per_block_optin = 0;  // the most a kernel may opt in to
  size_t total_memory = 0;
};

// Cumulative host<->device traffic enqueued on the device (counted when enqueued).
struct TransferStats {
  int64_t h2d_bytes = 0, h2d_count = 0;
  int64_t d2h_bytes = 0, d2h_count = 0;
  int64_t d2d_bytes = 0, d2d_count = 0;
};

// Device memory; freed on destruction (after the stream's queued work, as cuMemFree does).
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  DeviceBuffer(Device* device, CUdeviceptr ptr, size_t size)
      : device_(device), ptr_(ptr), size_(size) {}
  ~DeviceBuffer() { Reset(); }
  DeviceBuffer(DeviceBuffer&& o) noexcept { *this = std::move(o); }
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  CUdeviceptr ptr() const { return ptr_; }
  size_t size() const { return size_; }
  void Reset();  // frees now; a failure is logged

 private:
  Device* device_ = nullptr;
  CUdeviceptr ptr_ = 0;
  size_t size_ = 0;
};

// Page-locked host memory (cuMemAllocHost): the source and target of async copies.
class PinnedBuffer {
 public:
  PinnedBuffer() = default;
  PinnedBuffer(Device* device, void* data, size_t size)
      : device_(device), data_(data), size_(size) {}
  ~PinnedBuffer() { Reset(); }
  PinnedBuffer(PinnedBuffer&& o) noexcept { *this = std::move(o); }
  PinnedBuffer& operator=(PinnedBuffer&& o) noexcept;
  PinnedBuffer(const PinnedBuffer&) = delete;
  PinnedBuffer& operator=(const PinnedBuffer&) = delete;

  uint8_t* data() const { return static_cast<uint8_t*>(data_); }
  size_t size() const { return size_; }
  void Reset();

 private:
  Device* device_ = nullptr;
  void* data_ = nullptr;
  size_t size_ = 0;
};

// A driver object of `device`'s context (a module, a graph, an instantiated graph),
// released on destruction or Reset by the DriverTable call `Release` (named kRelease in
// the logged error if it fails). Nothing is released once the device is lost: the object
// went with the context.
template <class T, auto Release, const char* kRelease>
class DeviceHandle {
 public:
  DeviceHandle() = default;
  DeviceHandle(Device* device, T handle) : device_(device), handle_(handle) {}
  ~DeviceHandle() { Reset(); }
  DeviceHandle(DeviceHandle&& o) noexcept { *this = std::move(o); }
  DeviceHandle& operator=(DeviceHandle&& o) noexcept {
    if (this != &o) {
      Reset();
      device_ = std::exchange(o.device_, nullptr);
      handle_ = std::exchange(o.handle_, nullptr);
    }
    return *this;
  }
  DeviceHandle(const DeviceHandle&) = delete;
  DeviceHandle& operator=(const DeviceHandle&) = delete;

  T get() const { return handle_; }
  void Reset();  // device.cc

 private:
  Device* device_ = nullptr;
  T handle_ = nullptr;
};

inline constexpr char kModuleUnload[] = "cuModuleUnload";
inline constexpr char kGraphDestroy[] = "cuGraphDestroy";
inline constexpr char kGraphExecDestroy[] = "cuGraphExecDestroy";
// A loaded module.
using ModuleHandle = DeviceHandle<CUmodule, &DriverTable::cuModuleUnload, kModuleUnload>;
// A captured graph.
using Graph = DeviceHandle<CUgraph, &DriverTable::cuGraphDestroy, kGraphDestroy>;
// An instantiated graph (launches already queued still run after its release).
using GraphExec = DeviceHandle<CUgraphExec, &DriverTable::cuGraphExecDestroy, kGraphExecDestroy>;

class Device {
 public:
  // cuInit, then device `ordinal`: its attributes, its primary context (made current on
  // the calling thread) and a non-blocking stream. Errors name the failing call;
  // FailedPrecondition when the driver sees no device.
  static absl::StatusOr<std::unique_ptr<Device>> Open(std::unique_ptr<DriverTable> driver,
                                                      int ordinal = 0);
  // Synchronises, destroys the stream and releases the primary context. Every buffer and
  // module of this device must be gone by then.
  ~Device();
  Device(const Device&) = delete;
  Device& operator=(const Device&) = delete;

  const DeviceInfo& info() const { return info_; }
  const DriverTable& driver() const { return *driver_; }

  // Binds the context to the calling thread when another (or none) is bound. Every
  // method below calls it; cheap when already bound. Once the device is lost, returns the
  // fault that lost it.
  absl::Status MakeCurrent();
  // Whether a sticky fault has lost the context (see above). Any thread.
  bool lost() const { return lost_flag_.load(std::memory_order_acquire); }

  // `what` names the buffer in errors ("weights layers.3.wq", "KV pool").
  absl::StatusOr<DeviceBuffer> Alloc(size_t bytes, absl::string_view what);
  absl::StatusOr<PinnedBuffer> AllocPinned(size_t bytes, absl::string_view what);
  // (free bytes, total bytes) of device memory.
  absl::StatusOr<std::pair<size_t, size_t>> MemoryInfo();

  // Asynchronous on the stream; counted in transfers(). Host memory must stay valid and
  // unchanged (host->device) or unread (device->host) until Synchronize.
  absl::Status CopyToDevice(CUdeviceptr dst, const void* src, size_t n, absl::string_view what);
  absl::Status CopyToHost(void* dst, CUdeviceptr src, size_t n, absl::string_view what);
  absl::Status CopyOnDevice(CUdeviceptr dst, CUdeviceptr src, size_t n, absl::string_view what);
  absl::Status Memset(CUdeviceptr dst, uint8_t value, size_t n, absl::string_view what);
  // Waits for the stream; errors of earlier asynchronous work surface here.
  absl::Status Synchronize(absl::string_view what);

  // cuModuleLoadDataEx of NUL-terminated PTX text with the JIT error log captured into
  // the error; `kernel` names it.
  absl::StatusOr<ModuleHandle> LoadModule(const std::string& ptx, absl::string_view kernel);
  absl::StatusOr<CUfunction> GetFunction(const ModuleHandle& module, const char* entry,
                                         absl::string_view kernel);
  // cuLaunchKernel on the stream; `params[i]` points at parameter i's value. Dynamic
  // shared memory above the function's MaxDynamicShared needs SetMaxDynamicShared first.
  // `grid_dependent` (the kernel waits on griddepcontrol.wait): cuLaunchKernelEx with
  // programmatic stream serialization where the driver has it, so the launch overlaps the
  // previous kernel.
  absl::Status Launch(CUfunction fn, absl::string_view kernel, const kernels::LaunchDims& dims,
                      void** params, bool grid_dependent = false);
  // CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES of `fn`: the dynamic shared memory a
  // launch may ask for (info().max_shared_per_block less the static part until raised).
  absl::StatusOr<uint32_t> MaxDynamicShared(CUfunction fn, absl::string_view kernel);
  // cuFuncSetAttribute of that attribute: up to info().max_shared_per_block_optin less the
  // function's static shared memory (INTERNAL naming CUDA_ERROR_INVALID_VALUE above it).
  absl::Status SetMaxDynamicShared(CUfunction fn, uint32_t bytes, absl::string_view kernel);

  // Stream capture in CU_STREAM_CAPTURE_MODE_THREAD_LOCAL (this thread must not allocate,
  // free or synchronise until EndCapture; other threads are unaffected). Between the two,
  // Launch records instead of running and copies fail. EndCapture must follow every
  // successful BeginCapture, also after a failed launch (it then fails, naming the
  // invalidation, and the stream is back to normal). `what` names the graph in errors.
  absl::Status BeginCapture(absl::string_view what);
  absl::StatusOr<Graph> EndCapture(absl::string_view what);
  // cuGraphInstantiateWithFlags (flags 0).
  absl::StatusOr<GraphExec> Instantiate(const Graph& graph, absl::string_view what);
  // cuGraphLaunch on the stream: the graph's kernels run in capture order after the
  // stream's earlier work; their faults surface at the next Synchronize, as a launch's do.
  absl::Status LaunchGraph(const GraphExec& exec, absl::string_view what);

  // Milliseconds between two points of the stream, measured with events around `work`
  // (which enqueues; this call synchronises). For benchmarks.
  template <class Work>
  absl::StatusOr<float> TimeMs(Work&& work);

  TransferStats transfers() const;

  // Error for a failed driver call: "<call> [<kernel>] failed: <name>: <string>[: detail]".
  // A sticky code that the context confirms marks the device lost.
  absl::Status Error(CUresult r, absl::string_view call, absl::string_view kernel = {}) const;

 private:
  explicit Device(std::unique_ptr<DriverTable> driver) : driver_(std::move(driver)) {}
  absl::StatusOr<float> ElapsedMs(CUevent start, CUevent end);
  absl::Status RecordEvent(CUevent ev);
  absl::StatusOr<CUevent> CreateEvent();
  void DestroyEvent(CUevent ev);

  std::unique_ptr<DriverTable> driver_;
  DeviceInfo info_;
  CUdevice device_ = 0;
  CUcontext ctx_ = nullptr;
  CUstream stream_ = nullptr;
  uint64_t generation_ = 0;  // tells this device's context from an earlier one's
  // The fault that lost the context (set once, under lost_mu_, before lost_flag_).
  mutable std::mutex lost_mu_;
  mutable absl::Status lost_;
  mutable std::atomic<bool> lost_flag_{false};
  std::atomic<int64_t> h2d_bytes_{0}, h2d_count_{0}, d2h_bytes_{0}, d2h_count_{0}, d2d_bytes_{0},
      d2d_count_{0};
};

template <class Work>
absl::StatusOr<float> Device::TimeMs(Work&& work) {
  absl::StatusOr<CUevent> start = CreateEvent();
  if (!start.ok()) return start.status();
  absl::StatusOr<CUevent> end = CreateEvent();
  if (!end.ok()) {
    DestroyEvent(*start);
    return end.status();
  }
  absl::Status st = RecordEvent(*start);
  if (st.ok()) st = work();
  if (st.ok()) st = RecordEvent(*end);
  absl::StatusOr<float> ms = st.ok() ? ElapsedMs(*start, *end) : absl::StatusOr<float>(st);
  DestroyEvent(*start);
  DestroyEvent(*end);
  return ms;
}

}  // namespace ptxserve::cuda
