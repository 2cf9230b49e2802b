#include "engine/cuda/device.h"

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "engine/util/log.h"

namespace ptxserve::cuda {
namespace {

// The context bound to this thread, as (context, device generation): a new Device may get
// the same primary-context handle as a destroyed one, and must still bind it again.
thread_local CUcontext tls_ctx = nullptr;
thread_local uint64_t tls_generation = 0;
std::atomic<uint64_t> next_generation{1};

}  // namespace

// ---- RAII holders ----
// On a lost device they free nothing: the driver would refuse, and the context's teardown
// takes everything with it.

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& o) noexcept {
  if (this != &o) {
    Reset();
    device_ = std::exchange(o.device_, nullptr);
    ptr_ = std::exchange(o.ptr_, 0);
    size_ = std::exchange(o.size_, 0);
  }
  return *this;
}

void DeviceBuffer::Reset() {
  if (device_ != nullptr && ptr_ != 0 && !device_->lost()) {
    absl::Status st = device_->MakeCurrent();
    const CUresult r = device_->driver().cuMemFree_v2(ptr_);
    if (st.ok() && r != CUDA_SUCCESS) st = device_->Error(r, "cuMemFree_v2");
    if (!st.ok()) {
      PTX_LOG(ERROR) << "freeing device memory: " << st.message();
    }
  }
  device_ = nullptr;
  ptr_ = 0;
  size_ = 0;
}

PinnedBuffer& PinnedBuffer::operator=(PinnedBuffer&& o) noexcept {
  if (this != &o) {
    Reset();
    device_ = std::exchange(o.device_, nullptr);
    data_ = std::exchange(o.data_, nullptr);
    size_ = std::exchange(o.size_, 0);
  }
  return *this;
}

void PinnedBuffer::Reset() {
  if (device_ != nullptr && data_ != nullptr && !device_->lost()) {
    absl::Status st = device_->MakeCurrent();
    const CUresult r = device_->driver().cuMemFreeHost(data_);
    if (st.ok() && r != CUDA_SUCCESS) st = device_->Error(r, "cuMemFreeHost");
    if (!st.ok()) {
      PTX_LOG(ERROR) << "freeing pinned memory: " << st.message();
    }
  }
  device_ = nullptr;
  data_ = nullptr;
  size_ = 0;
}

template <class T, auto Release, const char* kRelease>
void DeviceHandle<T, Release, kRelease>::Reset() {
  if (device_ != nullptr && handle_ != nullptr && !device_->lost()) {
    absl::Status st = device_->MakeCurrent();
    const CUresult r = (device_->driver().*Release)(handle_);
    if (st.ok() && r != CUDA_SUCCESS) st = device_->Error(r, kRelease);
    if (!st.ok()) {
      PTX_LOG(ERROR) << "releasing a device object: " << st.message();
    }
  }
  device_ = nullptr;
  handle_ = nullptr;
}

template class DeviceHandle<CUmodule, &DriverTable::cuModuleUnload, kModuleUnload>;
template class DeviceHandle<CUgraph, &DriverTable::cuGraphDestroy, kGraphDestroy>;
template class DeviceHandle<CUgraphExec, &DriverTable::cuGraphExecDestroy, kGraphExecDestroy>;

// ---- Device ----

absl::Status Device::Error(CUresult r, absl::string_view call, absl::string_view kernel) const {
  std::string msg(call);
  if (!kernel.empty()) absl::StrAppend(&msg, " (kernel ", kernel, ")");
  absl::StrAppend(&msg, " failed on ", info_.name.empty() ? driver_->name : info_.name, ": ",
                  DescribeResult(*driver_, r));
  if (driver_->ErrorDetail != nullptr) {
    const char* detail = driver_->ErrorDetail();
    if (detail != nullptr && detail[0] != '\0') absl::StrAppend(&msg, ": ", detail);
  }
  if (r == CUDA_ERROR_OUT_OF_MEMORY) return absl::ResourceExhaustedError(msg);
  absl::Status st = absl::InternalError(msg);
  // A sticky code is confirmed by a call that needs a working context: on a GPU it fails
  // with the same error from then on, while an emulated device without sticky faults
  // answers (its failures are transient, and the device stays usable).
  if (IsStickyResult(r) && !lost()) {
    size_t free_bytes = 0, total = 0;
    if (driver_->cuMemGetInfo_v2(&free_bytes, &total) != CUDA_SUCCESS) {
      std::lock_guard<std::mutex> l(lost_mu_);
      if (!lost_flag_.load(std::memory_order_relaxed)) {
        lost_ = absl::InternalError(
            absl::StrCat("the device's context is lost (no further CUDA work can run on it; "
                         "restart the process): ",
                         msg));
        lost_flag_.store(true, std::memory_order_release);
        PTX_LOG(ERROR) << lost_.message();
      }
    }
  }
  return st;
}

absl::StatusOr<std::unique_ptr<Device>> Device::Open(std::unique_ptr<DriverTable> driver,
                                                     int ordinal) {
  if (driver == nullptr) return absl::InvalidArgumentError("Device::Open: no driver table");
  std::unique_ptr<Device> d(new Device(std::move(driver)));
  const DriverTable& t = *d->driver_;
  DeviceInfo& info = d->info_;
  info.driver = t.name;
  info.emulated = t.emulated;
  info.ordinal = ordinal;
  if (CUresult r = t.cuInit(0); r != CUDA_SUCCESS) return d->Error(r, "cuInit");
  if (CUresult r = t.cuDriverGetVersion(&info.driver_version); r != CUDA_SUCCESS) {
    return d->Error(r, "cuDriverGetVersion");
  }
  int count = 0;
  if (CUresult r = t.cuDeviceGetCount(&count); r != CUDA_SUCCESS) {
    return d->Error(r, "cuDeviceGetCount");
  }
  if (ordinal < 0 || ordinal >= count) {
    return absl::FailedPreconditionError(absl::StrCat(
        t.name, ": device ", ordinal, " requested, the driver sees ", count, " device(s)"));
  }
  if (CUresult r = t.cuDeviceGet(&d->device_, ordinal); r != CUDA_SUCCESS) {
    return d->Error(r, "cuDeviceGet");
  }
  char name[256] = {};
  if (CUresult r = t.cuDeviceGetName(name, sizeof(name), d->device_); r != CUDA_SUCCESS) {
    return d->Error(r, "cuDeviceGetName");
  }
  info.name = name;
  const std::pair<CUdevice_attribute, int*> attrs[] = {
      {CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, &info.cc_major},
      {CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, &info.cc_minor},
      {CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, &info.num_sms},
      {CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK, &info.max_shared_per_block},
      {CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN, &info.max_shared_per_block_optin},
  };
  for (const auto& [attr, out] : attrs) {
    if (CUresult r = t.cuDeviceGetAttribute(out, attr, d->device_); r != CUDA_SUCCESS) {
      return d->Error(r, absl::StrCat("cuDeviceGetAttribute(", static_cast<int>(attr), ")"));
    }
  }
  if (CUresult r = t.cuDevicePrimaryCtxRetain(&d->ctx_, d->device_); r != CUDA_SUCCESS) {
    return d->Error(r, "cuDevicePrimaryCtxRetain");
  }
  d->generation_ = next_generation.fetch_add(1);
  if (absl::Status st = d->MakeCurrent(); !st.ok()) return st;
  if (CUresult r = t.cuStreamCreate(&d->stream_, CU_STREAM_NON_BLOCKING); r != CUDA_SUCCESS) {
    d->stream_ = nullptr;
    return d->Error(r, "cuStreamCreate");
  }
  absl::StatusOr<std::pair<size_t, size_t>> mem = d->MemoryInfo();
  if (!mem.ok()) return mem.status();
  info.total_memory = mem->second;
  return d;
}

Device::~Device() {
  if (ctx_ == nullptr) return;  // Open failed before retaining the context
  // A lost context is only released: the release destroys it with its stream.
  absl::Status st = lost() ? absl::OkStatus() : MakeCurrent();
  if (st.ok() && !lost() && stream_ != nullptr) {
    st = Synchronize("Device teardown");
    if (const CUresult r = driver_->cuStreamDestroy_v2(stream_); st.ok() && r != CUDA_SUCCESS) {
      st = Error(r, "cuStreamDestroy_v2");
    }
  }
  if (const CUresult r = driver_->cuDevicePrimaryCtxRelease_v2(device_);
      st.ok() && r != CUDA_SUCCESS) {
    st = Error(r, "cuDevicePrimaryCtxRelease_v2");
  }
  if (tls_generation == generation_) {
    tls_ctx = nullptr;
    tls_generation = 0;
  }
  if (!st.ok()) {
    PTX_LOG(ERROR) << "closing the device: " << st.message();
  }
}

absl::Status Device::MakeCurrent() {
  if (lost()) {
    std::lock_guard<std::mutex> l(lost_mu_);
    return lost_;
  }
  if (tls_ctx == ctx_ && tls_generation == generation_) return absl::OkStatus();
  if (CUresult r = driver_->cuCtxSetCurrent(ctx_); r != CUDA_SUCCESS) {
    return Error(r, "cuCtxSetCurrent");
  }
  tls_ctx = ctx_;
  tls_generation = generation_;
  return absl::OkStatus();
}

absl::StatusOr<DeviceBuffer> Device::Alloc(size_t bytes, absl::string_view what) {
  if (absl::Status st = MakeCurrent(); !st.ok()) return st;
  CUdeviceptr p = 0;
  if (CUresult r = driver_->cuMemAlloc_v2(&p, bytes); r != CUDA_SUCCESS) {
    return Error(r, absl::StrCat("cuMemAlloc_v2 of ", bytes, " bytes for ", what));
  }
  return DeviceBuffer(this, p, bytes);
}

absl::StatusOr<PinnedBuffer> Device::AllocPinned(size_t bytes, absl::string_view what) {
  if (absl::Status st = MakeCurrent(); !st.ok()) return st;
  void* p = nullptr;
  if (CUresult r = driver_->cuMemAllocHost_v2(&p, bytes); r != CUDA_SUCCESS) {
    return Error(r, absl::StrCat("cuMemAllocHost_v2 of ", bytes, " bytes for ", what));
  }
  return PinnedBuffer(this, p, bytes);
}

absl::StatusOr<std::pair<size_t, size_t>> Device::MemoryInfo() {
  if (absl::Status st = MakeCurrent(); !st.ok()) return st;
  size_t free_bytes = 0, total = 0;
  if (CUresult r = driver_->cuMemGetInfo_v2(&free_bytes, &total); r != CUDA_SUCCESS) {
    return Error(r, "cuMemGetInfo_v2");
  }
  return std::make_pair(free_bytes, total);
}

absl::Status Device::CopyToDevice(CUdeviceptr dst, const void* src, size_t n,
                                  absl::string_view what) {
  if (absl::Status st = MakeCurrent(); !st.ok()) return st;
  if (CUresult r = driver_->cuMemcpyHtoDAsync_v2(dst, src, n, stream_); r != CUDA_SUCCESS) {
    return Error(r, absl::StrCat("cuMemcpyHtoDAsync_v2 of ", n, " bytes (", what, ")"));
  }
  h2d_bytes_.fetch_add(static_cast<int64_t>(n), std::memory_order_relaxed);
  h2d_count_.fetch_add(1, std::memory_order_relaxed);
  return absl::OkStatus();
}

absl::Status Device::CopyToHost(void* dst, CUdeviceptr src, size_t n, absl::string_view what) {
  if (absl::Status st = MakeCurrent(); !st.ok()) return st;
  if (CUresult r = driver_->cuMemcpyDtoHAsync_v2(dst, src, n, stream_); r != CUDA_SUCCESS) {
    return Error(r, absl::StrCat("cuMemcpyDtoHAsync_v2 of ", n, " bytes (", what, ")"));
  }
  d2h_bytes_.fetch_add(static_cast<int64_t>(n), std::memory_order_relaxed);
  d2h_count_.fetch_add(1, std::memory_order_relaxed);
  return absl::OkStatus();
}

absl::Status Device::CopyOnDevice(CUdeviceptr dst, CUdeviceptr src, size_t n,
                                  absl::string_view what) {
  if (absl::Status st = MakeCurrent(); !st.ok()) return st;
  if (CUresult r = driver_->cuMemcpyDtoDAsync_v2(dst, src, n, stream_); r != CUDA_SUCCESS) {
    return Error(r, absl::StrCat("cuMemcpyDtoDAsync_v2 of ", n, " bytes (", what, ")"));
  }
  d2d_bytes_.fetch_add(static_cast<int64_t>(n), std::memory_order_relaxed);
  d2d_count_.fetch_add(1, std::memory_order_relaxed);
  return absl::OkStatus();
}

absl::Status Device::Memset(CUdeviceptr dst, uint8_t value, size_t n, absl::string_view what) {
  if (absl::Status st = MakeCurrent(); !st.ok()) return st;
  if (CUresult r = driver_->cuMemsetD8Async(dst, value, n, stream_); r != CUDA_SUCCESS) {
    return Error(r, absl::StrCat("cuMemsetD8Async of ", n, " bytes (", what, ")"));
  }
  return absl::OkStatus();
}

absl::Status Device::Synchronize(absl::string_view what) {
  if (absl::Status st = MakeCurrent(); !st.ok()) return st;
  if (CUresult r = driver_->cuStreamSynchronize(stream_); r != CUDA_SUCCESS) {
    return Error(r, absl::StrCat("cuStreamSynchronize (", what, ")"));
  }
  return absl::OkStatus();
}

absl::StatusOr<ModuleHandle> Device::LoadModule(const std::string& ptx, absl::string_view kernel) {
  if (absl::Status st = MakeCurrent(); !st.ok()) return st;
  // The JIT's own diagnostics name the PTX line; they are what makes a bad kernel
  // debuggable, so they go into the Status.
  std::vector<char> error_log(16 * 1024, '\0');
  CUjit_option opts[] = {CU_JIT_ERROR_LOG_BUFFER, CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES};
  void* values[] = {error_log.data(),
                    reinterpret_cast<void*>(static_cast<uintptr_t>(error_log.size()))};
  CUmodule m = nullptr;
  const CUresult r = driver_->cuModuleLoadDataEx(&m, ptx.c_str(), 2, opts, values);
  if (r != CUDA_SUCCESS) {
    absl::Status st = Error(r, "cuModuleLoadDataEx", kernel);
    error_log.back() = '\0';
    if (error_log[0] != '\0') {
      return absl::Status(st.code(), absl::StrCat(st.message(), "; JIT log: ", error_log.data()));
    }
    return st;
  }
  return ModuleHandle(this, m);
}

absl::StatusOr<CUfunction> Device::GetFunction(const ModuleHandle& module, const char* entry,
                                               absl::string_view kernel) {
  if (absl::Status st = MakeCurrent(); !st.ok()) return st;
  CUfunction fn = nullptr;
  if (CUresult r = driver_->cuModuleGetFunction(&fn, module.get(), entry); r != CUDA_SUCCESS) {
    return Error(r, absl::StrCat("cuModuleGetFunction(", entry, ")"), kernel);
  }
  return fn;
}

absl::Status Device::Launch(CUfunction fn, absl::string_view kernel,
                            const kernels::LaunchDims& dims, void** params, bool grid_dependent) {
  if (absl::Status st = MakeCurrent(); !st.ok()) return st;
  if (grid_dependent && driver_->cuLaunchKernelEx != nullptr) {
    // Only sm_90 PTX has griddepcontrol, so the device supports the attribute.
    CUlaunchAttribute attr{};
    attr.id = CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
    attr.value.programmaticStreamSerializationAllowed = 1;
    const CUlaunchConfig config{
        dims.grid[0],  dims.grid[1],      dims.grid[2], dims.block[0], dims.block[1],
        dims.block[2], dims.shared_bytes, stream_,      &attr,         1};
    const CUresult r = driver_->cuLaunchKernelEx(&config, fn, params, nullptr);
    if (r != CUDA_SUCCESS) return Error(r, "cuLaunchKernelEx", kernel);
    return absl::OkStatus();
  }
  const CUresult r = driver_->cuLaunchKernel(fn, dims.grid[0], dims.grid[1], dims.grid[2],
                                             dims.block[0], dims.block[1], dims.block[2],
                                             dims.shared_bytes, stream_, params, nullptr);
  if (r != CUDA_SUCCESS) return Error(r, "cuLaunchKernel", kernel);
  return absl::OkStatus();
}

absl::StatusOr<uint32_t> Device::MaxDynamicShared(CUfunction fn, absl::string_view kernel) {
  if (absl::Status st = MakeCurrent(); !st.ok()) return st;
  int v = 0;
  if (CUresult r =
          driver_->cuFuncGetAttribute(&v, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, fn);
      r != CUDA_SUCCESS) {
    return Error(r, "cuFuncGetAttribute(MAX_DYNAMIC_SHARED_SIZE_BYTES)", kernel);
  }
  return static_cast<uint32_t>(std::max(v, 0));
}

absl::Status Device::SetMaxDynamicShared(CUfunction fn, uint32_t bytes, absl::string_view kernel) {
  if (absl::Status st = MakeCurrent(); !st.ok()) return st;
  if (CUresult r = driver_->cuFuncSetAttribute(fn, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                               static_cast<int>(bytes));
      r != CUDA_SUCCESS) {
    return Error(r, absl::StrCat("cuFuncSetAttribute(MAX_DYNAMIC_SHARED_SIZE_BYTES, ", bytes, ")"),
                 kernel);
  }
  return absl::OkStatus();
}

absl::Status Device::BeginCapture(absl::string_view what) {
  if (absl::Status st = MakeCurrent(); !st.ok()) return st;
  // THREAD_LOCAL, not GLOBAL: a capture on this stream must not make other threads' driver
  // calls (another backend's allocations, say) fail.
  if (CUresult r = driver_->cuStreamBeginCapture_v2(stream_, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL);
      r != CUDA_SUCCESS) {
    return Error(r, absl::StrCat("cuStreamBeginCapture_v2 (", what, ")"));
  }
  return absl::OkStatus();
}

absl::StatusOr<Graph> Device::EndCapture(absl::string_view what) {
  if (absl::Status st = MakeCurrent(); !st.ok()) return st;
  CUgraph g = nullptr;
  if (CUresult r = driver_->cuStreamEndCapture(stream_, &g); r != CUDA_SUCCESS) {
    // An invalidated capture may still hand back a graph: it is of no use.
    if (g != nullptr) (void)driver_->cuGraphDestroy(g);
    return Error(r, absl::StrCat("cuStreamEndCapture (", what, ")"));
  }
  return Graph(this, g);
}

absl::StatusOr<GraphExec> Device::Instantiate(const Graph& graph, absl::string_view what) {
  if (absl::Status st = MakeCurrent(); !st.ok()) return st;
  CUgraphExec e = nullptr;
  if (CUresult r = driver_->cuGraphInstantiateWithFlags(&e, graph.get(), 0); r != CUDA_SUCCESS) {
    return Error(r, absl::StrCat("cuGraphInstantiateWithFlags (", what, ")"));
  }
  return GraphExec(this, e);
}

absl::Status Device::LaunchGraph(const GraphExec& exec, absl::string_view what) {
  if (absl::Status st = MakeCurrent(); !st.ok()) return st;
  if (CUresult r = driver_->cuGraphLaunch(exec.get(), stream_); r != CUDA_SUCCESS) {
    return Error(r, absl::StrCat("cuGraphLaunch (", what, ")"));
  }
  return absl::OkStatus();
}

TransferStats Device::transfers() const {
  TransferStats s;
  s.h2d_bytes = h2d_bytes_.load(std::memory_order_relaxed);
  s.h2d_count = h2d_count_.load(std::memory_order_relaxed);
  s.d2h_bytes = d2h_bytes_.load(std::memory_order_relaxed);
  s.d2h_count = d2h_count_.load(std::memory_order_relaxed);
  s.d2d_bytes = d2d_bytes_.load(std::memory_order_relaxed);
  s.d2d_count = d2d_count_.load(std::memory_order_relaxed);
  return s;
}

absl::StatusOr<CUevent> Device::CreateEvent() {
  if (absl::Status st = MakeCurrent(); !st.ok()) return st;
  CUevent ev = nullptr;
  if (CUresult r = driver_->cuEventCreate(&ev, CU_EVENT_DEFAULT); r != CUDA_SUCCESS) {
    return Error(r, "cuEventCreate");
  }
  return ev;
}

void Device::DestroyEvent(CUevent ev) {
  if (CUresult r = driver_->cuEventDestroy_v2(ev); r != CUDA_SUCCESS) {
    const absl::Status st = Error(r, "cuEventDestroy_v2");
    PTX_LOG(ERROR) << st.message();
  }
}

absl::Status Device::RecordEvent(CUevent ev) {
  if (CUresult r = driver_->cuEventRecord(ev, stream_); r != CUDA_SUCCESS) {
    return Error(r, "cuEventRecord");
  }
  return absl::OkStatus();
}

absl::StatusOr<float> Device::ElapsedMs(CUevent start, CUevent end) {
  if (CUresult r = driver_->cuEventSynchronize(end); r != CUDA_SUCCESS) {
    return Error(r, "cuEventSynchronize");
  }
  float ms = 0;
  if (CUresult r = driver_->cuEventElapsedTime_v2(&ms, start, end); r != CUDA_SUCCESS) {
    return Error(r, "cuEventElapsedTime");
  }
  return ms;
}

}  // namespace ptxserve::cuda
