// Internal to the emulator: how the executor gathers KernelCounters (counters.h). One
// CounterSink per host thread of a launch sees every issued warp instruction before it
// executes (a load may overwrite its own address register); the sinks are merged when the
// launch ends, their DRAM sector sets united so a sector two threads touched counts once.
// Each touched sector keeps the CtaSample runs of the CTAs that touched it, from which a
// sampled launch's DRAM sectors are scaled to the grid (cta_sample.h).
// Every figure is a sum over warp instructions or a union of sector sets, so neither the
// order the executor runs warps in (odd blocks last to first, for race detection) nor the
// spread of blocks over host threads changes the counts.
#pragma once

#include <cstdint>
#include <deque>
#include <vector>

#include "kernels/emu/counters.h"
#include "kernels/emu/cta_sample.h"
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
  // A CTA starts; `run_bits` are its runs in the launch's sample (CtaSample::RunBits).
  void CountCta(uint16_t run_bits) {
    ++out_.ctas;
    cta_runs_ = run_bits;
    FoldLongestWarp();
    clocks_.clear();
  }

  // Takes the longest warp of the CTAs run so far (the running one's included) into
  // KernelCounters::longest_warp_steps: at each CTA's start, and once the last has run.
  void FoldLongestWarp();

  // Adds the sinks' counts, scaled from `sample` to the grid, into `out` (whose kernel and
  // launch shape the caller fills).
  static void Merge(const std::vector<const CounterSink*>& sinks, const CtaSample& sample,
                    KernelCounters* out);

 private:
  // One request of `n` lanes' accesses (address, bytes); DRAM sectors marked as given.
  void Global(const uint64_t* addr, const uint32_t* bytes, int n, GlobalTraffic* t, bool read,
              bool write);
  void Shared(const uint64_t* addr, const uint32_t* bytes, int n, SharedTraffic* t);
  void Ldmatrix(const Warp& w, const Instr& in);
  void MarkSector(uint64_t sector, bool read, bool write);
  // The load-wait model (counters.h) for one issue of `in` by warp `w`: waits for the
  // registers it reads, then sets when the registers of a global load arrive.
  void Clock(const Warp& w, const Instr& in, InstrClass cls, uint32_t m);
  // Index of the allocation holding `addr`, or num_allocs_ when none does.
  size_t AllocIndex(uint64_t addr);

  const std::vector<InstrClass>& classes_;
  const Allocation* allocs_;
  size_t num_allocs_;
  size_t last_alloc_ = 0;  // allocation of the previous sector: accesses cluster
  uint16_t cta_runs_ = 0;  // the running CTA's RunBits
  // Per allocation and 32-byte sector read / written, the OR of the RunBits of the CTAs
  // that did (0: untouched); sized on first touch.
  std::vector<std::vector<uint16_t>> read_runs_, write_runs_;
  std::vector<GlobalTraffic> per_alloc_;  // requests by the allocation of their first lane
  // One warp of the running CTA in the load-wait model, in steps of one issue.
  struct WarpClock {
    uint64_t now = 0;             // steps: one per issue, plus the waits
    uint64_t waited = 0;          // of them, the waits
    std::vector<uint64_t> ready;  // by register slot: when its pending load arrives
    uint64_t open_group = 0;      // arrival of the last cp.async not yet committed
    std::deque<uint64_t> groups;  // arrivals of the committed cp.async groups, oldest first
    void WaitUntil(uint64_t t, uint64_t* total_waited) {
      if (t > now) {
        *total_waited += t - now;
        waited += t - now;
        now = t;
      }
    }
  };
  std::vector<WarpClock> clocks_;  // by warp index in the CTA
  KernelCounters out_;             // everything but the DRAM figures, which Merge derives
};

}  // namespace ptxserve::emu
