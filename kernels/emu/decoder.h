// Internal to the emulator's front end: turns one RawInstr into an Instr. decoder.cc holds
// modifier and operand handling, decode_*.cc the per-opcode rules.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_format.h"
#include "kernels/emu/ops.h"
#include "kernels/emu/parse_types.h"

namespace ptxserve::emu {

// Modifier categories, so each opcode can say which it accepts.
enum ModCat : uint32_t {
  kMType = 1u << 0,
  kMRound = 1u << 1,
  kMFtz = 1u << 2,
  kMSat = 1u << 3,
  kMApprox = 1u << 4,  // .approx / .full
  kMWidth = 1u << 5,   // .lo / .hi / .wide
  kMCmp = 1u << 6,
  kMBool = 1u << 7,
  kMSpace = 1u << 8,
  kMVec = 1u << 9,
  kMHint = 1u << 10,   // cache operators and eviction priorities: no effect here
  kMSem = 1u << 11,    // .volatile .relaxed .acquire .release .weak ...
  kMScope = 1u << 12,  // .cta .gpu .sys .cluster
  kMSync = 1u << 13,   // .sync .aligned
  kMShfl = 1u << 14,
  kMVote = 1u << 15,
  kMAop = 1u << 16,
  kMUni = 1u << 17,
  kMTo = 1u << 18,
  kMNc = 1u << 19,
};

struct Mods {
  std::vector<Ty> types;
  Round rnd = Round::kNone;
  bool ftz = false, sat = false, approx = false, full = false, to = false, nc = false;
  bool sync = false, aligned = false, uni = false;
  Width width = Width::kNone;
  bool has_cmp = false;
  Cmp cmp = Cmp::kEq;
  BoolOp bop = BoolOp::kNone;
  bool has_space = false;
  Space space = Space::kGeneric;
  int vec = 1;
  bool has_shfl = false;
  ShflMode shfl = ShflMode::kIdx;
  bool has_vote = false;
  VoteMode vote = VoteMode::kAll;
  AtomOp aop = AtomOp::kNone;
  uint32_t seen = 0;
};

class Decoder {
 public:
  Decoder(FnBuilder& b, const RawInstr& r, Instr& in, Op op) : b_(b), r_(r), in_(in), op_(op) {}

  // Decodes r_ into in_ (control flow targets included).
  absl::Status Run();

 private:
  template <typename... Args>
  absl::Status Err(const absl::FormatSpec<Args...>& fmt, const Args&... args) const {
    return absl::InvalidArgumentError(absl::StrCat(
        absl::StrFormat("PTX line %d: '%s': ", r_.line, Spelled()), absl::StrFormat(fmt, args...)));
  }
  std::string Spelled() const;

  absl::Status ParseMods(uint32_t allowed);
  absl::Status NeedOps(size_t n) const;
  absl::Status NeedOps(size_t lo, size_t hi) const;
  Ty OneType() const { return m_.types.size() == 1 ? m_.types[0] : Ty::kNone; }
  absl::Status NeedTypes(size_t n) const;
  // Refuses what ptxas would: an instruction newer than the module's .target or .version.
  absl::Status NeedTarget(int min_sm, int min_ptx) const;

  absl::StatusOr<uint64_t> ImmBits(const RawOperand& o, Ty ty) const;
  // A data source operand (register, immediate, special register) as a slot.
  absl::StatusOr<uint16_t> Src(const RawOperand& o, Ty ty);
  absl::StatusOr<uint16_t> Dst(const RawOperand& o, Ty ty);
  absl::Status SetSrc(int k, size_t op_index, Ty ty);
  absl::Status SetDst(int k, size_t op_index, Ty ty);
  absl::Status PredSrc(int k, const RawOperand& o);
  absl::Status PredDst(int k, const RawOperand& o);
  absl::Status Address(const RawOperand& o, Space sp);
  void Check(uint16_t slot, bool is_reg);
  bool RegFits(Ty reg, Ty inst) const;

  absl::Status Alu();
  absl::Status Setp();
  absl::Status Mov();
  absl::Status Cvt();
  absl::Status Cvta();
  absl::Status LdSt();
  absl::Status Atom();
  absl::Status Shfl();
  absl::Status Vote();
  absl::Status Redux();
  absl::Status Bar();
  absl::Status BitScan();  // bfind, shf
  absl::Status Cp();
  absl::Status Ldmatrix();
  absl::Status Mma();
  absl::Status Misc();

  FnBuilder& b_;
  const RawInstr& r_;
  Instr& in_;
  Op op_;
  Mods m_;
  bool relaxed_ = false;  // ld/st/cvt: wider integer/bit registers allowed
};

}  // namespace ptxserve::emu
