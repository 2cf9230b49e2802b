// A kernel Config's settable fields, listed once in a `kFields` tuple beside the fields
// themselves (the target is common to all and not listed): the registry reads
// `ptxserve ptx --set key=value` into them and prints their defaults from them. The same
// NamedField lists a kernel's launch arguments (kernel_params.h).
//
//   struct RmsNormConfig {
//     int dim = 4096;
//     ElemType weight_dtype = ElemType::kF32;
//     ptx::Target target;
//     static constexpr auto kFields = std::make_tuple(
//         Field("dim", &RmsNormConfig::dim), Field("weight_dtype", &RmsNormConfig::weight_dtype));
//   };
#pragma once

#include <tuple>

namespace ptxserve::kernels {

// A data member and the name it goes by outside C++ (a setting, a .param).
template <class Owner, class T>
struct NamedField {
  const char* name;
  T Owner::*member;
};

template <class Config, class T>
constexpr NamedField<Config, T> Field(const char* name, T Config::*member) {
  return {name, member};
}

}  // namespace ptxserve::kernels
