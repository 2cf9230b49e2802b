#include "kernels/emu/cta_sample.h"

#include <algorithm>
#include <bit>

namespace ptxserve::emu {
namespace {

// An axis is cut no shorter than this: three runs of two, so a sector two runs touched
// (shared along the axis) can be told from one a single run touched.
constexpr uint32_t kMinCut = 6;

}  // namespace

CtaSample::CtaSample(const Dim3u& grid, uint64_t max_ctas) {
  const uint32_t n[3] = {grid.x, grid.y, grid.z};  // an empty grid samples nothing
  uint32_t s[3] = {n[0], n[1], n[2]};
  const auto product = [&] { return uint64_t{s[0]} * s[1] * s[2]; };
  // Cut the longest axis that can still be cut, as little as the budget allows, until the
  // sample fits. Never z (see the header).
  while (max_ctas != 0 && product() > max_ctas) {
    int longest = -1;
    for (int d = 0; d < 2; ++d) {
      if (s[d] > kMinCut && (longest < 0 || s[d] > s[longest])) longest = d;
    }
    if (longest < 0) break;
    const uint64_t others = product() / s[longest];
    s[longest] = static_cast<uint32_t>(std::max<uint64_t>(kMinCut, max_ctas / others));
  }
  for (int d = 0; d < 3; ++d) {
    Axis& a = axes_[d];
    a.n = n[d];
    grid_ctas_ *= n[d];
    if (s[d] == n[d]) {
      for (uint32_t v = 0; v < n[d]; ++v) a.values.push_back(v), a.run.push_back(0);
      continue;
    }
    // Three runs: the start, the middle, the end (they cannot overlap: s < n and the
    // first run is at most one longer than the last).
    const uint32_t len[3] = {(s[d] + 2) / 3, s[d] - (s[d] + 2) / 3 - s[d] / 3, s[d] / 3};
    const uint32_t start[3] = {0, (n[d] - len[1]) / 2, n[d] - len[2]};
    for (uint8_t r = 0; r < 3; ++r) {
      for (uint32_t v = start[r]; v < start[r] + len[r]; ++v)
        a.values.push_back(v), a.run.push_back(r);
    }
  }
  size_ = uint64_t{axes_[0].values.size()} * axes_[1].values.size() * axes_[2].values.size();
}

uint64_t CtaSample::LinearBlock(uint64_t i) const {
  const uint64_t sx = axes_[0].values.size(), sy = axes_[1].values.size();
  const uint64_t x = axes_[0].values[i % sx];
  const uint64_t y = axes_[1].values[(i / sx) % sy];
  const uint64_t z = axes_[2].values[i / (sx * sy)];
  return x + axes_[0].n * (y + uint64_t{axes_[1].n} * z);
}

uint16_t CtaSample::RunBits(uint64_t i) const {
  const uint64_t sx = axes_[0].values.size(), sy = axes_[1].values.size();
  const uint64_t idx[3] = {i % sx, (i / sx) % sy, i / (sx * sy)};
  uint16_t bits = 0;
  for (int d = 0; d < 3; ++d) bits |= static_cast<uint16_t>(1u << (3 * d + axes_[d].run[idx[d]]));
  return bits;
}

double CtaSample::SectorScale(uint16_t run_bits) const {
  double scale = 1;
  for (int d = 0; d < 3; ++d) {
    const uint32_t runs = (run_bits >> (3 * d)) & 7u;
    if (std::popcount(runs) < 2) {
      scale *= static_cast<double>(axes_[d].n) / static_cast<double>(axes_[d].values.size());
    }
  }
  return scale;
}

}  // namespace ptxserve::emu
