#include "kernels/emu/dependent_launch.h"

#include <algorithm>

#include "absl/strings/str_format.h"
#include "kernels/emu/ir.h"

namespace ptxserve::emu {

void WriteRanges::Compact() {
  std::sort(r_.begin(), r_.end());
  size_t out = 0;
  for (size_t i = 0; i < r_.size(); ++i) {
    if (out > 0 && r_[i].first <= r_[out - 1].second) {
      r_[out - 1].second = std::max(r_[out - 1].second, r_[i].second);
    } else {
      r_[out++] = r_[i];
    }
  }
  r_.resize(out);
  // Scattered writes that do not merge: compact again only after as many more.
  compact_at_ = std::max<size_t>(compact_at_, 2 * out);
}

void WriteRanges::Merge(const WriteRanges& o) {
  r_.insert(r_.end(), o.r_.begin(), o.r_.end());
  Compact();
}

bool WriteRanges::Overlaps(uint64_t addr, uint64_t n) const {
  // The first range that ends past addr; it overlaps when it starts before addr + n.
  auto it = std::upper_bound(
      r_.begin(), r_.end(), addr,
      [](uint64_t a, const std::pair<uint64_t, uint64_t>& r) { return a < r.second; });
  return it != r_.end() && it->first < addr + n;
}

bool DependentLaunchFault(ExecCtx& ctx, uint64_t addr, uint32_t n, uint32_t lane, bool write) {
  if (!write && !ctx.dependent_guard->Overlaps(addr, n)) return true;
  return ctx.FailAddr(
      static_cast<int>(lane), addr,
      absl::StrFormat(
          write ? "dependent-launch race: a %u-byte global write at address 0x%x before "
                  "griddepcontrol.wait (the previous kernel may still read or write global "
                  "memory: write only after the wait)"
                : "dependent-launch race: a %u-byte global read at address 0x%x, which a "
                  "kernel that may still be running wrote, before griddepcontrol.wait (read "
                  "the previous kernel's outputs only after the wait)",
          n, addr));
}

}  // namespace ptxserve::emu
