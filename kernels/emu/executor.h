// Runs a decoded kernel over a grid: blocks (optionally on several host threads), warps
// of 32 lanes executed instruction by instruction, divergence handled with per-lane PCs
// (the group of lanes with the lowest PC runs next, so lanes reconverge where their paths
// meet), and bar.sync / barrier.sync with deadlock detection.
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "kernels/emu/counters.h"
#include "kernels/emu/module.h"

namespace ptxserve::emu {

struct GlobalWrites;
class WriteRanges;
struct DependentLaunchLog;

struct LaunchConfig {
  const Function* fn = nullptr;
  Dim3u grid, block;
  uint32_t dynamic_shared = 0;
  std::vector<uint8_t> params;         // laid out as fn->params describes
  const Allocation* allocs = nullptr;  // sorted by base; must not change during the launch
  size_t num_allocs = 0;
  int num_threads = 1;                 // host threads running blocks
  uint64_t max_warp_instructions = 0;  // per host thread; 0 = unlimited
  // Run at most this many CTAs, a CtaSample (cta_sample.h), and scale the counters to the
  // grid: for estimates only, the other CTAs' outputs are never written. 0 = every CTA.
  uint64_t sample_ctas = 0;
  bool poison_shared = true;        // fill shared memory with 0xff per block
  bool detect_shared_races = true;  // read-after-write across warps without a barrier
  // Race detection in global memory between the warps of a block: one table per host
  // thread (at least num_threads), kept by the caller across launches; empty: off.
  std::vector<GlobalWrites*> global_writes;
  // Programmatic dependent launch (dependent_launch.h): what a kernel that waits must not
  // read before its wait (null: the kernel is not checked), and one log per host thread
  // (at least num_threads) of the launch's global writes and trigger (empty: no log).
  const WriteRanges* dependent_guard = nullptr;
  std::vector<DependentLaunchLog*> dependent_logs;
};

struct LaunchCounters {
  uint64_t warp_instructions = 0;
  uint64_t thread_instructions = 0;
};

// What special-register values depend on besides the thread.
struct SpecialInputs {
  Dim3u block, grid, block_idx;
  uint32_t nwarps = 0;
  uint32_t dynamic_shared = 0, total_shared = 0;
};
// The 32-bit value of special register `sp` for thread `t` (linear index in the block).
uint64_t SpecialValue(Special sp, const SpecialInputs& in, uint32_t t);

// Executes every block of the grid (or the sample cfg.sample_ctas asks for). The first fault
// (lowest block index when several threads fail) is returned; it names the kernel, block, thread,
// PTX line and address. With `kernel_counters`, the launch's counters are added to it (counters.h);
// without, the warps run an instantiation of the interpreter loop that has no counting code at all.
absl::Status ExecuteLaunch(const LaunchConfig& cfg, LaunchCounters* counters,
                           KernelCounters* kernel_counters = nullptr);

}  // namespace ptxserve::emu
