// What every kernel generator writes with: the PTX builder, its names brought into
// namespace kernels (so a generator reads like the PTX it emits), the typed launch
// arguments it declares its parameters from, and the frame every generator runs in.
#pragma once

#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "kernels/kernel_params.h"
#include "kernels/ptx/builder.h"

namespace ptxserve::kernels {

using ptx::CacheOp;
using ptx::Cmp;
using ptx::KernelBuilder;
using ptx::Label;
using ptx::Op;
using ptx::Operand;
using ptx::Reg;
using ptx::Round;
using ptx::Space;
using ptx::SReg;
using ptx::Type;

// `cfg`'s Validate() error, naming the kernel ("<entry> config: ...").
template <class Config>
absl::Status CheckConfig(const Config& cfg) {
  if (absl::Status s = cfg.Validate(); !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(Config::kEntry, " config: ", s.message()));
  }
  return absl::OkStatus();
}

// The frame of a generator: checks `cfg` (CheckConfig), opens a builder for the kernel's
// entry (its .maxntid BlockThreads(cfg) where the Config says), lets `body` write the kernel, and
// finishes it with a header naming the config key, and the note `body` returns when it returns a
// non-empty string.
template <class Config, class Body>
absl::StatusOr<std::string> GenerateKernel(const Config& cfg, Body&& body) {
  if (absl::Status s = CheckConfig(cfg); !s.ok()) return s;
  KernelBuilder kb(Config::kEntry, cfg.target);
  if constexpr (HasBlockThreads<Config>) kb.SetMaxThreads(BlockThreads(cfg));
  std::vector<std::string> header = {
      absl::StrCat("kernel ", Config::kEntry, ", config ", cfg.Key())};
  if constexpr (std::is_void_v<std::invoke_result_t<Body, KernelBuilder&>>) {
    body(kb);
  } else {
    std::string note = body(kb);
    if (!note.empty()) header.push_back(std::move(note));
  }
  return kb.Finish(header);
}

}  // namespace ptxserve::kernels
