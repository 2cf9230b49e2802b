// Per-launch counters of the PTX emulator: what a kernel asks of the memory system and of
// the execution units, measured exactly while the emulator runs every CTA of the grid, or,
// for launches too large to emulate whole, estimated from a sample of CTAs scaled to the
// grid (EmulatorOptions::sample_ctas; cta_sample.h says how, and what it assumes).
//
// Units follow the GPU's profilers (Nsight Compute) closely enough to reason about speed
// without a GPU; they are properties of the kernel and its inputs, not timings:
//  - A warp instruction is one instruction issued for the lanes of a warp that sit at the
//    same PC (a divergent branch issues each path separately, as on the GPU); predicated-off
//    instructions are issued too and counted in `instructions`, but make no requests.
//  - A global request is one warp instruction that touches global memory (ld/st/atom/red,
//    generic addresses that resolve to global memory, cp.async sources); its sectors are the
//    distinct 32-byte sectors its active lanes touch. Ideal: ceil(active lanes x bytes per
//    lane / 32), what a fully coalesced access of that width needs (4 for 32 lanes of f32).
//  - DRAM bytes: 32 bytes per distinct sector per launch, as if every sector were fetched
//    from DRAM once and then stayed in cache for the rest of the launch (read and written
//    sectors counted apart). This is the traffic a kernel cannot avoid; re-reads that a real
//    L2 would miss are not modelled.
//  - Shared memory: 32 banks of 4 bytes. A warp's access takes as many wavefronts as the
//    most distinct 4-byte words it addresses in one bank (the same word in several lanes is
//    a free broadcast); the ideal is ceil(distinct words / 32) (1 for a 4-byte access, 4 for
//    a 16-byte one), and bank conflicts are the extra wavefronts beyond it. ldmatrix counts
//    each 8x8 matrix (8 rows of 16 bytes) as its own phase, as the hardware does.
//  - Load waits: each warp runs through a latency model of its own, as a scheduler's
//    scoreboard sees it: the warp issues one instruction per step, the registers of a global
//    load arrive kLoadLatencySteps steps after it issues, and an instruction that reads a
//    register still in flight waits for it (cp.async.wait_group waits likewise for the
//    groups it retires). Loads issued back to back before their first use overlap, so one
//    wait covers them all; a load used at once costs a whole latency. The steps waited,
//    summed over warps, say how much of the DRAM latency a warp exposes and how many
//    requests it keeps in flight: what the cost model needs for Little's law.
//  - FLOPs: tensor = 2*M*N*K per mma per warp; FP32 = 1 per active lane for add/sub/mul and
//    2 for fma/mad (other f32 instructions, divisions and special functions add none).
// Not counted: local memory traffic (counted as instructions only), the shared-memory side
// of cp.async, and caches other than the once-per-launch DRAM model above.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace ptxserve::emu {

// FNV-1a (64-bit) of PTX text: ties a launch's counters to the PTX it ran (to ask ptxas
// for that kernel's registers, say). A change detector, not a cryptographic hash.
uint64_t PtxHash(std::string_view ptx);

// The load latency of the load-wait model (KernelCounters::load_wait_steps), in instruction
// issues of one warp: about an HBM access (~600 ns) over a warp's dependent issue (~4 cycles
// at ~2 GHz). A unit, not a device figure: the cost model counts the waits in latencies.
inline constexpr uint64_t kLoadLatencySteps = 256;

// What unit a warp instruction occupies (the classes of `KernelCounters::instructions`).
enum class InstrClass : uint8_t {
  kTensor,       // mma, ldmatrix
  kFp32,         // f32 arithmetic and comparisons (add, mul, fma, min, setp.f32, ...)
  kFpOther,      // f16/bf16 (scalar and x2) and f64 arithmetic
  kSfu,          // ex2, lg2, rsqrt, sin, cos, tanh, rcp.approx, sqrt.approx
  kInt,          // integer and bit arithmetic, mov, cvt, cvta, selp, predicate logic
  kLoadGlobal,   // ld/ldu from global memory (a generic address is classed by its lanes)
  kStoreGlobal,  // st to global memory
  kAtomGlobal,   // atom/red on global memory
  kLoadShared,   // ld from shared memory
  kStoreShared,  // st to shared memory
  kAtomShared,   // atom/red on shared memory
  kLocal,        // ld/st of local memory
  kParam,        // ld.param
  kAsyncCopy,    // cp.async and its commit/wait
  kWarp,         // shfl, vote, redux, activemask
  kBarrier,      // bar/barrier, membar, fence
  kControl,      // bra, exit, ret
  kOther,        // prefetch, nanosleep, griddepcontrol, ...
  kCount
};
inline constexpr int kNumInstrClasses = static_cast<int>(InstrClass::kCount);
// The class's name in ToString and ToJson ("tensor", "fp32", "load_global", ...).
const char* InstrClassName(InstrClass c);

struct GlobalTraffic {
  uint64_t requests = 0;       // warp instructions with at least one lane touching memory
  uint64_t sectors = 0;        // distinct 32-byte sectors per request, summed
  uint64_t ideal_sectors = 0;  // ceil(lanes x bytes / 32) per request, summed
  double SectorsPerRequest() const {
    return requests == 0 ? 0.0 : static_cast<double>(sectors) / static_cast<double>(requests);
  }
};

struct SharedTraffic {
  uint64_t requests = 0;
  uint64_t wavefronts = 0;
  uint64_t ideal_wavefronts = 0;
  uint64_t BankConflicts() const { return wavefronts - ideal_wavefronts; }  // extra wavefronts
};

// The traffic of one device allocation the launch touched.
struct BufferTraffic {
  uint64_t base = 0;  // the allocation's device address
  uint64_t size = 0;
  // Global requests (loads, stores, atomics, cp.async sources) whose first active lane
  // addressed this allocation. `access.sectors` is what reaches the cache hierarchy: equal
  // to dram_*_bytes / 32 when no sector is requested twice in the launch.
  GlobalTraffic access;
  uint64_t dram_read_bytes = 0;   // 32 x distinct sectors read
  uint64_t dram_write_bytes = 0;  // 32 x distinct sectors written (atomics: read and written)
};

struct KernelCounters {
  std::string kernel;     // the .entry name
  uint64_t ptx_hash = 0;  // PtxHash of the text of the module it came from
  std::array<uint32_t, 3> grid{1, 1, 1}, block{1, 1, 1};
  uint32_t static_shared_bytes = 0;  // the kernel's .shared declarations, per CTA
  uint32_t dynamic_shared_bytes = 0;
  uint64_t ctas = 0;          // the grid's CTAs, which the counts stand for
  uint64_t sampled_ctas = 0;  // CTAs run: ctas, or fewer when the launch was sampled
  // The kernel runs griddepcontrol.wait: a programmatic dependent launch, whose launch
  // overlaps the previous kernel (the cost model charges it so).
  bool grid_dependent = false;

  uint64_t warp_instructions = 0;                         // issued, predicated-off ones included
  uint64_t thread_instructions = 0;                       // summed over the lanes of each issue
  std::array<uint64_t, kNumInstrClasses> instructions{};  // warp instructions by class
  uint64_t Instructions(InstrClass c) const { return instructions[static_cast<int>(c)]; }

  GlobalTraffic global_load;  // ld, ldu, cp.async sources
  GlobalTraffic global_store;
  GlobalTraffic global_atomic;
  SharedTraffic shared_load;   // ld and ldmatrix
  SharedTraffic shared_store;  // st and atomics

  // Steps the warps waited on their global loads (the load-wait model above), summed.
  uint64_t load_wait_steps = 0;
  // load_wait_steps in load latencies per warp of the grid: the DRAM round trips a warp
  // does not hide.
  double LoadLatenciesPerWarp() const;
  // The warp of the longest chain in the load-wait model (issues plus waits; of the sampled
  // CTAs when sampled, unscaled): its steps and, of them, its waits. Longer than the mean
  // where warps do unequal work: the CTA that merges a split decode attention's partials,
  // the last causal tile of a sequence.
  uint64_t longest_warp_steps = 0;
  uint64_t longest_warp_wait_steps = 0;

  uint64_t dram_read_bytes = 0;
  uint64_t dram_write_bytes = 0;
  std::vector<BufferTraffic> buffers;  // allocations touched, by base address
  // The entry of the allocation holding device address `addr`, or nullptr.
  const BufferTraffic* Buffer(uint64_t addr) const;

  uint64_t tensor_flops = 0;
  uint64_t fp32_flops = 0;

  // A human-readable table (several lines, ending in a newline).
  std::string ToString() const;
  // One JSON object with every field above (class counts by name; ratios included).
  std::string ToJson() const;
};

}  // namespace ptxserve::emu
