// cp.async and its groups (cp.async.commit_group, wait_group N, wait_all), asynchronous as
// the ISA allows: a copy's source is read when it is issued, its destination written only
// when the issuing thread waits for the copy's group (async_copy.h). Groups are per thread:
// a commit closes the thread's copies since its previous commit into a group; wait_group N
// lands every group but the thread's N newest.
#include <cstring>

#include "absl/strings/str_format.h"
#include "kernels/emu/mem_access.h"
#include "kernels/emu/ops.h"

namespace ptxserve::emu {
namespace {

std::string ThreadName(const ExecCtx& ctx, uint32_t t) {
  const Dim3u& b = ctx.block_dim;
  return absl::StrFormat("(%u,%u,%u)", t % b.x, (t / b.x) % b.y, t / (b.x * b.y));
}

uint32_t ThreadOf(const ExecCtx& ctx, uint32_t lane) { return ctx.cur_warp * kWarpSize + lane; }

bool CpAsync(ExecCtx& ctx, Warp& w, const Instr& in, uint32_t m) {
  AsyncCopies& ac = *ctx.async;
  const uint64_t* dbase = in.addr_is_reg ? w.R(in.addr_slot) : nullptr;
  const uint64_t* sbase = w.R(in.s[0]);
  const uint64_t* src_size = in.mode == 1 ? w.R(in.s[1]) : nullptr;
  uint32_t ignore_src = 0;
  if (in.mode == 2) ignore_src = in.ps_neg[0] ? ~w.preds[in.ps[0]] : w.preds[in.ps[0]];
  const Allocation* cache = nullptr;
  const uint32_t n = in.size;
  bool ok = true;
  ForLanes(m, [&](uint32_t l) {
    if (!ok) return;
    const uint64_t daddr = LaneAddr(in, dbase, l);
    uint8_t* dst = Resolve<Space::kShared>(ctx, daddr, n, n, cache, l, "cp.async store");
    if (dst == nullptr || !CheckNotInFlight(ctx, daddr, n, l, "starts a cp.async onto")) {
      ok = false;
      return;
    }
    uint32_t src_n = src_size != nullptr ? static_cast<uint32_t>(src_size[l]) : n;
    if (src_n > n) {
      ok = ctx.Fail(static_cast<int>(l),
                    absl::StrFormat("cp.async src-size %u is larger than its cp-size %u "
                                    "(undefined in the ISA)",
                                    src_n, n));
      return;
    }
    if ((ignore_src >> l) & 1) src_n = 0;
    const uint64_t saddr = sbase[l] + static_cast<uint64_t>(in.imm2);
    if (saddr % n != 0) {
      ok = ctx.FailAddr(static_cast<int>(l), saddr,
                        absl::StrFormat("misaligned cp.async load: address 0x%x is not %u-byte "
                                        "aligned",
                                        saddr, n));
      return;
    }
    PendingCopy c;  // data beyond src_n stays zero: the zero-fill of src-size / ignore-src
    if (src_n > 0) {
      const uint8_t* src = Resolve<Space::kGlobal>(ctx, saddr, src_n, 1, cache, l, "cp.async load");
      if (src == nullptr || !TrackGlobal(ctx, src, saddr, src_n, Access::kRead, in.line, l)) {
        ok = false;
        return;
      }
      std::memcpy(c.data, src, src_n);
    }
    // The copy may land any time from now on: it is checked as a write now.
    if (!TrackShared(ctx, dst, n, Access::kWrite, in.line, l, c.data)) {
      ok = false;
      return;
    }
    const uint32_t t = ThreadOf(ctx, l);
    c.dst = static_cast<uint32_t>(daddr);
    c.size = n;
    c.group = ac.committed[t];
    c.line = in.line;
    for (size_t word = c.dst / 4; word <= (c.dst + n - 1) / 4; ++word) {
      ac.owner[word] = t + 1;
      ac.owner_line[word] = in.line;
    }
    ac.pending[t].push_back(c);
    ++ac.in_flight;
  });
  return ok;
}

// Writes thread t's copies of groups below `limit` to shared memory. For race detection
// they are writes of the thread's warp now, when the data becomes visible.
void Land(ExecCtx& ctx, uint32_t t, uint32_t limit) {
  AsyncCopies& ac = *ctx.async;
  std::vector<PendingCopy>& q = ac.pending[t];
  const uint32_t me = (ctx.epoch << 6) | (ctx.cur_warp + 1);
  size_t kept = 0;
  for (size_t i = 0; i < q.size(); ++i) {
    const PendingCopy& c = q[i];
    if (c.group >= limit) {
      q[kept++] = c;
      continue;
    }
    std::memcpy(ctx.shared + c.dst, c.data, c.size);
    for (size_t word = c.dst / 4; word <= (c.dst + c.size - 1) / 4; ++word) {
      ac.owner[word] = 0;
      if (ctx.shared_tags != nullptr) {
        ctx.shared_tags[word].write = me;
        ctx.shared_tags[word].write_line = c.line;
      }
    }
    --ac.in_flight;
  }
  q.resize(kept);
}

bool CpAsyncCommit(ExecCtx& ctx, Warp&, const Instr&, uint32_t m) {
  ForLanes(m, [&](uint32_t l) { ++ctx.async->committed[ThreadOf(ctx, l)]; });
  return true;
}

// wait_all is commit_group followed by wait_group 0.
template <bool kAll>
bool CpAsyncWait(ExecCtx& ctx, Warp&, const Instr& in, uint32_t m) {
  AsyncCopies& ac = *ctx.async;
  const uint32_t newest_pending = kAll ? 0 : static_cast<uint32_t>(in.imm);
  ForLanes(m, [&](uint32_t l) {
    const uint32_t t = ThreadOf(ctx, l);
    if (kAll) ++ac.committed[t];
    const uint32_t limit = ac.committed[t] > newest_pending ? ac.committed[t] - newest_pending : 0;
    if (!ac.pending[t].empty()) Land(ctx, t, limit);
  });
  return true;
}

}  // namespace

bool InFlightFault(ExecCtx& ctx, size_t offset, uint32_t lane, size_t word, const char* what) {
  const uint32_t owner = ctx.async->owner[word] - 1;
  return ctx.FailAddr(
      static_cast<int>(lane), offset,
      absl::StrFormat("cp.async race: this thread %s shared address 0x%x, the destination of a "
                      "cp.async by thread %s at PTX line %d that has not landed (the issuing "
                      "thread must first wait for its group with cp.async.wait_group or "
                      "cp.async.wait_all, and other threads need a barrier after that wait)",
                      what, offset, ThreadName(ctx, owner), ctx.async->owner_line[word]));
}

std::string CopiesInFlightAtExit(const ExecCtx& ctx, uint32_t lane) {
  const std::vector<PendingCopy>& q = ctx.async->pending[ThreadOf(ctx, lane)];
  if (q.empty()) return "";
  return absl::StrFormat(
      "thread exits with %u cp.async cop%s in flight (the first from PTX line %d to shared "
      "address 0x%x): it never waited for them with cp.async.wait_group or cp.async.wait_all",
      q.size(), q.size() == 1 ? "y" : "ies", q.front().line, q.front().dst);
}

Handler SelectCpAsync() { return &CpAsync; }
Handler SelectCpAsyncCommit() { return &CpAsyncCommit; }
Handler SelectCpAsyncWait(bool all) { return all ? &CpAsyncWait<true> : &CpAsyncWait<false>; }

}  // namespace ptxserve::emu
