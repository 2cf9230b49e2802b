// Warp-collective instructions (shfl.sync, vote.sync, redux.sync, activemask,
// bar.warp.sync), %clock reads and no-ops. A collective sees every lane of the group the
// scheduler is executing; a membermask naming a lane outside that group is an error, and a
// shuffle reading a lane that does not take part yields an uninitialised destination.
#include <atomic>
#include <bit>

#include "absl/strings/str_format.h"
#include "kernels/emu/dependent_launch.h"
#include "kernels/emu/ops.h"

namespace ptxserve::emu {
namespace {

// The detailed membermask check, naming the offending lanes.
bool CheckMembersSlow(ExecCtx& ctx, const uint64_t* mask, uint32_t m, const char* what,
                      uint32_t* members) {
  const uint32_t first = static_cast<uint32_t>(__builtin_ctz(m));
  const uint32_t mm = static_cast<uint32_t>(mask[first]);
  bool ok = true;
  ForLanes(m, [&](uint32_t l) {
    if (ok && static_cast<uint32_t>(mask[l]) != mm) {
      ok = ctx.Fail(static_cast<int>(l),
                    absl::StrFormat("%s: lanes pass different membermasks (0x%08x in lane %u, "
                                    "0x%08x in lane %u)",
                                    what, mm, first, static_cast<uint32_t>(mask[l]), l));
    }
  });
  if (!ok) return false;
  if ((mm & m) != m) {
    const uint32_t l = static_cast<uint32_t>(__builtin_ctz(m & ~mm));
    return ctx.Fail(
        static_cast<int>(l),
        absl::StrFormat("%s: executing lane %u is not in membermask 0x%08x", what, l, mm));
  }
  if ((mm & ~m) != 0) {
    return ctx.Fail(static_cast<int>(first),
                    absl::StrFormat("%s: membermask 0x%08x names lanes that do not execute this "
                                    "instruction (executing lanes 0x%08x, missing 0x%08x: "
                                    "diverged, exited, predicated off or not in the block)",
                                    what, mm, m, mm & ~m));
  }
  *members = mm;
  return true;
}

// Checks that every executing lane passes the same membermask naming exactly the lanes
// that execute the instruction. `uniform`: the mask is an immediate (decode flag), so one
// lane's copy suffices.
bool CheckMembers(ExecCtx& ctx, const uint64_t* mask, uint32_t m, bool uniform, const char* what,
                  uint32_t* members) {
  const uint32_t first = static_cast<uint32_t>(__builtin_ctz(m));
  const uint32_t mm = static_cast<uint32_t>(mask[first]);
  if (mm == m) {
    if (!uniform) {
      bool ok = true;
      ForLanes(m, [&](uint32_t l) { ok &= static_cast<uint32_t>(mask[l]) == mm; });
      if (!ok) return CheckMembersSlow(ctx, mask, m, what, members);
    }
    *members = mm;
    return true;
  }
  return CheckMembersSlow(ctx, mask, m, what, members);
}

template <ShflMode kMode>
bool Shfl(ExecCtx& ctx, Warp& w, const Instr& in, uint32_t m) {
  uint32_t members;
  if (!CheckMembers(ctx, w.R(in.s[3]), m, (in.mode2 & 1) != 0, "shfl.sync", &members)) {
    return false;
  }
  const uint64_t *a = w.R(in.s[0]), *b = w.R(in.s[1]), *c = w.R(in.s[2]);
  const uint32_t src_ok = m & w.init[in.s[0]];
  uint32_t vals[kWarpSize];
  uint32_t pvals = 0, valid = 0;
  ForLanes(m, [&](uint32_t lane) {
    const uint32_t bval = static_cast<uint32_t>(b[lane]) & 31;
    const uint32_t cw = static_cast<uint32_t>(c[lane]);
    const uint32_t cval = cw & 31, segmask = (cw >> 8) & 31;
    const int32_t max_lane = static_cast<int32_t>((lane & segmask) | (cval & ~segmask));
    int32_t j;
    bool pval;
    if constexpr (kMode == ShflMode::kUp) {
      j = static_cast<int32_t>(lane) - static_cast<int32_t>(bval);
      pval = j >= max_lane;
    } else if constexpr (kMode == ShflMode::kDown) {
      j = static_cast<int32_t>(lane + bval);
      pval = j <= max_lane;
    } else if constexpr (kMode == ShflMode::kBfly) {
      j = static_cast<int32_t>(lane ^ bval);
      pval = j <= max_lane;
    } else {
      j = static_cast<int32_t>((lane & segmask) | (bval & ~segmask));
      pval = j <= max_lane;
    }
    if (!pval) j = static_cast<int32_t>(lane);
    vals[lane] = static_cast<uint32_t>(a[j]);
    // A source lane outside the group (or never written) gives an unpredictable value.
    valid |= ((src_ok >> j) & 1u) << lane;
    pvals |= static_cast<uint32_t>(pval) << lane;
  });
  uint64_t* d = w.R(in.d[0]);
  ForLanes(m, [&](uint32_t l) { d[l] = vals[l]; });
  w.init[in.d[0]] = (w.init[in.d[0]] & ~m) | (valid & m);
  if (in.has_pd2) {
    uint32_t& p = w.preds[in.pd[0]];
    p = (p & ~m) | (pvals & m);
    w.pinit[in.pd[0]] |= m;
  }
  return true;
}

template <VoteMode kMode>
bool Vote(ExecCtx& ctx, Warp& w, const Instr& in, uint32_t m) {
  uint32_t members;
  if (!CheckMembers(ctx, w.R(in.s[0]), m, (in.mode2 & 1) != 0, "vote.sync", &members)) {
    return false;
  }
  const uint32_t p = (in.ps_neg[0] ? ~w.preds[in.ps[0]] : w.preds[in.ps[0]]) & m;
  if constexpr (kMode == VoteMode::kBallot) {
    uint64_t* d = w.R(in.d[0]);
    ForLanes(m, [&](uint32_t l) { d[l] = p; });
    w.init[in.d[0]] |= m;
  } else {
    bool r = false;
    if (kMode == VoteMode::kAll) r = p == m;
    if (kMode == VoteMode::kAny) r = p != 0;
    if (kMode == VoteMode::kUni) r = p == m || p == 0;
    uint32_t& q = w.preds[in.pd[0]];
    q = (q & ~m) | (r ? m : 0);
    w.pinit[in.pd[0]] |= m;
  }
  return true;
}

bool ActiveMask(ExecCtx&, Warp& w, const Instr& in, uint32_t m) {
  uint64_t* d = w.R(in.d[0]);
  ForLanes(m, [&](uint32_t l) { d[l] = m; });
  w.init[in.d[0]] |= m;
  return true;
}

template <AtomOp kOp, class T>
bool Redux(ExecCtx& ctx, Warp& w, const Instr& in, uint32_t m) {
  uint32_t members;
  if (!CheckMembers(ctx, w.R(in.s[1]), m, (in.mode2 & 1) != 0, "redux.sync", &members)) {
    return false;
  }
  const uint64_t* a = w.R(in.s[0]);
  const uint32_t first = static_cast<uint32_t>(__builtin_ctz(m));
  T r = Get<T>(a[first]);
  ForLanes(m & (m - 1), [&](uint32_t l) {
    const T x = Get<T>(a[l]);
    if constexpr (kOp == AtomOp::kAdd) r = static_cast<T>(static_cast<uint32_t>(r) + x);
    if constexpr (kOp == AtomOp::kMin) r = x < r ? x : r;
    if constexpr (kOp == AtomOp::kMax) r = x > r ? x : r;
    if constexpr (kOp == AtomOp::kAnd) r &= x;
    if constexpr (kOp == AtomOp::kOr) r |= x;
    if constexpr (kOp == AtomOp::kXor) r ^= x;
  });
  uint64_t* d = w.R(in.d[0]);
  ForLanes(m, [&](uint32_t l) { d[l] = Put<T>(r); });
  w.init[in.d[0]] |= m;
  return true;
}

bool WarpSync(ExecCtx& ctx, Warp& w, const Instr& in, uint32_t m) {
  uint32_t members;
  return CheckMembers(ctx, w.R(in.s[0]), m, (in.mode2 & 1) != 0, "bar.warp.sync", &members);
}

template <bool k64>
bool Clock(ExecCtx& ctx, Warp& w, const Instr& in, uint32_t m) {
  uint64_t* d = w.R(in.d[0]);
  const uint64_t v = k64 ? ctx.clock : (ctx.clock & 0xffffffffu);
  ForLanes(m, [&](uint32_t l) { d[l] = v; });
  w.init[in.d[0]] |= m;
  return true;
}

bool Nop(ExecCtx&, Warp&, const Instr&, uint32_t) { return true; }

// The previous kernels have completed when the emulator runs this one: the wait only marks
// the lanes whose later accesses need no dependent-launch check.
bool GridWait(ExecCtx&, Warp& w, const Instr&, uint32_t m) {
  w.grid_waited |= m;
  return true;
}

bool LaunchDependents(ExecCtx& ctx, Warp&, const Instr&, uint32_t) {
  if (ctx.dependent_log != nullptr) ctx.dependent_log->triggered = true;
  return true;
}

// Blocks of a launch run on several host threads whose atomics are relaxed: a host fence
// gives membar/fence its device-wide order (a CTA's partial results seen by the CTA whose
// atomic finds it last, say) on any host memory model.
bool Fence(ExecCtx&, Warp&, const Instr&, uint32_t) {
  std::atomic_thread_fence(std::memory_order_seq_cst);
  return true;
}

}  // namespace

Handler SelectShfl(ShflMode m) {
  switch (m) {
    case ShflMode::kUp:
      return &Shfl<ShflMode::kUp>;
    case ShflMode::kDown:
      return &Shfl<ShflMode::kDown>;
    case ShflMode::kBfly:
      return &Shfl<ShflMode::kBfly>;
    case ShflMode::kIdx:
      return &Shfl<ShflMode::kIdx>;
  }
  return nullptr;
}

Handler SelectVote(VoteMode m) {
  switch (m) {
    case VoteMode::kAll:
      return &Vote<VoteMode::kAll>;
    case VoteMode::kAny:
      return &Vote<VoteMode::kAny>;
    case VoteMode::kUni:
      return &Vote<VoteMode::kUni>;
    case VoteMode::kBallot:
      return &Vote<VoteMode::kBallot>;
  }
  return nullptr;
}

Handler SelectActiveMask() { return &ActiveMask; }

Handler SelectRedux(AtomOp op, Ty t) {
  const bool u = t == Ty::kU32, s = t == Ty::kS32, b = t == Ty::kB32;
  switch (op) {
    case AtomOp::kAdd:
      return u || s ? &Redux<AtomOp::kAdd, uint32_t> : nullptr;
    case AtomOp::kMin:
      return u ? &Redux<AtomOp::kMin, uint32_t> : s ? &Redux<AtomOp::kMin, int32_t> : nullptr;
    case AtomOp::kMax:
      return u ? &Redux<AtomOp::kMax, uint32_t> : s ? &Redux<AtomOp::kMax, int32_t> : nullptr;
    case AtomOp::kAnd:
      return b ? &Redux<AtomOp::kAnd, uint32_t> : nullptr;
    case AtomOp::kOr:
      return b ? &Redux<AtomOp::kOr, uint32_t> : nullptr;
    case AtomOp::kXor:
      return b ? &Redux<AtomOp::kXor, uint32_t> : nullptr;
    default:
      return nullptr;
  }
}

Handler SelectClock(bool is64) { return is64 ? &Clock<true> : &Clock<false>; }
Handler SelectWarpSync() { return &WarpSync; }
Handler SelectNop() { return &Nop; }
Handler SelectGridWait() { return &GridWait; }
Handler SelectLaunchDependents() { return &LaunchDependents; }
Handler SelectFence() { return &Fence; }

}  // namespace ptxserve::emu
