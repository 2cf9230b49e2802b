// Internal to the emulated driver (emulated_driver.cc, emulated_module.cc): the
// process-wide device state and the opaque handle structs behind the CU* handles.
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
#include <vector>

#include "absl/status/status.h"
#include "engine/cuda/driver.h"
#include "engine/cuda/emulated_driver.h"
#include "kernels/emu/emulator.h"

namespace ptxserve::cuda {

struct CUctx_st {
  int unused = 0;
};
struct CUfunc_st {
  emu::FunctionHandle handle;
  CUmod_st* module = nullptr;
  std::string name;
  std::vector<emu::ParamDesc> params;
  uint32_t static_shared = 0;
};
struct CUmod_st {
  emu::ModuleHandle handle;
  std::map<std::string, std::unique_ptr<CUfunc_st>, std::less<>> functions;
};
struct CUstream_st {
  int unused = 0;
};
struct CUevent_st {
  bool timing = true;
  bool recorded = false;   // cuEventRecord was called
  bool completed = false;  // the record ran (its stream work before it is done)
  std::chrono::steady_clock::time_point time;
};

namespace emulated {

// One piece of deferred stream work. `code` is what a failure of `run` reports.
struct Op {
  std::function<absl::Status()> run;
  CUresult code = CUDA_ERROR_LAUNCH_FAILED;
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
  std::deque<Op> queue;  // all streams' work in submission order (stronger than needed)
  EmulatedFault fault;
  int64_t launches_since_fault = 0;
  int64_t allocs_since_fault = 0;
  EmulatedDeviceCounters counters;
};

// The process-wide state (never destroyed: drivers outlive static destructors).
State& S();
// Clears and sets this thread's error detail (DriverTable::ErrorDetail).
void ClearDetail();
void SetDetail(std::string detail);
// CUDA_SUCCESS when a live context is current on this thread (call with S().mu held).
CUresult CheckContext();
// Runs every queued op in order; on the first failure drops the rest, sets the detail and
// returns the op's code. Call with S().mu held.
CUresult Flush();
// Whether [ptr, ptr + n) lies in one live device allocation (S().mu held).
bool ValidRange(CUdeviceptr ptr, size_t n);
bool ValidStream(CUstream s);  // null (legacy default stream) or a live stream

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
CUresult LaunchKernel(CUfunction fn, unsigned int gx, unsigned int gy, unsigned int gz,
                      unsigned int bx, unsigned int by, unsigned int bz, unsigned int shared,
                      CUstream stream, void** params, void** extra);
// Frees every module (device teardown; S().mu held).
void DestroyModules();

}  // namespace emulated
}  // namespace ptxserve::cuda
