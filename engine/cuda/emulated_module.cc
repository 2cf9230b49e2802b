// Modules, functions and launches of the emulated driver (see emulated_driver.h).
#include <algorithm>
#include <cstring>
#include <mutex>
#include <string_view>
#include <utility>

#include "absl/strings/str_cat.h"
#include "engine/cuda/emulated_state.h"

namespace ptxserve::cuda::emulated {
namespace {

using Lock = std::lock_guard<std::mutex>;

// The JIT log options of cuModuleLoadDataEx: where to write, and the slot that receives
// the written size.
struct JitLog {
  char* buffer = nullptr;
  size_t capacity = 0;
  void** size_slot = nullptr;
};

// Writes `text` NUL-terminated into the log (truncated to its capacity) and stores the
// bytes written, terminator included, back into the size slot as the driver does.
void WriteLog(const JitLog& log, std::string_view text) {
  if (log.size_slot == nullptr) return;
  size_t written = 0;
  if (log.buffer != nullptr && log.capacity > 0) {
    const size_t k = std::min(text.size(), log.capacity - 1);
    std::memcpy(log.buffer, text.data(), k);
    log.buffer[k] = '\0';
    written = text.empty() ? 0 : k + 1;
  }
  *log.size_slot = reinterpret_cast<void*>(static_cast<uintptr_t>(written));
}

CUfunc_st* LiveFunction(CUfunction fn) {
  if (fn == nullptr || S().modules.count(fn->module) == 0) return nullptr;
  return fn;
}

}  // namespace

void DestroyModules() {
  for (CUmod_st* m : S().modules) delete m;
  S().modules.clear();
  S().counters.live_modules = 0;
}

CUresult ModuleLoadDataEx(CUmodule* module, const void* image, unsigned int num_options,
                          CUjit_option* options, void** option_values) {
  ClearDetail();
  Lock l(S().mu);
  State& s = S();
  if (CUresult r = CheckContext(); r != CUDA_SUCCESS) return r;
  if (module == nullptr || image == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (num_options > 0 && (options == nullptr || option_values == nullptr)) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  JitLog info, error;
  void** wall_slot = nullptr;
  for (unsigned int i = 0; i < num_options; ++i) {
    const auto size = static_cast<size_t>(reinterpret_cast<uintptr_t>(option_values[i]));
    switch (options[i]) {
      case CU_JIT_INFO_LOG_BUFFER:
        info.buffer = static_cast<char*>(option_values[i]);
        break;
      case CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES:
        info.capacity = size;
        info.size_slot = &option_values[i];
        break;
      case CU_JIT_ERROR_LOG_BUFFER:
        error.buffer = static_cast<char*>(option_values[i]);
        break;
      case CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES:
        error.capacity = size;
        error.size_slot = &option_values[i];
        break;
      case CU_JIT_WALL_TIME:
        wall_slot = &option_values[i];
        break;
      case CU_JIT_MAX_REGISTERS:
      case CU_JIT_OPTIMIZATION_LEVEL:
      case CU_JIT_LOG_VERBOSE:
        break;  // accepted, meaningless for an interpreter
      default:
        return CUDA_ERROR_INVALID_VALUE;
    }
  }
  const auto t0 = std::chrono::steady_clock::now();
  absl::StatusOr<emu::ModuleHandle> h = s.emu->LoadModule(static_cast<const char*>(image));
  const float ms =
      std::chrono::duration<float, std::milli>(std::chrono::steady_clock::now() - t0).count();
  if (wall_slot != nullptr) {
    uintptr_t bits = 0;
    std::memcpy(&bits, &ms, sizeof(ms));
    *wall_slot = reinterpret_cast<void*>(bits);
  }
  if (!h.ok()) {
    WriteLog(error, absl::StrCat("ptxas (emulated) fatal: ", h.status().message()));
    WriteLog(info, "");
    SetDetail(std::string(h.status().message()));
    return CUDA_ERROR_INVALID_PTX;
  }
  WriteLog(error, "");
  WriteLog(info, "");
  auto* m = new CUmod_st;
  m->handle = *h;
  m->ptx = static_cast<const char*>(image);
  s.modules.insert(m);
  ++s.counters.live_modules;
  ++s.counters.modules_loaded;
  *module = m;
  return CUDA_SUCCESS;
}

CUresult ModuleUnload(CUmodule module) {
  ClearDetail();
  Lock l(S().mu);
  State& s = S();
  if (CUresult r = CheckContext(); r != CUDA_SUCCESS) return r;
  if (s.modules.count(module) == 0) return CUDA_ERROR_INVALID_HANDLE;
  if (CUresult r = CheckCaptureAllows("cuModuleUnload"); r != CUDA_SUCCESS) return r;
  Flush();  // queued launches of its functions run first
  ClearDetail();
  (void)s.emu->UnloadModule(module->handle);
  s.modules.erase(module);
  --s.counters.live_modules;
  delete module;
  return CUDA_SUCCESS;
}

CUresult ModuleGetFunction(CUfunction* fn, CUmodule module, const char* name) {
  ClearDetail();
  Lock l(S().mu);
  State& s = S();
  if (CUresult r = CheckContext(); r != CUDA_SUCCESS) return r;
  if (fn == nullptr || name == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (s.modules.count(module) == 0) return CUDA_ERROR_INVALID_HANDLE;
  if (auto it = module->functions.find(std::string_view(name)); it != module->functions.end()) {
    *fn = it->second.get();
    return CUDA_SUCCESS;
  }
  absl::StatusOr<emu::FunctionHandle> h = s.emu->GetFunction(module->handle, name);
  if (!h.ok()) {
    SetDetail(std::string(h.status().message()));
    return CUDA_ERROR_NOT_FOUND;
  }
  auto params = s.emu->GetParams(*h);
  auto shared = s.emu->GetStaticSharedBytes(*h);
  if (!params.ok() || !shared.ok()) return CUDA_ERROR_UNKNOWN;
  auto f = std::make_unique<CUfunc_st>();
  f->handle = *h;
  f->module = module;
  f->name = name;
  f->params = *std::move(params);
  f->static_shared = *shared;
  const auto per_block = static_cast<uint32_t>(s.options.max_shared_per_block);
  f->max_dynamic_shared = per_block > *shared ? per_block - *shared : 0;
  *fn = f.get();
  module->functions.emplace(name, std::move(f));
  return CUDA_SUCCESS;
}

CUresult FuncGetAttribute(int* value, CUfunction_attribute attrib, CUfunction fn) {
  ClearDetail();
  Lock l(S().mu);
  if (CUresult r = CheckContext(); r != CUDA_SUCCESS) return r;
  if (value == nullptr) return CUDA_ERROR_INVALID_VALUE;
  CUfunc_st* f = LiveFunction(fn);
  if (f == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  switch (attrib) {
    case CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK:
      *value = 1024;
      break;
    case CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES:
      *value = static_cast<int>(f->static_shared);
      break;
    case CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES:
    case CU_FUNC_ATTRIBUTE_NUM_REGS:
      *value = 0;  // an interpreter has neither spills nor a register file
      break;
    case CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES:
      *value = static_cast<int>(f->max_dynamic_shared);
      break;
    default:
      return CUDA_ERROR_INVALID_VALUE;
  }
  return CUDA_SUCCESS;
}

CUresult FuncSetAttribute(CUfunction fn, CUfunction_attribute attrib, int value) {
  ClearDetail();
  Lock l(S().mu);
  if (CUresult r = CheckContext(); r != CUDA_SUCCESS) return r;
  CUfunc_st* f = LiveFunction(fn);
  if (f == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  // The only attribute the backend sets; the others the table declares are read-only.
  if (attrib != CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES) return CUDA_ERROR_INVALID_VALUE;
  const int64_t limit = int64_t{S().options.max_shared_per_block_optin} - f->static_shared;
  if (value < 0 || value > limit) {
    SetDetail(absl::StrCat("cuFuncSetAttribute ", f->name, ": ", value,
                           " bytes of dynamic shared memory; the device allows at most ", limit,
                           " (", S().options.max_shared_per_block_optin, " opt-in less ",
                           f->static_shared, " static)"));
    return CUDA_ERROR_INVALID_VALUE;
  }
  f->max_dynamic_shared = static_cast<uint32_t>(value);
  return CUDA_SUCCESS;
}

namespace {

CUresult LaunchLocked(CUfunction fn, unsigned int gx, unsigned int gy, unsigned int gz,
                      unsigned int bx, unsigned int by, unsigned int bz, unsigned int shared,
                      CUstream stream, void** params, void** extra) {
  State& s = S();
  CUfunc_st* f = LiveFunction(fn);
  if (f == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  if (extra != nullptr) {
    SetDetail("cuLaunchKernel: the emulated driver takes kernelParams only, not extra");
    return CUDA_ERROR_NOT_SUPPORTED;
  }
  // The launch configuration is checked now, as the driver does; faults inside the
  // kernel surface at the next synchronisation.
  const uint64_t threads = uint64_t{bx} * by * bz;
  if (gx == 0 || gy == 0 || gz == 0 || gy > 65535 || gz > 65535 || threads == 0 || threads > 1024 ||
      bz > 64) {
    SetDetail(absl::StrCat("cuLaunchKernel ", f->name, ": invalid grid (", gx, ",", gy, ",", gz,
                           ") or block (", bx, ",", by, ",", bz, ")"));
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (shared > f->max_dynamic_shared) {
    SetDetail(absl::StrCat("cuLaunchKernel ", f->name, ": ", shared,
                           " bytes of dynamic shared memory exceed the function's "
                           "CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES of ",
                           f->max_dynamic_shared,
                           " (raise it with cuFuncSetAttribute to use more than ",
                           s.options.max_shared_per_block / 1024, " KiB)"));
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (params == nullptr && !f->params.empty()) return CUDA_ERROR_INVALID_VALUE;
  // Parameters are copied now: the caller may reuse its argument storage at once.
  std::vector<emu::KernelArg> args(f->params.size());
  for (size_t i = 0; i < f->params.size(); ++i) {
    if (params[i] == nullptr) return CUDA_ERROR_INVALID_VALUE;
    args[i].bytes.resize(f->params[i].size);
    std::memcpy(args[i].bytes.data(), params[i], f->params[i].size);
  }
  // A capture records the launch; it runs (and meets injected faults) when a graph made
  // from the capture is launched.
  if (Capturing(stream)) {
    return RecordLaunch(stream, GraphNode{f->module, f->handle, f->name, emu::Dim3{gx, gy, gz},
                                          emu::Dim3{bx, by, bz}, shared, std::move(args)});
  }
  if (s.fault.fail_launch > 0 && ++s.launches_since_fault == s.fault.fail_launch) {
    const CUresult code = s.fault.launch_code;
    std::string what = absl::StrCat("injected failure of kernel ", f->name);
    if (s.fault.site == EmulatedFault::Site::kLaunch) {
      SetDetail(std::move(what));
      return code;
    }
    s.queue.push_back(Op{[what] { return absl::InternalError(what); }, code, s.fault.sticky});
    ++s.counters.launches;
    return CUDA_SUCCESS;
  }
  emu::Emulator* e = s.emu.get();
  const emu::FunctionHandle h = f->handle;
  s.queue.push_back(
      Op{[e, h, gx, gy, gz, bx, by, bz, shared, args = std::move(args)] {
           return e->Launch(h, emu::Dim3{gx, gy, gz}, emu::Dim3{bx, by, bz}, shared, args);
         },
         CUDA_ERROR_LAUNCH_FAILED, /*kernel=*/true});
  ++s.counters.launches;
  return CUDA_SUCCESS;
}

}  // namespace

CUresult LaunchKernel(CUfunction fn, unsigned int gx, unsigned int gy, unsigned int gz,
                      unsigned int bx, unsigned int by, unsigned int bz, unsigned int shared,
                      CUstream stream, void** params, void** extra) {
  ClearDetail();
  Lock l(S().mu);
  if (CUresult r = CheckContext(); r != CUDA_SUCCESS) return r;
  if (!ValidStream(stream)) return CUDA_ERROR_INVALID_HANDLE;
  const CUresult r = LaunchLocked(fn, gx, gy, gz, bx, by, bz, shared, stream, params, extra);
  // As on a GPU, a launch that fails during a capture invalidates the capture.
  if (r != CUDA_SUCCESS && r != CUDA_ERROR_STREAM_CAPTURE_INVALIDATED && Capturing(stream)) {
    InvalidateCapture(stream, absl::StrCat("a launch failed with CUresult ", static_cast<int>(r)));
  }
  return r;
}

CUresult LaunchKernelEx(const CUlaunchConfig* config, CUfunction fn, void** params, void** extra) {
  if (config == nullptr || (config->numAttrs > 0 && config->attrs == nullptr)) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  for (unsigned int i = 0; i < config->numAttrs; ++i) {
    if (config->attrs[i].id != CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION) {
      SetDetail(
          absl::StrCat("cuLaunchKernelEx: the emulated driver supports only "
                       "CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION, not attribute ",
                       static_cast<int>(config->attrs[i].id)));
      return CUDA_ERROR_NOT_SUPPORTED;
    }
  }
  // Launches run in stream order, so programmatic serialisation changes no result; the
  // emulator checks what a kernel that waits on griddepcontrol.wait touches before its wait
  // (kernels/emu/dependent_launch.h).
  return LaunchKernel(fn, config->gridDimX, config->gridDimY, config->gridDimZ, config->blockDimX,
                      config->blockDimY, config->blockDimZ, config->sharedMemBytes, config->hStream,
                      params, extra);
}

}  // namespace ptxserve::cuda::emulated
