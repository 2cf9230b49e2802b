// Gathering KernelCounters: the executor hands every issued warp instruction to the host
// thread's CounterSink before running it. Addresses are recomputed here from the same
// registers the handler will read, so the handlers stay free of counting code; an access
// the handler then rejects fails the launch, and a failed launch's counters are dropped.
#include "kernels/emu/counting.h"

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>

#include "kernels/emu/mem_access.h"
#include "kernels/emu/ops.h"

namespace ptxserve::emu {
namespace {

constexpr int kSectorShift = 5;  // 32-byte sectors
constexpr int kBanks = 32;       // of 4 bytes

InstrClass ArithClass(Ty t) {
  if (t == Ty::kF32) return InstrClass::kFp32;
  if (TyIsFloat(t)) return InstrClass::kFpOther;
  return InstrClass::kInt;
}

InstrClass ClassOf(const Instr& in) {
  switch (static_cast<Op>(in.op)) {
    case Op::kMma:
    case Op::kLdmatrix:
      return InstrClass::kTensor;
    case Op::kLd:
    case Op::kLdu:
      if (in.space == Space::kShared) return InstrClass::kLoadShared;
      if (in.space == Space::kLocal) return InstrClass::kLocal;
      if (in.space == Space::kParam) return InstrClass::kParam;
      return InstrClass::kLoadGlobal;
    case Op::kSt:
      if (in.space == Space::kShared) return InstrClass::kStoreShared;
      if (in.space == Space::kLocal) return InstrClass::kLocal;
      return InstrClass::kStoreGlobal;
    case Op::kAtom:
    case Op::kRed:
      return in.space == Space::kShared ? InstrClass::kAtomShared : InstrClass::kAtomGlobal;
    case Op::kCp:
      return InstrClass::kAsyncCopy;
    case Op::kShfl:
    case Op::kVote:
    case Op::kRedux:
    case Op::kActivemask:
      return InstrClass::kWarp;
    case Op::kBar:
    case Op::kBarrier:
    case Op::kMembar:
    case Op::kFence:
      return InstrClass::kBarrier;
    case Op::kBra:
    case Op::kRet:
    case Op::kExit:
      return InstrClass::kControl;
    case Op::kPrefetch:
    case Op::kPrefetchu:
    case Op::kNanosleep:
    case Op::kGriddepcontrol:
    case Op::kTestp:
      return InstrClass::kOther;
    case Op::kEx2:
    case Op::kLg2:
    case Op::kRsqrt:
    case Op::kSin:
    case Op::kCos:
    case Op::kTanh:
      return InstrClass::kSfu;
    case Op::kRcp:
    case Op::kSqrt:
      return in.approx ? InstrClass::kSfu : ArithClass(in.type);
    case Op::kMov:
    case Op::kCvt:
    case Op::kCvta:
    case Op::kSelp:
      return InstrClass::kInt;
    default:
      return ArithClass(in.type);
  }
}

const uint64_t* Slot(const Warp& w, uint16_t slot) {
  return w.regs + static_cast<size_t>(slot) * kWarpSize;
}

bool InWindow(uint64_t a, uint64_t base, uint64_t size) { return a >= base && a - base < size; }

// Sorts and deduplicates v[0, n) in place; returns the distinct count. Coalesced accesses
// come sorted already, which skips the sort.
template <class T>
int Distinct(T* v, int n) {
  if (!std::is_sorted(v, v + n)) std::sort(v, v + n);
  return static_cast<int>(std::unique(v, v + n) - v);
}

// Wavefronts of one shared-memory phase addressing `words` (4-byte word indices; sorted and
// deduplicated in place): the most distinct words any bank holds.
uint32_t Wavefronts(uint32_t* words, int n, uint32_t* distinct) {
  n = Distinct(words, n);
  uint32_t per_bank[kBanks] = {};
  uint32_t most = 0;
  for (int i = 0; i < n; ++i) most = std::max(most, ++per_bank[words[i] % kBanks]);
  *distinct = static_cast<uint32_t>(n);
  return most;
}

}  // namespace

std::vector<InstrClass> ClassifyCode(const Function& fn) {
  std::vector<InstrClass> out;
  out.reserve(fn.code.size());
  for (const Instr& in : fn.code) out.push_back(ClassOf(in));
  return out;
}

CounterSink::CounterSink(const std::vector<InstrClass>& classes, const Allocation* allocs,
                         size_t num_allocs)
    : classes_(classes),
      allocs_(allocs),
      num_allocs_(num_allocs),
      read_runs_(num_allocs),
      write_runs_(num_allocs),
      per_alloc_(num_allocs) {}

size_t CounterSink::AllocIndex(uint64_t addr) {
  if (last_alloc_ < num_allocs_ &&
      InWindow(addr, allocs_[last_alloc_].base, allocs_[last_alloc_].size)) {
    return last_alloc_;
  }
  const Allocation* end = allocs_ + num_allocs_;
  const Allocation* it = std::upper_bound(
      allocs_, end, addr, [](uint64_t x, const Allocation& b) { return x < b.base; });
  if (it == allocs_ || !InWindow(addr, (it - 1)->base, (it - 1)->size)) return num_allocs_;
  last_alloc_ = static_cast<size_t>(it - 1 - allocs_);
  return last_alloc_;
}

void CounterSink::MarkSector(uint64_t sector, bool read, bool write) {
  const uint64_t addr = sector << kSectorShift;
  const size_t a = AllocIndex(addr);
  // Outside every allocation: the handler faults and the launch's counters are dropped.
  if (a == num_allocs_) return;
  // Allocations are 256-byte aligned, so sector boundaries are the allocation's too.
  const uint64_t index = (addr - allocs_[a].base) >> kSectorShift;
  const size_t sectors = static_cast<size_t>((allocs_[a].size + 31) >> kSectorShift);
  for (auto* runs : {read ? &read_runs_[a] : nullptr, write ? &write_runs_[a] : nullptr}) {
    if (runs == nullptr) continue;
    if (runs->empty()) runs->resize(sectors);
    (*runs)[index] |= cta_runs_;
  }
}

void CounterSink::Global(const uint64_t* addr, const uint32_t* bytes, int n, GlobalTraffic* t,
                         bool read, bool write) {
  if (n == 0) return;
  // A naturally aligned access of at most 16 bytes lies in one sector (misaligned ones
  // fault in the handler).
  uint64_t sectors[kWarpSize];
  uint64_t total = 0;
  for (int i = 0; i < n; ++i) {
    sectors[i] = addr[i] >> kSectorShift;
    total += bytes[i];
  }
  const int distinct = Distinct(sectors, n);
  const uint64_t ideal = (total + 31) >> kSectorShift;
  ++t->requests;
  t->sectors += static_cast<uint64_t>(distinct);
  t->ideal_sectors += ideal;
  if (const size_t a = AllocIndex(addr[0]); a != num_allocs_) {
    ++per_alloc_[a].requests;
    per_alloc_[a].sectors += static_cast<uint64_t>(distinct);
    per_alloc_[a].ideal_sectors += ideal;
  }
  for (int i = 0; i < distinct; ++i) MarkSector(sectors[i], read, write);
}

void CounterSink::Shared(const uint64_t* addr, const uint32_t* bytes, int n, SharedTraffic* t) {
  if (n == 0) return;
  // An aligned access of at most 16 bytes covers at most 4 words; a misaligned one (which
  // the handler rejects) is cut to 4 so it cannot overrun the array.
  uint32_t words[kWarpSize * 4];
  int k = 0;
  for (int i = 0; i < n; ++i) {
    const uint64_t last = std::min(addr[i] / 4 + 3, (addr[i] + bytes[i] - 1) / 4);
    for (uint64_t wd = addr[i] / 4; wd <= last; ++wd) words[k++] = static_cast<uint32_t>(wd);
  }
  uint32_t distinct = 0;
  ++t->requests;
  t->wavefronts += Wavefronts(words, k, &distinct);
  t->ideal_wavefronts += (distinct + kBanks - 1) / kBanks;
}

// Each 8x8 matrix is a phase of its own: 8 lanes' rows of 16 bytes, one wavefront when
// the rows fall in distinct banks.
void CounterSink::Ldmatrix(const Warp& w, const Instr& in) {
  const uint64_t* base = in.addr_is_reg ? Slot(w, in.addr_slot) : nullptr;
  SharedTraffic& t = out_.shared_load;
  ++t.requests;
  for (int mat = 0; mat < in.vec; ++mat) {
    uint32_t words[8 * 4];
    for (uint32_t r = 0; r < 8; ++r) {
      uint64_t a = LaneAddr(in, base, 8 * mat + r);
      if (in.space == Space::kGeneric) a -= kSharedWindow;
      for (uint32_t j = 0; j < 4; ++j) words[4 * r + j] = static_cast<uint32_t>(a / 4 + j);
    }
    uint32_t distinct = 0;
    t.wavefronts += Wavefronts(words, 32, &distinct);
    ++t.ideal_wavefronts;
  }
}

void CounterSink::Clock(const Warp& w, const Instr& in, InstrClass cls, uint32_t m) {
  if (clocks_.size() <= w.index) clocks_.resize(w.index + 1);
  WarpClock& c = clocks_[w.index];
  uint64_t& waited = out_.load_wait_steps;
  if (m != 0 && in.ctl == Ctl::kNone) {
    for (int i = 0; i < in.nchk; ++i) {
      if (in.chk[i] < c.ready.size()) c.WaitUntil(c.ready[in.chk[i]], &waited);
    }
  }
  ++c.now;
  if (m == 0 || in.ctl != Ctl::kNone) return;
  const uint64_t arrival = c.now + kLoadLatencySteps;
  if (cls == InstrClass::kLoadGlobal) {
    for (int e = 0; e < in.vec; ++e) {
      if (c.ready.size() <= in.d[e]) c.ready.resize(in.d[e] + 1, 0);
      c.ready[in.d[e]] = arrival;
    }
  } else if (cls == InstrClass::kAsyncCopy) {
    const bool wait_all = in.fn == SelectCpAsyncWait(true);
    if (in.size != 0) {
      c.open_group = arrival;
    } else if (in.fn == SelectCpAsyncCommit() || wait_all) {
      c.groups.push_back(c.open_group);
      c.open_group = 0;
    }
    if (wait_all || in.fn == SelectCpAsyncWait(false)) {
      const uint64_t keep = wait_all ? 0 : static_cast<uint64_t>(in.imm);
      while (c.groups.size() > keep) {
        c.WaitUntil(c.groups.front(), &waited);
        c.groups.pop_front();
      }
    }
  }
}

void CounterSink::FoldLongestWarp() {
  for (const WarpClock& c : clocks_) {
    if (c.now > out_.longest_warp_steps) {
      out_.longest_warp_steps = c.now;
      out_.longest_warp_wait_steps = c.waited;
    }
  }
}

void CounterSink::Count(const Warp& w, const Instr& in, uint32_t pc, uint32_t issued, uint32_t m) {
  ++out_.warp_instructions;
  out_.thread_instructions += static_cast<uint64_t>(std::popcount(issued));
  InstrClass cls = classes_[pc];
  if (m == 0 || in.ctl != Ctl::kNone) {
    Clock(w, in, cls, m);
    ++out_.instructions[static_cast<int>(cls)];
    return;
  }
  const Op op = static_cast<Op>(in.op);
  switch (cls) {
    case InstrClass::kTensor:
      if (op == Op::kMma) {
        out_.tensor_flops += 2ull * 16 * 8 * in.mode;
      } else {
        Ldmatrix(w, in);
      }
      break;
    case InstrClass::kFp32:
      if (op == Op::kAdd || op == Op::kSub || op == Op::kMul) {
        out_.fp32_flops += static_cast<uint64_t>(std::popcount(m));
      } else if (op == Op::kFma || op == Op::kMad) {
        out_.fp32_flops += 2ull * static_cast<uint64_t>(std::popcount(m));
      }
      break;
    case InstrClass::kAsyncCopy: {
      if (in.size == 0) break;  // commit_group / wait_group
      const uint64_t* src = Slot(w, in.s[0]);
      const uint64_t* src_size = in.mode == 1 ? Slot(w, in.s[1]) : nullptr;
      uint32_t ignore = 0;
      if (in.mode == 2) ignore = in.ps_neg[0] ? ~w.preds[in.ps[0]] : w.preds[in.ps[0]];
      uint64_t addr[kWarpSize];
      uint32_t bytes[kWarpSize];
      int n = 0;
      ForLanes(m, [&](uint32_t l) {
        uint32_t b = src_size != nullptr ? static_cast<uint32_t>(src_size[l]) : in.size;
        if ((ignore >> l) & 1) b = 0;
        if (b == 0) return;  // zero-fill only: nothing is read
        addr[n] = src[l] + static_cast<uint64_t>(in.imm2);
        bytes[n++] = std::min<uint32_t>(b, in.size);
      });
      Global(addr, bytes, n, &out_.global_load, true, false);
      break;
    }
    case InstrClass::kLoadGlobal:
    case InstrClass::kStoreGlobal:
    case InstrClass::kAtomGlobal:
    case InstrClass::kLoadShared:
    case InstrClass::kStoreShared:
    case InstrClass::kAtomShared: {
      const uint64_t* base = in.addr_is_reg ? Slot(w, in.addr_slot) : nullptr;
      const uint32_t size = static_cast<uint32_t>(in.size) * in.vec;
      uint64_t gaddr[kWarpSize], saddr[kWarpSize];
      uint32_t gbytes[kWarpSize], sbytes[kWarpSize];
      int ng = 0, ns = 0, nl = 0;
      ForLanes(m, [&](uint32_t l) {
        const uint64_t a = LaneAddr(in, base, l);
        if (in.space == Space::kShared) {
          saddr[ns] = a;
          sbytes[ns++] = size;
        } else if (in.space == Space::kGlobal) {
          gaddr[ng] = a;
          gbytes[ng++] = size;
        } else if (InWindow(a, kSharedWindow, kSharedWindowSize)) {
          saddr[ns] = a - kSharedWindow;
          sbytes[ns++] = size;
        } else if (InWindow(a, kLocalWindow, kLocalWindowSize)) {
          ++nl;
        } else {
          gaddr[ng] = a;
          gbytes[ng++] = size;
        }
      });
      const bool load = op == Op::kLd || op == Op::kLdu;
      const bool atom = op == Op::kAtom || op == Op::kRed;
      Global(gaddr, gbytes, ng,
             load   ? &out_.global_load
             : atom ? &out_.global_atomic
                    : &out_.global_store,
             load || atom, !load);
      Shared(saddr, sbytes, ns, load ? &out_.shared_load : &out_.shared_store);
      if (in.space == Space::kGeneric) {  // classed by where its lanes went
        if (ng != 0) {
          cls = load   ? InstrClass::kLoadGlobal
                : atom ? InstrClass::kAtomGlobal
                       : InstrClass::kStoreGlobal;
        } else if (ns != 0) {
          cls = load   ? InstrClass::kLoadShared
                : atom ? InstrClass::kAtomShared
                       : InstrClass::kStoreShared;
        } else if (nl != 0) {
          cls = InstrClass::kLocal;
        }
      }
      break;
    }
    default:
      break;
  }
  Clock(w, in, cls, m);
  ++out_.instructions[static_cast<int>(cls)];
}

void CounterSink::Merge(const std::vector<const CounterSink*>& sinks, const CtaSample& sample,
                        KernelCounters* out) {
  const double k = sample.CtaScale();
  const auto scaled = [k](uint64_t v) { return static_cast<uint64_t>(std::llround(v * k)); };
  const auto add_global = [&](GlobalTraffic& a, const GlobalTraffic& b) {
    a.requests += scaled(b.requests);
    a.sectors += scaled(b.sectors);
    a.ideal_sectors += scaled(b.ideal_sectors);
  };
  const auto add_shared = [&](SharedTraffic& a, const SharedTraffic& b) {
    a.requests += scaled(b.requests);
    a.wavefronts += scaled(b.wavefronts);
    a.ideal_wavefronts += scaled(b.ideal_wavefronts);
  };
  size_t num_allocs = 0;
  uint64_t sampled = 0;
  for (const CounterSink* s : sinks) {
    const KernelCounters& c = s->out_;
    // A warp's chain is not scaled: the grid's longest is (about) the sample's longest.
    if (c.longest_warp_steps > out->longest_warp_steps) {
      out->longest_warp_steps = c.longest_warp_steps;
      out->longest_warp_wait_steps = c.longest_warp_wait_steps;
    }
    sampled += c.ctas;
    out->warp_instructions += scaled(c.warp_instructions);
    out->thread_instructions += scaled(c.thread_instructions);
    for (int i = 0; i < kNumInstrClasses; ++i) out->instructions[i] += scaled(c.instructions[i]);
    add_global(out->global_load, c.global_load);
    add_global(out->global_store, c.global_store);
    add_global(out->global_atomic, c.global_atomic);
    add_shared(out->shared_load, c.shared_load);
    add_shared(out->shared_store, c.shared_store);
    out->tensor_flops += scaled(c.tensor_flops);
    out->fp32_flops += scaled(c.fp32_flops);
    out->load_wait_steps += scaled(c.load_wait_steps);
    num_allocs = std::max(num_allocs, s->num_allocs_);
  }
  out->sampled_ctas += sampled;
  out->ctas += scaled(sampled);
  // A sector counts once however many host threads touched it: unite the run sets, then
  // scale each sector by what its runs say about its sharing (cta_sample.h), at most the
  // allocation's sectors.
  std::array<double, 512> sector_scale;
  for (uint16_t bits = 0; bits < sector_scale.size(); ++bits) {
    sector_scale[bits] = sample.SectorScale(bits);
  }
  const auto dram_bytes = [&](size_t a, std::vector<std::vector<uint16_t>> CounterSink::*runs) {
    std::vector<uint16_t> all;
    for (const CounterSink* s : sinks) {
      const std::vector<uint16_t>& r = (s->*runs)[a];
      if (r.empty()) continue;
      if (all.empty()) all.assign(r.size(), 0);
      for (size_t i = 0; i < r.size(); ++i) all[i] |= r[i];
    }
    double n = 0;
    for (uint16_t bits : all) {
      if (bits != 0) n += sector_scale[bits];
    }
    const double cap = static_cast<double>(all.size());
    return static_cast<uint64_t>(std::llround(std::min(n, cap))) << kSectorShift;
  };
  for (size_t a = 0; a < num_allocs; ++a) {
    BufferTraffic b;
    for (const CounterSink* s : sinks) add_global(b.access, s->per_alloc_[a]);
    b.dram_read_bytes = dram_bytes(a, &CounterSink::read_runs_);
    b.dram_write_bytes = dram_bytes(a, &CounterSink::write_runs_);
    if (b.access.requests == 0) continue;
    b.base = sinks.front()->allocs_[a].base;
    b.size = sinks.front()->allocs_[a].size;
    out->dram_read_bytes += b.dram_read_bytes;
    out->dram_write_bytes += b.dram_write_bytes;
    out->buffers.push_back(b);
  }
}

}  // namespace ptxserve::emu
