// Internal to the emulator: address resolution shared by the memory handlers (ops_mem.cc,
// ops_atom.cc, ops_async.cc, ops_tensor.cc). Every access is checked before it happens:
// natural alignment of the whole (vector) access, then bounds against one global
// allocation, the block's shared memory, the thread's local memory or the parameter buffer.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "kernels/emu/async_copy.h"
#include "kernels/emu/ir.h"

namespace ptxserve::emu {

// Fault recorders (always return nullptr), out of line so the access fast path stays small.
uint8_t* FailMisaligned(ExecCtx& ctx, uint64_t addr, uint32_t n, uint32_t align, uint32_t lane,
                        const char* what);
uint8_t* FailSpace(ExecCtx& ctx, Space sp, uint64_t addr, uint32_t n, uint32_t lane,
                   const char* what);

enum class Access : uint8_t { kRead, kWrite, kAtomic };
enum class Race : uint8_t { kReadAfterWrite, kWriteAfterRead, kWriteAfterWrite };

// Records a race found by TrackShared (always returns false).
bool SharedRaceFault(ExecCtx& ctx, size_t offset, uint32_t lane, size_t word, Race race);
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

// Whether writing `value` (the bytes of [off, off + n)) changes shared word `w`.
inline bool ChangesWord(const ExecCtx& ctx, size_t off, uint32_t n, const uint8_t* value,
                        size_t w) {
  const size_t lo = std::max(off, 4 * w), hi = std::min(off + n, 4 * w + 4);
  return std::memcmp(ctx.shared + lo, value + (lo - off), hi - lo) != 0;
}

// Before a shared-memory access of `n` bytes at `p` by the current warp, in the order
// the GPU does not guarantee between warps without a barrier: touching a cp.async
// destination that has not landed is a fault, and so, since the last barrier, are a read
// of a word another warp wrote, a write of a word another warp read, and a write of a
// different `value` than another warp wrote (writes of the same value are benign).
// Otherwise the words are tagged with this access. Pointers outside shared memory (generic
// accesses to global/local) are ignored. Atomics race with each other by design: they are
// tagged as writes without checks.
inline bool TrackShared(ExecCtx& ctx, const uint8_t* p, uint32_t n, Access access, int32_t line,
                        uint32_t lane, const uint8_t* value = nullptr) {
  const uintptr_t off = reinterpret_cast<uintptr_t>(p) - reinterpret_cast<uintptr_t>(ctx.shared);
  if (off >= ctx.shared_size) return true;
  if (!CheckNotInFlight(ctx, off, n, lane, access == Access::kRead ? "reads" : "writes")) {
    return false;
  }
  if (ctx.shared_tags == nullptr) return true;
  const uint32_t me = (ctx.epoch << 6) | (ctx.cur_warp + 1);
  const uint32_t bit = 1u << ctx.cur_warp;
  for (size_t w = off / 4; w <= (off + n - 1) / 4; ++w) {
    SharedTag& t = ctx.shared_tags[w];
    const bool written_now = (t.write >> 6) == ctx.epoch && t.write != me;
    if (access == Access::kRead) {
      if (written_now) return SharedRaceFault(ctx, off, lane, w, Race::kReadAfterWrite);
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
      if (written_now && value != nullptr && ChangesWord(ctx, off, n, value, w)) {
        return SharedRaceFault(ctx, off, lane, w, Race::kWriteAfterWrite);
      }
    }
    t.write = me;
    t.write_line = line;
  }
  return true;
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
