// Internal to the emulator: how the executor gathers KernelCounters (counters.h). One
// CounterSink per host thread of a launch sees every issued warp instruction before it
// executes (a load may overwrite its own address register); the sinks are merged when the
// launch ends, their DRAM sector sets united so a sector two threads touched counts once.
// Every figure is a sum over warp instructions or a union of sector sets, so neither the
// order the executor runs warps in (odd blocks last to first, for race detection) nor the
// spread of blocks over host threads changes the counts.
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/emu/counters.h"
#include "kernels/emu/ir.h"
#include "kernels/emu/module.h"

namespace ptxserve::emu {

// The class of each instruction of `fn`, by PC. Generic loads and stores are classed as
// global here; CounterSink reclasses them by where their lanes' addresses point.
std::vector<InstrClass> ClassifyCode(const Function& fn);

class CounterSink {
 public:
  // `classes`: ClassifyCode(fn) of the launch's function; `allocs` sorted by base, fixed
  // during the launch. Both must outlive the sink.
  CounterSink(const std::vector<InstrClass>& classes, const Allocation* allocs, size_t num_allocs);

  // Counts warp instruction `in` (at `pc`) issued for the lanes in `issued`, of which
  // `m` passed its guard, before it executes.
  void Count(const Warp& w, const Instr& in, uint32_t pc, uint32_t issued, uint32_t m);
  void CountCta() { ++out_.ctas; }

  // Adds the sinks' counts into `out` (whose kernel and launch shape the caller fills).
  static void Merge(const std::vector<const CounterSink*>& sinks, KernelCounters* out);

 private:
  // One request of `n` lanes' accesses (address, bytes); DRAM sectors marked as given.
  void Global(const uint64_t* addr, const uint32_t* bytes, int n, GlobalTraffic* t, bool read,
              bool write);
  void Shared(const uint64_t* addr, const uint32_t* bytes, int n, SharedTraffic* t);
  void Ldmatrix(const Warp& w, const Instr& in);
  void MarkSector(uint64_t sector, bool read, bool write);
  // Index of the allocation holding `addr`, or num_allocs_ when none does.
  size_t AllocIndex(uint64_t addr);

  const std::vector<InstrClass>& classes_;
  const Allocation* allocs_;
  size_t num_allocs_;
  size_t last_alloc_ = 0;  // allocation of the previous sector: accesses cluster
  // Per allocation, a bit per 32-byte sector read / written; sized on first touch.
  std::vector<std::vector<uint64_t>> read_bits_, write_bits_;
  std::vector<GlobalTraffic> per_alloc_;  // requests by the allocation of their first lane
  KernelCounters out_;                    // everything but the DRAM figures, which Merge derives
};

}  // namespace ptxserve::emu
