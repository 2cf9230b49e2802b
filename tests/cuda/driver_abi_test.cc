// The driver table against the CUDA toolkit's own cuda.h, at compile time: every function
// pointer type of engine/cuda/driver.h, mapped through the re-declared ABI types, must be
// exactly decltype(&::cuXxx), and every re-declared enumerator and type must match in
// value and size. cuda.h is included only here (and only where CMake found it); the
// library never sees it. Plus the loader's behaviour without a driver.
#if defined(PTXSERVE_HAVE_CUDA_H) && __has_include(<cuda.h>)
#include <cuda.h>
#define PTXSERVE_CHECK_CUDA_H 1
#endif

#include <cstddef>
#include <type_traits>

#include "engine/cuda/driver.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace {

namespace cu = ::ptxserve::cuda;

#ifdef PTXSERVE_CHECK_CUDA_H

// Local<T>: the driver.h type standing for cuda.h's type T (identity for plain types).
template <class T>
struct Local {
  using type = T;
};
template <class T>
using Local_t = typename Local<T>::type;
template <class T>
struct Local<T*> {
  using type = Local_t<T>*;
};
template <class T>
struct Local<const T> {
  using type = const Local_t<T>;
};
template <class R, class... A>
struct Local<R (*)(A...)> {
  using type = Local_t<R> (*)(Local_t<A>...);
};
#define PTXSERVE_LOCAL(theirs, ours) \
  template <>                        \
  struct Local<theirs> {             \
    using type = ours;               \
  };
PTXSERVE_LOCAL(::CUresult, cu::CUresult)
PTXSERVE_LOCAL(::CUdevice_attribute, cu::CUdevice_attribute)
PTXSERVE_LOCAL(::CUfunction_attribute, cu::CUfunction_attribute)
PTXSERVE_LOCAL(::CUjit_option, cu::CUjit_option)
PTXSERVE_LOCAL(::CUstreamCaptureMode, cu::CUstreamCaptureMode)
PTXSERVE_LOCAL(::CUstreamCaptureStatus, cu::CUstreamCaptureStatus)
PTXSERVE_LOCAL(::CUlaunchConfig, cu::CUlaunchConfig)
PTXSERVE_LOCAL(::CUctx_st, cu::CUctx_st)
PTXSERVE_LOCAL(::CUmod_st, cu::CUmod_st)
PTXSERVE_LOCAL(::CUfunc_st, cu::CUfunc_st)
PTXSERVE_LOCAL(::CUstream_st, cu::CUstream_st)
PTXSERVE_LOCAL(::CUevent_st, cu::CUevent_st)
PTXSERVE_LOCAL(::CUgraph_st, cu::CUgraph_st)
PTXSERVE_LOCAL(::CUgraphExec_st, cu::CUgraphExec_st)
#undef PTXSERVE_LOCAL

// Every function of the table, by its exported name.
#define PTXSERVE_CHECK_FN(sym, ret, params)                               \
  static_assert(std::is_same_v<Local_t<decltype(&::sym)>, cu::PFN_##sym>, \
                #sym ": driver.h's declaration differs from cuda.h's");
PTXSERVE_CUDA_DRIVER_FUNCTIONS(PTXSERVE_CHECK_FN)
#undef PTXSERVE_CHECK_FN

// cuLaunchKernelEx is optional (outside the table's list) but has cuda.h's signature, and
// its structs its layout.
static_assert(std::is_same_v<Local_t<decltype(&::cuLaunchKernelEx)>, cu::PFN_cuLaunchKernelEx>);
static_assert(sizeof(::CUlaunchAttribute) == sizeof(cu::CUlaunchAttribute));
static_assert(offsetof(::CUlaunchAttribute, value) == offsetof(cu::CUlaunchAttribute, value));
static_assert(sizeof(::CUlaunchConfig) == sizeof(cu::CUlaunchConfig));
static_assert(offsetof(::CUlaunchConfig, hStream) == offsetof(cu::CUlaunchConfig, hStream));
static_assert(offsetof(::CUlaunchConfig, attrs) == offsetof(cu::CUlaunchConfig, attrs));
static_assert(offsetof(::CUlaunchConfig, numAttrs) == offsetof(cu::CUlaunchConfig, numAttrs));

// Plain types are the very same types.
static_assert(std::is_same_v<::CUdeviceptr, cu::CUdeviceptr>);
static_assert(std::is_same_v<::CUdevice, cu::CUdevice>);
// Enums: same size and underlying type, so they pass through the ABI unchanged.
template <class A, class B>
constexpr bool SameRepr() {
  return sizeof(A) == sizeof(B) && alignof(A) == alignof(B) &&
         std::is_same_v<std::underlying_type_t<A>, std::underlying_type_t<B>>;
}
static_assert(SameRepr<::CUresult, cu::CUresult>());
static_assert(SameRepr<::CUdevice_attribute, cu::CUdevice_attribute>());
static_assert(SameRepr<::CUfunction_attribute, cu::CUfunction_attribute>());
static_assert(SameRepr<::CUjit_option, cu::CUjit_option>());
static_assert(SameRepr<::CUstreamCaptureMode, cu::CUstreamCaptureMode>());
static_assert(SameRepr<::CUstreamCaptureStatus, cu::CUstreamCaptureStatus>());

// Every re-declared enumerator and flag.
#define PTXSERVE_SAME_VALUE(name)                                                   \
  static_assert(static_cast<long long>(cu::name) == static_cast<long long>(::name), \
                #name " differs from cuda.h");
PTXSERVE_SAME_VALUE(CUDA_SUCCESS)
PTXSERVE_SAME_VALUE(CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION)
PTXSERVE_SAME_VALUE(CUDA_ERROR_INVALID_VALUE)
PTXSERVE_SAME_VALUE(CUDA_ERROR_OUT_OF_MEMORY)
PTXSERVE_SAME_VALUE(CUDA_ERROR_NOT_INITIALIZED)
PTXSERVE_SAME_VALUE(CUDA_ERROR_DEINITIALIZED)
PTXSERVE_SAME_VALUE(CUDA_ERROR_NO_DEVICE)
PTXSERVE_SAME_VALUE(CUDA_ERROR_INVALID_DEVICE)
PTXSERVE_SAME_VALUE(CUDA_ERROR_INVALID_IMAGE)
PTXSERVE_SAME_VALUE(CUDA_ERROR_INVALID_CONTEXT)
PTXSERVE_SAME_VALUE(CUDA_ERROR_INVALID_PTX)
PTXSERVE_SAME_VALUE(CUDA_ERROR_UNSUPPORTED_PTX_VERSION)
PTXSERVE_SAME_VALUE(CUDA_ERROR_INVALID_SOURCE)
PTXSERVE_SAME_VALUE(CUDA_ERROR_SHARED_OBJECT_INIT_FAILED)
PTXSERVE_SAME_VALUE(CUDA_ERROR_INVALID_HANDLE)
PTXSERVE_SAME_VALUE(CUDA_ERROR_ILLEGAL_STATE)
PTXSERVE_SAME_VALUE(CUDA_ERROR_NOT_FOUND)
PTXSERVE_SAME_VALUE(CUDA_ERROR_NOT_READY)
PTXSERVE_SAME_VALUE(CUDA_ERROR_ILLEGAL_ADDRESS)
PTXSERVE_SAME_VALUE(CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES)
PTXSERVE_SAME_VALUE(CUDA_ERROR_LAUNCH_TIMEOUT)
PTXSERVE_SAME_VALUE(CUDA_ERROR_ASSERT)
PTXSERVE_SAME_VALUE(CUDA_ERROR_HARDWARE_STACK_ERROR)
PTXSERVE_SAME_VALUE(CUDA_ERROR_ILLEGAL_INSTRUCTION)
PTXSERVE_SAME_VALUE(CUDA_ERROR_MISALIGNED_ADDRESS)
PTXSERVE_SAME_VALUE(CUDA_ERROR_INVALID_ADDRESS_SPACE)
PTXSERVE_SAME_VALUE(CUDA_ERROR_INVALID_PC)
PTXSERVE_SAME_VALUE(CUDA_ERROR_LAUNCH_FAILED)
PTXSERVE_SAME_VALUE(CUDA_ERROR_NOT_SUPPORTED)
PTXSERVE_SAME_VALUE(CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED)
PTXSERVE_SAME_VALUE(CUDA_ERROR_STREAM_CAPTURE_INVALIDATED)
PTXSERVE_SAME_VALUE(CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD)
PTXSERVE_SAME_VALUE(CUDA_ERROR_UNKNOWN)
PTXSERVE_SAME_VALUE(CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK)
PTXSERVE_SAME_VALUE(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK)
PTXSERVE_SAME_VALUE(CU_DEVICE_ATTRIBUTE_WARP_SIZE)
PTXSERVE_SAME_VALUE(CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_BLOCK)
PTXSERVE_SAME_VALUE(CU_DEVICE_ATTRIBUTE_CLOCK_RATE)
PTXSERVE_SAME_VALUE(CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)
PTXSERVE_SAME_VALUE(CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE)
PTXSERVE_SAME_VALUE(CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH)
PTXSERVE_SAME_VALUE(CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE)
PTXSERVE_SAME_VALUE(CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR)
PTXSERVE_SAME_VALUE(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)
PTXSERVE_SAME_VALUE(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)
PTXSERVE_SAME_VALUE(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR)
PTXSERVE_SAME_VALUE(CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_MULTIPROCESSOR)
PTXSERVE_SAME_VALUE(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN)
PTXSERVE_SAME_VALUE(CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK)
PTXSERVE_SAME_VALUE(CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES)
PTXSERVE_SAME_VALUE(CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES)
PTXSERVE_SAME_VALUE(CU_FUNC_ATTRIBUTE_NUM_REGS)
PTXSERVE_SAME_VALUE(CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES)
PTXSERVE_SAME_VALUE(CU_JIT_MAX_REGISTERS)
PTXSERVE_SAME_VALUE(CU_JIT_WALL_TIME)
PTXSERVE_SAME_VALUE(CU_JIT_INFO_LOG_BUFFER)
PTXSERVE_SAME_VALUE(CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES)
PTXSERVE_SAME_VALUE(CU_JIT_ERROR_LOG_BUFFER)
PTXSERVE_SAME_VALUE(CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES)
PTXSERVE_SAME_VALUE(CU_JIT_OPTIMIZATION_LEVEL)
PTXSERVE_SAME_VALUE(CU_JIT_LOG_VERBOSE)
PTXSERVE_SAME_VALUE(CU_STREAM_NON_BLOCKING)
PTXSERVE_SAME_VALUE(CU_EVENT_DEFAULT)
PTXSERVE_SAME_VALUE(CU_EVENT_DISABLE_TIMING)
PTXSERVE_SAME_VALUE(CU_STREAM_CAPTURE_MODE_GLOBAL)
PTXSERVE_SAME_VALUE(CU_STREAM_CAPTURE_MODE_THREAD_LOCAL)
PTXSERVE_SAME_VALUE(CU_STREAM_CAPTURE_MODE_RELAXED)
PTXSERVE_SAME_VALUE(CU_STREAM_CAPTURE_STATUS_NONE)
PTXSERVE_SAME_VALUE(CU_STREAM_CAPTURE_STATUS_ACTIVE)
PTXSERVE_SAME_VALUE(CU_STREAM_CAPTURE_STATUS_INVALIDATED)
#undef PTXSERVE_SAME_VALUE

#endif  // PTXSERVE_CHECK_CUDA_H

TEST(DriverAbi, CheckedAgainstCudaH) {
#ifdef PTXSERVE_CHECK_CUDA_H
  std::printf("[ abi    ] driver.h checked against cuda.h of CUDA %d.%d\n", CUDA_VERSION / 1000,
              CUDA_VERSION % 1000 / 10);
#else
  GTEST_SKIP() << "cuda.h was not found at build time: the declarations were not checked";
#endif
}

// Without an NVIDIA driver the loader says so (and names libcuda.so.1); with one, every
// function resolves.
TEST(DriverAbi, LoaderFindsEveryFunctionOrSaysWhy) {
  absl::StatusOr<std::unique_ptr<cu::DriverTable>> t = cu::LoadCudaDriver();
  if (!t.ok()) {
    EXPECT_EQ(t.status().code(), absl::StatusCode::kNotFound) << t.status();
    EXPECT_THAT(std::string(t.status().message()),
                ::testing::HasSubstr("libcuda.so.1 not found: no NVIDIA driver"));
    return;
  }
  EXPECT_EQ((*t)->name, "libcuda.so.1");
  EXPECT_FALSE((*t)->emulated);
#define PTXSERVE_NOT_NULL(sym, ret, params) EXPECT_NE((*t)->sym, nullptr) << #sym;
  PTXSERVE_CUDA_DRIVER_FUNCTIONS(PTXSERVE_NOT_NULL)
#undef PTXSERVE_NOT_NULL
}

}  // namespace
