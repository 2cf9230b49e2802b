// A kernel's launch arguments as one typed struct, so each parameter's name, order and type
// are written once, beside the kernel's Config: the generator declares the PTX parameters
// from the struct (DeclareParams) and every launch packs a filled-in struct (PackParams)
// into cuLaunchKernel's kernelParams. A struct lists its fields in .param order with
// PTXSERVE_PARAMS, which makes its `kParams` tuple of Param(name, &Args::field) entries
// (each parameter is named as its field):
//
//   struct RmsNormArgs {
//     DevicePtr x, w, out;
//     uint32_t num_rows = 0;
//     float eps = 0;
//     PTXSERVE_PARAMS(RmsNormArgs, x, w, out, num_rows, eps);
//   };
//
// A DevicePtr field becomes a .u64 parameter converted to a global address; a pointer the
// kernel of a given Config never dereferences (a GEMM without bias) is declared as a plain
// .u64, so the parameter list is the same for every Config.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "kernels/config_fields.h"
#include "kernels/ptx/builder.h"

namespace ptxserve::kernels {

// A device address (CUdeviceptr), as a kernel's pointer parameter receives it.
struct DevicePtr {
  uint64_t address = 0;
  DevicePtr(uint64_t a = 0) : address(a) {}  // NOLINT: a CUdeviceptr converts implicitly
};

template <class Args, class T>
constexpr NamedField<Args, T> Param(const char* name, T Args::*member) {
  return {name, member};
}

// `static constexpr auto kParams = std::make_tuple(Param("a", &Args::a), ...)` for the
// fields named, in that order (up to 64).
#define PTXSERVE_PARAMS(Args, ...) \
  static constexpr auto kParams = std::make_tuple(PTXSERVE_FOR_EACH_PARAM_(Args, __VA_ARGS__))

// PTXSERVE_FOR_EACH_PARAM_(A, a, b, c) -> Param("a", &A::a), Param("b", &A::b), ...: a
// recursive __VA_OPT__ expansion, each name one more rescan (64 of them here).
#define PTXSERVE_FOR_EACH_PARAM_(Args, ...) \
  __VA_OPT__(PTXSERVE_EXPAND_(PTXSERVE_PARAM_STEP_(Args, __VA_ARGS__)))
#define PTXSERVE_PARAM_STEP_(Args, field, ...)     \
  ::ptxserve::kernels::Param(#field, &Args::field) \
      __VA_OPT__(, PTXSERVE_PARAM_AGAIN_ PTXSERVE_PARENS_(Args, __VA_ARGS__))
#define PTXSERVE_PARAM_AGAIN_() PTXSERVE_PARAM_STEP_
#define PTXSERVE_PARENS_ ()
#define PTXSERVE_EXPAND_(...) \
  PTXSERVE_EXPAND4_(PTXSERVE_EXPAND4_(PTXSERVE_EXPAND4_(PTXSERVE_EXPAND4_(__VA_ARGS__))))
#define PTXSERVE_EXPAND4_(...) \
  PTXSERVE_EXPAND2_(PTXSERVE_EXPAND2_(PTXSERVE_EXPAND2_(PTXSERVE_EXPAND2_(__VA_ARGS__))))
#define PTXSERVE_EXPAND2_(...) \
  PTXSERVE_EXPAND1_(PTXSERVE_EXPAND1_(PTXSERVE_EXPAND1_(PTXSERVE_EXPAND1_(__VA_ARGS__))))
#define PTXSERVE_EXPAND1_(...) __VA_ARGS__

// The PTX type of a scalar parameter.
template <class T>
constexpr ptx::Type ParamType() {
  if constexpr (std::is_same_v<T, uint32_t>) return ptx::Type::kU32;
  if constexpr (std::is_same_v<T, int32_t>) return ptx::Type::kS32;
  if constexpr (std::is_same_v<T, uint64_t>) return ptx::Type::kU64;
  if constexpr (std::is_same_v<T, float>) return ptx::Type::kF32;
  static_assert(std::is_same_v<T, uint32_t> || std::is_same_v<T, int32_t> ||
                    std::is_same_v<T, uint64_t> || std::is_same_v<T, float>,
                "a kernel parameter is a DevicePtr, u32, s32, u64 or f32");
  return ptx::Type::kU32;
}

// The registers DeclareParams gave the parameters of Args, in kParams order:
// `const auto [x, w, out, num_rows, eps] = DeclareParams<A>(kb);`.
template <class Args>
class ParamRegs {
 public:
  static constexpr size_t kCount = std::tuple_size_v<decltype(Args::kParams)>;

  explicit ParamRegs(const std::array<ptx::Reg, kCount>& regs) : regs_(regs) {}

  template <size_t I>
  ptx::Reg get() const {
    return std::get<I>(regs_);
  }
  // An aggregate of kCount registers (named in kParams order) initialised from them.
  template <class S>
  S As() const {
    static_assert(sizeof(S) == sizeof(regs_), "one register per parameter");
    return [&]<size_t... I>(std::index_sequence<I...>) { return S{std::get<I>(regs_)...}; }
    (std::make_index_sequence<kCount>{});
  }

 private:
  std::array<ptx::Reg, kCount> regs_;
};

// Declares the parameters of Args on `kb`, in kParams order (each parameter's ld.param, and
// for a pointer its cvta.to.global, at this point of the kernel). Pointers in `unused` stay
// plain .u64 parameters.
template <class Args>
ParamRegs<Args> DeclareParams(ptx::KernelBuilder& kb,
                              const std::vector<DevicePtr Args::*>& unused = {}) {
  std::array<ptx::Reg, ParamRegs<Args>::kCount> regs;
  size_t i = 0;
  const auto declare = [&](const auto& field) {
    using T = std::remove_cvref_t<decltype(std::declval<Args&>().*(field.member))>;
    if constexpr (std::is_same_v<T, DevicePtr>) {
      bool used = true;
      for (DevicePtr Args::*u : unused) used = used && u != field.member;
      regs[i++] = used ? kb.GlobalPtrParam(field.name) : kb.Param(field.name, ptx::Type::kU64);
    } else {
      regs[i++] = kb.Param(field.name, ParamType<T>());
    }
  };
  std::apply([&](const auto&... field) { (declare(field), ...); }, Args::kParams);
  return ParamRegs<Args>(regs);
}

// cuLaunchKernel's kernelParams for `args`: one pointer per parameter, in kParams order,
// valid while `args` lives (the driver copies the values at launch and at graph capture).
template <class Args>
std::array<void*, std::tuple_size_v<decltype(Args::kParams)>> PackParams(Args& args) {
  return std::apply(
      [&](const auto&... field) {
        return std::array<void*, sizeof...(field)>{static_cast<void*>(&(args.*(field.member)))...};
      },
      Args::kParams);
}

}  // namespace ptxserve::kernels

template <class Args>
struct std::tuple_size<ptxserve::kernels::ParamRegs<Args>>
    : std::integral_constant<size_t, ptxserve::kernels::ParamRegs<Args>::kCount> {};
template <size_t I, class Args>
struct std::tuple_element<I, ptxserve::kernels::ParamRegs<Args>> {
  using type = ptxserve::ptx::Reg;
};
