// The CUDA Driver API functions the GPU backend uses, as a table of function pointers.
//
// Two tables exist: the real one (LoadCudaDriver: dlopen("libcuda.so.1") and dlsym of the
// exported, versioned symbol names such as cuMemAlloc_v2) and the emulated one
// (emulated_driver.h: the same functions over the PTX emulator). Code above the table is
// identical for both.
//
// cuda.h is never included here: its ABI types are re-declared in this namespace (same
// sizes, same enumerator values, opaque handle structs), so the project builds without a
// CUDA toolkit. tests/cuda/driver_abi_test.cc checks every declaration against cuda.h at
// compile time wherever cuda.h is installed.
//
// Table members are named after the exported symbols (cuMemAlloc_v2, not cuMemAlloc), which
// also keeps cuda.h's `#define cuMemAlloc cuMemAlloc_v2` macros away from them. For graphs
// that means cuStreamBeginCapture_v2 (the unversioned symbol has no mode argument) and
// cuGraphInstantiateWithFlags (the exported cuGraphInstantiate is CUDA 10's form with an
// error-node and log buffer; cuda.h maps cuGraphInstantiate to ...WithFlags since 12.0).
#pragma once

#include <cstddef>
#include <memory>
#include <string>

#include "absl/status/statusor.h"

namespace ptxserve::cuda {

// ---- ABI types (cuda.h, CUDA 11.0+ on 64-bit Linux) -------------------------------------

// Only the codes the backend names or the emulated device returns; drivers may return
// others (cuGetErrorName describes them).
enum CUresult {
  CUDA_SUCCESS = 0,
  CUDA_ERROR_INVALID_VALUE = 1,
  CUDA_ERROR_OUT_OF_MEMORY = 2,
  CUDA_ERROR_NOT_INITIALIZED = 3,
  CUDA_ERROR_DEINITIALIZED = 4,
  CUDA_ERROR_NO_DEVICE = 100,
  CUDA_ERROR_INVALID_DEVICE = 101,
  CUDA_ERROR_INVALID_IMAGE = 200,
  CUDA_ERROR_INVALID_CONTEXT = 201,
  CUDA_ERROR_INVALID_PTX = 218,
  CUDA_ERROR_UNSUPPORTED_PTX_VERSION = 222,
  CUDA_ERROR_INVALID_SOURCE = 300,
  CUDA_ERROR_SHARED_OBJECT_INIT_FAILED = 303,
  CUDA_ERROR_INVALID_HANDLE = 400,
  CUDA_ERROR_ILLEGAL_STATE = 401,
  CUDA_ERROR_NOT_FOUND = 500,
  CUDA_ERROR_NOT_READY = 600,
  CUDA_ERROR_ILLEGAL_ADDRESS = 700,
  CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES = 701,
  CUDA_ERROR_LAUNCH_TIMEOUT = 702,
  CUDA_ERROR_ASSERT = 710,
  CUDA_ERROR_HARDWARE_STACK_ERROR = 714,
  CUDA_ERROR_ILLEGAL_INSTRUCTION = 715,
  CUDA_ERROR_MISALIGNED_ADDRESS = 716,
  CUDA_ERROR_INVALID_ADDRESS_SPACE = 717,
  CUDA_ERROR_INVALID_PC = 718,
  CUDA_ERROR_LAUNCH_FAILED = 719,
  CUDA_ERROR_NOT_SUPPORTED = 801,
  CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED = 900,
  CUDA_ERROR_STREAM_CAPTURE_INVALIDATED = 901,
  CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD = 908,
  CUDA_ERROR_UNKNOWN = 999,
};

using CUdevice = int;
using CUdeviceptr = unsigned long long;  // NOLINT(runtime/int): cuda.h's exact type
using CUflags64 = unsigned long long;    // NOLINT(runtime/int): cuGraphInstantiateWithFlags

struct CUctx_st;
struct CUmod_st;
struct CUfunc_st;
struct CUstream_st;
struct CUevent_st;
struct CUgraph_st;
struct CUgraphExec_st;
using CUcontext = CUctx_st*;
using CUmodule = CUmod_st*;
using CUfunction = CUfunc_st*;
using CUstream = CUstream_st*;
using CUevent = CUevent_st*;
using CUgraph = CUgraph_st*;          // a captured graph (cuStreamEndCapture)
using CUgraphExec = CUgraphExec_st*;  // an instantiated graph (cuGraphInstantiateWithFlags)

enum CUdevice_attribute {
  CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK = 1,
  CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK = 8,
  CU_DEVICE_ATTRIBUTE_WARP_SIZE = 10,
  CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_BLOCK = 12,
  CU_DEVICE_ATTRIBUTE_CLOCK_RATE = 13,
  CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT = 16,
  CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE = 36,
  CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH = 37,
  CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE = 38,
  CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR = 39,
  CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR = 75,
  CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR = 76,
  CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR = 81,
  CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_MULTIPROCESSOR = 82,
  CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN = 97,
};

enum CUfunction_attribute {
  CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK = 0,
  CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES = 1,
  CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES = 3,
  CU_FUNC_ATTRIBUTE_NUM_REGS = 4,
  // Settable (cuFuncSetAttribute): the dynamic shared memory a launch may ask for. It starts
  // at the device's 48 KiB per-block default less the function's static shared memory; a
  // launch above it fails with CUDA_ERROR_INVALID_VALUE. Raising it (up to the device's
  // opt-in maximum less the static part) is how a kernel gets more than 48 KiB.
  CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES = 8,
};

// cuModuleLoadDataEx options. Values travel in void* slots: sizes as integers cast to
// void*, buffers as pointers; the driver writes the used log sizes back into the slots.
enum CUjit_option {
  CU_JIT_MAX_REGISTERS = 0,
  CU_JIT_WALL_TIME = 2,  // out: float milliseconds in the slot's low 32 bits
  CU_JIT_INFO_LOG_BUFFER = 3,
  CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES = 4,
  CU_JIT_ERROR_LOG_BUFFER = 5,
  CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES = 6,
  CU_JIT_OPTIMIZATION_LEVEL = 7,
  CU_JIT_LOG_VERBOSE = 12,
};

// Stream capture (CUDA graphs). THREAD_LOCAL: only the capturing thread is barred from
// calls that are unsafe during a capture (allocations, synchronisation).
enum CUstreamCaptureMode {
  CU_STREAM_CAPTURE_MODE_GLOBAL = 0,
  CU_STREAM_CAPTURE_MODE_THREAD_LOCAL = 1,
  CU_STREAM_CAPTURE_MODE_RELAXED = 2,
};
enum CUstreamCaptureStatus {
  CU_STREAM_CAPTURE_STATUS_NONE = 0,
  CU_STREAM_CAPTURE_STATUS_ACTIVE = 1,
  CU_STREAM_CAPTURE_STATUS_INVALIDATED = 2,  // an error ended it; cuStreamEndCapture fails
};

// cuLaunchKernelEx (CUDA 12.0+ drivers) and the one launch attribute the backend sets:
// programmatic stream serialization, under which a kernel may launch before the previous
// kernel of its stream completes (programmatic dependent launch, sm_90: the kernel's
// griddepcontrol.wait orders its reads of that kernel's results).
enum CUlaunchAttributeID {
  CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION = 6,
};
union CUlaunchAttributeValue {
  char pad[64];
  int programmaticStreamSerializationAllowed;
};
struct CUlaunchAttribute {
  CUlaunchAttributeID id;
  char pad[8 - sizeof(CUlaunchAttributeID)];
  CUlaunchAttributeValue value;
};
struct CUlaunchConfig {
  unsigned int gridDimX, gridDimY, gridDimZ;
  unsigned int blockDimX, blockDimY, blockDimZ;
  unsigned int sharedMemBytes;
  CUstream hStream;
  CUlaunchAttribute* attrs;
  unsigned int numAttrs;
};
using PFN_cuLaunchKernelEx = CUresult (*)(const CUlaunchConfig* config, CUfunction fn,
                                          void** params, void** extra);

inline constexpr unsigned int CU_STREAM_NON_BLOCKING = 0x1;
inline constexpr unsigned int CU_EVENT_DEFAULT = 0x0;
inline constexpr unsigned int CU_EVENT_DISABLE_TIMING = 0x2;

// ---- The functions -------------------------------------------------------------------

// X(symbol, return type, parameter list): every function of the table, by the name the
// driver exports. The ABI test and the loader iterate this list, so a function added here
// is loaded and checked with no further edits.
#define PTXSERVE_CUDA_DRIVER_FUNCTIONS(X)                                                         \
  X(cuInit, CUresult, (unsigned int flags))                                                       \
  X(cuDriverGetVersion, CUresult, (int* version))                                                 \
  X(cuGetErrorString, CUresult, (CUresult error, const char** str))                               \
  X(cuGetErrorName, CUresult, (CUresult error, const char** str))                                 \
  X(cuDeviceGetCount, CUresult, (int* count))                                                     \
  X(cuDeviceGet, CUresult, (CUdevice * device, int ordinal))                                      \
  X(cuDeviceGetName, CUresult, (char* name, int len, CUdevice dev))                               \
  X(cuDeviceGetAttribute, CUresult, (int* value, CUdevice_attribute attrib, CUdevice dev))        \
  X(cuDevicePrimaryCtxRetain, CUresult, (CUcontext * ctx, CUdevice dev))                          \
  X(cuDevicePrimaryCtxRelease_v2, CUresult, (CUdevice dev))                                       \
  X(cuCtxSetCurrent, CUresult, (CUcontext ctx))                                                   \
  X(cuCtxSynchronize, CUresult, ())                                                               \
  X(cuStreamCreate, CUresult, (CUstream * stream, unsigned int flags))                            \
  X(cuStreamDestroy_v2, CUresult, (CUstream stream))                                              \
  X(cuStreamSynchronize, CUresult, (CUstream stream))                                             \
  X(cuEventCreate, CUresult, (CUevent * event, unsigned int flags))                               \
  X(cuEventDestroy_v2, CUresult, (CUevent event))                                                 \
  X(cuEventRecord, CUresult, (CUevent event, CUstream stream))                                    \
  X(cuEventSynchronize, CUresult, (CUevent event))                                                \
  X(cuEventElapsedTime_v2, CUresult, (float* ms, CUevent start, CUevent end))                     \
  X(cuMemGetInfo_v2, CUresult, (size_t * free_bytes, size_t * total_bytes))                       \
  X(cuMemAlloc_v2, CUresult, (CUdeviceptr * dptr, size_t bytes))                                  \
  X(cuMemFree_v2, CUresult, (CUdeviceptr dptr))                                                   \
  X(cuMemAllocHost_v2, CUresult, (void** ptr, size_t bytes))                                      \
  X(cuMemFreeHost, CUresult, (void* ptr))                                                         \
  X(cuMemcpyHtoDAsync_v2, CUresult, (CUdeviceptr dst, const void* src, size_t n, CUstream s))     \
  X(cuMemcpyDtoHAsync_v2, CUresult, (void* dst, CUdeviceptr src, size_t n, CUstream s))           \
  X(cuMemcpyDtoDAsync_v2, CUresult, (CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s))     \
  X(cuMemsetD8Async, CUresult, (CUdeviceptr dst, unsigned char value, size_t n, CUstream s))      \
  X(cuModuleLoadDataEx, CUresult,                                                                 \
    (CUmodule * module, const void* image, unsigned int num_options, CUjit_option* options,       \
     void** option_values))                                                                       \
  X(cuModuleUnload, CUresult, (CUmodule module))                                                  \
  X(cuModuleGetFunction, CUresult, (CUfunction * fn, CUmodule module, const char* name))          \
  X(cuFuncGetAttribute, CUresult, (int* value, CUfunction_attribute attrib, CUfunction fn))       \
  X(cuFuncSetAttribute, CUresult, (CUfunction fn, CUfunction_attribute attrib, int value))        \
  X(cuLaunchKernel, CUresult,                                                                     \
    (CUfunction fn, unsigned int grid_x, unsigned int grid_y, unsigned int grid_z,                \
     unsigned int block_x, unsigned int block_y, unsigned int block_z, unsigned int shared_bytes, \
     CUstream stream, void** params, void** extra))                                               \
  X(cuStreamBeginCapture_v2, CUresult, (CUstream stream, CUstreamCaptureMode mode))               \
  X(cuStreamEndCapture, CUresult, (CUstream stream, CUgraph * graph))                             \
  X(cuStreamIsCapturing, CUresult, (CUstream stream, CUstreamCaptureStatus * status))             \
  X(cuGraphInstantiateWithFlags, CUresult, (CUgraphExec * exec, CUgraph graph, CUflags64 flags))  \
  X(cuGraphLaunch, CUresult, (CUgraphExec exec, CUstream stream))                                 \
  X(cuGraphExecDestroy, CUresult, (CUgraphExec exec))                                             \
  X(cuGraphDestroy, CUresult, (CUgraph graph))

#define PTXSERVE_CUDA_PFN_TYPE(sym, ret, params) using PFN_##sym = ret(*) params;
PTXSERVE_CUDA_DRIVER_FUNCTIONS(PTXSERVE_CUDA_PFN_TYPE)
#undef PTXSERVE_CUDA_PFN_TYPE

// One driver: the function table plus what identifies it. Function pointers are never
// null in a table a loader returned.
struct DriverTable {
  std::string name;         // "libcuda.so.1" or "emulated"
  bool emulated = false;    // true for the PTX-emulator device
  void* library = nullptr;  // dlopen handle (kept open for the process: libcuda is not
                            // safe to unload)

#define PTXSERVE_CUDA_TABLE_MEMBER(sym, ret, params) PFN_##sym sym = nullptr;
  PTXSERVE_CUDA_DRIVER_FUNCTIONS(PTXSERVE_CUDA_TABLE_MEMBER)
#undef PTXSERVE_CUDA_TABLE_MEMBER

  // Optional: null where the driver lacks it (before CUDA 12.0); launches then take
  // cuLaunchKernel, without launch attributes.
  PFN_cuLaunchKernelEx cuLaunchKernelEx = nullptr;

  // Not a Driver API function: the emulated device's description of the last failure on
  // this thread (the emulator's message naming kernel, block, thread and PTX line), or
  // "" when there is none. Null for the real driver.
  const char* (*ErrorDetail)() = nullptr;
};

// dlopen("libcuda.so.1") and resolve every function of the table. Errors:
// NotFound "libcuda.so.1 not found: no NVIDIA driver (<dlerror>)" when the library is
// absent; FailedPrecondition naming the missing symbol when the driver is too old.
absl::StatusOr<std::unique_ptr<DriverTable>> LoadCudaDriver();

// "CUDA_ERROR_LAUNCH_FAILED: unspecified launch failure" (the driver's name and string of
// `r`), or "CUresult <n>" where the driver does not know it.
std::string DescribeResult(const DriverTable& driver, CUresult r);

// Whether `r` is one of the errors the driver documents as sticky: a kernel faulted (illegal
// or misaligned address, illegal instruction, trap, timeout...), the context is corrupt and
// "any further CUDA work will return the same error" until the process ends (cuda.h on
// CUDA_ERROR_ILLEGAL_ADDRESS, CUDA_ERROR_LAUNCH_FAILED and their kin).
bool IsStickyResult(CUresult r);

}  // namespace ptxserve::cuda
