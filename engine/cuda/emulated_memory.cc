// Memory functions of the emulated driver: allocations, pinned host memory, and the
// asynchronous copies and memsets, whose work is queued until the next synchronisation.
#include <cstdlib>
#include <mutex>
#include <string>

#include "absl/strings/str_cat.h"
#include "engine/cuda/emulated_state.h"

namespace ptxserve::cuda::emulated {
namespace {

using Lock = std::lock_guard<std::mutex>;

// Checks shared by the async copies and memset; the work itself is queued. A capturing
// stream refuses them (the emulator records kernel launches only).
CUresult CheckAsync(CUstream stream, const char* call) {
  if (CUresult r = CheckContext(); r != CUDA_SUCCESS) return r;
  if (!ValidStream(stream)) return CUDA_ERROR_INVALID_HANDLE;
  return RejectIfCapturing(stream, call);
}

}  // namespace

CUresult MemGetInfo(size_t* free_bytes, size_t* total_bytes) {
  ClearDetail();
  Lock l(S().mu);
  if (CUresult r = CheckContext(); r != CUDA_SUCCESS) return r;
  if (free_bytes == nullptr || total_bytes == nullptr) return CUDA_ERROR_INVALID_VALUE;
  uint64_t used = 0, total = 0;
  S().emu->MemInfo(&used, &total);
  *free_bytes = total - used;
  *total_bytes = total;
  return CUDA_SUCCESS;
}

CUresult MemAlloc(CUdeviceptr* dptr, size_t bytes) {
  ClearDetail();
  Lock l(S().mu);
  State& s = S();
  if (CUresult r = CheckContext(); r != CUDA_SUCCESS) return r;
  if (dptr == nullptr || bytes == 0) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult r = CheckCaptureAllows("cuMemAlloc_v2"); r != CUDA_SUCCESS) return r;
  if (s.fault.fail_alloc > 0 && ++s.allocs_since_fault == s.fault.fail_alloc) {
    SetDetail(absl::StrCat("injected out-of-memory for an allocation of ", bytes, " bytes"));
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  absl::StatusOr<uint64_t> p = s.emu->Alloc(bytes);
  if (!p.ok()) {
    SetDetail(std::string(p.status().message()));
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  s.allocations[*p] = bytes;
  ++s.counters.live_allocations;
  s.counters.live_bytes += static_cast<int64_t>(bytes);
  *dptr = *p;
  return CUDA_SUCCESS;
}

CUresult MemFree(CUdeviceptr dptr) {
  ClearDetail();
  Lock l(S().mu);
  State& s = S();
  if (CUresult r = CheckContext(); r != CUDA_SUCCESS) return r;
  auto it = s.allocations.find(dptr);
  if (it == s.allocations.end()) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult r = CheckCaptureAllows("cuMemFree_v2"); r != CUDA_SUCCESS) return r;
  // cuMemFree synchronises: queued work may still use the memory.
  Flush();
  ClearDetail();
  if (absl::Status st = s.emu->Free(dptr); !st.ok()) {
    SetDetail(std::string(st.message()));
    return CUDA_ERROR_INVALID_VALUE;
  }
  --s.counters.live_allocations;
  s.counters.live_bytes -= static_cast<int64_t>(it->second);
  s.allocations.erase(it);
  return CUDA_SUCCESS;
}

CUresult MemAllocHost(void** ptr, size_t bytes) {
  ClearDetail();
  Lock l(S().mu);
  State& s = S();
  if (CUresult r = CheckContext(); r != CUDA_SUCCESS) return r;
  if (ptr == nullptr || bytes == 0) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult r = CheckCaptureAllows("cuMemAllocHost_v2"); r != CUDA_SUCCESS) return r;
  void* p = std::aligned_alloc(4096, (bytes + 4095) / 4096 * 4096);
  if (p == nullptr) return CUDA_ERROR_OUT_OF_MEMORY;
  s.host_allocations[p] = bytes;
  ++s.counters.live_host_allocations;
  *ptr = p;
  return CUDA_SUCCESS;
}

CUresult MemFreeHost(void* ptr) {
  ClearDetail();
  Lock l(S().mu);
  State& s = S();
  if (CUresult r = CheckContext(); r != CUDA_SUCCESS) return r;
  auto it = s.host_allocations.find(ptr);
  if (it == s.host_allocations.end()) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult r = CheckCaptureAllows("cuMemFreeHost"); r != CUDA_SUCCESS) return r;
  Flush();  // queued copies may still read or write it
  ClearDetail();
  std::free(ptr);
  s.host_allocations.erase(it);
  --s.counters.live_host_allocations;
  return CUDA_SUCCESS;
}

CUresult MemcpyHtoDAsync(CUdeviceptr dst, const void* src, size_t n, CUstream stream) {
  ClearDetail();
  Lock l(S().mu);
  if (CUresult r = CheckAsync(stream, "cuMemcpyHtoDAsync_v2"); r != CUDA_SUCCESS) return r;
  if (n == 0) return CUDA_SUCCESS;
  if (src == nullptr || !ValidRange(dst, n)) return CUDA_ERROR_INVALID_VALUE;
  emu::Emulator* e = S().emu.get();
  S().queue.push_back(
      Op{[e, dst, src, n] { return e->CopyHtoD(dst, src, n); }, CUDA_ERROR_INVALID_VALUE});
  return CUDA_SUCCESS;
}

CUresult MemcpyDtoHAsync(void* dst, CUdeviceptr src, size_t n, CUstream stream) {
  ClearDetail();
  Lock l(S().mu);
  if (CUresult r = CheckAsync(stream, "cuMemcpyDtoHAsync_v2"); r != CUDA_SUCCESS) return r;
  if (n == 0) return CUDA_SUCCESS;
  if (dst == nullptr || !ValidRange(src, n)) return CUDA_ERROR_INVALID_VALUE;
  emu::Emulator* e = S().emu.get();
  S().queue.push_back(
      Op{[e, dst, src, n] { return e->CopyDtoH(dst, src, n); }, CUDA_ERROR_INVALID_VALUE});
  return CUDA_SUCCESS;
}

CUresult MemcpyDtoDAsync(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream stream) {
  ClearDetail();
  Lock l(S().mu);
  if (CUresult r = CheckAsync(stream, "cuMemcpyDtoDAsync_v2"); r != CUDA_SUCCESS) return r;
  if (n == 0) return CUDA_SUCCESS;
  if (!ValidRange(dst, n) || !ValidRange(src, n)) return CUDA_ERROR_INVALID_VALUE;
  emu::Emulator* e = S().emu.get();
  S().queue.push_back(
      Op{[e, dst, src, n] { return e->CopyDtoD(dst, src, n); }, CUDA_ERROR_INVALID_VALUE});
  return CUDA_SUCCESS;
}

CUresult MemsetD8Async(CUdeviceptr dst, unsigned char value, size_t n, CUstream stream) {
  ClearDetail();
  Lock l(S().mu);
  if (CUresult r = CheckAsync(stream, "cuMemsetD8Async"); r != CUDA_SUCCESS) return r;
  if (n == 0) return CUDA_SUCCESS;
  if (!ValidRange(dst, n)) return CUDA_ERROR_INVALID_VALUE;
  emu::Emulator* e = S().emu.get();
  S().queue.push_back(
      Op{[e, dst, value, n] { return e->Memset(dst, value, n); }, CUDA_ERROR_INVALID_VALUE});
  return CUDA_SUCCESS;
}

}  // namespace ptxserve::cuda::emulated
