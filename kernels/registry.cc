// Each entry turns a string map into its kernel's Config through the Config's kFields;
// values are parsed strictly (whole string, in range) so a typo is an error, not a
// default.
#include "kernels/registry.h"

#include <fstream>
#include <functional>
#include <tuple>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "kernels/common.h"
#include "kernels/kernel_list.h"

namespace ptxserve::kernels {
namespace {

// Typed reads from a settings map; the first parse error is kept.
class Reader {
 public:
  explicit Reader(const KernelSettings& s) : s_(s) {}

  void Read(const std::string& key, int* v) {
    if (!absl::SimpleAtoi(Get(key), v)) Error(key, "an integer");
  }
  void Read(const std::string& key, bool* v) {
    const std::string& text = Get(key);
    *v = text == "1" || text == "true";
    if (!*v && text != "0" && text != "false") Error(key, "true/false/1/0");
  }
  void Read(const std::string& key, ElemType* v) {
    if (!ParseElemType(Get(key), v)) Error(key, "f32, f16 or bf16");
  }
  void Read(const std::string& key, BlockFormat* v) {
    if (!ParseBlockFormat(Get(key), v)) Error(key, "q8_0 or q4_0");
  }
  void Read(const std::string& key, RopeLayout* v) {
    const std::string& text = Get(key);
    *v = text == "rotate_half" ? RopeLayout::kRotateHalf : RopeLayout::kInterleaved;
    if (text != "rotate_half" && text != "interleaved") Error(key, "rotate_half or interleaved");
  }
  ptx::Target Target() {
    ptx::Target t;
    Read("sm", &t.sm);
    const std::string v = absl::StrReplaceAll(Get("ptx"), {{".", ""}});
    if (!absl::SimpleAtoi(v, &t.ptx_version)) Error("ptx", "an ISA version like 7.8");
    return t;
  }
  const absl::Status& status() const { return status_; }

 private:
  const std::string& Get(const std::string& key) {
    static const std::string kEmpty;
    auto it = s_.find(key);
    return it == s_.end() ? kEmpty : it->second;
  }
  void Error(const std::string& key, absl::string_view want) {
    if (status_.ok()) {
      status_ = absl::InvalidArgumentError(
          absl::StrCat("setting ", key, "='", Get(key), "': want ", want));
    }
  }

  const KernelSettings& s_;
  absl::Status status_;
};

// A setting's text, as Reader reads it back.
std::string Format(int v) { return absl::StrCat(v); }
std::string Format(bool v) { return v ? "true" : "false"; }
std::string Format(ElemType v) { return std::string(ElemTypeName(v)); }
std::string Format(BlockFormat v) { return std::string(BlockFormatName(v)); }
std::string Format(RopeLayout v) {
  return v == RopeLayout::kRotateHalf ? "rotate_half" : "interleaved";
}

struct Entry {
  std::string name;
  KernelSettings defaults;  // without the common sm/ptx keys
  std::function<absl::StatusOr<std::string>(Reader&)> generate;
};

// The entry of a listed kernel (kernel_list.h): its settings are its Config's kFields
// (config_fields.h), their defaults a default-constructed Config's.
template <class K>
Entry MakeEntry(K) {
  using Config = typename K::Config;
  Entry e;
  e.name = K::kName;
  const Config defaults;
  std::apply(
      [&](const auto&... field) {
        (e.defaults.emplace(field.name, Format(defaults.*(field.member))), ...);
      },
      Config::kFields);
  e.generate = [](Reader& r) -> absl::StatusOr<std::string> {
    Config c;
    std::apply([&](const auto&... field) { (r.Read(field.name, &(c.*(field.member))), ...); },
               Config::kFields);
    c.target = r.Target();
    if (!r.status().ok()) return r.status();
    return K::Generate(c);
  };
  return e;
}

const std::vector<Entry>& Entries() {
  static const std::vector<Entry>* entries = [] {
    auto* all = new std::vector<Entry>;
    ForEachKernel([&](auto kernel) { all->push_back(MakeEntry(kernel)); });
    return all;
  }();
  return *entries;
}

const Entry* Find(absl::string_view name) {
  for (const Entry& e : Entries()) {
    if (e.name == name) return &e;
  }
  return nullptr;
}

KernelSettings WithCommon(const KernelSettings& d) {
  const ptx::Target t;
  KernelSettings all = d;
  all["sm"] = absl::StrCat(t.sm);
  all["ptx"] = t.VersionText();
  return all;
}

}  // namespace

std::vector<std::string> KernelNames() {
  std::vector<std::string> names;
  for (const Entry& e : Entries()) names.push_back(e.name);
  std::sort(names.begin(), names.end());
  return names;
}

absl::StatusOr<KernelSettings> KernelDefaults(absl::string_view name) {
  const Entry* e = Find(name);
  if (e == nullptr) {
    return absl::NotFoundError(
        absl::StrCat("unknown kernel '", name, "'; known: ", absl::StrJoin(KernelNames(), ", ")));
  }
  return WithCommon(e->defaults);
}

absl::StatusOr<std::string> GeneratePtxByName(absl::string_view name,
                                              const KernelSettings& settings) {
  absl::StatusOr<KernelSettings> defaults = KernelDefaults(name);
  if (!defaults.ok()) return defaults.status();
  KernelSettings merged = *defaults;
  for (const auto& [key, value] : settings) {
    if (!merged.contains(key)) {
      std::vector<std::string> keys;
      for (const auto& kv : merged) keys.push_back(kv.first);
      return absl::InvalidArgumentError(absl::StrCat("kernel ", name, ": unknown setting '", key,
                                                     "'; known: ", absl::StrJoin(keys, ", ")));
    }
    merged[key] = value;
  }
  Reader r(merged);
  absl::StatusOr<std::string> ptx = Find(name)->generate(r);
  if (!ptx.ok()) {
    return absl::Status(ptx.status().code(),
                        absl::StrCat("kernel ", name, ": ", ptx.status().message()));
  }
  return ptx;
}

absl::Status WriteAllPtx(const std::string& dir, const ptx::Target& target) {
  for (const std::string& name : KernelNames()) {
    absl::StatusOr<std::string> ptx = GeneratePtxByName(
        name, {{"sm", absl::StrCat(target.sm)}, {"ptx", absl::StrCat(target.ptx_version)}});
    if (!ptx.ok()) return ptx.status();
    const std::string path = absl::StrCat(dir, "/", name, ".ptx");
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out << *ptx;
    out.close();
    if (!out) return absl::InternalError(absl::StrCat("cannot write ", path));
  }
  return absl::OkStatus();
}

}  // namespace ptxserve::kernels
