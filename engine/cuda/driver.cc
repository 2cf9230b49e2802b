#include "engine/cuda/driver.h"

#include <dlfcn.h>

#include "absl/strings/str_cat.h"

namespace ptxserve::cuda {
namespace {

// Older drivers (before CUDA 12.8) export only the unversioned name of some functions,
// with the same signature; the table takes whichever exists, newest first.
const char* FallbackName(const char* sym) {
  if (std::string_view(sym) == "cuEventElapsedTime_v2") return "cuEventElapsedTime";
  return nullptr;
}

}  // namespace

absl::StatusOr<std::unique_ptr<DriverTable>> LoadCudaDriver() {
  // RTLD_NOW: a driver missing a symbol we call is found here, not at the first call.
  void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) {
    const char* why = dlerror();
    return absl::NotFoundError(absl::StrCat("libcuda.so.1 not found: no NVIDIA driver (",
                                            why != nullptr ? why : "dlopen failed", ")"));
  }
  auto table = std::make_unique<DriverTable>();
  table->name = "libcuda.so.1";
  table->library = lib;
  std::string missing;
  auto resolve = [&](const char* sym) -> void* {
    void* p = dlsym(lib, sym);
    if (p == nullptr && FallbackName(sym) != nullptr) p = dlsym(lib, FallbackName(sym));
    if (p == nullptr) absl::StrAppend(&missing, missing.empty() ? "" : ", ", sym);
    return p;
  };
#define PTXSERVE_CUDA_RESOLVE(sym, ret, params) \
  table->sym = reinterpret_cast<PFN_##sym>(resolve(#sym));
  PTXSERVE_CUDA_DRIVER_FUNCTIONS(PTXSERVE_CUDA_RESOLVE)
#undef PTXSERVE_CUDA_RESOLVE
  table->cuLaunchKernelEx = reinterpret_cast<PFN_cuLaunchKernelEx>(dlsym(lib, "cuLaunchKernelEx"));
  if (!missing.empty()) {
    // The library stays loaded: unloading libcuda is unsafe, and it costs nothing.
    return absl::FailedPreconditionError(
        absl::StrCat("libcuda.so.1 lacks ", missing, ": the NVIDIA driver is too old"));
  }
  return table;
}

std::string DescribeResult(const DriverTable& driver, CUresult r) {
  const char* name = nullptr;
  const char* str = nullptr;
  if (driver.cuGetErrorName != nullptr && driver.cuGetErrorName(r, &name) != CUDA_SUCCESS) {
    name = nullptr;
  }
  if (driver.cuGetErrorString != nullptr && driver.cuGetErrorString(r, &str) != CUDA_SUCCESS) {
    str = nullptr;
  }
  if (name == nullptr) return absl::StrCat("CUresult ", static_cast<int>(r));
  if (str == nullptr) return name;
  return absl::StrCat(name, ": ", str);
}

bool IsStickyResult(CUresult r) {
  switch (r) {
    case CUDA_ERROR_ILLEGAL_ADDRESS:
    case CUDA_ERROR_LAUNCH_TIMEOUT:
    case CUDA_ERROR_ASSERT:
    case CUDA_ERROR_HARDWARE_STACK_ERROR:
    case CUDA_ERROR_ILLEGAL_INSTRUCTION:
    case CUDA_ERROR_MISALIGNED_ADDRESS:
    case CUDA_ERROR_INVALID_ADDRESS_SPACE:
    case CUDA_ERROR_INVALID_PC:
    case CUDA_ERROR_LAUNCH_FAILED:
      return true;
    default:
      return false;
  }
}

}  // namespace ptxserve::cuda
