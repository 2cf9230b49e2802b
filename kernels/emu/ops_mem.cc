// ld / st handlers and the global-memory lookup; address checks live in mem_access.h.
#include <algorithm>
#include <bit>
#include <cstring>
#include <type_traits>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "kernels/emu/mem_access.h"
#include "kernels/emu/ops.h"

namespace ptxserve::emu {

uint8_t* ExecCtx::GlobalSlow(uint64_t addr, uint64_t n, const Allocation*& cache) const {
  const Allocation* end = allocs + num_allocs;
  const Allocation* it = std::upper_bound(
      allocs, end, addr, [](uint64_t a, const Allocation& b) { return a < b.base; });
  if (it == allocs) return nullptr;
  --it;
  const uint64_t off = addr - it->base;
  if (off >= it->size || n > it->size - off) return nullptr;
  cache = it;
  return it->host + off;
}

namespace {

std::string DescribeGlobal(const ExecCtx& ctx, uint64_t addr, uint64_t n) {
  const Allocation* end = ctx.allocs + ctx.num_allocs;
  const Allocation* it = std::upper_bound(
      ctx.allocs, end, addr, [](uint64_t a, const Allocation& b) { return a < b.base; });
  std::string near;
  if (it != ctx.allocs) {
    const Allocation& p = *(it - 1);
    const uint64_t off = addr - p.base;
    if (off < p.size) {
      return absl::StrFormat("overruns the allocation at 0x%x of %u bytes by %u bytes", p.base,
                             p.size, off + n - p.size);
    }
    near = absl::StrFormat("; %u bytes past the end of the allocation at 0x%x of %u bytes",
                           off - p.size, p.base, p.size);
  }
  if (it != end) {
    near += absl::StrFormat("; %u bytes before the allocation at 0x%x", it->base - addr, it->base);
  }
  return absl::StrCat("no allocation contains it", near);
}

}  // namespace

namespace {

// "which warp W wrote at PTX line L", or "... wrote a different value to ..."
std::string WriterText(Race race, uint32_t warp, int32_t line) {
  return absl::StrFormat("which warp %u wrote%s at PTX line %d", warp,
                         race == Race::kWriteAfterWrite ? " a different value to" : "", line);
}

bool RaceFault(ExecCtx& ctx, const char* space, uint64_t addr, uint32_t lane, Race race,
               const std::string& other) {
  return ctx.FailAddr(
      static_cast<int>(lane), addr,
      absl::StrFormat("%s-memory race: warp %u %s %s address 0x%x, %s with no barrier in "
                      "between (warps of a block run concurrently on the GPU: separate the two "
                      "accesses with bar.sync)",
                      space, ctx.cur_warp, race == Race::kReadAfterWrite ? "reads" : "writes",
                      space, addr, other));
}

}  // namespace

bool GlobalRaceFault(ExecCtx& ctx, uint64_t addr, uint32_t lane, const GlobalWrites::Slot& slot,
                     Race race) {
  return RaceFault(ctx, "global", addr, lane, race,
                   WriterText(race, (slot.tag & 63) - 1, slot.line));
}

bool SharedRaceFault(ExecCtx& ctx, size_t offset, uint32_t lane, size_t word, Race race) {
  const SharedTag& t = ctx.shared_tags[word];
  const uint32_t me = ctx.cur_warp + 1;
  std::string other;
  if (race != Race::kWriteAfterRead) {
    other = WriterText(race, (t.write & 63) - 1, t.write_line);
  } else if ((t.first_read & 63) != me) {
    other = absl::StrFormat("which warp %u read at PTX line %d", (t.first_read & 63) - 1,
                            t.first_read_line);
  } else if ((t.last_read & 63) != me) {
    other = absl::StrFormat("which warp %u read at PTX line %d", (t.last_read & 63) - 1,
                            t.last_read_line);
  } else {
    other =
        absl::StrFormat("which warp %d read", std::countr_zero(t.readers & ~(1u << ctx.cur_warp)));
  }
  return RaceFault(ctx, "shared", offset, lane, race, other);
}

uint8_t* FailMisaligned(ExecCtx& ctx, uint64_t addr, uint32_t n, uint32_t align, uint32_t lane,
                        const char* what) {
  ctx.FailAddr(static_cast<int>(lane), addr,
               absl::StrFormat("misaligned %s: %u-byte access at address 0x%x is not %u-byte "
                               "aligned",
                               what, n, addr, align));
  return nullptr;
}
uint8_t* FailSpace(ExecCtx& ctx, Space sp, uint64_t addr, uint32_t n, uint32_t lane,
                   const char* what) {
  std::string msg;
  if (sp == Space::kGlobal) {
    msg = absl::StrFormat("out-of-bounds global %s of %u bytes at address 0x%x: %s", what, n, addr,
                          DescribeGlobal(ctx, addr, n));
  } else if (sp == Space::kShared) {
    msg = absl::StrFormat(
        "out-of-bounds shared %s of %u bytes at shared address 0x%x (block has "
        "%u bytes of shared memory)",
        what, n, addr, ctx.shared_size);
  } else if (sp == Space::kLocal) {
    msg = absl::StrFormat(
        "out-of-bounds local %s of %u bytes at local address 0x%x (%u bytes of local memory "
        "per thread)",
        what, n, addr, ctx.local_size);
  } else {
    msg = absl::StrFormat(
        "out-of-bounds param %s of %u bytes at offset %u (%u bytes of "
        "parameters)",
        what, n, addr, ctx.param_size);
  }
  ctx.FailAddr(static_cast<int>(lane), addr, std::move(msg));
  return nullptr;
}

namespace {

template <int kSize, bool kSigned>
inline uint64_t LoadVal(const uint8_t* p) {
  if constexpr (kSize == 1) {
    return kSigned ? Put<int8_t>(static_cast<int8_t>(*p)) : *p;
  } else if constexpr (kSize == 2) {
    uint16_t v;
    std::memcpy(&v, p, 2);
    return kSigned ? Put<int16_t>(static_cast<int16_t>(v)) : v;
  } else if constexpr (kSize == 4) {
    uint32_t v;
    std::memcpy(&v, p, 4);
    return kSigned ? Put<int32_t>(static_cast<int32_t>(v)) : v;
  } else {
    uint64_t v;
    std::memcpy(&v, p, 8);
    return v;
  }
}

template <Space SP, int kSize, bool kSigned, int kVec>
bool Load(ExecCtx& ctx, Warp& w, const Instr& in, uint32_t m) {
  if constexpr (SP == Space::kParam) {  // symbolic address: the same value for every lane
    const Allocation* none = nullptr;
    const uint8_t* p = Resolve<SP>(ctx, static_cast<uint64_t>(in.imm), kSize * kVec, kSize * kVec,
                                   none, static_cast<uint32_t>(__builtin_ctz(m)), "load");
    if (p == nullptr) return false;
    for (int e = 0; e < kVec; ++e) {
      const uint64_t v = LoadVal<kSize, kSigned>(p + e * kSize);
      uint64_t* d = w.R(in.d[e]);
      ForLanes(m, [&](uint32_t l) { d[l] = v; });
      w.init[in.d[e]] |= m;
    }
    return true;
  }
  const uint64_t* base = in.addr_is_reg ? w.R(in.addr_slot) : nullptr;
  const Allocation* cache = nullptr;
  uint64_t* d[kVec];
  for (int e = 0; e < kVec; ++e) d[e] = w.R(in.d[e]);
  bool ok = true;
  ForLanes(m, [&](uint32_t l) {
    if (!ok) return;
    const uint64_t addr = LaneAddr(in, base, l);
    const uint8_t* p = Resolve<SP>(ctx, addr, kSize * kVec, kSize * kVec, cache, l, "load");
    if (p == nullptr) {
      ok = false;
      return;
    }
    if (!TrackAccess<SP>(ctx, p, addr, kSize * kVec,
                         in.mode != 0 ? Access::kStrongRead : Access::kRead, in.line, l) ||
        !TrackDependent<SP>(ctx, w, addr, kSize * kVec, false, l)) {
      ok = false;
      return;
    }
    for (int e = 0; e < kVec; ++e) d[e][l] = LoadVal<kSize, kSigned>(p + e * kSize);
  });
  if (!ok) return false;
  for (int e = 0; e < kVec; ++e) w.init[in.d[e]] |= m;
  return true;
}

template <Space SP, int kSize, int kVec>
bool Store(ExecCtx& ctx, Warp& w, const Instr& in, uint32_t m) {
  const uint64_t* base = in.addr_is_reg ? w.R(in.addr_slot) : nullptr;
  const Allocation* cache = nullptr;
  const uint64_t* s[kVec];
  for (int e = 0; e < kVec; ++e) s[e] = w.R(in.s[e]);
  bool ok = true;
  ForLanes(m, [&](uint32_t l) {
    if (!ok) return;
    const uint64_t addr = LaneAddr(in, base, l);
    uint8_t* p = Resolve<SP>(ctx, addr, kSize * kVec, kSize * kVec, cache, l, "store");
    if (p == nullptr) {
      ok = false;
      return;
    }
    uint8_t bytes[kSize * kVec];
    for (int e = 0; e < kVec; ++e) std::memcpy(bytes + e * kSize, &s[e][l], kSize);
    if (!TrackAccess<SP>(ctx, p, addr, kSize * kVec,
                         in.mode != 0 ? Access::kStrongWrite : Access::kWrite, in.line, l, bytes) ||
        !TrackDependent<SP>(ctx, w, addr, kSize * kVec, true, l)) {
      ok = false;
      return;
    }
    std::memcpy(p, bytes, kSize * kVec);
  });
  return ok;
}

template <Space SP>
Handler LoadFor(int size, bool sgn, int vec) {
#define EMU_LD(S, SG, V) \
  if (size == S && sgn == SG && vec == V) return &Load<SP, S, SG, V>;
  EMU_LD(1, false, 1)
  EMU_LD(1, true, 1)
  EMU_LD(2, false, 1)
  EMU_LD(2, true, 1)
  EMU_LD(4, false, 1)
  EMU_LD(4, true, 1)
  EMU_LD(8, false, 1)
  EMU_LD(1, false, 2)
  EMU_LD(1, false, 4)
  EMU_LD(2, false, 2)
  EMU_LD(2, false, 4)
  EMU_LD(4, false, 2)
  EMU_LD(4, false, 4)
  EMU_LD(8, false, 2)
  EMU_LD(1, true, 2)
  EMU_LD(1, true, 4)
  EMU_LD(2, true, 2)
  EMU_LD(2, true, 4)
  EMU_LD(4, true, 2)
  EMU_LD(4, true, 4)
#undef EMU_LD
  return nullptr;
}

template <Space SP>
Handler StoreFor(int size, int vec) {
#define EMU_ST(S, V) \
  if (size == S && vec == V) return &Store<SP, S, V>;
  EMU_ST(1, 1)
  EMU_ST(2, 1)
  EMU_ST(4, 1)
  EMU_ST(8, 1)
  EMU_ST(1, 2)
  EMU_ST(2, 2)
  EMU_ST(4, 2)
  EMU_ST(8, 2)
  EMU_ST(1, 4)
  EMU_ST(2, 4)
  EMU_ST(4, 4)
#undef EMU_ST
  return nullptr;
}

}  // namespace

Handler SelectLoad(Space sp, int size, bool is_signed, int vec) {
  switch (sp) {
    case Space::kGlobal:
      return LoadFor<Space::kGlobal>(size, is_signed, vec);
    case Space::kShared:
      return LoadFor<Space::kShared>(size, is_signed, vec);
    case Space::kParam:
      return LoadFor<Space::kParam>(size, is_signed, vec);
    case Space::kLocal:
      return LoadFor<Space::kLocal>(size, is_signed, vec);
    case Space::kGeneric:
      return LoadFor<Space::kGeneric>(size, is_signed, vec);
    default:
      return nullptr;
  }
}

Handler SelectStore(Space sp, int size, int vec) {
  switch (sp) {
    case Space::kGlobal:
      return StoreFor<Space::kGlobal>(size, vec);
    case Space::kShared:
      return StoreFor<Space::kShared>(size, vec);
    case Space::kLocal:
      return StoreFor<Space::kLocal>(size, vec);
    case Space::kGeneric:
      return StoreFor<Space::kGeneric>(size, vec);
    default:
      return nullptr;
  }
}

}  // namespace ptxserve::emu
