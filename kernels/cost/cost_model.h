// The cost model: an estimate of a kernel launch's time on a named GPU from the emulator's
// counters of that launch (kernels/emu/counters.h), its launch resources and the device's
// datasheet figures. Every figure it prints is an estimate, never a measurement.
//
// A launch takes the longest of its limits (they overlap on a GPU: memory, tensor cores,
// FP32 pipes and instruction issue work at once), plus the launch overhead:
//  - dram:    DRAM bytes / the bandwidth the launch can draw. That is the smaller of the
//             sustainable peak and what its resident warps keep in flight (Little's law:
//             bytes in flight / DRAM latency), so a grid too small to fill the device is slow.
//             A warp keeps in flight the loads it issues before it must wait for one: the
//             emulator's load-wait model (KernelCounters::load_wait_steps) measures that,
//             so loads issued together overlap and a load used at once does not.
//  - tensor:  tensor FLOPs / the tensor peak of the SMs the grid occupies.
//  - fp32:    FP32 FLOPs / the FP32 peak of the SMs the grid occupies.
//  - issue:   warp instructions / (4 schedulers x clock) of the SMs the grid occupies; the
//             SFU and shared-memory wavefronts have their own, lower rates.
//  - latency: the chain one warp cannot hide alone, once per wave: its instructions at one
//             per 4 cycles (an ALU's dependent-issue latency) and the DRAM latencies the
//             load-wait model says it waits out; and no less than the longest warp's chain
//             (KernelCounters::longest_warp_steps), which the launch cannot end before: the
//             CTA that merges a split decode attention's partials runs its split, then the
//             merge, while the mean over the grid's warps spreads that merge thin.
// A programmatic dependent launch (KernelCounters::grid_dependent: the kernel waits on
// griddepcontrol.wait) is launched while the previous kernel still runs, so its launch
// overhead overlaps that kernel: hidden up to the previous kernel's own time, less the
// release (DeviceSpec::dependent_release_s), which never overlaps. Its limits are charged
// in full: the prologue it runs before the wait is not credited.
// Work per SM is the grid's work scaled by the CTAs of the busiest SM (ceil(ctas / SMs)
// over ctas), so tails and grids smaller than the SM count cost what they cost.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "kernels/emu/counters.h"

namespace ptxserve::cost {

// A GPU as the model sees it. cost_model.cc gives each figure's source.
struct DeviceSpec {
  std::string name;  // "h100", "a100"
  std::string description;
  int sms = 0;
  double clock_hz = 0;          // boost clock: instruction issue and the SFU/shared rates
  double dram_bytes_per_s = 0;  // datasheet peak
  double dram_efficiency = 0;   // share of the peak a streaming kernel sustains
  double dram_latency_s = 0;    // a DRAM load's latency under load (Little's law)
  double tensor_f16_flops = 0;  // dense f16/bf16 mma with f32 accumulation
  double fp32_flops = 0;        // non-tensor FP32 (an FMA is 2)
  int max_warps_per_sm = 0;
  int max_ctas_per_sm = 0;
  int registers_per_sm = 0;
  int shared_bytes_per_sm = 0;      // usable by CTAs (the carve-out's maximum)
  int shared_reserved_per_cta = 0;  // the driver keeps 1 KiB per CTA
  double launch_eager_s = 0;        // one cuLaunchKernel, back to back on a stream
  double launch_graph_s = 0;        // one kernel node of a replayed CUDA graph
  // A programmatic dependent launch's share of its launch that cannot overlap the previous
  // kernel: that kernel's completion and memory flush reaching the waiting CTAs.
  double dependent_release_s = 0;
};

// The named device ("h100", "a100"), or nullptr.
const DeviceSpec* FindDevice(std::string_view name);
// The names FindDevice knows, for error messages.
std::vector<std::string> DeviceNames();

// What a launch holds per CTA beyond the counters (which carry its shared memory):
// registers per thread, from ptxas when present; 0 = unknown, taken as 32.
struct LaunchResources {
  int registers_per_thread = 0;
};

struct Occupancy {
  int ctas_per_sm = 0;
  int warps_per_sm = 0;
  std::string limit;  // "warps", "ctas", "registers", "shared memory"
};
Occupancy ComputeOccupancy(const DeviceSpec& d, int threads_per_cta, int shared_bytes_per_cta,
                           int registers_per_thread);

struct Estimate {
  double seconds = 0;   // the largest limit + the launch overhead
  std::string binding;  // the largest limit's name
  double dram_s = 0, tensor_s = 0, fp32_s = 0, issue_s = 0, sfu_s = 0, shared_s = 0, latency_s = 0,
         launch_s = 0;
  double dram_bandwidth = 0;  // bytes/s the launch can draw (after Little's law)
  Occupancy occupancy;
  int waves = 0;  // ceil(ctas / (ctas_per_sm x SMs))
};

// `in_graph`: the launch is a node of a replayed CUDA graph (cheaper launch).
// `previous_s`: the previous kernel's time on the stream without its own launch overhead
// (Estimate::seconds - launch_s), which a dependent launch's overhead overlaps; 0 = none.
Estimate EstimateLaunch(const DeviceSpec& d, const emu::KernelCounters& c, const LaunchResources& r,
                        bool in_graph, double previous_s = 0);

}  // namespace ptxserve::cost
