// A loaded PTX module after parsing and decoding: one Function per .entry, holding the
// decoded instruction array, the parameter layout, register-file shape and shared layout.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "kernels/emu/ir.h"

namespace ptxserve::emu {

// Per-thread values a special register slot is filled with at block start.
enum class Special : uint8_t {
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
  kWarpId,
  kNWarpId,
  kSmId,
  kNSmId,
  kGridId,
  kLanemaskEq,
  kLanemaskLe,
  kLanemaskLt,
  kLanemaskGe,
  kLanemaskGt,
  kDynamicSmemSize,
  kTotalSmemSize,
};

struct ParamInfo {
  std::string name;
  uint32_t offset = 0;  // in the launch's parameter buffer
  uint32_t size = 0;
  uint32_t align = 1;
};

struct Function {
  std::string name;
  int32_t line = 0;  // line of the .entry directive
  std::vector<Instr> code;
  std::vector<ParamInfo> params;
  uint32_t param_bytes = 0;
  uint32_t num_slots = 0;  // data register slots (declared registers, constants, specials)
  uint32_t num_preds = 0;
  std::vector<std::pair<uint16_t, uint64_t>> consts;   // slot, value in every lane
  std::vector<std::pair<uint16_t, Special>> specials;  // slot, what it holds
  std::vector<std::string> slot_names;                 // for messages
  std::vector<std::string> pred_names;
  uint32_t static_shared = 0;   // bytes of .shared variables the function uses
  uint32_t dynamic_offset = 0;  // where the .extern .shared array starts
  bool uses_dynamic_shared = false;
  uint32_t local_bytes = 0;    // per-thread .local variables
  bool uses_cp_async = false;  // needs the per-block cp.async state (async_copy.h)
  // griddepcontrol.wait / .launch_dependents appear (dependent_launch.h).
  bool waits_on_grid = false;
  bool triggers_dependents = false;
  Dim3u reqntid{0, 0, 0};  // 0 = not given
  Dim3u maxntid{0, 0, 0};
};

struct Module {
  int version_major = 0, version_minor = 0;
  std::string target;
  uint64_t ptx_hash = 0;  // PtxHash of the text (counters.h), set by Emulator::LoadModule
  std::vector<std::unique_ptr<Function>> functions;
  const Function* Find(std::string_view name) const {
    for (const auto& f : functions) {
      if (f->name == name) return f.get();
    }
    return nullptr;
  }
};

// Parses and decodes PTX text. Errors name the line and the offending token, opcode or
// modifier; unsupported constructs are errors, never ignored.
absl::StatusOr<std::unique_ptr<Module>> ParseModule(std::string_view text);

}  // namespace ptxserve::emu
