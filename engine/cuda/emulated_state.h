// Internal to the emulated driver (emulated_driver.cc, emulated_memory.cc,
// emulated_module.cc, emulated_graph.cc): the process-wide device state and the opaque
// handle structs behind the CU* handles.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "engine/cuda/driver.h"
#include "engine/cuda/emulated_driver.h"
#include "kernels/emu/emulator.h"

namespace ptxserve::cuda {
namespace emulated {

// One kernel launch recorded by a stream capture: everything cuLaunchKernel was given,
// parameters copied. `module` is checked for liveness before `handle` is used.
struct GraphNode {
  CUmod_st* module = nullptr;
  emu::FunctionHandle handle;
  std::string name;  // the kernel's entry name, for fault messages
  emu::Dim3 grid, block;
  uint32_t shared = 0;
  std::vector<emu::KernelArg> args;
};

}  // namespace emulated

struct CUctx_st {
  int unused = 0;
};
struct CUfunc_st {
  emu::FunctionHandle handle;
  CUmod_st* module = nullptr;
  std::string name;
  std::vector<emu::ParamDesc> params;
  uint32_t static_shared = 0;
  // CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES: the device's default per-block shared
  // memory less static_shared until cuFuncSetAttribute raises it.
  uint32_t max_dynamic_shared = 0;
};
struct CUmod_st {
  emu::ModuleHandle handle;
  std::string ptx;  // the image, for EmulatedModulePtx
  std::map<std::string, std::unique_ptr<CUfunc_st>, std::less<>> functions;
};
struct CUstream_st {
  // Stream capture (emulated_graph.cc): while not NONE, launches on the stream are
  // recorded into `captured` instead of queued.
  CUstreamCaptureStatus capture = CU_STREAM_CAPTURE_STATUS_NONE;
  CUstreamCaptureMode capture_mode = CU_STREAM_CAPTURE_MODE_GLOBAL;
  std::thread::id capture_thread;
  std::string invalidated_by;  // why the capture became INVALIDATED
  std::vector<emulated::GraphNode> captured;
};
struct CUgraph_st {
  std::vector<emulated::GraphNode> nodes;
};
// Shared with the queued ops of its launches, so destroying an exec with launches still
// queued is safe (as on a GPU).
struct CUgraphExec_st {
  std::shared_ptr<const std::vector<emulated::GraphNode>> nodes;
};
struct CUevent_st {
  bool timing = true;
  bool recorded = false;   // cuEventRecord was called
  bool completed = false;  // the record ran (its stream work before it is done)
  std::chrono::steady_clock::time_point time;
};

namespace emulated {

// One piece of deferred stream work. `code` is what a failure of `run` reports; `kernel`:
// the work runs a kernel, whose failure is a fault that sticks to the context (when the
// device's sticky_faults is on).
struct Op {
  std::function<absl::Status()> run;
  CUresult code = CUDA_ERROR_LAUNCH_FAILED;
  bool kernel = false;
};

struct State {
  std::mutex mu;
  EmulatedDeviceOptions next_options;  // for the next device creation
  EmulatedDeviceOptions options;       // of the live device
  bool initialized = false;            // cuInit called
  int ctx_refs = 0;
  CUctx_st ctx;
  std::unique_ptr<emu::Emulator> emu;
  std::map<CUdeviceptr, size_t> allocations;
  std::map<void*, size_t> host_allocations;
  std::set<CUmod_st*> modules;
  std::set<CUstream_st*> streams;
  std::set<CUevent_st*> events;
  std::set<CUgraph_st*> graphs;
  std::set<CUgraphExec_st*> graph_execs;
  std::deque<Op> queue;  // all streams' work in submission order (stronger than needed)
  // CUDA_SUCCESS, or the fault that poisoned the live context: every call that needs the
  // context returns it (CheckContext) until the device is torn down.
  CUresult sticky = CUDA_SUCCESS;
  EmulatedFault fault;
  int64_t launches_since_fault = 0;
  int64_t allocs_since_fault = 0;
  EmulatedDeviceCounters counters;
  bool kernel_counters = false;  // SetEmulatedKernelCounters
  uint64_t kernel_counter_sample_ctas = 0;
};

// The process-wide state (never destroyed: drivers outlive static destructors).
State& S();
// Clears and sets this thread's error detail (DriverTable::ErrorDetail).
void ClearDetail();
void SetDetail(std::string detail);
// CUDA_SUCCESS when a live, unpoisoned context is current on this thread; else why not
// (the sticky fault for a poisoned one). Call with S().mu held.
CUresult CheckContext();
// Runs every queued op in order; on the first failure drops the rest, sets the detail and
// returns the op's code. Call with S().mu held.
CUresult Flush();
// Whether [ptr, ptr + n) lies in one live device allocation (S().mu held).
bool ValidRange(CUdeviceptr ptr, size_t n);
bool ValidStream(CUstream s);  // null (legacy default stream) or a live stream

// Stream capture (emulated_graph.cc; S().mu held). Whether `s` is capturing (ACTIVE or
// INVALIDATED).
bool Capturing(CUstream s);
// Ends `s`'s capture as failed: cuStreamEndCapture will return INVALIDATED with `why`.
void InvalidateCapture(CUstream s, std::string why);
// For calls that are unsafe during a capture (allocation, free, synchronisation): when a
// capture forbids them to this thread (GLOBAL: every thread; THREAD_LOCAL: the capturing
// thread), invalidates that capture and returns CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED
// with a detail naming `call`; else CUDA_SUCCESS.
CUresult CheckCaptureAllows(const char* call);
// For stream work the emulator does not record (copies, memsets, event records): on a
// capturing stream, invalidates the capture and returns CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED.
CUresult RejectIfCapturing(CUstream s, const char* call);
// Records a launch on capturing stream `s` (parameters already copied into `node`).
CUresult RecordLaunch(CUstream s, emulated::GraphNode node);
// Frees every graph and graph exec (device teardown; S().mu held).
void DestroyGraphs();

// Memory entry points (emulated_memory.cc).
CUresult MemGetInfo(size_t* free_bytes, size_t* total_bytes);
CUresult MemAlloc(CUdeviceptr* dptr, size_t bytes);
CUresult MemFree(CUdeviceptr dptr);
CUresult MemAllocHost(void** ptr, size_t bytes);
CUresult MemFreeHost(void* ptr);
CUresult MemcpyHtoDAsync(CUdeviceptr dst, const void* src, size_t n, CUstream stream);
CUresult MemcpyDtoHAsync(void* dst, CUdeviceptr src, size_t n, CUstream stream);
CUresult MemcpyDtoDAsync(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream stream);
CUresult MemsetD8Async(CUdeviceptr dst, unsigned char value, size_t n, CUstream stream);

// Module and launch entry points (emulated_module.cc).
CUresult ModuleLoadDataEx(CUmodule* module, const void* image, unsigned int num_options,
                          CUjit_option* options, void** option_values);
CUresult ModuleUnload(CUmodule module);
CUresult ModuleGetFunction(CUfunction* fn, CUmodule module, const char* name);
CUresult FuncGetAttribute(int* value, CUfunction_attribute attrib, CUfunction fn);
CUresult FuncSetAttribute(CUfunction fn, CUfunction_attribute attrib, int value);
CUresult LaunchKernel(CUfunction fn, unsigned int gx, unsigned int gy, unsigned int gz,
                      unsigned int bx, unsigned int by, unsigned int bz, unsigned int shared,
                      CUstream stream, void** params, void** extra);
// cuLaunchKernelEx: LaunchKernel with the config's dimensions and stream; the only attribute
// taken is programmatic stream serialisation (others: CUDA_ERROR_NOT_SUPPORTED).
CUresult LaunchKernelEx(const CUlaunchConfig* config, CUfunction fn, void** params, void** extra);
// Frees every module (device teardown; S().mu held).
void DestroyModules();

// Graph entry points (emulated_graph.cc).
CUresult StreamBeginCapture(CUstream stream, CUstreamCaptureMode mode);
CUresult StreamEndCapture(CUstream stream, CUgraph* graph);
CUresult StreamIsCapturing(CUstream stream, CUstreamCaptureStatus* status);
CUresult GraphInstantiateWithFlags(CUgraphExec* exec, CUgraph graph, CUflags64 flags);
CUresult GraphLaunch(CUgraphExec exec, CUstream stream);
CUresult GraphExecDestroy(CUgraphExec exec);
CUresult GraphDestroy(CUgraph graph);

}  // namespace emulated
}  // namespace ptxserve::cuda
