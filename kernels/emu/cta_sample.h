// A sample of a grid's CTAs, for the counters of launches too large to emulate whole (a
// Llama-3.2-1B decode step at batch 256 is hundreds of GFLOPs). The emulator runs only the
// sampled CTAs and scales their counts to the grid; the launch's outputs are incomplete, so
// a sampled launch is for estimates only.
//
// The sample is a product of per-axis samples, so a sector's sharing between CTAs shows
// along each axis. Along an axis cut to s of its n values, the sample is up to three
// contiguous runs (the start, the middle, the end), each long enough that a group of
// neighbouring CTAs sharing data (the query heads of one KV head, say) falls inside one run.
// The z axis is never cut: the CTAs along it may work together within the launch, as a
// split decode attention's do (grid z = its splits; the last of a group to finish merges
// the group's partials, kernels/decode_attention.h), and a group cut short would never see
// its last CTA, so the merge's work would be missing from the counts. The backend's z axes
// are short (splits, split-K slices), so a sample that keeps z whole stays small.
// Scaling:
//  - instructions, requests, sectors, FLOPs: by (grid CTAs / sampled CTAs); CTAs are alike
//    except at the edges, and the runs hold both edges.
//  - DRAM sectors (counted once per launch): a sector the sampled CTAs touched counts
//    n / s along each cut axis where it was touched in one run only (data private to a run's
//    CTAs, repeated along the axis), and 1 along an axis where two runs touched it (data
//    every CTA along the axis reads, such as a GEMM's activations across its column tiles).
// Exact when every sector is either private to a group of neighbouring CTAs shorter than a
// run or shared along whole axes, which is how the backend's kernels divide a decode step's
// work. A group longer than a run but not the whole axis is overcounted, up to the size of
// its allocation (each buffer's estimate is capped there): the prompt rows of one sequence
// sharing its KV rows in a prefill's attention, say. Estimates of such steps should size
// the buffers to what the step uses. tests/cuda/gpu_counters_test.cc checks the sampled
// counts of every kernel of a decode and a prefill step against whole-grid counts.
#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include "kernels/emu/ir.h"

namespace ptxserve::emu {

class CtaSample {
 public:
  // At most `max_ctas` CTAs of `grid` (0 = all of them). When an axis can no longer be cut
  // (x and y down to 6 values, three runs of two; z never), the sample may exceed max_ctas.
  CtaSample(const Dim3u& grid, uint64_t max_ctas);

  uint64_t size() const { return size_; }
  bool whole() const { return size_ == grid_ctas_; }
  // The linear block index (x fastest) of the i-th sampled CTA, i < size().
  uint64_t LinearBlock(uint64_t i) const;
  // Bits saying which run of each axis holds the i-th sampled CTA: bit 3*axis + run.
  uint16_t RunBits(uint64_t i) const;
  // Grid CTAs per sampled CTA.
  double CtaScale() const {
    return size_ == 0 ? 1.0 : static_cast<double>(grid_ctas_) / static_cast<double>(size_);
  }
  // How many grid sectors one sampled sector stands for, given the OR of the RunBits of the
  // sampled CTAs that touched it.
  double SectorScale(uint16_t run_bits) const;

 private:
  struct Axis {
    uint32_t n = 1;                // grid values
    std::vector<uint32_t> values;  // sampled values, ascending
    std::vector<uint8_t> run;      // run of each sampled value (0..2)
  };
  std::array<Axis, 3> axes_;
  uint64_t grid_ctas_ = 1;
  uint64_t size_ = 1;
};

}  // namespace ptxserve::emu
