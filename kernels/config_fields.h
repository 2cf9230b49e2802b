// A kernel Config is one definition: its settable fields, listed once in a `kFields` tuple
// beside the fields themselves, drive its cache key (Key()), its checks (Validate()) and the
// registry's `ptxserve ptx --set key=value` parsing and defaults. The target, common to
// all, is not listed. The same NamedField lists a kernel's launch arguments
// (kernel_params.h).
//
//   inline constexpr char kRmsNormEntry[] = "rmsnorm";
//   struct RmsNormConfig : KernelConfig<RmsNormConfig, kRmsNormEntry> {
//     int dim = 4096;
//     ElemType weight_dtype = ElemType::kF32;
//     ptx::Target target;
//     static constexpr auto kFields =
//         std::make_tuple(Field("dim", &RmsNormConfig::dim).Key("dim").Range(1, 65536),
//                         Field("weight_dtype", &RmsNormConfig::weight_dtype).Key(""));
//   };
//
// gives keys like "rmsnorm:dim4096:f32:sm80_ptx78": the entry name, then ":<tag><value>"
// for each keyed field in kFields order (a bool field adds ":<tag>" only when true; an enum
// field its KeyText), then the target. Validate() checks the target, each field's range in
// kFields order, then the Config's own `CheckAcrossFields()` when it has one (rules that
// relate fields, such as num_heads being a multiple of num_kv_heads).
#pragma once

#include <cstdint>
#include <string>
#include <tuple>
#include <type_traits>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "kernels/common.h"
#include "kernels/ptx/types.h"

namespace ptxserve::kernels {

// A data member and the name it goes by outside C++ (a setting, a .param).
template <class Owner, class T>
struct NamedField {
  const char* name;
  T Owner::*member;
};

// A Config's setting: its name, its part of the config key and the values it may take.
template <class Owner, class T>
struct ConfigField : NamedField<Owner, T> {
  const char* key_tag = nullptr;      // nullptr: not part of the key
  bool Owner::*key_unless = nullptr;  // left out of the key while this flag is set
  bool Owner::*key_when = nullptr;    // in the key only while this flag is set
  bool key_omit_default = false;      // left out of the key at the value `key_default`
  int64_t key_default = 0;
  bool key_unless_f32 = false;       // an ElemType left out of the key while it is f32
  int64_t lo = 0, hi = 0, step = 0;  // step 0: any value

  // In the key as ":<tag><value>" (bool: ":<tag>" when true), except while `unless` is set.
  constexpr ConfigField Key(const char* tag, bool Owner::*unless = nullptr) const {
    ConfigField f = *this;
    f.key_tag = tag;
    f.key_unless = unless;
    return f;
  }
  // In the key as Key(tag) does, but only while `when` is set: a setting of one form.
  constexpr ConfigField KeyWhen(const char* tag, bool Owner::*when) const {
    ConfigField f = Key(tag);
    f.key_when = when;
    return f;
  }
  // In the key as Key(tag) does, except at `value` (a setting that most configs leave at
  // its default, so their keys stay as they were before it existed).
  constexpr ConfigField KeyUnlessValue(const char* tag, int64_t value) const {
    ConfigField f = Key(tag);
    f.key_omit_default = true;
    f.key_default = value;
    return f;
  }
  // An element type in the key as Key(tag) does, except while it is f32: a type added to a
  // kernel whose f32 form came first keeps that form's key (and golden text).
  constexpr ConfigField KeyUnlessF32(const char* tag) const {
    static_assert(std::is_same_v<T, ElemType>, "KeyUnlessF32 is for an element type");
    ConfigField f = Key(tag);
    f.key_unless_f32 = true;
    return f;
  }
  // Valid values: lo..hi, and a multiple of `multiple_of`.
  constexpr ConfigField Range(int64_t min, int64_t max, int64_t multiple_of = 1) const {
    static_assert(std::is_integral_v<T>, "a range is for an integer field");
    ConfigField f = *this;
    f.lo = min;
    f.hi = max;
    f.step = multiple_of;
    return f;
  }

  absl::Status Check(const Owner& c) const {
    if (step == 0) return absl::OkStatus();
    const int64_t v = static_cast<int64_t>(c.*(this->member));
    if (step == 1) return CheckRange(this->name, v, lo, hi);
    if (v < lo || v > hi || v % step != 0) {
      return absl::InvalidArgumentError(absl::StrCat(this->name, " = ", v, ": want a multiple of ",
                                                     step, " in [", lo, ", ", hi, "]"));
    }
    return absl::OkStatus();
  }

  void AppendKey(const Owner& c, std::string* key) const {
    if (key_tag == nullptr || (key_unless != nullptr && c.*key_unless) ||
        (key_when != nullptr && !(c.*key_when))) {
      return;
    }
    const T& v = c.*(this->member);
    if constexpr (std::is_integral_v<T>) {
      if (key_omit_default && static_cast<int64_t>(v) == key_default) return;
    }
    if constexpr (std::is_same_v<T, ElemType>) {
      if (key_unless_f32 && v == ElemType::kF32) return;
    }
    if constexpr (std::is_same_v<T, bool>) {
      if (v) absl::StrAppend(key, ":", key_tag);
    } else if constexpr (std::is_integral_v<T>) {
      absl::StrAppend(key, ":", key_tag, v);
    } else {
      absl::StrAppend(key, ":", key_tag, KeyText(v));
    }
  }
};

template <class Config, class T>
constexpr ConfigField<Config, T> Field(const char* name, T Config::*member) {
  return {{name, member}};
}

// Settings several kernels share, with one rule each.
// Threads per CTA: whole warps, at most 1024 (":t<threads>" in the key).
template <class Config>
constexpr ConfigField<Config, int> ThreadsField(int Config::*member) {
  return Field("threads", member).Key("t").Range(32, 1024, 32);
}
// head_dim: a multiple of 32 in [32, 256], so one warp covers a head in whole vectors
// (":d<head_dim>" in the key).
template <class Config>
constexpr ConfigField<Config, int> HeadDimField(int Config::*member) {
  return Field("head_dim", member).Key("d").Range(32, 256, 32);
}

// The base of every kernel Config: the .entry name, and Validate() and Key() from the
// Config's kFields and target.
//
// A Config declares `ptx::Target target;` after its fields. Fill a Config by assigning its
// fields: a designated initializer cannot name the base, which GCC's
// -Wmissing-field-initializers then reports.
template <class Config, const char* kName>
struct KernelConfig {
  static constexpr const char* kEntry = kName;

  absl::Status Validate() const {
    const Config& c = static_cast<const Config&>(*this);
    absl::Status s = c.target.Validate();
    std::apply([&](const auto&... field) { ((s = s.ok() ? field.Check(c) : s), ...); },
               Config::kFields);
    if constexpr (requires { c.CheckAcrossFields(); }) {
      if (s.ok()) s = c.CheckAcrossFields();
    }
    return s;
  }

  // The kernel-cache key: every keyed field, e.g. "rope_kv:h32:kvh8:d128:half:bs16:f16:sm80_ptx78".
  std::string Key() const {
    const Config& c = static_cast<const Config&>(*this);
    std::string key = kName;
    std::apply([&](const auto&... field) { (field.AppendKey(c, &key), ...); }, Config::kFields);
    absl::StrAppend(&key, ":", c.target.Key());
    return key;
  }
};

}  // namespace ptxserve::kernels
