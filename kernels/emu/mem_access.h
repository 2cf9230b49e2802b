// Internal to the emulator: address resolution shared by the memory handlers (ops_mem.cc,
// ops_atom.cc, ops_async.cc, ops_tensor.cc). Every access is checked before it happens:
// natural alignment of the whole (vector) access, then bounds against one global
// allocation, the block's shared memory, the thread's local memory or the parameter buffer.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include "kernels/emu/async_copy.h"
#include "kernels/emu/dependent_launch.h"
#include "kernels/emu/ir.h"

namespace ptxserve::emu {

// Fault recorders (always return nullptr), out of line so the access fast path stays small.
uint8_t* FailMisaligned(ExecCtx& ctx, uint64_t addr, uint32_t n, uint32_t align, uint32_t lane,
                        const char* what);
uint8_t* FailSpace(ExecCtx& ctx, Space sp, uint64_t addr, uint32_t n, uint32_t lane,
                   const char* what);

// Strong accesses (atomics, ld/st .volatile/.relaxed/.acquire/.release) do not race with
// each other: the memory model calls a pair of them morally strong.
enum class Access : uint8_t { kRead, kWrite, kStrongRead, kStrongWrite };
inline bool IsRead(Access a) { return a == Access::kRead || a == Access::kStrongRead; }
enum class Race : uint8_t { kReadAfterWrite, kWriteAfterRead, kWriteAfterWrite };

// The global words the block's warps wrote in the current epoch, in a direct-mapped table
// by address: a slot keeps the last word that mapped to it, so a block that writes more
// words than it has slots between two barriers may forget older writes (missing a race,
// never inventing one). Reads are not recorded (every weight byte would be), so a global
// read that another warp later overwrites goes unseen here; the executor runs the warps of
// odd blocks in reverse order, where the same pair shows as a read of that warp's write.
//
// The emulator keeps one table per host thread across launches (allocating it per launch
// would cost more than short kernels take), so epochs keep counting across launches: a
// slot of an older launch never matches.
struct GlobalWrites {
  struct Slot {
    uint64_t word = ~uint64_t{0};  // address / 4
    uint32_t tag = 0;              // epoch << 7 | strong << 6 | (warp + 1)
    int32_t line = 0;
  };
  static constexpr uint32_t kSlots = 1u << 16;
  // Epochs must fit the tags here and in SharedTag; past this the table starts afresh.
  static constexpr uint32_t kMaxEpoch = 1u << 24;
  std::vector<Slot> slots;  // kSlots once a block writes global memory
  uint32_t epoch = 0;       // of the writes counted in `writes`
  uint32_t writes = 0;      // reads skip the lookup while there are none
  uint32_t last_epoch = 0;  // the newest epoch of the launches so far

  Slot& At(uint64_t word) { return slots[(word ^ (word >> 16)) & (kSlots - 1)]; }
  void Reset() {
    std::fill(slots.begin(), slots.end(), Slot{});
    epoch = writes = last_epoch = 0;
  }
};

// Records a race found by TrackShared / TrackGlobal (always returns false).
bool SharedRaceFault(ExecCtx& ctx, size_t offset, uint32_t lane, size_t word, Race race);
bool GlobalRaceFault(ExecCtx& ctx, uint64_t addr, uint32_t lane, const GlobalWrites::Slot& slot,
                     Race race);
// Records an access (`what`: "reads", ...) to a word whose cp.async has not landed (false).
bool InFlightFault(ExecCtx& ctx, size_t offset, uint32_t lane, size_t word, const char* what);

// False, after recording the fault, when shared bytes [off, off + n) overlap the
// destination of a cp.async that has not landed (async_copy.h).
inline bool CheckNotInFlight(ExecCtx& ctx, size_t off, uint32_t n, uint32_t lane,
                             const char* what) {
  if (ctx.async == nullptr || ctx.async->in_flight == 0) return true;
  for (size_t w = off / 4; w <= (off + n - 1) / 4; ++w) {
    if (ctx.async->owner[w] != 0) return InFlightFault(ctx, off, lane, w, what);
  }
  return true;
}

// Whether writing `value` over the `n` bytes at `mem` (address `addr`) changes word `w`.
inline bool ChangesWord(const uint8_t* mem, uint64_t addr, uint32_t n, const uint8_t* value,
                        uint64_t w) {
  const uint64_t lo = std::max(addr, 4 * w), hi = std::min(addr + n, 4 * w + 4);
  return std::memcmp(mem + (lo - addr), value + (lo - addr), hi - lo) != 0;
}

// Before a shared-memory access of `n` bytes at `p` by the current warp, in the order
// the GPU does not guarantee between warps without a barrier: touching a cp.async
// destination that has not landed is a fault, and so, since the last barrier, are a read
// of a word another warp wrote (unless both are strong), a write of a word another warp
// read, and a write of a different `value` than another warp wrote (writes of the same
// value are benign). Otherwise the words are tagged with this access. Pointers outside
// shared memory (generic accesses to global/local) are ignored. Strong writes are tagged
// without checks: atomics race with each other by design.
inline bool TrackShared(ExecCtx& ctx, const uint8_t* p, uint32_t n, Access access, int32_t line,
                        uint32_t lane, const uint8_t* value = nullptr) {
  const uintptr_t off = reinterpret_cast<uintptr_t>(p) - reinterpret_cast<uintptr_t>(ctx.shared);
  if (off >= ctx.shared_size) return true;
  if (!CheckNotInFlight(ctx, off, n, lane, IsRead(access) ? "reads" : "writes")) {
    return false;
  }
  if (ctx.shared_tags == nullptr) return true;
  const uint32_t me = (ctx.epoch << 6) | (ctx.cur_warp + 1);
  const uint32_t bit = 1u << ctx.cur_warp;
  for (size_t w = off / 4; w <= (off + n - 1) / 4; ++w) {
    SharedTag& t = ctx.shared_tags[w];
    const bool written_now = (t.write >> 6) == ctx.epoch && t.write != me;
    if (IsRead(access)) {
      if (written_now && !(access == Access::kStrongRead && t.write_strong)) {
        return SharedRaceFault(ctx, off, lane, w, Race::kReadAfterWrite);
      }
      if ((t.last_read >> 6) != ctx.epoch) {
        t.readers = 0;
        t.first_read = me;
        t.first_read_line = line;
      }
      t.readers |= bit;
      t.last_read = me;
      t.last_read_line = line;
      continue;
    }
    if (access == Access::kWrite) {
      if ((t.last_read >> 6) == ctx.epoch && (t.readers & ~bit) != 0) {
        return SharedRaceFault(ctx, off, lane, w, Race::kWriteAfterRead);
      }
      if (written_now && value != nullptr && ChangesWord(p, off, n, value, w)) {
        return SharedRaceFault(ctx, off, lane, w, Race::kWriteAfterWrite);
      }
    }
    t.write = me;
    t.write_line = line;
    t.write_strong = access == Access::kStrongWrite;
  }
  return true;
}

// TrackShared's rules for global memory, between the warps of one block: a read of a word
// another warp wrote (unless both are strong), or a write of a different value over it,
// since the last barrier.
inline bool TrackGlobal(ExecCtx& ctx, const uint8_t* p, uint64_t addr, uint32_t n, Access access,
                        int32_t line, uint32_t lane, const uint8_t* value = nullptr) {
  GlobalWrites* g = ctx.global_writes;
  if (g == nullptr) return true;
  if (g->epoch != ctx.epoch) {
    g->epoch = ctx.epoch;
    g->writes = 0;
  }
  const uint32_t me = ctx.cur_warp + 1;
  if (IsRead(access)) {
    if (g->writes == 0) return true;
    for (uint64_t w = addr / 4; w <= (addr + n - 1) / 4; ++w) {
      const GlobalWrites::Slot& s = g->At(w);
      if (s.word == w && (s.tag >> 7) == ctx.epoch && (s.tag & 63) != me &&
          !(access == Access::kStrongRead && (s.tag & 64) != 0)) {
        return GlobalRaceFault(ctx, addr, lane, s, Race::kReadAfterWrite);
      }
    }
    return true;
  }
  if (g->slots.empty()) g->slots.resize(GlobalWrites::kSlots);
  const uint32_t tag = (ctx.epoch << 7) | (access == Access::kStrongWrite ? 64 : 0) | me;
  for (uint64_t w = addr / 4; w <= (addr + n - 1) / 4; ++w) {
    GlobalWrites::Slot& s = g->At(w);
    if (access == Access::kWrite && s.word == w && (s.tag >> 7) == ctx.epoch &&
        (s.tag & 63) != me && value != nullptr && ChangesWord(p, addr, n, value, w)) {
      return GlobalRaceFault(ctx, addr, lane, s, Race::kWriteAfterWrite);
    }
    s = GlobalWrites::Slot{w, tag, line};
  }
  ++g->writes;
  return true;
}

inline bool IsGenericGlobal(uint64_t addr) {
  return !(addr >= kSharedWindow && addr - kSharedWindow < kSharedWindowSize) &&
         !(addr >= kLocalWindow && addr - kLocalWindow < kLocalWindowSize);
}

// The race checks of an access in space SP at `addr`, resolved to `p`.
template <Space SP>
inline bool TrackAccess(ExecCtx& ctx, const uint8_t* p, uint64_t addr, uint32_t n, Access access,
                        int32_t line, uint32_t lane, const uint8_t* value = nullptr) {
  if constexpr (SP == Space::kShared) {
    return TrackShared(ctx, p, n, access, line, lane, value);
  } else if constexpr (SP == Space::kGlobal) {
    return TrackGlobal(ctx, p, addr, n, access, line, lane, value);
  } else if constexpr (SP == Space::kGeneric) {
    if (IsGenericGlobal(addr)) return TrackGlobal(ctx, p, addr, n, access, line, lane, value);
    return TrackShared(ctx, p, n, access, line, lane, value);  // ignores local memory
  } else {
    return true;
  }
}

// The dependent-launch check (dependent_launch.h) of an access of `n` bytes at `addr` in
// space SP by `lane` of `w`: logs global writes, and faults on a read of a guarded range or
// any global write before the lane passed griddepcontrol.wait.
template <Space SP>
inline bool TrackDependent(ExecCtx& ctx, const Warp& w, uint64_t addr, uint32_t n, bool write,
                           uint32_t lane) {
  if constexpr (SP != Space::kGlobal && SP != Space::kGeneric) {
    return true;
  } else {
    if (ctx.dependent_log == nullptr && ctx.dependent_guard == nullptr) return true;
    if (SP == Space::kGeneric && !IsGenericGlobal(addr)) return true;
    if (write && ctx.dependent_log != nullptr) ctx.dependent_log->writes.Add(addr, n);
    if (ctx.dependent_guard == nullptr || ((w.grid_waited >> lane) & 1) != 0) return true;
    return DependentLaunchFault(ctx, addr, n, lane, write);
  }
}

inline uint64_t LaneAddr(const Instr& in, const uint64_t* base, uint32_t l) {
  uint64_t a = 0;
  if (base != nullptr) a = in.addr32 ? (base[l] & 0xffffffffu) : base[l];
  return a + static_cast<uint64_t>(in.imm);
}

// Host pointer for an access of `n` bytes aligned to `align` (a power of two) in space SP,
// or nullptr after recording the fault.
template <Space SP>
[[gnu::always_inline]] inline uint8_t* Resolve(ExecCtx& ctx, uint64_t addr, uint32_t n,
                                               uint32_t align, const Allocation*& cache,
                                               uint32_t lane, const char* what) {
  if ((addr & (align - 1)) != 0) return FailMisaligned(ctx, addr, n, align, lane, what);
  if constexpr (SP == Space::kGeneric) {
    if (addr >= kSharedWindow && addr - kSharedWindow < kSharedWindowSize) {
      return Resolve<Space::kShared>(ctx, addr - kSharedWindow, n, 1, cache, lane, what);
    }
    if (addr >= kLocalWindow && addr - kLocalWindow < kLocalWindowSize) {
      return Resolve<Space::kLocal>(ctx, addr - kLocalWindow, n, 1, cache, lane, what);
    }
    return Resolve<Space::kGlobal>(ctx, addr, n, 1, cache, lane, what);
  } else if constexpr (SP == Space::kGlobal) {
    uint8_t* p = ctx.Global(addr, n, cache);
    return p != nullptr ? p : FailSpace(ctx, SP, addr, n, lane, what);
  } else if constexpr (SP == Space::kShared) {
    if (addr > ctx.shared_size || n > ctx.shared_size - addr) {
      return FailSpace(ctx, SP, addr, n, lane, what);
    }
    return ctx.shared + addr;
  } else if constexpr (SP == Space::kLocal) {
    if (addr > ctx.local_size || n > ctx.local_size - addr) {
      return FailSpace(ctx, SP, addr, n, lane, what);
    }
    const size_t thread = size_t{ctx.cur_warp} * kWarpSize + lane;
    return ctx.local + thread * ctx.local_size + addr;
  } else {
    static_assert(SP == Space::kParam);
    if (addr > ctx.param_size || n > ctx.param_size - addr) {
      return FailSpace(ctx, SP, addr, n, lane, what);
    }
    return const_cast<uint8_t*>(ctx.params) + addr;
  }
}

}  // namespace ptxserve::emu
