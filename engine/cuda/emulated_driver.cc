// Device, context, memory, stream and event functions of the emulated driver. Every entry
// point takes the one state mutex: the emulator serialises its own calls anyway, and a
// single lock keeps the deferred queue's order equal to the submission order.
#include "engine/cuda/emulated_driver.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "engine/cuda/emulated_state.h"

namespace ptxserve::cuda {
namespace emulated {
namespace {

thread_local std::string tls_detail;
thread_local CUctx_st* tls_current = nullptr;

using Lock = std::lock_guard<std::mutex>;

struct ErrorText {
  CUresult code;
  const char* name;
  const char* text;
};
constexpr ErrorText kErrors[] = {
    {CUDA_SUCCESS, "CUDA_SUCCESS", "no error"},
    {CUDA_ERROR_INVALID_VALUE, "CUDA_ERROR_INVALID_VALUE", "invalid argument"},
    {CUDA_ERROR_OUT_OF_MEMORY, "CUDA_ERROR_OUT_OF_MEMORY", "out of memory"},
    {CUDA_ERROR_NOT_INITIALIZED, "CUDA_ERROR_NOT_INITIALIZED", "initialization error"},
    {CUDA_ERROR_DEINITIALIZED, "CUDA_ERROR_DEINITIALIZED", "driver shutting down"},
    {CUDA_ERROR_NO_DEVICE, "CUDA_ERROR_NO_DEVICE", "no CUDA-capable device is detected"},
    {CUDA_ERROR_INVALID_DEVICE, "CUDA_ERROR_INVALID_DEVICE", "invalid device ordinal"},
    {CUDA_ERROR_INVALID_IMAGE, "CUDA_ERROR_INVALID_IMAGE", "device kernel image is invalid"},
    {CUDA_ERROR_INVALID_CONTEXT, "CUDA_ERROR_INVALID_CONTEXT", "invalid device context"},
    {CUDA_ERROR_INVALID_PTX, "CUDA_ERROR_INVALID_PTX", "a PTX JIT compilation failed"},
    {CUDA_ERROR_UNSUPPORTED_PTX_VERSION, "CUDA_ERROR_UNSUPPORTED_PTX_VERSION",
     "the provided PTX was compiled with an unsupported toolchain."},
    {CUDA_ERROR_INVALID_SOURCE, "CUDA_ERROR_INVALID_SOURCE", "device kernel image is invalid"},
    {CUDA_ERROR_SHARED_OBJECT_INIT_FAILED, "CUDA_ERROR_SHARED_OBJECT_INIT_FAILED",
     "shared object initialization failed"},
    {CUDA_ERROR_INVALID_HANDLE, "CUDA_ERROR_INVALID_HANDLE", "invalid resource handle"},
    {CUDA_ERROR_ILLEGAL_STATE, "CUDA_ERROR_ILLEGAL_STATE",
     "the operation cannot be performed in the present state"},
    {CUDA_ERROR_NOT_FOUND, "CUDA_ERROR_NOT_FOUND", "named symbol not found"},
    {CUDA_ERROR_NOT_READY, "CUDA_ERROR_NOT_READY", "device not ready"},
    {CUDA_ERROR_ILLEGAL_ADDRESS, "CUDA_ERROR_ILLEGAL_ADDRESS",
     "an illegal memory access was encountered"},
    {CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES, "CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES",
     "too many resources requested for launch"},
    {CUDA_ERROR_LAUNCH_TIMEOUT, "CUDA_ERROR_LAUNCH_TIMEOUT",
     "the launch timed out and was terminated"},
    {CUDA_ERROR_ILLEGAL_INSTRUCTION, "CUDA_ERROR_ILLEGAL_INSTRUCTION",
     "an illegal instruction was encountered"},
    {CUDA_ERROR_MISALIGNED_ADDRESS, "CUDA_ERROR_MISALIGNED_ADDRESS", "misaligned address"},
    {CUDA_ERROR_LAUNCH_FAILED, "CUDA_ERROR_LAUNCH_FAILED", "unspecified launch failure"},
    {CUDA_ERROR_NOT_SUPPORTED, "CUDA_ERROR_NOT_SUPPORTED", "operation not supported"},
    {CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, "CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED",
     "operation not permitted when stream is capturing"},
    {CUDA_ERROR_STREAM_CAPTURE_INVALIDATED, "CUDA_ERROR_STREAM_CAPTURE_INVALIDATED",
     "operation failed due to a previous error during capture"},
    {CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD, "CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD",
     "attempt to terminate a thread-local capture sequence from another thread"},
    {CUDA_ERROR_UNKNOWN, "CUDA_ERROR_UNKNOWN", "unknown error"},
};

const ErrorText* FindError(CUresult r) {
  for (const ErrorText& e : kErrors) {
    if (e.code == r) return &e;
  }
  return nullptr;
}

// Tears the device down as a primary-context reset does: everything it owned goes.
void DestroyDevice(State& s) {
  s.queue.clear();
  DestroyGraphs();
  DestroyModules();
  for (CUstream_st* st : s.streams) delete st;
  for (CUevent_st* ev : s.events) delete ev;
  for (auto& [p, n] : s.host_allocations) std::free(p);
  s.streams.clear();
  s.events.clear();
  s.host_allocations.clear();
  s.allocations.clear();
  s.counters.live_allocations = 0;
  s.counters.live_bytes = 0;
  s.counters.live_host_allocations = 0;
  s.emu.reset();
}

// ---- the table's functions ----

CUresult Init(unsigned int flags) {
  ClearDetail();
  if (flags != 0) return CUDA_ERROR_INVALID_VALUE;
  Lock l(S().mu);
  S().initialized = true;
  return CUDA_SUCCESS;
}

CUresult DriverGetVersion(int* version) {
  if (version == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *version = 12000;
  return CUDA_SUCCESS;
}

CUresult GetErrorString(CUresult error, const char** str) {
  if (str == nullptr) return CUDA_ERROR_INVALID_VALUE;
  const ErrorText* e = FindError(error);
  *str = e != nullptr ? e->text : nullptr;
  return e != nullptr ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

CUresult GetErrorName(CUresult error, const char** str) {
  if (str == nullptr) return CUDA_ERROR_INVALID_VALUE;
  const ErrorText* e = FindError(error);
  *str = e != nullptr ? e->name : nullptr;
  return e != nullptr ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

CUresult DeviceGetCount(int* count) {
  ClearDetail();
  Lock l(S().mu);
  if (!S().initialized) return CUDA_ERROR_NOT_INITIALIZED;
  if (count == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *count = 1;
  return CUDA_SUCCESS;
}

CUresult DeviceGet(CUdevice* device, int ordinal) {
  ClearDetail();
  Lock l(S().mu);
  if (!S().initialized) return CUDA_ERROR_NOT_INITIALIZED;
  if (device == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (ordinal != 0) return CUDA_ERROR_INVALID_DEVICE;
  *device = 0;
  return CUDA_SUCCESS;
}

// The options of the live device, or those the next one will have.
const EmulatedDeviceOptions& Options(const State& s) {
  return s.ctx_refs > 0 ? s.options : s.next_options;
}

CUresult DeviceGetName(char* name, int len, CUdevice dev) {
  ClearDetail();
  Lock l(S().mu);
  if (!S().initialized) return CUDA_ERROR_NOT_INITIALIZED;
  if (dev != 0) return CUDA_ERROR_INVALID_DEVICE;
  if (name == nullptr || len <= 0) return CUDA_ERROR_INVALID_VALUE;
  const std::string& n = Options(S()).name;
  const size_t k = std::min(n.size(), static_cast<size_t>(len - 1));
  std::memcpy(name, n.data(), k);
  name[k] = '\0';
  return CUDA_SUCCESS;
}

CUresult DeviceGetAttribute(int* value, CUdevice_attribute attrib, CUdevice dev) {
  ClearDetail();
  Lock l(S().mu);
  if (!S().initialized) return CUDA_ERROR_NOT_INITIALIZED;
  if (dev != 0) return CUDA_ERROR_INVALID_DEVICE;
  if (value == nullptr) return CUDA_ERROR_INVALID_VALUE;
  const EmulatedDeviceOptions& o = Options(S());
  switch (attrib) {
    case CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK:
      *value = 1024;
      break;
    case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK:
      *value = o.max_shared_per_block;
      break;
    case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN:
      *value = o.max_shared_per_block_optin;
      break;
    case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR:
      *value = o.max_shared_per_sm;
      break;
    case CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_BLOCK:
    case CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_MULTIPROCESSOR:
      *value = o.registers_per_sm;
      break;
    case CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR:
      *value = o.max_threads_per_sm;
      break;
    case CU_DEVICE_ATTRIBUTE_WARP_SIZE:
      *value = 32;
      break;
    case CU_DEVICE_ATTRIBUTE_CLOCK_RATE:
      *value = 1000;  // kHz: an interpreter is slow, and says so
      break;
    case CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT:
      *value = o.num_sms;
      break;
    case CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE:
      *value = 1000;
      break;
    case CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH:
      *value = 64;
      break;
    case CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE:
      *value = 0;
      break;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR:
      *value = o.compute_major;
      break;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR:
      *value = o.compute_minor;
      break;
    default:
      return CUDA_ERROR_INVALID_VALUE;
  }
  return CUDA_SUCCESS;
}

CUresult PrimaryCtxRetain(CUcontext* ctx, CUdevice dev) {
  ClearDetail();
  Lock l(S().mu);
  State& s = S();
  if (!s.initialized) return CUDA_ERROR_NOT_INITIALIZED;
  if (dev != 0) return CUDA_ERROR_INVALID_DEVICE;
  if (ctx == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (s.ctx_refs == 0) {
    s.options = s.next_options;
    emu::EmulatorOptions eo;
    eo.num_threads = std::max(1, s.options.host_threads);
    eo.poison_allocations = s.options.poison_allocations;
    eo.max_device_bytes = s.options.memory_bytes;
    eo.max_shared_bytes = static_cast<uint32_t>(s.options.max_shared_per_block_optin);
    eo.collect_counters = s.kernel_counters;
    eo.sample_ctas = s.kernel_counter_sample_ctas;
    s.emu = std::make_unique<emu::Emulator>(eo);
    s.sticky = CUDA_SUCCESS;
    const int64_t started = s.counters.devices_started + 1;
    s.counters = EmulatedDeviceCounters{};
    s.counters.devices_started = started;
    s.counters.alive = true;
  }
  ++s.ctx_refs;
  *ctx = &s.ctx;
  return CUDA_SUCCESS;
}

CUresult PrimaryCtxRelease(CUdevice dev) {
  ClearDetail();
  Lock l(S().mu);
  State& s = S();
  if (!s.initialized) return CUDA_ERROR_NOT_INITIALIZED;
  if (dev != 0) return CUDA_ERROR_INVALID_DEVICE;
  if (s.ctx_refs == 0) return CUDA_ERROR_INVALID_CONTEXT;
  if (--s.ctx_refs == 0) {
    DestroyDevice(s);
    s.counters.alive = false;
  }
  return CUDA_SUCCESS;
}

CUresult CtxSetCurrent(CUcontext ctx) {
  ClearDetail();
  Lock l(S().mu);
  if (!S().initialized) return CUDA_ERROR_NOT_INITIALIZED;
  if (ctx != nullptr && (ctx != &S().ctx || S().ctx_refs == 0)) return CUDA_ERROR_INVALID_CONTEXT;
  tls_current = ctx;
  return CUDA_SUCCESS;
}

CUresult CtxSynchronize() {
  ClearDetail();
  Lock l(S().mu);
  if (CUresult r = CheckContext(); r != CUDA_SUCCESS) return r;
  if (CUresult r = CheckCaptureAllows("cuCtxSynchronize"); r != CUDA_SUCCESS) return r;
  return Flush();
}

CUresult StreamCreate(CUstream* stream, unsigned int flags) {
  ClearDetail();
  Lock l(S().mu);
  if (CUresult r = CheckContext(); r != CUDA_SUCCESS) return r;
  if (stream == nullptr || (flags & ~CU_STREAM_NON_BLOCKING) != 0) return CUDA_ERROR_INVALID_VALUE;
  *stream = new CUstream_st;
  S().streams.insert(*stream);
  return CUDA_SUCCESS;
}

CUresult StreamDestroy(CUstream stream) {
  ClearDetail();
  Lock l(S().mu);
  if (CUresult r = CheckContext(); r != CUDA_SUCCESS) return r;
  if (S().streams.count(stream) == 0) return CUDA_ERROR_INVALID_HANDLE;
  // The stream's work still completes (and reports nothing), as on the GPU.
  Flush();
  ClearDetail();
  S().streams.erase(stream);
  delete stream;
  return CUDA_SUCCESS;
}

CUresult StreamSynchronize(CUstream stream) {
  ClearDetail();
  Lock l(S().mu);
  if (CUresult r = CheckContext(); r != CUDA_SUCCESS) return r;
  if (!ValidStream(stream)) return CUDA_ERROR_INVALID_HANDLE;
  if (CUresult r = RejectIfCapturing(stream, "cuStreamSynchronize"); r != CUDA_SUCCESS) return r;
  return Flush();
}

CUresult EventCreate(CUevent* event, unsigned int flags) {
  ClearDetail();
  Lock l(S().mu);
  if (CUresult r = CheckContext(); r != CUDA_SUCCESS) return r;
  if (event == nullptr || (flags & ~CU_EVENT_DISABLE_TIMING) != 0) return CUDA_ERROR_INVALID_VALUE;
  auto* ev = new CUevent_st;
  ev->timing = (flags & CU_EVENT_DISABLE_TIMING) == 0;
  S().events.insert(ev);
  *event = ev;
  return CUDA_SUCCESS;
}

CUresult EventDestroy(CUevent event) {
  ClearDetail();
  Lock l(S().mu);
  if (CUresult r = CheckContext(); r != CUDA_SUCCESS) return r;
  if (S().events.count(event) == 0) return CUDA_ERROR_INVALID_HANDLE;
  Flush();  // a queued record must not touch the freed event
  ClearDetail();
  S().events.erase(event);
  delete event;
  return CUDA_SUCCESS;
}

CUresult EventRecord(CUevent event, CUstream stream) {
  ClearDetail();
  Lock l(S().mu);
  if (CUresult r = CheckContext(); r != CUDA_SUCCESS) return r;
  if (S().events.count(event) == 0 || !ValidStream(stream)) return CUDA_ERROR_INVALID_HANDLE;
  if (CUresult r = RejectIfCapturing(stream, "cuEventRecord"); r != CUDA_SUCCESS) return r;
  event->recorded = true;
  event->completed = false;
  S().queue.push_back(Op{[event] {
                           event->completed = true;
                           event->time = std::chrono::steady_clock::now();
                           return absl::OkStatus();
                         },
                         CUDA_ERROR_UNKNOWN});
  return CUDA_SUCCESS;
}

CUresult EventSynchronize(CUevent event) {
  ClearDetail();
  Lock l(S().mu);
  if (CUresult r = CheckContext(); r != CUDA_SUCCESS) return r;
  if (S().events.count(event) == 0) return CUDA_ERROR_INVALID_HANDLE;
  return Flush();
}

CUresult EventElapsedTime(float* ms, CUevent start, CUevent end) {
  ClearDetail();
  Lock l(S().mu);
  if (CUresult r = CheckContext(); r != CUDA_SUCCESS) return r;
  if (ms == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (S().events.count(start) == 0 || S().events.count(end) == 0) return CUDA_ERROR_INVALID_HANDLE;
  if (!start->timing || !end->timing || !start->recorded || !end->recorded) {
    return CUDA_ERROR_INVALID_HANDLE;
  }
  if (!start->completed || !end->completed) return CUDA_ERROR_NOT_READY;
  *ms = std::chrono::duration<float, std::milli>(end->time - start->time).count();
  return CUDA_SUCCESS;
}

const char* ErrorDetail() { return tls_detail.c_str(); }

}  // namespace

State& S() {
  static State* s = new State;
  return *s;
}

void ClearDetail() { tls_detail.clear(); }
void SetDetail(std::string detail) { tls_detail = std::move(detail); }

CUresult CheckContext() {
  const State& s = S();
  if (!s.initialized) return CUDA_ERROR_NOT_INITIALIZED;
  if (tls_current == nullptr || tls_current != &s.ctx || s.ctx_refs == 0) {
    return CUDA_ERROR_INVALID_CONTEXT;
  }
  if (s.sticky != CUDA_SUCCESS) {
    const ErrorText* e = FindError(s.sticky);
    SetDetail(absl::StrCat("the context was lost to an earlier kernel fault (",
                           e != nullptr ? e->name : "an injected code", ")"));
  }
  return s.sticky;
}

CUresult Flush() {
  State& s = S();
  while (!s.queue.empty()) {
    Op op = std::move(s.queue.front());
    s.queue.pop_front();
    absl::Status st = op.run();
    if (!st.ok()) {
      s.queue.clear();
      SetDetail(std::string(st.message()));
      CUresult code = op.code;
      // A kernel's memory fault is what a GPU reports as an illegal or misaligned
      // address; the emulator says which in its (stable) fault text.
      if (code == CUDA_ERROR_LAUNCH_FAILED) {
        if (absl::StrContains(st.message(), "out-of-bounds")) code = CUDA_ERROR_ILLEGAL_ADDRESS;
        if (absl::StrContains(st.message(), "misaligned")) code = CUDA_ERROR_MISALIGNED_ADDRESS;
      }
      if (op.kernel && s.options.sticky_faults) s.sticky = code;
      return code;
    }
  }
  return CUDA_SUCCESS;
}

bool ValidRange(CUdeviceptr ptr, size_t n) {
  const State& s = S();
  auto it = s.allocations.upper_bound(ptr);
  if (it == s.allocations.begin()) return false;
  --it;
  const uint64_t off = ptr - it->first;
  return off < it->second && n <= it->second - off;
}

bool ValidStream(CUstream s) { return s == nullptr || S().streams.count(s) != 0; }

}  // namespace emulated

absl::StatusOr<std::unique_ptr<DriverTable>> LoadEmulatedDriver(
    const EmulatedDeviceOptions& options) {
  using namespace emulated;  // NOLINT(build/namespaces): the table's implementations
  {
    Lock l(S().mu);
    S().next_options = options;
  }
  auto t = std::make_unique<DriverTable>();
  t->name = "emulated";
  t->emulated = true;
  t->cuInit = Init;
  t->cuDriverGetVersion = DriverGetVersion;
  t->cuGetErrorString = GetErrorString;
  t->cuGetErrorName = GetErrorName;
  t->cuDeviceGetCount = DeviceGetCount;
  t->cuDeviceGet = DeviceGet;
  t->cuDeviceGetName = DeviceGetName;
  t->cuDeviceGetAttribute = DeviceGetAttribute;
  t->cuDevicePrimaryCtxRetain = PrimaryCtxRetain;
  t->cuDevicePrimaryCtxRelease_v2 = PrimaryCtxRelease;
  t->cuCtxSetCurrent = CtxSetCurrent;
  t->cuCtxSynchronize = CtxSynchronize;
  t->cuStreamCreate = StreamCreate;
  t->cuStreamDestroy_v2 = StreamDestroy;
  t->cuStreamSynchronize = StreamSynchronize;
  t->cuEventCreate = EventCreate;
  t->cuEventDestroy_v2 = EventDestroy;
  t->cuEventRecord = EventRecord;
  t->cuEventSynchronize = EventSynchronize;
  t->cuEventElapsedTime_v2 = EventElapsedTime;
  t->cuMemGetInfo_v2 = MemGetInfo;
  t->cuMemAlloc_v2 = MemAlloc;
  t->cuMemFree_v2 = MemFree;
  t->cuMemAllocHost_v2 = MemAllocHost;
  t->cuMemFreeHost = MemFreeHost;
  t->cuMemcpyHtoDAsync_v2 = MemcpyHtoDAsync;
  t->cuMemcpyDtoHAsync_v2 = MemcpyDtoHAsync;
  t->cuMemcpyDtoDAsync_v2 = MemcpyDtoDAsync;
  t->cuMemsetD8Async = MemsetD8Async;
  t->cuModuleLoadDataEx = ModuleLoadDataEx;
  t->cuModuleUnload = ModuleUnload;
  t->cuModuleGetFunction = ModuleGetFunction;
  t->cuFuncGetAttribute = FuncGetAttribute;
  t->cuFuncSetAttribute = FuncSetAttribute;
  t->cuLaunchKernel = LaunchKernel;
  t->cuLaunchKernelEx = LaunchKernelEx;
  t->cuStreamBeginCapture_v2 = StreamBeginCapture;
  t->cuStreamEndCapture = StreamEndCapture;
  t->cuStreamIsCapturing = StreamIsCapturing;
  t->cuGraphInstantiateWithFlags = GraphInstantiateWithFlags;
  t->cuGraphLaunch = GraphLaunch;
  t->cuGraphExecDestroy = GraphExecDestroy;
  t->cuGraphDestroy = GraphDestroy;
  t->ErrorDetail = ErrorDetail;
  return t;
}

// Sources of the profiles' figures: the CUDA C++ Programming Guide, "Compute Capabilities",
// table "Technical Specifications per Compute Capability" (8.0 and 9.0: 1024 threads and
// 64K 32-bit registers per block, 2048 resident threads and 64K registers per SM, 48 KB of
// shared memory per block by default; opt-in per block 163 KB on 8.0 and 227 KB on 9.0, per
// SM 164 KB and 228 KB); SM counts and memory from the NVIDIA A100 Tensor Core GPU
// Architecture whitepaper (108 SMs) and the NVIDIA H100 Tensor Core GPU datasheet (H100
// SXM5: 132 SMs, 80 GB), the 80 GB boards of each. Memory is taken as GiB; a real board's
// cuMemGetInfo reports somewhat less (what the driver and ECC reserve).
absl::StatusOr<EmulatedDeviceOptions> EmulatedDeviceProfile(std::string_view name) {
  struct Gpu {
    const char* profile;
    const char* name;
    int compute_major, num_sms, optin_kib, per_sm_kib;
  };
  // Both are sm_x0 boards of 80 GB; the defaults' 48 KiB per block by default, registers
  // and threads per SM hold for both.
  constexpr Gpu kGpus[] = {
      {"a100", "ptxserve emulated NVIDIA A100-SXM4-80GB (PTX interpreter)", 8, 108, 163, 164},
      {"h100", "ptxserve emulated NVIDIA H100 80GB HBM3 (PTX interpreter)", 9, 132, 227, 228},
  };
  EmulatedDeviceOptions o;
  if (name == "small") return o;
  for (const Gpu& g : kGpus) {
    if (name != g.profile) continue;
    o.name = g.name;
    o.compute_major = g.compute_major;
    o.compute_minor = 0;
    o.num_sms = g.num_sms;
    o.memory_bytes = uint64_t{80} << 30;
    o.max_shared_per_block_optin = g.optin_kib * 1024;
    o.max_shared_per_sm = g.per_sm_kib * 1024;
    return o;
  }
  return absl::InvalidArgumentError(absl::StrCat("unknown emulated device profile \"",
                                                 std::string(name), "\": want ",
                                                 EmulatedDeviceProfileNames()));
}

const char* EmulatedDeviceProfileNames() { return "small, a100 or h100"; }

void SetEmulatedFault(const EmulatedFault& fault) {
  emulated::Lock l(emulated::S().mu);
  emulated::S().fault = fault;
  emulated::S().launches_since_fault = 0;
  emulated::S().allocs_since_fault = 0;
}

EmulatedDeviceCounters GetEmulatedDeviceCounters() {
  emulated::Lock l(emulated::S().mu);
  return emulated::S().counters;
}

void SetEmulatedKernelCounters(bool on, uint64_t sample_ctas) {
  emulated::Lock l(emulated::S().mu);
  emulated::S().kernel_counters = on;
  emulated::S().kernel_counter_sample_ctas = sample_ctas;
  if (emulated::S().emu != nullptr) emulated::S().emu->SetCollectCounters(on, sample_ctas);
}

std::vector<emu::KernelCounters> TakeEmulatedKernelCounters() {
  emulated::Lock l(emulated::S().mu);
  if (emulated::S().emu == nullptr) return {};
  return emulated::S().emu->TakeCounters();
}

std::string EmulatedModulePtx(uint64_t ptx_hash) {
  emulated::Lock l(emulated::S().mu);
  for (const CUmod_st* m : emulated::S().modules) {
    if (emu::PtxHash(m->ptx) == ptx_hash) return m->ptx;
  }
  return "";
}

}  // namespace ptxserve::cuda
