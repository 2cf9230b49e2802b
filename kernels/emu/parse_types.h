// Internal to the emulator's front end: the parsed-but-not-decoded form of a function
// (parser.cc fills it, decode*.cc turn it into Instr).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "kernels/emu/module.h"

namespace ptxserve::emu {

// A register name resolved at parse time (PTX register scopes are lexical).
struct RegRef {
  bool pred = false;
  uint16_t index = 0;  // data slot or predicate index
  Ty type = Ty::kNone;
};

struct RawOperand {
  enum Kind : uint8_t { kReg, kInt, kFloat, kSym, kSpecial, kAddr, kVec, kSink };
  Kind kind = kSink;
  RegRef reg;             // kReg; kAddr with a register base
  bool has_reg2 = false;  // "d|p" dual destination
  RegRef reg2;
  bool neg = false;    // "!%p"
  uint64_t ival = 0;   // kInt
  uint64_t fbits = 0;  // kFloat (see Token)
  bool f32_bits = false;
  std::string name;               // kSym, kSpecial ("%tid.x"), kAddr symbol base
  bool addr_reg = false;          // kAddr: base is a register (reg), else symbol (name) or none
  int64_t offset = 0;             // kAddr
  std::vector<RawOperand> elems;  // kVec
};

struct RawInstr {
  int32_t line = 0;
  bool has_guard = false;
  RegRef guard;
  bool guard_neg = false;
  std::string opcode;
  std::vector<std::string> mods;  // without dots
  std::vector<RawOperand> ops;
};

struct SharedVar {
  uint32_t align = 1;
  uint32_t size = 0;
  bool is_extern = false;
};

// State shared by parsing and decoding one function.
struct FnBuilder {
  Function* fn = nullptr;
  const Module* module = nullptr;  // .version and .target, for instructions gated by them
  std::vector<RawInstr> raw;
  absl::flat_hash_map<std::string, uint32_t> labels;  // -> instruction index
  absl::flat_hash_map<std::string, uint32_t> params;  // -> index into fn->params
  const absl::flat_hash_map<std::string, SharedVar>* module_shared = nullptr;
  absl::flat_hash_map<std::string, SharedVar> local_shared;
  absl::flat_hash_map<std::string, uint32_t> shared_offset;  // laid out on first use
  absl::flat_hash_map<std::string, SharedVar> local_vars;    // .local declarations
  absl::flat_hash_map<std::string, uint32_t> local_offset;
  absl::flat_hash_map<uint64_t, uint16_t> const_slots;
  absl::flat_hash_map<uint8_t, uint16_t> special_slots;
  uint16_t sink_slot = UINT16_MAX;

  absl::StatusOr<uint16_t> NewSlot(std::string name);
  absl::StatusOr<uint16_t> ConstSlot(uint64_t bits);
  absl::StatusOr<uint16_t> SpecialSlot(Special s);
  absl::StatusOr<uint16_t> SinkSlot();
  // Shared-space offset of a .shared variable (laid out on first reference), or NotFound.
  absl::StatusOr<uint32_t> SharedAddress(const std::string& name);
  // Local-space offset of a .local variable (laid out on first reference), or NotFound.
  absl::StatusOr<uint32_t> LocalAddress(const std::string& name);
};

// Decodes b.raw into b.fn->code. Errors name the PTX line.
absl::Status DecodeFunction(FnBuilder& b);

}  // namespace ptxserve::emu
