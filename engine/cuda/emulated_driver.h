// The emulated CUDA device: a DriverTable whose functions run on the PTX emulator
// (kernels/emu), so the GPU backend runs unchanged, and fully checked, without a GPU.
//
// One process-wide device (ordinal 0), like a real driver: modules are emulator modules,
// CUfunctions emulator functions, device pointers emulator addresses, pinned host memory
// aligned host buffers. The primary context owns the emulator: it is created when the
// primary context is first retained and destroyed (with every allocation, module, stream
// and event) when the last retain is released.
//
// Faithful where it catches host-side bugs:
//  - A context must be current on the calling thread (cuCtxSetCurrent) for every call
//    that needs one, else CUDA_ERROR_INVALID_CONTEXT.
//  - Stream work (copies, memsets, launches, event records) is deferred: it runs, in
//    submission order, at the next synchronising call (cuStreamSynchronize,
//    cuEventSynchronize, cuCtxSynchronize, cuMemFree, cuMemFreeHost, cuModuleUnload,
//    cuStreamDestroy). Reading a device->host copy's destination, or refilling a host->device
//    copy's source, before synchronising sees the same stale data as on a GPU. Kernel
//    parameters are copied at cuLaunchKernel, as the driver does.
//  - Faults found while running deferred work (out-of-bounds access, barrier deadlock...)
//    come back from the synchronising call (CUDA_ERROR_ILLEGAL_ADDRESS,
//    CUDA_ERROR_MISALIGNED_ADDRESS or CUDA_ERROR_LAUNCH_FAILED), with the emulator's message
//    in DriverTable::ErrorDetail; the rest of the queued work is dropped. As on a GPU, a
//    kernel's fault is sticky (EmulatedDeviceOptions::sticky_faults): from then on every
//    call that needs the context fails with the same code, until the primary context is
//    released by its last holder (the next retain creates a fresh device). Without
//    sticky_faults the context stays usable. Injected failures (EmulatedFault) are
//    transient unless EmulatedFault::sticky says otherwise.
//  - Memory as the device profile says (EmulatedDeviceProfile): cuMemGetInfo reports the
//    profile's total less what is allocated, while host RAM is taken only by what
//    cuMemAlloc actually allocates, so an 80 GB device costs nothing until used. Device
//    pointers are at least 256-byte aligned, as the driver's are.
//  - Shared memory as on the driver: a launch may ask for dynamic shared memory up to the
//    function's CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES (48 KiB less its static
//    shared memory until cuFuncSetAttribute raises it, at most to the profile's opt-in
//    maximum less the static part); above it the launch fails with CUDA_ERROR_INVALID_VALUE.
//  - Stream capture (CUDA graphs) records kernel launches only: cuLaunchKernel on a
//    capturing stream copies its parameters into the capture and runs nothing;
//    cuStreamEndCapture makes a graph of them (in order), cuGraphInstantiateWithFlags
//    (flags 0) an exec, and cuGraphLaunch queues the exec's launches on a stream like
//    any other stream work. Copies, memsets and event records on a capturing stream, and
//    the calls a capture forbids (allocation, free, synchronisation; on the capturing
//    thread for THREAD_LOCAL, on any thread for GLOBAL) fail with
//    CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED and invalidate the capture, whose
//    cuStreamEndCapture then fails with CUDA_ERROR_STREAM_CAPTURE_INVALIDATED, as a
//    driver does. A graph launched into a capturing stream is refused the same way.
// Not supported: cuLaunchKernel's `extra` argument (CUDA_ERROR_NOT_SUPPORTED).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/cuda/driver.h"
#include "kernels/emu/counters.h"

namespace ptxserve::cuda {

// The defaults are the "small" profile: a few SMs and 1 GiB, cheap for tests.
struct EmulatedDeviceOptions {
  std::string name = "ptxserve emulated device (PTX interpreter)";
  int compute_major = 8;  // reported compute capability (the kernels' target sm)
  int compute_minor = 0;
  int num_sms = 8;                              // CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT
  uint64_t memory_bytes = uint64_t{1} << 30;    // device memory (host RAM, used on demand)
  int max_shared_per_block = 48 * 1024;         // without opting in (cuFuncSetAttribute)
  int max_shared_per_block_optin = 227 * 1024;  // the most a function may opt in to
  int max_shared_per_sm = 228 * 1024;
  int registers_per_sm = 64 * 1024;  // 32-bit registers; also the per-block maximum
  int max_threads_per_sm = 2048;
  int host_threads = 2;            // emulator threads running one launch's blocks
  bool poison_allocations = true;  // new device memory reads as 0xff bytes
  bool sticky_faults = true;       // a kernel's fault poisons the context (see above)
};

// The device profiles --emulated_device names: "small" (the defaults above), "a100"
// (A100 SXM4 80GB) and "h100" (H100 SXM5 80GB). InvalidArgument naming the valid names
// for any other.
absl::StatusOr<EmulatedDeviceOptions> EmulatedDeviceProfile(std::string_view name);
// "small, a100 or h100": the profile names, for error messages and help texts.
const char* EmulatedDeviceProfileNames();

// The emulated table. `options` take effect when the device is (re)created, i.e. at the
// next primary-context retain while no context is retained.
absl::StatusOr<std::unique_ptr<DriverTable>> LoadEmulatedDriver(
    const EmulatedDeviceOptions& options = {});

// Fault injection for tests. Counts start when SetEmulatedFault is called. Launches count
// as they are submitted to run: each cuLaunchKernel outside a capture, and each kernel of
// a cuGraphLaunch; launches recorded by a capture run nothing and do not count.
struct EmulatedFault {
  enum class Site : uint8_t {
    kLaunch,  // cuLaunchKernel (or the cuGraphLaunch holding the kernel) returns `code`,
              // as for a bad launch configuration; a failed graph launch queues nothing
    kSync,    // the launch is accepted; the next synchronising call returns `code`
  };
  int64_t fail_launch = 0;  // fail the n-th kernel launch from now (1 = the next); 0 = never
  CUresult launch_code = CUDA_ERROR_LAUNCH_FAILED;
  Site site = Site::kLaunch;
  // kSync: the failure poisons the context as a kernel's own fault does (with
  // EmulatedDeviceOptions::sticky_faults): a planted illegal address, say.
  bool sticky = false;
  int64_t fail_alloc = 0;  // fail the n-th cuMemAlloc_v2 with CUDA_ERROR_OUT_OF_MEMORY
};
void SetEmulatedFault(const EmulatedFault& fault);

// What the emulated device holds now, for leak and bookkeeping checks in tests.
struct EmulatedDeviceCounters {
  bool alive = false;            // a primary context is retained
  int64_t launches = 0;          // kernel launches accepted to run since the device started
                                 // (cuLaunchKernel outside captures + kernels of graph launches)
  int64_t graph_launches = 0;    // cuGraphLaunch calls accepted
  int64_t live_graphs = 0;       // CUgraphs not yet destroyed
  int64_t live_graph_execs = 0;  // CUgraphExecs not yet destroyed
  int64_t live_allocations = 0;  // device allocations
  int64_t live_bytes = 0;
  int64_t live_host_allocations = 0;  // cuMemAllocHost buffers
  int64_t live_modules = 0;
  int64_t modules_loaded = 0;   // cuModuleLoadDataEx successes since the device started
  int64_t devices_started = 0;  // primary contexts created since process start
};
EmulatedDeviceCounters GetEmulatedDeviceCounters();

// Kernel counters (kernels/emu/counters.h), to profile the GPU backend's kernels in tests.
// While on (off by default: counting slows the emulator), every kernel launch that runs
// keeps its counters, named by kernel, for TakeEmulatedKernelCounters; the setting holds
// for the live device and for devices created later. `sample_ctas` > 0 runs at most that
// many CTAs of each launch and scales the counters to the grid (kernels/emu/cta_sample.h):
// for estimates only, as the launches' outputs are then incomplete.
void SetEmulatedKernelCounters(bool on, uint64_t sample_ctas = 0);
// The counters of the launches that ran since the previous call, oldest first (the newest
// 4096 are kept); empty without a live device.
std::vector<emu::KernelCounters> TakeEmulatedKernelCounters();
// The PTX text of a loaded module whose emu::PtxHash is `ptx_hash` (KernelCounters::ptx_hash),
// or "" when no live module has it.
std::string EmulatedModulePtx(uint64_t ptx_hash);

}  // namespace ptxserve::cuda
