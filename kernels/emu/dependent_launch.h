// Internal to the emulator: programmatic dependent launch (griddepcontrol, sm_90).
//
// On a GPU a kernel launched with CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION may
// start once every CTA of the previous kernel has run griddepcontrol.launch_dependents (or
// exited); its threads then run beside that kernel until they pass griddepcontrol.wait,
// which returns once the previous kernels have completed and their writes are visible. The
// emulator runs launches one after another, so the instructions change no results here;
// what it checks is the race a GPU would have: before its wait, a thread of a kernel that
// waits must not read global memory that a kernel which may still be running wrote, and
// must not write global memory at all (the previous kernel may still read or write it).
//
// Which kernels may still be running: those back to the last one that did not let its
// dependents launch early, since a kernel that waits and also triggers lets the next one
// start before its own predecessors finished. Copies and memsets order the stream fully.
// Every kernel that executes griddepcontrol.wait is checked as if launched with the
// attribute (the backend launches exactly those with it). Checked: ld/st and atomics; not
// checked: cp.async sources.
#pragma once

#include <algorithm>
#include <cstdint>
#include <utility>
#include <vector>

namespace ptxserve::emu {

struct ExecCtx;

// Global byte ranges [first, second), appended as a launch writes them.
class WriteRanges {
 public:
  void Add(uint64_t addr, uint64_t n) {
    if (!r_.empty() && addr >= r_.back().first && addr <= r_.back().second) {
      r_.back().second = std::max(r_.back().second, addr + n);
      return;
    }
    r_.emplace_back(addr, addr + n);
    if (r_.size() >= compact_at_) Compact();
  }
  // Sorts and merges the ranges (overlapping or touching become one).
  void Compact();
  // Adds another set's ranges; the result is compacted.
  void Merge(const WriteRanges& o);
  // Whether any range overlaps [addr, addr + n); requires Compact() since the last Add.
  bool Overlaps(uint64_t addr, uint64_t n) const;
  bool empty() const { return r_.empty(); }
  void clear() { r_.clear(); }

 private:
  std::vector<std::pair<uint64_t, uint64_t>> r_;
  size_t compact_at_ = 1 << 16;  // doubles when compaction leaves the set large
};

// What one host thread of a launch records for the dependent-launch check.
struct DependentLaunchLog {
  WriteRanges writes;      // logged only while ExecCtx::dependent_log points here
  bool triggered = false;  // a thread ran griddepcontrol.launch_dependents
};

// The fault of a thread that had not passed griddepcontrol.wait and read memory in
// ExecCtx::dependent_guard (`write` false) or wrote global memory (`write` true); false.
bool DependentLaunchFault(ExecCtx& ctx, uint64_t addr, uint32_t n, uint32_t lane, bool write);

}  // namespace ptxserve::emu
