// KernelBuilder: writes one PTX module holding one `.entry`.
//
// Instructions go into a body buffer as they are emitted; registers are virtual and
// typed, and Finish() prepends one `.reg` declaration per register class (in the
// style of tinygrad's renderer/ptx.py), the parameters and the shared arrays. Every
// instruction is checked against the table in forms.h and the operand types; the
// first problem is remembered and Finish() returns it instead of any PTX, so a
// caller never sees half-written text. Output is a pure function of the calls made.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "kernels/ptx/forms.h"
#include "kernels/ptx/types.h"

namespace ptxserve::ptx {

enum class Space : uint8_t { kGlobal, kShared, kParam, kLocal };

enum class Cmp : uint8_t {
  kEq,
  kNe,
  kLt,
  kLe,
  kGt,
  kGe,
  kLo,  // unsigned <
  kLs,  // unsigned <=
  kHi,  // unsigned >
  kHs,  // unsigned >=
  kEqu,
  kNeu,
  kLtu,
  kLeu,
  kGtu,
  kGeu,
  kNum,  // neither is NaN
  kNan,  // either is NaN
};

// Rounding modifier of cvt: float rounding (rn..rp) or rounding to an integer (rni..rpi).
enum class Round : uint8_t { kNone, kRn, kRz, kRm, kRp, kRni, kRzi, kRmi, kRpi };

enum class ShflMode : uint8_t { kUp, kDown, kBfly, kIdx };

enum class SReg : uint8_t {
  kTidX,
  kTidY,
  kTidZ,
  kNtidX,
  kNtidY,
  kNtidZ,
  kCtaidX,
  kCtaidY,
  kCtaidZ,
  kNctaidX,
  kNctaidY,
  kNctaidZ,
  kLaneId,
};

enum class CacheOp : uint8_t { kDefault, kNonCoherent };  // ld.global.nc for read-only data

enum class MmaShape : uint8_t { kM16N8K8, kM16N8K16 };

// cp.async cache operator: .ca caches in L1 and L2, .cg only in L2 (16-byte copies only).
enum class CpAsyncCache : uint8_t { kCa, kCg };

struct Label {
  uint32_t id = 0;
};

class KernelBuilder {
 public:
  // `name` is the entry's name (a PTX identifier). The target is validated here.
  KernelBuilder(std::string name, Target target);

  const Target& target() const { return target_; }
  const std::string& name() const { return name_; }
  bool ok() const { return status_.ok(); }
  // Records an error found by the caller (e.g. a config check); the first one wins.
  void Fail(absl::string_view message);

  // ---- declarations ----
  // Declares `.param .<t> p_<name>` and loads it into a register.
  Reg Param(absl::string_view name, Type t);
  // A pointer parameter, loaded and converted to a global address (cvta.to.global).
  Reg GlobalPtrParam(absl::string_view name);
  // A static `.shared` array of `bytes` bytes named s_<name>.
  Symbol Shared(absl::string_view name, int64_t bytes, int align = 16);
  // The module's extern dynamic shared array (its size is given at launch).
  Symbol DynamicShared(int align = 16);
  // `.maxntid x, y, z`: the most threads a CTA of this kernel has (register budget).
  void SetMaxThreads(int x, int y = 1, int z = 1);
  Reg NewReg(Type t);

  // ---- table-driven instructions (forms.h) ----
  // Writes `op` of type `t` into a new register (twice as wide for .wide forms, a
  // predicate for setp-like forms). `srcs` are the operands after the destination.
  Reg Emit(Op op, Type t, std::initializer_list<Operand> srcs);
  // Same, into an existing register (loop-carried values).
  void EmitTo(Reg dst, Op op, Type t, std::initializer_list<Operand> srcs);
  Reg Setp(Cmp cmp, Type t, const Operand& a, const Operand& b);
  // mov into a new register of `t` (half types move as .b16/.b32).
  Reg Mov(Type t, const Operand& src);
  void MovTo(Reg dst, const Operand& src);
  // selp: p ? a : b.
  Reg Selp(Type t, const Operand& a, const Operand& b, Reg p);

  // ---- conversions and moves ----
  Reg Cvt(Type dst, Type src, const Operand& a, Round r = Round::kNone);
  void CvtTo(Reg dst, Type src, const Operand& a, Round r = Round::kNone);
  // cvt.rn.{f16x2,bf16x2}.f32: `hi` lands in the upper half, `lo` in the lower half
  // (the lower address when stored).
  Reg CvtPack(Type packed, const Operand& hi, const Operand& lo);
  // mov.bN wide, {parts}: parts[0] is the least significant.
  Reg Pack(Type wide, std::initializer_list<Reg> parts);
  // mov.bN {parts}, wide: splits into registers of `part` (least significant first).
  std::vector<Reg> Unpack(Reg wide, Type part);
  Reg Special(SReg s);
  // The shared-window address (u32) of a shared symbol.
  Reg AddressOf(const Symbol& s);

  // ---- memory ----
  // ld.<space>[.nc][.v<vec>].<t>; returns `vec` registers of type t.
  std::vector<Reg> Ld(Space sp, Type t, const Operand& addr, int vec = 1,
                      CacheOp cache = CacheOp::kDefault);
  Reg Ld1(Space sp, Type t, const Operand& addr, CacheOp cache = CacheOp::kDefault);
  // Loads into existing registers (vec = dsts.size()).
  void LdTo(Space sp, Type t, const Operand& addr, const std::vector<Reg>& dsts,
            CacheOp cache = CacheOp::kDefault);
  // st.<space>[.v<n>].<t> with n = vals.size() registers.
  void St(Space sp, Type t, const Operand& addr, const std::vector<Reg>& vals);
  // atom.<space>.<op>.<t> d, [addr], b (, c for cas).
  Reg Atom(Op op, Space sp, Type t, const Operand& addr, const Operand& b,
           const Operand& c = Operand());
  // red.<space>.<op>.<t> [addr], b: an atomic without a result.
  void Red(Op op, Space sp, Type t, const Operand& addr, const Operand& b);

  // ---- tensor cores and asynchronous copies (builder_tensor.cc) ----
  // mma.sync.aligned.<shape>.row.col.f32.<ab>.<ab>.f32 d, a, b, c: the warp computes
  // D = A * B + C for a 16 x K row-major A and a K x 8 column-major B of `ab` (f16 or bf16)
  // held as packed pairs in b32 registers (K/4 of A and K/8 of B per lane) and a 16 x 8 f32
  // C and D (4 per lane), in the fragment layouts of the PTX ISA ("Matrix Fragments for
  // mma.m16n8k8 / m16n8k16"). Every lane of the warp must execute it: never under a guard.
  // `d` may be `c` (accumulate in place).
  void MmaTo(const std::vector<Reg>& d, MmaShape shape, Type ab, const std::vector<Reg>& a,
             const std::vector<Reg>& b, const std::vector<Reg>& c);
  std::vector<Reg> Mma(MmaShape shape, Type ab, const std::vector<Reg>& a,
                       const std::vector<Reg>& b, const std::vector<Reg>& c);
  // ldmatrix.sync.aligned.m8n8.x<num>[.trans].shared.b16: `num` (1, 2 or 4) 8x8 matrices of
  // 16-bit elements from shared memory, one b32 register per matrix. Lanes 8i..8i+7 give
  // the (16-byte aligned) row addresses of matrix i; lane l receives row l/4, columns
  // 2(l%4) and 2(l%4)+1 (low half first) of each matrix, or of its transpose with `trans`.
  // A whole-warp instruction like Mma.
  std::vector<Reg> Ldmatrix(int num, bool trans, const Operand& shared_addr);
  // cp.async.<cache>.shared.global [dst], [src], bytes{, src_size}: starts copying `bytes`
  // (4, 8 or 16; 16 for .cg) from global to shared memory, both addresses aligned to
  // `bytes`. With `src_size` (u32, at most `bytes`) only that many bytes are read and the
  // rest is zero-filled. The data lands at some point before the thread's wait for the
  // copy's group: reading or overwriting the destination earlier is a race.
  void CpAsync(CpAsyncCache cache, const Operand& shared_dst, const Operand& global_src, int bytes,
               const Operand& src_size = Operand());
  // cp.async.commit_group: this thread's copies since its last commit become one group.
  void CpAsyncCommit();
  // cp.async.wait_group n: waits until at most this thread's `n` newest groups are pending.
  void CpAsyncWait(int n);
  // cp.async.wait_all: commits, then waits for all of this thread's copies.
  void CpAsyncWaitAll();

  // ---- warp and block ----
  // shfl.sync.<mode>.b32 with the full-warp mask; `c` is the clamp/segment operand
  // (default: 0 for up, 31 otherwise). The result has val's type.
  Reg Shfl(ShflMode mode, Reg val, const Operand& b, int c = -1, const Operand& mask = -1);
  void BarSync(int barrier = 0);
  // membar.gl: this thread's global memory accesses before it are seen by the whole device
  // before its accesses after it (a fence that pairs with another thread's, through an
  // atomic, to hand results between CTAs).
  void MembarGl();
  // Programmatic dependent launch (sm_90, PTX ISA 7.8). A kernel launched with
  // CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION may start while the previous
  // kernel of its stream still runs:
  //  - griddepcontrol.launch_dependents: this CTA lets the next kernel launch now (it does
  //    not make this kernel's writes visible to that kernel);
  //  - griddepcontrol.wait: blocks until every prerequisite grid has completed and its
  //    memory is visible. Before it a thread may read only memory the previous kernels do
  //    not write (weights), and must write no global memory.
  // Without the attribute (or on a device without it) both do nothing.
  void GridDepLaunchDependents();
  void GridDepWait();
  // prefetch.global.L2 [addr]: brings the line at `addr` into L2 (no register result).
  void PrefetchL2(const Operand& addr);

  // ---- control flow ----
  Label NewLabel(absl::string_view hint);
  void Bind(Label l);
  void Bra(Label l);
  void BraIf(Reg pred, Label l, bool if_false = false);
  void Ret();
  void Comment(absl::string_view text);

  // While alive, every instruction emitted is predicated on `pred` (or !pred).
  class [[nodiscard]] ScopedGuard {
   public:
    ScopedGuard(KernelBuilder* kb, Reg pred, bool negate);
    ~ScopedGuard();
    ScopedGuard(const ScopedGuard&) = delete;
    ScopedGuard& operator=(const ScopedGuard&) = delete;

   private:
    KernelBuilder* kb_;
  };
  ScopedGuard If(Reg pred, bool negate = false) { return ScopedGuard(this, pred, negate); }

  // The complete module, or the first error. `header` lines become leading comments.
  absl::StatusOr<std::string> Finish(const std::vector<std::string>& header = {});

 private:
  friend class ScopedGuard;
  struct Param_ {
    std::string name;
    Type type;
  };
  struct Shared_ {
    std::string name;
    int64_t bytes;
    int align;
  };

  bool CheckOperand(const Operand& o, Type want, bool allow_imm, absl::string_view what);
  bool CheckDst(Reg dst, Type want, absl::string_view what);
  void Line(absl::string_view opcode, const std::vector<std::string>& operands);
  bool Require(int min_sm, int min_ptx, absl::string_view what);
  static bool AddrOk(Space sp, const Operand& a);
  bool ValidIdent(absl::string_view name, absl::string_view what);

  std::string name_;
  Target target_;
  absl::Status status_;
  std::string body_;
  std::vector<Param_> params_;
  std::vector<Shared_> shared_;
  int dynamic_shared_align_ = 0;
  int maxntid_[3] = {0, 0, 0};
  uint32_t reg_count_[kNumRegClasses] = {};
  std::vector<std::string> label_names_;
  std::vector<bool> label_bound_;
  std::string guard_;
  bool last_was_ret_ = false;
};

}  // namespace ptxserve::ptx
