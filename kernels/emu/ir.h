// Decoded PTX for the emulator: types, decoded instructions, the per-warp register file
// and the execution context handlers run against. PTX text is parsed and decoded once
// (parser.cc, decode*.cc); execution (executor.cc, ops_*.cc) only touches these structs.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace ptxserve::emu {

constexpr int kWarpSize = 32;
constexpr uint32_t kFullMask = 0xffffffffu;
// Generic addresses in [kSharedWindow, kSharedWindow + 4 GiB) name the block's shared memory
// (cvta.shared); global allocations live far below it.
constexpr uint64_t kSharedWindow = 0x0000700000000000ull;
constexpr uint64_t kSharedWindowSize = 0x100000000ull;
// Generic addresses in [kLocalWindow, kLocalWindow + 4 GiB) name the executing thread's
// local memory (cvta.local).
constexpr uint64_t kLocalWindow = 0x0000710000000000ull;
constexpr uint64_t kLocalWindowSize = 0x100000000ull;

enum class Ty : uint8_t {
  kNone,
  kPred,
  kB8,
  kB16,
  kB32,
  kB64,
  kB128,
  kU8,
  kU16,
  kU32,
  kU64,
  kS8,
  kS16,
  kS32,
  kS64,
  kF16,
  kF16x2,
  kBF16,
  kBF16x2,
  kF32,
  kF64,
};

int TySize(Ty t);                         // bytes; 0 for kNone/kPred
bool TyIsFloat(Ty t);                     // f16, f16x2, bf16, bf16x2, f32, f64
bool TyIsSigned(Ty t);                    // s8..s64
bool TyIsBits(Ty t);                      // b8..b128
const char* TyName(Ty t);                 // "f32", ...
bool ParseTy(std::string_view s, Ty* t);  // "f32" -> kF32; false when unknown

enum class Space : uint8_t { kGeneric, kGlobal, kShared, kParam, kLocal, kConst };

// Where a decoded instruction hands control back to the warp scheduler.
enum class Ctl : uint8_t { kNone, kBra, kExit, kBar, kBarArrive };

struct AsyncCopies;
struct GlobalWrites;
struct ExecCtx;
struct Warp;
struct Instr;
// Executes one instruction for the lanes in `mask` (guard already applied, non-empty).
// Returns false after filling ctx.fault.
using Handler = bool (*)(ExecCtx& ctx, Warp& w, const Instr& in, uint32_t mask);

// One decoded instruction. Register operands are slot indices into the warp's register
// file; immediates and special registers were turned into pre-filled slots at decode time.
struct Instr {
  Handler fn = nullptr;
  Ctl ctl = Ctl::kNone;
  bool guard_neg = false;
  uint8_t nchk = 0;   // data slots whose initialised bits are checked before execution
  uint8_t npchk = 0;  // predicate registers checked likewise
  uint8_t vec = 1;    // vector width of ld/st (and element count for mov pack/unpack)
  uint8_t size = 0;   // access size in bytes per element (ld/st/atom)
  uint8_t mode = 0;   // op-specific sub-mode (shfl mode, vote mode, atom op, cmp op, ...)
  uint8_t mode2 = 0;  // op-specific (bool op of setp, rounding of cvt, ...)
  Space space = Space::kGeneric;
  Ty type = Ty::kNone;  // element type of ld/st/atom, operand type of ALU ops and setp
  Ty type2 = Ty::kNone;
  bool approx = false;   // .approx (the counters class rcp/sqrt.approx as special functions)
  bool addr32 = false;   // address register is 32-bit
  bool has_pd2 = false;  // second predicate destination (setp p|q, shfl d|p)
  int32_t guard = -1;    // guard predicate register, -1 when unguarded
  int32_t line = 0;      // PTX source line
  uint32_t target = 0;   // branch target (instruction index)
  uint16_t op = 0;       // Opcode, for messages
  uint16_t d[4] = {0, 0, 0, 0};
  uint16_t s[4] = {0, 0, 0, 0};
  uint16_t s2[6] = {0, 0, 0, 0, 0, 0};  // further sources (mma: B in [0..1], C in [2..5])
  uint16_t pd[2] = {0, 0};              // predicate destinations
  uint16_t ps[2] = {0, 0};              // predicate sources
  bool ps_neg[2] = {false, false};
  uint16_t chk[10] = {};  // mma reads ten registers
  uint16_t pchk[3] = {0, 0, 0};
  int64_t imm = 0;           // address offset (ld/st/atom), absolute address for symbolic operands
  int64_t imm2 = 0;          // second address offset (cp.async source)
  bool addr_is_reg = false;  // address operand has a base register (s[...] per op)
  uint16_t addr_slot = 0;
};

// Register file of one warp: slot-major, 32 lanes per slot, values as raw 64-bit patterns
// (narrower types live in the low bits). `init` holds per slot the lanes that wrote it.
struct Warp {
  uint64_t* regs = nullptr;
  uint32_t* init = nullptr;
  uint32_t* preds = nullptr;
  uint32_t* pinit = nullptr;
  uint64_t* R(uint16_t slot) { return regs + static_cast<size_t>(slot) * kWarpSize; }

  uint32_t index = 0;      // warp index within the block
  uint32_t exists = 0;     // lanes that are threads of the block
  uint32_t live = 0;       // lanes that have not exited
  uint32_t active = 0;     // lanes of the group being executed, all at `pc`
  uint32_t suspended = 0;  // lanes ready to run at lane_pc[] but not in the current group
  uint32_t waiting = 0;    // lanes blocked at a barrier (lane_pc[] = the bar instruction)
  uint32_t pc = 0;
  uint32_t min_susp_pc = UINT32_MAX;
  uint32_t lane_pc[kWarpSize] = {};
  uint8_t bar_id[kWarpSize] = {};
  int32_t exit_line = 0;  // line of the first exit of a lane of this warp
  int32_t exit_lane = -1;
  uint32_t grid_waited = 0;  // lanes past griddepcontrol.wait
};

// What race detection remembers of one 4-byte word of shared memory. Accesses are tagged
// epoch << 6 | (warp + 1), the epoch counting barrier releases: two warps' accesses in one
// epoch are unordered on the GPU.
struct SharedTag {
  uint32_t write = 0;  // the last write
  int32_t write_line = 0;
  uint32_t first_read = 0;  // the first and the last read of the read epoch
  int32_t first_read_line = 0;
  uint32_t last_read = 0;
  int32_t last_read_line = 0;
  uint32_t readers = 0;       // a bit per warp that read the word in the read epoch
  bool write_strong = false;  // the last write was an atomic or a strong store
};

struct Allocation {
  uint64_t base = 0;
  uint64_t size = 0;
  uint8_t* host = nullptr;
};

// A fault found by a handler; the executor adds kernel, block, thread and line.
struct Fault {
  int lane = -1;
  bool has_addr = false;
  uint64_t addr = 0;
  std::string msg;
};

struct Dim3u {
  uint32_t x = 1, y = 1, z = 1;
};

class WriteRanges;
struct DependentLaunchLog;

struct ExecCtx {
  const Allocation* allocs = nullptr;  // sorted by base
  size_t num_allocs = 0;
  uint8_t* shared = nullptr;
  uint32_t shared_size = 0;
  uint8_t* local = nullptr;  // per-thread local memory of the block, local_size each
  uint32_t local_size = 0;
  uint32_t cur_warp = 0;  // warp being executed (selects the lanes' local memory)
  // Shared-memory race detection (TrackShared in mem_access.h), one tag per 4-byte word;
  // null: detection off. The epoch advances at every barrier release and every block.
  SharedTag* shared_tags = nullptr;
  // Global-memory race detection between the block's warps (TrackGlobal); null: off.
  GlobalWrites* global_writes = nullptr;
  uint32_t epoch = 1;
  AsyncCopies* async = nullptr;  // cp.async copies not landed; null when the kernel has none
  // Programmatic dependent launch (dependent_launch.h): the global ranges a thread must not
  // read before griddepcontrol.wait (null: the kernel does not wait, nothing is checked),
  // and where this host thread logs the launch's global writes and trigger (null: not
  // logged).
  const WriteRanges* dependent_guard = nullptr;
  DependentLaunchLog* dependent_log = nullptr;
  const uint8_t* params = nullptr;
  uint32_t param_size = 0;
  Dim3u block_idx, block_dim, grid_dim;
  uint64_t clock = 0;  // warp-instructions executed by this worker (%clock)
  Fault fault;
  const std::vector<std::string>* slot_names = nullptr;

  // Host pointer for `n` bytes of global memory at `addr`, or nullptr (out of bounds).
  // `cache` remembers the last allocation hit.
  uint8_t* Global(uint64_t addr, uint64_t n, const Allocation*& cache) const {
    if (cache != nullptr && addr >= cache->base && addr - cache->base + n <= cache->size &&
        addr - cache->base <= cache->size) {
      return cache->host + (addr - cache->base);
    }
    return GlobalSlow(addr, n, cache);
  }
  uint8_t* GlobalSlow(uint64_t addr, uint64_t n, const Allocation*& cache) const;
  bool Fail(int lane, std::string msg) {
    fault.lane = lane;
    fault.has_addr = false;
    fault.msg = std::move(msg);
    return false;
  }
  bool FailAddr(int lane, uint64_t addr, std::string msg) {
    fault.lane = lane;
    fault.has_addr = true;
    fault.addr = addr;
    fault.msg = std::move(msg);
    return false;
  }
};

// Calls f(lane) for each set lane of `mask`; the full mask runs a plain 0..31 loop.
template <class F>
inline void ForLanes(uint32_t mask, F&& f) {
  if (mask == kFullMask) {
    for (uint32_t l = 0; l < kWarpSize; ++l) f(l);
    return;
  }
  while (mask != 0) {
    const uint32_t l = static_cast<uint32_t>(__builtin_ctz(mask));
    mask &= mask - 1;
    f(l);
  }
}

}  // namespace ptxserve::emu
