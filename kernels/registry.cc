// Each entry turns a string map into its kernel's Config; values are parsed
// strictly (whole string, in range) so a typo is an error, not a default.
#include "kernels/registry.h"

#include <fstream>
#include <functional>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "kernels/argmax.h"
#include "kernels/attention_merge.h"
#include "kernels/common.h"
#include "kernels/decode_attention.h"
#include "kernels/embedding.h"
#include "kernels/gemm.h"
#include "kernels/kv_scatter.h"
#include "kernels/logprobs.h"
#include "kernels/penalties.h"
#include "kernels/rmsnorm.h"
#include "kernels/rope.h"
#include "kernels/sampling.h"
#include "kernels/silu_mul.h"

namespace ptxserve::kernels {
namespace {

// Typed reads from a settings map; the first parse error is kept.
class Reader {
 public:
  explicit Reader(const KernelSettings& s) : s_(s) {}

  int Int(const std::string& key) {
    int v = 0;
    if (!absl::SimpleAtoi(Get(key), &v)) Error(key, "an integer");
    return v;
  }
  double Float(const std::string& key) {
    double v = 0;
    if (!absl::SimpleAtod(Get(key), &v)) Error(key, "a number");
    return v;
  }
  bool Bool(const std::string& key) {
    const std::string& v = Get(key);
    if (v == "1" || v == "true") return true;
    if (v != "0" && v != "false") Error(key, "true/false/1/0");
    return false;
  }
  ElemType Elem(const std::string& key) {
    ElemType t = ElemType::kF32;
    if (!ParseElemType(Get(key), &t)) Error(key, "f32, f16 or bf16");
    return t;
  }
  RopeLayout Layout(const std::string& key) {
    const std::string& v = Get(key);
    if (v == "rotate_half") return RopeLayout::kRotateHalf;
    if (v != "interleaved") Error(key, "rotate_half or interleaved");
    return RopeLayout::kInterleaved;
  }
  ptx::Target Target() {
    ptx::Target t;
    t.sm = Int("sm");
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

struct Entry {
  std::string name;
  KernelSettings defaults;  // without the common sm/ptx keys
  std::function<absl::StatusOr<std::string>(Reader&)> generate;
};

template <typename Config>
absl::StatusOr<std::string> Run(Reader& r, const Config& cfg,
                                absl::StatusOr<std::string> (*fn)(const Config&)) {
  if (!r.status().ok()) return r.status();
  return fn(cfg);
}

const std::vector<Entry>& Entries() {
  static const std::vector<Entry>* entries = new std::vector<Entry>{
      {"kv_scatter",
       {{"num_kv_heads", "8"}, {"head_dim", "128"}, {"block_size", "16"}, {"kv_dtype", "f16"}},
       [](Reader& r) {
         KvScatterConfig c;
         c.num_kv_heads = r.Int("num_kv_heads");
         c.head_dim = r.Int("head_dim");
         c.block_size = r.Int("block_size");
         c.kv_dtype = r.Elem("kv_dtype");
         c.target = r.Target();
         return Run(r, c, &GenerateKvScatter);
       }},
      {"attention_merge",
       {{"num_heads", "32"}, {"head_dim", "128"}},
       [](Reader& r) {
         AttentionMergeConfig c;
         c.num_heads = r.Int("num_heads");
         c.head_dim = r.Int("head_dim");
         c.target = r.Target();
         return Run(r, c, &GenerateAttentionMerge);
       }},
      {"argmax",
       {{"threads", "256"}},
       [](Reader& r) {
         ArgmaxConfig c;
         c.threads = r.Int("threads");
         c.target = r.Target();
         return Run(r, c, &GenerateArgmax);
       }},
      {"decode_attention",
       {{"num_heads", "32"},
        {"num_kv_heads", "8"},
        {"head_dim", "128"},
        {"block_size", "16"},
        {"kv_dtype", "f16"},
        {"split", "false"},
        {"ragged", "false"},
        {"num_warps", "0"}},
       [](Reader& r) {
         DecodeAttentionConfig c;
         c.num_heads = r.Int("num_heads");
         c.num_kv_heads = r.Int("num_kv_heads");
         c.head_dim = r.Int("head_dim");
         c.block_size = r.Int("block_size");
         c.kv_dtype = r.Elem("kv_dtype");
         c.split = r.Bool("split");
         c.ragged = r.Bool("ragged");
         c.num_warps = r.Int("num_warps");
         c.target = r.Target();
         return Run(r, c, &GenerateDecodeAttention);
       }},
      {"embedding",
       {{"dim", "4096"}, {"table_dtype", "f32"}},
       [](Reader& r) {
         EmbeddingConfig c;
         c.dim = r.Int("dim");
         c.table_dtype = r.Elem("table_dtype");
         c.target = r.Target();
         return Run(r, c, &GenerateEmbedding);
       }},
      {"gemm",
       {{"n", "4096"},
        {"k", "4096"},
        {"weight_dtype", "f16"},
        {"has_bias", "false"},
        {"accumulate", "false"},
        {"m_tile", "4"},
        {"warps", "4"},
        {"tiled", "false"}},
       [](Reader& r) {
         GemmConfig c;
         c.n = r.Int("n");
         c.k = r.Int("k");
         c.weight_dtype = r.Elem("weight_dtype");
         c.has_bias = r.Bool("has_bias");
         c.accumulate = r.Bool("accumulate");
         c.m_tile = r.Int("m_tile");
         c.warps = r.Int("warps");
         c.tiled = r.Bool("tiled");
         c.target = r.Target();
         return Run(r, c, &GenerateGemm);
       }},
      {"logprobs",
       {{"threads", "256"}, {"max_top", "20"}},
       [](Reader& r) {
         LogprobsConfig c;
         c.threads = r.Int("threads");
         c.max_top = r.Int("max_top");
         c.target = r.Target();
         return Run(r, c, &GenerateLogprobs);
       }},
      {"penalties",
       {{"threads", "256"}},
       [](Reader& r) {
         PenaltiesConfig c;
         c.threads = r.Int("threads");
         c.target = r.Target();
         return Run(r, c, &GeneratePenalties);
       }},
      {"rmsnorm",
       {{"dim", "4096"}, {"weight_dtype", "f32"}},
       [](Reader& r) {
         RmsNormConfig c;
         c.dim = r.Int("dim");
         c.weight_dtype = r.Elem("weight_dtype");
         c.target = r.Target();
         return Run(r, c, &GenerateRmsNorm);
       }},
      {"rope",
       {{"num_heads", "32"}, {"num_kv_heads", "8"}, {"head_dim", "128"}, {"layout", "rotate_half"}},
       [](Reader& r) {
         RopeConfig c;
         c.num_heads = r.Int("num_heads");
         c.num_kv_heads = r.Int("num_kv_heads");
         c.head_dim = r.Int("head_dim");
         c.layout = r.Layout("layout");
         c.target = r.Target();
         return Run(r, c, &GenerateRope);
       }},
      {"sampling",
       {{"threads", "256"}},
       [](Reader& r) {
         SamplingConfig c;
         c.threads = r.Int("threads");
         c.target = r.Target();
         return Run(r, c, &GenerateSampling);
       }},
      {"silu_mul",
       {{"fused_inter", "0"}},
       [](Reader& r) {
         SiluMulConfig c;
         c.fused_inter = r.Int("fused_inter");
         c.target = r.Target();
         return Run(r, c, &GenerateSiluMul);
       }},
  };
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
