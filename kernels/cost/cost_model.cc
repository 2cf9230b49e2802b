#include "kernels/cost/cost_model.h"

#include <algorithm>
#include <cmath>

namespace ptxserve::cost {
namespace {

// Sources of the figures below:
//  [DS-H100] NVIDIA H100 Tensor Core GPU datasheet, SXM5 column: 132 SMs, 3.35 TB/s HBM3,
//            FP32 67 TFLOPS, FP16/BF16 tensor 1,979 TFLOPS with sparsity (989.4 dense).
//  [DS-A100] NVIDIA A100 Tensor Core GPU datasheet, 80GB SXM column: 2,039 GB/s HBM2e,
//            FP32 19.5 TFLOPS, FP16/BF16 tensor 312 TFLOPS (dense); 108 SMs, 1,410 MHz boost
//            (NVIDIA A100 whitepaper, table 3).
//  [CLK-H100] 1,980 MHz boost: the clock at which 132 SMs x 128 FP32 lanes x 2 give the
//            datasheet's 67 TFLOPS.
//  [CPG]     CUDA C++ Programming Guide, "Compute capabilities" table, 8.0 and 9.0: 64 warps
//            and 32 CTAs per SM, 64K 32-bit registers per SM (allocated per warp in units
//            of 256), 164 KiB (8.0) / 228 KiB (9.0) shared memory per SM, 1 KiB of it
//            reserved per CTA; 4 warp schedulers per SM issuing one instruction each per
//            clock; "Arithmetic instructions" table: 16 results per clock per SM for the
//            special functions (ex2, lg2, rsqrt, sin, cos) on 8.0 and 9.0. Shared memory
//            serves one 128-byte wavefront per clock per SM.
//  [LAT]     DRAM latency under load: public microbenchmarks put an unloaded HBM access of
//            A100/H100 near 600 SM cycles (~300-450 ns); a streaming kernel sees queueing on
//            top. 600 ns is this model's assumption, to calibrate on hardware.
//  [EFF]     A streaming copy sustains about 90% of the HBM peak on A100/H100 (public
//            STREAM-style figures: ~1.8 of 2.0 TB/s, ~3.0 of 3.35 TB/s); an assumption until
//            gpu_bench measures it here.
//  [GRAPH]   NVIDIA, "Getting Started with CUDA Graphs" (2019): a 2.9 us kernel took 3.8 us
//            per launch back to back on a stream and 3.4 us as a graph node: 0.9 us and
//            0.5 us of launch overhead.
//  [PDL]     CUDA C++ Programming Guide, "Programmatic Dependent Launch and Synchronization"
//            (sm_90): with programmatic stream serialization the secondary kernel launches
//            once the primary's CTAs trigger (griddepcontrol.launch_dependents), so its launch
//            and its work before griddepcontrol.wait overlap the primary; the wait returns
//            once the primary grid has completed and flushed its memory. The guide gives no
//            figure for that release; 0.25 us (about 500 cycles: a GPU-scope fence and the
//            completion signal) is this model's assumption, to calibrate on hardware.
const std::vector<DeviceSpec>& Devices() {
  static const std::vector<DeviceSpec> devices = {
      {.name = "h100",
       .description = "H100 SXM5 80GB (sm_90)",
       .sms = 132,                    // [DS-H100]
       .clock_hz = 1.98e9,            // [CLK-H100]
       .dram_bytes_per_s = 3.35e12,   // [DS-H100]
       .dram_efficiency = 0.90,       // [EFF]
       .dram_latency_s = 600e-9,      // [LAT]
       .tensor_f16_flops = 989.4e12,  // [DS-H100]
       .fp32_flops = 66.9e12,         // [DS-H100]
       .max_warps_per_sm = 64,        // [CPG]
       .max_ctas_per_sm = 32,
       .registers_per_sm = 65536,
       .shared_bytes_per_sm = 228 * 1024,
       .shared_reserved_per_cta = 1024,
       .launch_eager_s = 0.9e-6,  // [GRAPH]
       .launch_graph_s = 0.5e-6,
       .dependent_release_s = 0.25e-6},  // [PDL]
      {.name = "a100",
       .description = "A100 SXM4 80GB (sm_80)",
       .sms = 108,                    // [DS-A100]
       .clock_hz = 1.41e9,            // [DS-A100]
       .dram_bytes_per_s = 2.039e12,  // [DS-A100]
       .dram_efficiency = 0.90,       // [EFF]
       .dram_latency_s = 600e-9,      // [LAT]
       .tensor_f16_flops = 312e12,    // [DS-A100]
       .fp32_flops = 19.5e12,         // [DS-A100]
       .max_warps_per_sm = 64,        // [CPG]
       .max_ctas_per_sm = 32,
       .registers_per_sm = 65536,
       .shared_bytes_per_sm = 164 * 1024,
       .shared_reserved_per_cta = 1024,
       .launch_eager_s = 0.9e-6,  // [GRAPH]
       .launch_graph_s = 0.5e-6},
  };
  return devices;
}

// [CPG]: one instruction per scheduler per clock; 16 special-function results per clock
// (half a warp instruction); one shared-memory wavefront per clock.
constexpr double kIssuePerSmClock = 4;
constexpr double kSfuPerSmClock = 0.5;
constexpr double kWavefrontsPerSmClock = 1;
// A dependent instruction waits about 4 cycles for its operand (the ALU pipeline depth of
// sm_80/sm_90): the floor of a lone warp's chain.
constexpr double kDependentIssueCycles = 4;
constexpr int kUnknownRegisters = 32;

double DivOrZero(double a, double b) { return b > 0 ? a / b : 0; }

}  // namespace

const DeviceSpec* FindDevice(std::string_view name) {
  for (const DeviceSpec& d : Devices()) {
    if (d.name == name) return &d;
  }
  return nullptr;
}

std::vector<std::string> DeviceNames() {
  std::vector<std::string> names;
  for (const DeviceSpec& d : Devices()) names.push_back(d.name);
  return names;
}

Occupancy ComputeOccupancy(const DeviceSpec& d, int threads_per_cta, int shared_bytes_per_cta,
                           int registers_per_thread) {
  const int warps = std::max(1, (threads_per_cta + 31) / 32);
  const int regs = registers_per_thread > 0 ? registers_per_thread : kUnknownRegisters;
  const int regs_per_warp = (regs * 32 + 255) / 256 * 256;
  Occupancy o;
  o.ctas_per_sm = d.max_warps_per_sm / warps;
  o.limit = "warps";
  auto cap = [&o](int ctas, const char* limit) {
    if (ctas < o.ctas_per_sm) {
      o.ctas_per_sm = ctas;
      o.limit = limit;
    }
  };
  cap(d.max_ctas_per_sm, "ctas");
  cap(d.registers_per_sm / regs_per_warp / warps, "registers");
  if (shared_bytes_per_cta > 0) {
    cap(d.shared_bytes_per_sm / (shared_bytes_per_cta + d.shared_reserved_per_cta),
        "shared memory");
  }
  o.warps_per_sm = o.ctas_per_sm * warps;
  return o;
}

Estimate EstimateLaunch(const DeviceSpec& d, const emu::KernelCounters& c, const LaunchResources& r,
                        bool in_graph, double previous_s) {
  Estimate e;
  const int threads = static_cast<int>(c.block[0] * c.block[1] * c.block[2]);
  const int warps_per_cta = std::max(1, (threads + 31) / 32);
  const double ctas = static_cast<double>(std::max<uint64_t>(c.ctas, 1));
  e.occupancy =
      ComputeOccupancy(d, threads, static_cast<int>(c.static_shared_bytes + c.dynamic_shared_bytes),
                       r.registers_per_thread);
  const double resident_ctas = static_cast<double>(std::max(1, e.occupancy.ctas_per_sm)) * d.sms;
  e.waves = static_cast<int>(std::ceil(ctas / resident_ctas));
  // The busiest SM's share of the grid's work.
  const double share = std::ceil(ctas / d.sms) / ctas;
  const double sm_clock = d.clock_hz;

  e.tensor_s = static_cast<double>(c.tensor_flops) * share / (d.tensor_f16_flops / d.sms);
  e.fp32_s = static_cast<double>(c.fp32_flops) * share / (d.fp32_flops / d.sms);
  e.issue_s = static_cast<double>(c.warp_instructions) * share / (kIssuePerSmClock * sm_clock);
  e.sfu_s = static_cast<double>(c.Instructions(emu::InstrClass::kSfu)) * share /
            (kSfuPerSmClock * sm_clock);
  e.shared_s = static_cast<double>(c.shared_load.wavefronts + c.shared_store.wavefronts) * share /
               (kWavefrontsPerSmClock * sm_clock);

  // Little's law: the bytes the resident warps keep in flight over the latency. A warp keeps
  // in flight the requests it issues between two waits: its requests over the load
  // latencies it waits out (the emulator's load-wait model), all of them when it waits out
  // less than one.
  const double load_requests = static_cast<double>(c.global_load.requests);
  const double bytes_per_request =
      DivOrZero(32.0 * static_cast<double>(c.global_load.sectors), load_requests);
  const double total_warps = ctas * warps_per_cta;
  const double resident_warps = std::min(ctas, resident_ctas) * warps_per_cta;
  const double requests_per_warp = load_requests / total_warps;
  const double load_latencies_per_warp = c.LoadLatenciesPerWarp();
  const double in_flight_per_warp = requests_per_warp / std::max(1.0, load_latencies_per_warp);
  const double in_flight = resident_warps * in_flight_per_warp * bytes_per_request;
  const double sustained = d.dram_bytes_per_s * d.dram_efficiency;
  e.dram_bandwidth = in_flight > 0 ? std::min(sustained, in_flight / d.dram_latency_s) : sustained;
  e.dram_s = static_cast<double>(c.dram_read_bytes + c.dram_write_bytes) / e.dram_bandwidth;

  // A warp's own chain, once per wave: its instructions back to back and the load latencies
  // it waits out. Requests for sectors another warp already brought in (e.g. every warp of
  // a GEMV reading the same activations) hit the caches, whose latency the DRAM latency
  // dwarfs: only the DRAM requests' share of the waits counts.
  const double instructions_per_warp = static_cast<double>(c.warp_instructions) / total_warps;
  const double dram_requests_per_warp =
      std::min(requests_per_warp,
               DivOrZero(static_cast<double>(c.dram_read_bytes), bytes_per_request) / total_warps);
  const double dram_share = DivOrZero(dram_requests_per_warp, requests_per_warp);
  const auto chain_s = [&](double instructions, double load_latencies) {
    return instructions * kDependentIssueCycles / sm_clock +
           load_latencies * dram_share * d.dram_latency_s;
  };
  // The longest warp, in the same units: its issues, and its waits in load latencies.
  const double longest_waits = static_cast<double>(c.longest_warp_wait_steps);
  const double longest_s = chain_s(static_cast<double>(c.longest_warp_steps) - longest_waits,
                                   longest_waits / static_cast<double>(emu::kLoadLatencySteps));
  e.latency_s =
      std::max(e.waves * chain_s(instructions_per_warp, load_latencies_per_warp), longest_s);

  e.launch_s = in_graph ? d.launch_graph_s : d.launch_eager_s;
  if (c.grid_dependent) {
    // [PDL]: the launch overlaps the previous kernel, as far as that kernel lasts; the
    // release does not. (Only sm_90 kernels have griddepcontrol.)
    const double hidden =
        std::clamp(previous_s, 0.0, std::max(0.0, e.launch_s - d.dependent_release_s));
    e.launch_s -= hidden;
  }
  const std::pair<double, const char*> limits[] = {
      {e.dram_s, "dram"}, {e.tensor_s, "tensor"}, {e.fp32_s, "fp32"},      {e.issue_s, "issue"},
      {e.sfu_s, "sfu"},   {e.shared_s, "shared"}, {e.latency_s, "latency"}};
  double worst = 0;
  e.binding = "launch";
  for (const auto& [seconds, name] : limits) {
    if (seconds > worst) {
      worst = seconds;
      e.binding = name;
    }
  }
  e.seconds = worst + e.launch_s;
  return e;
}

}  // namespace ptxserve::cost
