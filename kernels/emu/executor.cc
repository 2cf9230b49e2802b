// The warp scheduler. Each warp keeps one "active" group of lanes sharing a PC; a divergent
// branch parks the other lanes with their own PCs and the group with the lowest PC runs
// next. Lanes rejoin the moment the running group reaches a parked PC, which for the
// structured control flow PTX generators emit is the immediate post-dominator. Warps of a
// block run one at a time until they exit or block at a barrier; a barrier releases its
// waiters when its expected thread count has arrived.
#include "kernels/emu/executor.h"

#include <algorithm>
#include <atomic>
#include <bit>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "kernels/emu/async_copy.h"
#include "kernels/emu/counting.h"
#include "kernels/emu/cta_sample.h"
#include "kernels/emu/mem_access.h"
#include "kernels/emu/ops.h"

namespace ptxserve::emu {
namespace {

constexpr int kNumBarriers = 16;

std::string Dim(const Dim3u& d) { return absl::StrFormat("(%u,%u,%u)", d.x, d.y, d.z); }

class BlockRunner {
 public:
  // `worker`: the host thread's index, which selects its global-race table. `sink`: where
  // counters go, or null when the launch is not counted.
  BlockRunner(const LaunchConfig& cfg, size_t worker, CounterSink* sink)
      : cfg_(cfg), fn_(*cfg.fn), sink_(sink) {
    nthreads_ = cfg.block.x * cfg.block.y * cfg.block.z;
    nwarps_ = (nthreads_ + kWarpSize - 1) / kWarpSize;
    const size_t slots = fn_.num_slots;
    regs_.assign(static_cast<size_t>(nwarps_) * slots * kWarpSize, 0);
    init_.assign(static_cast<size_t>(nwarps_) * slots, 0);
    preds_.assign(static_cast<size_t>(nwarps_) * std::max<uint32_t>(fn_.num_preds, 1), 0);
    pinit_.assign(preds_.size(), 0);
    warps_.resize(nwarps_);
    shared_.resize(static_cast<size_t>(fn_.dynamic_offset) + cfg.dynamic_shared + 16);
    local_.resize(static_cast<size_t>(fn_.local_bytes) * nwarps_ * kWarpSize);
    ctx_.allocs = cfg.allocs;
    ctx_.num_allocs = cfg.num_allocs;
    ctx_.shared = shared_.data();
    ctx_.local = local_.data();
    ctx_.local_size = fn_.local_bytes;
    ctx_.shared_size =
        fn_.uses_dynamic_shared ? fn_.dynamic_offset + cfg.dynamic_shared : fn_.static_shared;
    if (cfg.detect_shared_races && ctx_.shared_size != 0) {
      const size_t words = (ctx_.shared_size + 3) / 4;
      shared_tags_.resize(words);
      ctx_.shared_tags = shared_tags_.data();
    }
    ctx_.slot_names = &fn_.slot_names;
    if (fn_.uses_cp_async) ctx_.async = &async_;
    if (worker < cfg.global_writes.size()) {
      GlobalWrites* g = cfg.global_writes[worker];
      if (g->last_epoch > GlobalWrites::kMaxEpoch) g->Reset();
      ctx_.global_writes = g;
      ctx_.epoch = g->last_epoch + 1;
    }
    ctx_.dependent_guard = cfg.dependent_guard;
    if (worker < cfg.dependent_logs.size()) ctx_.dependent_log = cfg.dependent_logs[worker];
    ctx_.params = cfg.params.data();
    ctx_.param_size = static_cast<uint32_t>(cfg.params.size());
    ctx_.block_dim = cfg.block;
    ctx_.grid_dim = cfg.grid;
  }

  ~BlockRunner() {
    if (ctx_.global_writes != nullptr) ctx_.global_writes->last_epoch = ctx_.epoch;
  }
  BlockRunner(const BlockRunner&) = delete;
  BlockRunner& operator=(const BlockRunner&) = delete;

  // `run_bits`: the block's runs in the launch's CtaSample (CtaSample::RunBits).
  absl::Status Run(uint64_t linear_block, uint16_t run_bits);
  const LaunchCounters& counters() const { return counters_; }

 private:
  void InitWarp(uint32_t wi);
  template <bool kCount>
  absl::Status RunWarp(Warp& w);
  static bool NextGroup(Warp& w);
  static void Reconverge(Warp& w);
  static void UpdateMinSuspended(Warp& w);
  absl::Status Barrier(Warp& w, const Instr& in, uint32_t m);
  void Release(int id);
  absl::Status DeadlockError() const;

  Dim3u ThreadOf(const Warp& w, int lane) const {
    const uint32_t t = w.index * kWarpSize + static_cast<uint32_t>(lane);
    const Dim3u& b = cfg_.block;
    return Dim3u{t % b.x, (t / b.x) % b.y, t / (b.x * b.y)};
  }
  absl::Status Error(const Warp& w, int lane, int32_t line, std::string_view msg) const {
    return absl::FailedPreconditionError(
        absl::StrFormat("kernel %s: block %s, thread %s, PTX line %d: %s", fn_.name,
                        Dim(ctx_.block_idx), Dim(ThreadOf(w, std::max(lane, 0))), line, msg));
  }
  absl::Status UninitError(const Warp& w, const Instr& in, const std::string& name,
                           uint32_t missing) const {
    return Error(w, std::countr_zero(missing), in.line,
                 UninitMessage(static_cast<Op>(in.op), name, missing, w.index));
  }

  const LaunchConfig& cfg_;
  const Function& fn_;
  CounterSink* sink_;
  uint32_t nthreads_ = 0, nwarps_ = 0;
  std::vector<uint64_t> regs_;
  std::vector<uint32_t> init_, preds_, pinit_;
  std::vector<Warp> warps_;
  std::vector<uint8_t> shared_;
  std::vector<uint8_t> local_;
  std::vector<SharedTag> shared_tags_;  // shared-memory race detection
  AsyncCopies async_;                   // used when the kernel has cp.async
  ExecCtx ctx_;
  LaunchCounters counters_;
  struct Bar {
    uint32_t arrived = 0;
    uint32_t expected = 0;
    uint32_t popc = 0;  // bar.red accumulators over the arrived threads
    bool all = true;
    bool any = false;
  } bars_[kNumBarriers];
};

void BlockRunner::InitWarp(uint32_t wi) {
  Warp& w = warps_[wi];
  const size_t slots = fn_.num_slots;
  const uint32_t np = std::max<uint32_t>(fn_.num_preds, 1);
  w = Warp();
  w.regs = regs_.data() + wi * slots * kWarpSize;
  w.init = init_.data() + wi * slots;
  w.preds = preds_.data() + wi * np;
  w.pinit = pinit_.data() + wi * np;
  w.index = wi;
  const uint32_t first = wi * kWarpSize;
  const uint32_t n = std::min<uint32_t>(kWarpSize, nthreads_ - first);
  w.exists = n == kWarpSize ? kFullMask : ((1u << n) - 1);
  w.live = w.active = w.exists;
  if (slots != 0) std::memset(w.init, 0, slots * sizeof(uint32_t));
  std::memset(w.pinit, 0, np * sizeof(uint32_t));
  for (const auto& [slot, value] : fn_.consts) {
    uint64_t* r = w.R(slot);
    for (int l = 0; l < kWarpSize; ++l) r[l] = value;
    w.init[slot] = kFullMask;
  }
  SpecialInputs si;
  si.block = cfg_.block;
  si.grid = cfg_.grid;
  si.block_idx = ctx_.block_idx;
  si.nwarps = nwarps_;
  si.dynamic_shared = cfg_.dynamic_shared;
  si.total_shared = ctx_.shared_size;
  for (const auto& [slot, sp] : fn_.specials) {
    uint64_t* r = w.R(slot);
    for (uint32_t l = 0; l < kWarpSize; ++l) r[l] = SpecialValue(sp, si, first + l);
    w.init[slot] = kFullMask;
  }
}

void BlockRunner::UpdateMinSuspended(Warp& w) {
  uint32_t mn = UINT32_MAX;
  for (uint32_t s = w.suspended; s != 0; s &= s - 1) {
    mn = std::min(mn, w.lane_pc[std::countr_zero(s)]);
  }
  w.min_susp_pc = mn;
}

// Makes the lowest-PC parked lanes the active group; false when none is ready.
bool BlockRunner::NextGroup(Warp& w) {
  if (w.suspended == 0) return false;
  const uint32_t pc = w.min_susp_pc;
  uint32_t group = 0;
  for (uint32_t s = w.suspended; s != 0; s &= s - 1) {
    const int l = std::countr_zero(s);
    if (w.lane_pc[l] == pc) group |= 1u << l;
  }
  w.active = group;
  w.suspended &= ~group;
  w.pc = pc;
  UpdateMinSuspended(w);
  return true;
}

// Called when the running group's PC reached or passed the lowest parked PC.
void BlockRunner::Reconverge(Warp& w) {
  if (w.pc == w.min_susp_pc) {
    for (uint32_t s = w.suspended; s != 0; s &= s - 1) {
      const int l = std::countr_zero(s);
      if (w.lane_pc[l] == w.pc) w.active |= 1u << l;
    }
    w.suspended &= ~w.active;
    UpdateMinSuspended(w);
    return;
  }
  for (uint32_t s = w.active; s != 0; s &= s - 1) w.lane_pc[std::countr_zero(s)] = w.pc;
  w.suspended |= w.active;
  w.active = 0;
  UpdateMinSuspended(w);
  NextGroup(w);
}

void BlockRunner::Release(int id) {
  const Bar& b = bars_[id];
  ++ctx_.epoch;  // writes before the barrier are now visible to every warp
  for (Warp& w : warps_) {
    uint32_t rel = 0;
    for (uint32_t s = w.waiting; s != 0; s &= s - 1) {
      const int l = std::countr_zero(s);
      if (w.bar_id[l] != id) continue;
      rel |= 1u << l;
      const Instr& in = fn_.code[w.lane_pc[l]];
      if ((in.mode & 4) != 0) {  // bar.red: every waiting thread gets the block's result
        if (in.mode2 == 1) {
          w.R(in.d[0])[l] = b.popc;
          w.init[in.d[0]] |= 1u << l;
        } else {
          const bool r = in.mode2 == 2 ? b.all : b.any;
          w.preds[in.pd[0]] = (w.preds[in.pd[0]] & ~(1u << l)) | (uint32_t{r} << l);
          w.pinit[in.pd[0]] |= 1u << l;
        }
      }
      ++w.lane_pc[l];
    }
    if (rel == 0) continue;
    w.waiting &= ~rel;
    w.suspended |= rel;
    UpdateMinSuspended(w);
  }
}

absl::Status BlockRunner::Barrier(Warp& w, const Instr& in, uint32_t m) {
  const bool has_count = (in.mode & 1) != 0, aligned = (in.mode & 2) != 0;
  const bool arrive = in.ctl == Ctl::kBarArrive;
  const char* name = static_cast<Op>(in.op) == Op::kBar ? "bar" : "barrier";
  if (aligned && m != 0 && m != w.live) {
    const uint32_t missing = w.live & ~m;
    std::string where;
    for (uint32_t s = missing; s != 0; s &= s - 1) {
      const int l = std::countr_zero(s);
      const bool waits = (w.waiting >> l) & 1;
      const bool parked = (w.suspended >> l) & 1;
      const uint32_t pc = (waits || parked) ? w.lane_pc[l] : w.pc;
      where = absl::StrFormat("lane %d is %s line %d", l,
                              waits    ? "waiting at a barrier on"
                              : parked ? "diverged, at"
                                       : "predicated off at",
                              fn_.code[pc].line);
      break;
    }
    return Error(w, std::countr_zero(m), in.line,
                 absl::StrFormat("%s.%s executed by a diverged warp: lanes 0x%08x arrive, "
                                 "0x%08x do not (%s); an aligned barrier must be reached by all "
                                 "threads of a warp together",
                                 name, arrive ? "arrive" : "sync", m, missing, where));
  }
  if (m == 0) {
    ++w.pc;
    return absl::OkStatus();
  }
  const uint32_t first = std::countr_zero(m);
  const uint64_t id = w.R(in.s[0])[first] & 0xffffffffu;
  if (id >= kNumBarriers) {
    return Error(w, first, in.line, absl::StrFormat("barrier id %u out of range 0..15", id));
  }
  uint32_t expected = nthreads_;
  if (has_count) {
    expected = static_cast<uint32_t>(w.R(in.s[1])[first]);
    if (expected == 0 || expected % kWarpSize != 0 ||
        expected > (nthreads_ + kWarpSize - 1) / kWarpSize * kWarpSize) {
      return Error(w, first, in.line,
                   absl::StrFormat("barrier thread count %u must be a non-zero multiple of 32 "
                                   "no larger than the block",
                                   expected));
    }
    // A partial last warp counts as a whole warp, as on the hardware.
    if (expected > nthreads_) expected = nthreads_;
  }
  Bar& b = bars_[id];
  if (b.arrived != 0 && b.expected != expected) {
    return Error(w, first, in.line,
                 absl::StrFormat("barrier %u used with different thread counts (%u and %u)", id,
                                 b.expected, expected));
  }
  b.expected = expected;
  b.arrived += std::popcount(m);
  if ((in.mode & 4) != 0) {
    if ((w.pinit[in.ps[0]] & m) != m) {
      return UninitError(w, in, fn_.pred_names[in.ps[0]], m & ~w.pinit[in.ps[0]]);
    }
    const uint32_t p = (in.ps_neg[0] ? ~w.preds[in.ps[0]] : w.preds[in.ps[0]]) & m;
    b.popc += std::popcount(p);
    b.all = b.all && p == m;
    b.any = b.any || p != 0;
  }
  if (!arrive) {
    for (uint32_t s = m; s != 0; s &= s - 1) {
      const int l = std::countr_zero(s);
      w.lane_pc[l] = w.pc;
      w.bar_id[l] = static_cast<uint8_t>(id);
    }
    w.waiting |= m;
    w.active &= ~m;
  }
  if (w.active != 0) ++w.pc;
  if (b.arrived >= b.expected) {
    Release(static_cast<int>(id));
    b = Bar();
  }
  return absl::OkStatus();
}

template <bool kCount>
absl::Status BlockRunner::RunWarp(Warp& w) {
  const Instr* code = fn_.code.data();
  const uint64_t limit = cfg_.max_warp_instructions;
  uint64_t warp_instr = counters_.warp_instructions;
  uint64_t thread_instr = counters_.thread_instructions;
  absl::Status status;
  ctx_.cur_warp = w.index;
  while (true) {
    if (w.active == 0 && !NextGroup(w)) break;
    const Instr& in = code[w.pc];
    uint32_t m = w.active;
    thread_instr += std::popcount(m);  // active lanes, predicated-off ones included
    if (in.guard >= 0) {
      if ((w.pinit[in.guard] & m) != m) {
        status = UninitError(w, in, fn_.pred_names[in.guard], m & ~w.pinit[in.guard]);
        break;
      }
      m &= in.guard_neg ? ~w.preds[in.guard] : w.preds[in.guard];
    }
    ++warp_instr;
    if (limit != 0 && warp_instr > limit) {
      status = Error(w, std::countr_zero(w.active), in.line,
                     absl::StrFormat("instruction limit of %u warp-instructions exceeded "
                                     "(infinite loop?)",
                                     limit));
      break;
    }
    if constexpr (kCount) sink_->Count(w, in, w.pc, w.active, m);
    switch (in.ctl) {
      case Ctl::kNone:
        if (m != 0) {
          bool ok = true;
          for (int i = 0; i < in.nchk; ++i) {
            const uint32_t missing = m & ~w.init[in.chk[i]];
            if (missing != 0) {
              status = UninitError(w, in, fn_.slot_names[in.chk[i]], missing);
              ok = false;
              break;
            }
          }
          for (int i = 0; ok && i < in.npchk; ++i) {
            const uint32_t missing = m & ~w.pinit[in.pchk[i]];
            if (missing != 0) {
              status = UninitError(w, in, fn_.pred_names[in.pchk[i]], missing);
              ok = false;
            }
          }
          if (!ok) break;
          ctx_.clock = warp_instr;
          if (!in.fn(ctx_, w, in, m)) {
            std::string msg = std::move(ctx_.fault.msg);
            status = Error(w, ctx_.fault.lane, in.line, msg);
            break;
          }
        }
        ++w.pc;
        break;
      case Ctl::kBra:
        if (m == w.active) {
          w.pc = in.target;
        } else if (m == 0) {
          ++w.pc;
        } else if (in.mode != 0) {
          status = Error(w, std::countr_zero(w.active & ~m), in.line,
                         absl::StrFormat("bra.uni taken by lanes 0x%08x but not by 0x%08x of warp "
                                         "%u: .uni promises a non-divergent branch",
                                         m, w.active & ~m, w.index));
        } else {
          for (uint32_t s = w.active; s != 0; s &= s - 1) {
            const int l = std::countr_zero(s);
            w.lane_pc[l] = ((m >> l) & 1) ? in.target : w.pc + 1;
          }
          w.suspended |= w.active;
          w.active = 0;
          UpdateMinSuspended(w);
          continue;
        }
        break;
      case Ctl::kExit:
        if (m != 0 && ctx_.async != nullptr && async_.in_flight != 0) {
          for (uint32_t s = m; s != 0 && status.ok(); s &= s - 1) {
            const int l = std::countr_zero(s);
            if (std::string why = CopiesInFlightAtExit(ctx_, l); !why.empty()) {
              status = Error(w, l, in.line, why);
            }
          }
          if (!status.ok()) break;
        }
        if (m != 0) {
          if (w.exit_lane < 0) {
            w.exit_lane = std::countr_zero(m);
            w.exit_line = in.line;
          }
          w.live &= ~m;
          w.active &= ~m;
        }
        if (w.active == 0) continue;
        ++w.pc;
        break;
      case Ctl::kBar:
      case Ctl::kBarArrive:
        status = Barrier(w, in, m);
        if (!status.ok()) break;
        if (w.active == 0) continue;
        break;
    }
    if (!status.ok()) break;
    if (w.pc >= w.min_susp_pc) Reconverge(w);
  }
  counters_.warp_instructions = warp_instr;
  counters_.thread_instructions = thread_instr;
  return status;
}

absl::Status BlockRunner::DeadlockError() const {
  std::map<int32_t, uint32_t> waiting_lines;  // line -> threads waiting there
  uint32_t waiting = 0, exited = 0;
  const Warp* exit_warp = nullptr;
  for (const Warp& w : warps_) {
    for (uint32_t s = w.waiting; s != 0; s &= s - 1) {
      ++waiting_lines[fn_.code[w.lane_pc[std::countr_zero(s)]].line];
    }
    waiting += std::popcount(w.waiting);
    const uint32_t gone = w.exists & ~w.live;
    exited += std::popcount(gone);
    if (gone != 0 && exit_warp == nullptr) exit_warp = &w;
  }
  std::vector<std::string> parts;
  for (const auto& [line, n] : waiting_lines)
    parts.push_back(absl::StrFormat("%u at line %d", n, line));
  std::string msg = absl::StrFormat(
      "kernel %s: block %s can never pass its barrier: %u of %u threads wait (%s)", fn_.name,
      Dim(ctx_.block_idx), waiting, nthreads_, absl::StrJoin(parts, ", "));
  if (exited != 0) {
    absl::StrAppend(&msg,
                    absl::StrFormat("; %u threads exited before reaching it, first thread %s at "
                                    "PTX line %d (early exit before bar.sync)",
                                    exited, Dim(ThreadOf(*exit_warp, exit_warp->exit_lane)),
                                    exit_warp->exit_line));
  }
  if (waiting_lines.size() > 1) {
    absl::StrAppend(&msg, "; threads wait at different barrier instructions");
  }
  return absl::FailedPreconditionError(msg);
}

absl::Status BlockRunner::Run(uint64_t b, uint16_t run_bits) {
  const Dim3u& g = cfg_.grid;
  ctx_.block_idx = Dim3u{static_cast<uint32_t>(b % g.x), static_cast<uint32_t>((b / g.x) % g.y),
                         static_cast<uint32_t>(b / (uint64_t{g.x} * g.y))};
  if (cfg_.poison_shared) {
    std::memset(shared_.data(), 0xff, shared_.size());
    if (!local_.empty()) std::memset(local_.data(), 0xff, local_.size());
  }
  for (auto& bar : bars_) bar = Bar();
  if (ctx_.async != nullptr) async_.Reset(nwarps_ * kWarpSize, ctx_.shared_size);
  // A new epoch instead of clearing the race tags: the previous block's are all older.
  ++ctx_.epoch;
  for (uint32_t wi = 0; wi < nwarps_; ++wi) InitWarp(wi);
  if (sink_ != nullptr) sink_->CountCta(run_bits);
  // Odd blocks run their warps last to first, so a global read that another warp later
  // overwrites (reads are not tracked) shows, in one of the two orders, as a read of that
  // warp's write.
  const bool reverse = (b & 1) != 0;
  while (true) {
    bool ran = false;
    for (uint32_t i = 0; i < nwarps_; ++i) {
      Warp& w = warps_[reverse ? nwarps_ - 1 - i : i];
      if ((w.active | w.suspended) == 0) continue;
      ran = true;
      if (auto s = sink_ != nullptr ? RunWarp<true>(w) : RunWarp<false>(w); !s.ok()) return s;
    }
    if (!ran) break;
  }
  for (const Warp& w : warps_) {
    if (w.waiting != 0) return DeadlockError();
  }
  return absl::OkStatus();
}

}  // namespace

std::string UninitMessage(Op op, std::string_view reg, uint32_t missing, uint32_t warp) {
  return absl::StrFormat(
      "'%s' reads register %s, which this thread never wrote (or which got an undefined value "
      "from a shfl.sync of a non-participating lane); uninitialised in lanes 0x%08x of warp %u",
      OpName(op), reg, missing, warp);
}

absl::Status ExecuteLaunch(const LaunchConfig& cfg, LaunchCounters* counters,
                           KernelCounters* kernel_counters) {
  const CtaSample sample(cfg.grid, cfg.sample_ctas);
  const uint64_t nblocks = sample.size();
  const auto run = [&](BlockRunner& r, uint64_t i) {
    return r.Run(sample.LinearBlock(i), sample.RunBits(i));
  };
  const int nthreads = static_cast<int>(
      std::min<uint64_t>(std::max(cfg.num_threads, 1), std::max<uint64_t>(nblocks, 1)));
  // One sink per host thread, merged once the launch succeeded.
  std::vector<InstrClass> classes;
  std::vector<std::unique_ptr<CounterSink>> sinks;
  if (kernel_counters != nullptr) {
    classes = ClassifyCode(*cfg.fn);
    for (int i = 0; i < nthreads; ++i) {
      sinks.push_back(std::make_unique<CounterSink>(classes, cfg.allocs, cfg.num_allocs));
    }
  }
  const auto sink = [&](size_t worker) { return sinks.empty() ? nullptr : sinks[worker].get(); };
  const auto merge = [&](const absl::Status& st) {
    if (!st.ok() || kernel_counters == nullptr) return;
    std::vector<const CounterSink*> all;
    for (const auto& s : sinks) {
      s->FoldLongestWarp();  // the last CTA each sink ran
      all.push_back(s.get());
    }
    CounterSink::Merge(all, sample, kernel_counters);
  };
  if (nthreads <= 1) {
    BlockRunner r(cfg, 0, sink(0));
    absl::Status st;
    for (uint64_t b = 0; b < nblocks && st.ok(); ++b) st = run(r, b);
    counters->warp_instructions += r.counters().warp_instructions;
    counters->thread_instructions += r.counters().thread_instructions;
    merge(st);
    return st;
  }
  std::atomic<uint64_t> next{0};
  std::atomic<bool> failed{false};
  std::mutex mu;
  uint64_t fail_block = UINT64_MAX;
  absl::Status fail;
  LaunchCounters total;
  auto work = [&](size_t worker) {
    BlockRunner r(cfg, worker, sink(worker));
    while (!failed.load(std::memory_order_relaxed)) {
      const uint64_t b = next.fetch_add(1, std::memory_order_relaxed);
      if (b >= nblocks) break;
      absl::Status st = run(r, b);
      if (!st.ok()) {
        std::lock_guard<std::mutex> lock(mu);
        if (b < fail_block) {
          fail_block = b;
          fail = st;
        }
        failed.store(true);
      }
    }
    std::lock_guard<std::mutex> lock(mu);
    total.warp_instructions += r.counters().warp_instructions;
    total.thread_instructions += r.counters().thread_instructions;
  };
  std::vector<std::thread> threads;
  for (int i = 1; i < nthreads; ++i) threads.emplace_back(work, static_cast<size_t>(i));
  work(0);
  for (auto& t : threads) t.join();
  counters->warp_instructions += total.warp_instructions;
  counters->thread_instructions += total.thread_instructions;
  merge(fail);
  return fail;
}

}  // namespace ptxserve::emu
