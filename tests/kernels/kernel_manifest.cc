#include "tests/kernels/kernel_manifest.h"

#include <algorithm>
#include <filesystem>
#include <iterator>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "engine/backend.h"
#include "engine/cuda/emulated_driver.h"
#include "engine/cuda/gpu_backend.h"
#include "engine/cuda/kernel_set.h"
#include "engine/model/config.h"
#include "engine/model/synthetic.h"
#include "engine/util/file.h"
#include "kernels/emu/counters.h"

namespace ptxserve::cuda::testing {
namespace {

// What the manifest covers. Profiles: every --emulated-device (EmulatedDeviceProfileNames;
// a new profile belongs here). Their targets differ (sm_80, sm_90); their SM counts do not
// enter the kernel set today, which is why small and a100 list the same kernels, and would
// show here if they did. Dtypes: each model's weights as the server may load them (and as
// q8_0/q4_0 GGUFs where its rows are whole blocks of 32, and as fp8/AWQ checkpoints where
// they are whole blocks of 32/128), and every K/V cache dtype the
// backend takes; a kernel depends on one or the other, never both, but every pair is built anyway,
// so the manifest does not rest on that. Block size and PTX ISA: the server's defaults.
constexpr const char* kProfiles[] = {"small", "a100", "h100"};
constexpr DType kAllDTypes[] = {DType::kF32, DType::kF16, DType::kBF16};

struct ManifestModel {
  std::string name;
  ModelConfig config;
  std::vector<DType> weight_dtypes;
};

absl::StatusOr<std::vector<ManifestModel>> Models(const std::string& test_model_dir) {
  std::vector<ManifestModel> models;
  // The test model in its file's dtype (config.json's torch_dtype: its tensors are all
  // f32), named by its directory.
  const std::string config_path = test_model_dir + "/config.json";
  absl::StatusOr<std::string> json = ReadFileToString(config_path);
  if (!json.ok()) return json.status();
  absl::StatusOr<ModelConfig> config = ParseModelConfig(*json, config_path);
  if (!config.ok()) return config.status();
  std::filesystem::path dir = std::filesystem::path(test_model_dir).lexically_normal();
  if (!dir.has_filename()) dir = dir.parent_path();
  models.push_back({dir.filename().string(), *config, {config->torch_dtype}});
  // The synthetic presets in every dtype make-model writes.
  for (const std::string& name : SyntheticPresetNames()) {
    absl::StatusOr<SyntheticSpec> spec = SyntheticPreset(name);
    if (!spec.ok()) return spec.status();
    models.push_back({name, spec->config, {std::begin(kAllDTypes), std::end(kAllDTypes)}});
  }
  return models;
}

struct GeneratedPtx {
  size_t bytes = 0;
  uint64_t hash = 0;
};

}  // namespace

absl::StatusOr<std::string> KernelManifest(const std::string& test_model_dir) {
  absl::StatusOr<std::vector<ManifestModel>> models = Models(test_model_dir);
  if (!models.ok()) return models.status();
  const KvCacheConfig default_kv;
  const GpuBackendOptions default_options;
  // Keys name everything a kernel bakes in, target included, so models and profiles
  // sharing a key share its PTX: each key is generated once.
  std::map<std::string, GeneratedPtx> by_key;
  std::set<std::string> lines;
  for (const ManifestModel& m : *models) {
    for (const char* profile : kProfiles) {
      absl::StatusOr<EmulatedDeviceOptions> device = EmulatedDeviceProfile(profile);
      if (!device.ok()) return device.status();
      absl::StatusOr<ptx::Target> target =
          KernelTarget(device->compute_major, device->compute_minor, default_options.ptx_version);
      if (!target.ok()) return target.status();
      // Each dtype, and the q8_0/q4_0 blocks `ptxserve quantize` makes of the model.
      std::vector<WeightTypes> formats;
      for (DType dt : m.weight_dtypes) formats.push_back(WeightTypes::Uniform(ToElemType(dt)));
      const ModelConfig& c = m.config;
      const bool padded = c.head_dim % 32 != 0;
      if (c.hidden_size % 32 == 0 && c.intermediate_size % 32 == 0 &&
          (padded || c.q_dim() % 32 == 0)) {
        for (kernels::BlockFormat f : {kernels::BlockFormat::kQ8_0, kernels::BlockFormat::kQ4_0}) {
          formats.push_back(WeightTypes::Blocks(f, padded));
        }
      }
      // And the fp8 and AWQ/GPTQ checkpoints `ptxserve quantize --type fp8|awq` makes of it:
      // the projections in blocks, embedding and LM head in the model's dtype.
      for (kernels::BlockFormat f :
           {kernels::BlockFormat::kFp8E4M3, kernels::BlockFormat::kInt4G128}) {
        const int be = kernels::BlockElems(f);
        if (c.hidden_size % be != 0 || c.intermediate_size % be != 0 ||
            (!padded && c.q_dim() % be != 0)) {
          continue;
        }
        for (DType dt : m.weight_dtypes) {
          WeightTypes w = WeightTypes::Blocks(f, padded);
          w.embed_blocks.reset();
          w.lm_head_blocks.reset();
          w.embed = w.lm_head = ToElemType(dt);
          formats.push_back(w);
        }
      }
      for (const WeightTypes& weights : formats) {
        for (DType kv_dtype : kAllDTypes) {
          KvCacheConfig kv = default_kv;
          kv.dtype = kv_dtype;
          absl::StatusOr<KernelSet> set =
              BuildKernelSet(m.config, weights, kv, *target, device->num_sms);
          if (!set.ok()) {
            return absl::Status(set.status().code(), absl::StrCat(m.name, " on ", profile, ": ",
                                                                  set.status().message()));
          }
          for (KernelSlot* slot : set->All()) {
            auto it = by_key.find(slot->spec.key);
            if (it == by_key.end()) {
              absl::StatusOr<std::string> ptx = slot->spec.generate();
              if (!ptx.ok()) {
                return absl::Status(
                    ptx.status().code(),
                    absl::StrCat("generating ", slot->spec.key, ": ", ptx.status().message()));
              }
              it = by_key.emplace(slot->spec.key, GeneratedPtx{ptx->size(), emu::PtxHash(*ptx)})
                       .first;
            }
            lines.insert(absl::StrFormat("%s %s %s %s %d %016x", m.name, profile, slot->spec.key,
                                         slot->spec.entry, it->second.bytes, it->second.hash));
          }
        }
      }
    }
  }
  std::string out = absl::StrCat(
      "# Every kernel the GPU backend builds (BuildKernelSet, engine/cuda/kernel_set.h), one\n"
      "# line per model, device profile and kernel, sorted:\n"
      "#   <model> <profile> <config key> <entry> <ptx bytes> <64-bit FNV-1a of the ptx>\n"
      "# Models: the test model in its file dtype, every synthetic preset in f32, f16 and bf16.\n"
      "# Profiles: --emulated-device ",
      absl::StrJoin(kProfiles, ", "), ".\n# K/V cache: f32, f16 and bf16, blocks of ",
      default_kv.block_size, ". PTX ISA ", default_options.ptx_version / 10, ".",
      default_options.ptx_version % 10,
      ".\n"
      "# A changed line is a changed kernel: say why in the commit.\n"
      "# Regenerate: ",
      kKernelManifestUpdateCommand, "\n");
  for (const std::string& line : lines) absl::StrAppend(&out, line, "\n");
  return out;
}

std::string KernelManifestDiff(std::string_view checked_in, std::string_view generated,
                               int max_lines) {
  if (checked_in == generated) return "";
  auto line_set = [](std::string_view text) {
    std::multiset<std::string> s;
    for (absl::string_view line :
         absl::StrSplit(absl::string_view(text.data(), text.size()), '\n', absl::SkipEmpty())) {
      s.emplace(line);
    }
    return s;
  };
  const std::multiset<std::string> old_lines = line_set(checked_in);
  const std::multiset<std::string> new_lines = line_set(generated);
  std::vector<std::string> removed, added;
  std::set_difference(old_lines.begin(), old_lines.end(), new_lines.begin(), new_lines.end(),
                      std::back_inserter(removed));
  std::set_difference(new_lines.begin(), new_lines.end(), old_lines.begin(), old_lines.end(),
                      std::back_inserter(added));
  std::string out =
      absl::StrCat("the generated kernel manifest differs from ", kKernelManifestPath);
  if (removed.empty() && added.empty()) {
    absl::StrAppend(&out, ": the same lines in another order or spacing\n");
  } else {
    absl::StrAppend(&out, " (lines: ", removed.size(), " removed, ", added.size(), " added):\n--- ",
                    kKernelManifestPath, " (checked in)\n+++ generated\n");
    // Merged in sorted order: a kernel whose PTX changed shows its - and + lines together.
    size_t r = 0, a = 0;
    int shown = 0;
    while ((r < removed.size() || a < added.size()) && shown < max_lines) {
      if (a == added.size() || (r < removed.size() && removed[r] <= added[a])) {
        absl::StrAppend(&out, "-", removed[r++], "\n");
      } else {
        absl::StrAppend(&out, "+", added[a++], "\n");
      }
      ++shown;
    }
    const size_t rest = removed.size() - r + added.size() - a;
    if (rest > 0) absl::StrAppend(&out, "... and ", rest, " more\n");
  }
  absl::StrAppend(&out, "If the generated PTX changed on purpose, regenerate the manifest with `",
                  kKernelManifestUpdateCommand,
                  "` and say in the commit why each kernel changed.\n");
  return out;
}

}  // namespace ptxserve::cuda::testing
