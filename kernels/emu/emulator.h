// A PTX emulator behind a tiny driver-like interface (allocate, copy, load a module, launch)
// so a GPU backend written against the CUDA Driver API can run on the CPU unchanged.
//
// Device memory lives in host buffers reached only through 64-bit device addresses that
// start at 0x100000000 and leave a guard gap after every allocation; kernels can never touch
// host memory. Every global access is checked against one allocation, every shared/local
// access against the block's shared size / the thread's local size, accesses must be
// naturally aligned (a 16-byte ld.v4 on a 16-byte boundary), and a read of a register the
// thread never wrote is an error. So are barrier deadlocks (early exit before bar.sync, a
// warp diverged around an aligned barrier), shfl/vote masks naming lanes that do not execute
// the instruction, and races between the warps of a block (below). Each comes back as a
// Status naming kernel, block, thread, PTX line and address.
//
// Execution: warps of 32 lanes run instruction by instruction; a divergent branch parks
// lanes with their own PC and the lowest-PC group runs next, so lanes rejoin where their
// paths meet and warp collectives see every participating lane. Warps of a block run one at
// a time until they exit or wait at a barrier, last to first in blocks of odd index.
//
// Races: what the GPU leaves unordered between warps must not decide whether a kernel
// passes, so accesses of two warps with no barrier in between are checked instead of run
// in some order: in shared memory a read of another warp's write, a write over another
// warp's read and a write of a different value over another warp's write; in global memory
// (within a block) the first and the last, remembering up to 65536 written words between
// two barriers. Global reads are not recorded, so a read that another warp later
// overwrites is seen only when that warp runs first: in blocks of odd index, so in grids
// of two blocks or more. Strong accesses (atomics, .volatile, .relaxed, .acquire,
// .release) do not race with each other. Not checked: races between blocks, and races
// across a barrier that not every warp takes part in (a thread count, bar.arrive): every
// barrier release counts as ordering all warps.
//
// Programmatic dependent launch (griddepcontrol.launch_dependents / .wait, sm_90): launches
// still run one after another, and a kernel that executes griddepcontrol.wait is checked as
// a dependent launch would be on a GPU: before its wait a thread must not read global memory
// that a kernel which may still be running wrote (the previous one, and further back while
// each kernel in between let its dependents launch before its own wait), nor write global
// memory (dependent_launch.h). Copies and memsets complete the stream's order.
//
// Tensor cores: ldmatrix.m8n8 (.x1/.x2/.x4, .trans) and mma.m16n8k8 / m16n8k16 with f16 or
// bf16 inputs and f32 accumulators, in the ISA's fragment layouts; both must be executed by
// a whole warp. mma sums exactly and rounds once (a GPU may differ in the last bits).
//
// cp.async is asynchronous: the source is read at issue, the destination written only when
// the issuing thread waits for the copy's group (per-thread groups: commit_group,
// wait_group N, wait_all). Touching a destination before then (a read, a store, another
// cp.async) and exiting with copies in flight are errors; landed data counts as written by
// the issuer's warp at the wait, so other warps still need a barrier. Not checked: a write
// to a copy's source before it lands (undefined in the ISA).
//
// Not modelled (rejected at load with the line): .func/call, .global/.const variables,
// textures/surfaces, other mma shapes and types, wgmma, directed rounding (.rz/.rm/.rp) of
// arithmetic (cvt supports every rounding mode).
//
// Counters: with EmulatorOptions::collect_counters every launch also yields KernelCounters
// (counters.h: memory requests and sectors, DRAM bytes, bank conflicts, instruction mix,
// FLOPs), gathered over every CTA and kept for TakeCounters.
//
// Thread-safe: calls are serialised by an internal mutex; a launch is synchronous and may
// run its blocks on several host threads (blocks are independent except for atomics, which
// use host atomics).
#pragma once

#include <cstdint>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kernels/emu/counters.h"

namespace ptxserve::emu {

struct Module;
struct Allocation;
struct GlobalWrites;
class WriteRanges;
struct DependentLaunchLog;

struct Dim3 {
  uint32_t x = 1, y = 1, z = 1;
};

struct ModuleHandle {
  uint32_t id = 0;
};
struct FunctionHandle {
  uint32_t module = 0;
  uint32_t index = 0;
};

// One kernel argument's raw bytes (what a void* in cuLaunchKernel's kernelParams points at).
struct KernelArg {
  std::vector<uint8_t> bytes;
  template <class T>
  static KernelArg Of(const T& v) {
    KernelArg a;
    a.bytes.resize(sizeof(T));
    std::memcpy(a.bytes.data(), &v, sizeof(T));
    return a;
  }
};

// A kernel parameter as declared in the PTX (.param), for packing cuLaunchKernel arguments.
struct ParamDesc {
  std::string name;
  uint32_t offset = 0;
  uint32_t size = 0;
};

struct EmulatorStats {
  uint64_t launches = 0;
  uint64_t warp_instructions = 0;    // instructions issued per warp
  uint64_t thread_instructions = 0;  // summed over active lanes (predicated-off included)
  uint64_t bytes_htod = 0, bytes_dtoh = 0, bytes_dtod = 0;
  double launch_seconds = 0;  // wall time spent inside Launch
};

struct EmulatorOptions {
  int num_threads = 2;  // host threads running blocks of one launch
  // A launch fails after this many warp-instructions on one host thread (runaway loops).
  uint64_t max_warp_instructions = 1'000'000'000ull;
  bool poison_allocations = true;  // fill new allocations with 0xff (device memory is
                                   // uninitialised; NaN/-1 makes stray reads visible)
  bool poison_shared = true;       // likewise for each block's shared memory
  // Report a warp reading shared memory that another warp wrote since the last barrier
  // (a race on the GPU, where warps run concurrently).
  bool detect_shared_races = true;
  // Report a warp of a block reading global memory that another warp of the block wrote
  // since the last barrier, or writing a different value over it.
  bool detect_global_races = true;
  uint32_t max_shared_bytes = 227 * 1024;
  uint64_t max_device_bytes = 16ull << 30;  // total live allocation limit
  // Gather KernelCounters (counters.h) for every successful launch, kept for TakeCounters.
  // Off, launches run an interpreter loop without counting code; on, a load-heavy GEMV
  // takes about 1.6x the CPU time (tests/kernels/kernels_counters_test.cc prints it).
  bool collect_counters = false;
  // With collect_counters: run at most this many CTAs of each launch and scale their
  // counters to the grid (cta_sample.h). For estimates only: the CTAs not run write
  // nothing, so the launch's outputs are incomplete. 0 = run every CTA.
  uint64_t sample_ctas = 0;
  size_t counters_history = 4096;  // launches kept; the oldest go first
};

class Emulator {
 public:
  explicit Emulator(EmulatorOptions opts = {});
  ~Emulator();
  Emulator(const Emulator&) = delete;
  Emulator& operator=(const Emulator&) = delete;

  // Allocates `bytes` (> 0) of device memory, 256-byte aligned; returns its device address.
  absl::StatusOr<uint64_t> Alloc(size_t bytes);
  // Frees an allocation by its base address; addresses are never reused.
  absl::Status Free(uint64_t dptr);
  // Copies; each device range must lie inside one allocation.
  absl::Status CopyHtoD(uint64_t dst, const void* src, size_t n);
  absl::Status CopyDtoH(void* dst, uint64_t src, size_t n);
  absl::Status CopyDtoD(uint64_t dst, uint64_t src, size_t n);
  // Sets n bytes to `value` (cuMemsetD8) / `count` 32-bit words to `value` (cuMemsetD32).
  absl::Status Memset(uint64_t dst, uint8_t value, size_t n);
  absl::Status MemsetD32(uint64_t dst, uint32_t value, size_t count);
  // Bytes currently allocated and the configured limit.
  void MemInfo(uint64_t* used, uint64_t* total) const;

  // Parses and decodes PTX text once; errors name the PTX line.
  absl::StatusOr<ModuleHandle> LoadModule(std::string_view ptx_text);
  absl::Status UnloadModule(ModuleHandle m);
  // Finds a .entry by name.
  absl::StatusOr<FunctionHandle> GetFunction(ModuleHandle m, std::string_view name);
  // The function's parameters in declaration order.
  absl::StatusOr<std::vector<ParamDesc>> GetParams(FunctionHandle f) const;
  // Static shared bytes of the function (dynamic shared comes on top).
  absl::StatusOr<uint32_t> GetStaticSharedBytes(FunctionHandle f) const;

  // Runs the kernel to completion. `args` holds one entry per .param with exactly the
  // parameter's size.
  absl::Status Launch(FunctionHandle f, Dim3 grid, Dim3 block, uint32_t dynamic_shared_bytes,
                      const std::vector<KernelArg>& args);
  // Same, with cuLaunchKernel's kernelParams: params[i] points at parameter i's bytes.
  absl::Status LaunchRaw(FunctionHandle f, Dim3 grid, Dim3 block, uint32_t dynamic_shared_bytes,
                         void* const* params);

  EmulatorStats stats() const;

  // The counters of the successful launches since the previous call, oldest first (at
  // most counters_history of them); empty unless collect_counters.
  std::vector<KernelCounters> TakeCounters();
  // Sets EmulatorOptions::collect_counters and sample_ctas for later launches.
  void SetCollectCounters(bool on, uint64_t sample_ctas = 0);

 private:
  struct Buffer {
    uint64_t size = 0;
    std::unique_ptr<uint8_t[]> host;
  };
  // Host pointer for [addr, addr+n) inside one allocation, or an error naming `what`.
  absl::StatusOr<uint8_t*> Range(uint64_t addr, size_t n, const char* what);
  absl::Status LaunchLocked(FunctionHandle f, Dim3 grid, Dim3 block, uint32_t dyn,
                            const std::vector<const uint8_t*>& args);
  void RebuildTable();

  EmulatorOptions opts_;
  mutable std::mutex mu_;
  std::map<uint64_t, Buffer> buffers_;   // by base address
  std::vector<Allocation> table_;        // sorted snapshot for kernels
  uint64_t next_addr_ = 0x100000000ull;  // bump pointer, never reused
  uint64_t used_bytes_ = 0;
  std::map<uint32_t, std::unique_ptr<Module>> modules_;
  std::vector<std::unique_ptr<GlobalWrites>> race_tables_;  // per host thread of a launch
  // Programmatic dependent launch (dependent_launch.h): the global writes of the kernels a
  // dependent kernel's threads may still overlap before their wait, and the per-host-thread
  // logs of a launch that triggers.
  std::unique_ptr<WriteRanges> pending_writes_;
  std::vector<std::unique_ptr<DependentLaunchLog>> dependent_logs_;
  uint32_t next_module_ = 1;
  EmulatorStats stats_;
  std::deque<KernelCounters> counters_;
};

}  // namespace ptxserve::emu
