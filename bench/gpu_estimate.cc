// The estimated cost of a model's decode steps and prefill on a GPU that is not here: per
// kernel of one step, the time the cost model gives from the emulator's counters, the
// limit that binds, the DRAM bytes and how close the kernel comes to its roofline; per
// step, the total against the step's roofline (engine/cuda/step_estimate.h says how).
// Every figure is an estimate, never a measurement. Table or JSON.
//
//   build/bench/gpu_estimate --preset llama-3.2-1b --dtype f16 --device h100
//   build/bench/gpu_estimate --preset llama-3.2-1b --weights q4_0 --batch 1,8 --prefill 0
//   build/bench/gpu_estimate --preset llama-3.2-1b --batch 1 --prefill 0 --mixed 512:64
//   build/bench/gpu_estimate --preset llama-3.2-1b --weights int4 --batch 1 --prefill 0
//   build/bench/gpu_estimate --model ../shared/models/tinystories-656k --batch 1,8 --prefill 128
//   build/bench/gpu_estimate ... --format json > estimate.json
#include <stdlib.h>  // mkdtemp

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "engine/cuda/step_estimate.h"
#include "engine/model/gguf_export.h"
#include "engine/model/gguf_writer.h"
#include "engine/model/hf_quant_export.h"
#include "engine/model/model.h"
#include "engine/model/synthetic.h"
#include "kernels/ptx/ptxas.h"
#include "nlohmann/json.hpp"

ABSL_FLAG(std::string, model, "", "a Hugging Face model directory (or --preset)");
ABSL_FLAG(std::string, preset, "llama-3.2-1b", "a synthetic preset, when --model is not given");
ABSL_FLAG(std::string, dtype, "f16", "--preset: the weights' dtype (f16, bf16, f32)");
ABSL_FLAG(std::string, weights, "",
          "the matrices re-encoded first: as a GGUF of this type (q8_0, q4_0, f16, ...) or as a "
          "Hugging Face checkpoint (fp8: FP8 E4M3, int4: AWQ's 4-bit groups of 128); the GPU "
          "reads q8_0/q4_0/fp8/int4 as blocks. Empty: as loaded");
ABSL_FLAG(std::string, device, "h100", "the GPU to estimate for (h100, a100)");
ABSL_FLAG(std::string, batch, "1,16,64,256", "decode batches (sequences), comma-separated");
ABSL_FLAG(int32_t, context, 1024, "tokens per sequence in a decode step");
ABSL_FLAG(int32_t, prefill, 2048, "tokens of one sequence's prefill (0: none)");
ABSL_FLAG(std::string, mixed, "",
          "mixed steps, comma-separated CHUNK:DECODES: a prompt chunk of CHUNK tokens (the last "
          "of max(--context, CHUNK)) beside DECODES sequences decoding at --context");
ABSL_FLAG(int32_t, mixed_decode_rows, ptxserve::kernels::kMixedDecodeRows,
          "decode rows of a mixed step from which they run in the decode kernel, apart from "
          "flash attention (a large value: every row in flash attention)");
ABSL_FLAG(uint64_t, sample_ctas, 64, "CTAs the emulator runs per launch (0: all)");
ABSL_FLAG(bool, eager, false, "decode launch by launch instead of as a CUDA graph replay");
ABSL_FLAG(std::string, ptxas, "",
          "ptxas for the kernels' registers (default: PATH, then "
          "/usr/local/cuda/bin; 'none': assume 32)");
ABSL_FLAG(std::string, format, "table", "table or json");

namespace ptxserve::cuda {
namespace {

int Fail(const std::string& msg) {
  std::fprintf(stderr, "gpu_estimate: %s\n", msg.c_str());
  return 2;
}

// The run's own directory for the model copies it writes (the preset's one-layer model,
// the re-encoded weights): a fresh one under $TMPDIR (else /tmp) made by mkdtemp on first
// use, so runs side by side never read each other's half-written files, and removed with
// its contents when the run ends (the loaded models map their files; the mappings outlive
// the unlinking).
class ScratchDir {
 public:
  ScratchDir() = default;
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;
  ~ScratchDir() {
    if (path_.empty()) return;
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }

  // `name` inside the directory, which is created first if it is not yet.
  absl::StatusOr<std::string> Path(const std::string& name) {
    if (path_.empty()) {
      std::error_code ec;
      const std::filesystem::path tmp = std::filesystem::temp_directory_path(ec);
      if (ec) return absl::InternalError("no temporary directory: " + ec.message());
      std::string templ = (tmp / "ptxserve-estimate-XXXXXX").string();
      if (mkdtemp(templ.data()) == nullptr) {
        return absl::InternalError(absl::StrCat("mkdtemp ", templ, ": ", std::strerror(errno)));
      }
      path_ = templ;
    }
    return (std::filesystem::path(path_) / name).string();
  }

 private:
  std::string path_;
};

std::string Dims(const std::array<uint32_t, 3>& d) {
  return absl::StrFormat("%ux%ux%u", d[0], d[1], d[2]);
}

void PrintTable(const ModelEstimate& m) {
  const cost::DeviceSpec& d = *m.device;
  std::printf(
      "ESTIMATES (no GPU measured): %s %s on %s (%s); counters from the PTX emulator, "
      "%s CTAs per launch\n",
      m.model.c_str(), m.weights.c_str(), d.name.c_str(), d.description.c_str(),
      m.sample_ctas == 0 ? "all" : absl::StrCat("at most ", m.sample_ctas).c_str());
  std::printf("weights on the device: %.1f MiB (%llu bytes, every layer, as uploaded)\n",
              static_cast<double>(m.device_weight_bytes) / (1 << 20),
              static_cast<unsigned long long>(m.device_weight_bytes));
  for (const StepEstimate& s : m.steps) {
    if (s.phase == "mixed") {
      std::printf("\nmixed: a %d-token chunk + %d decode row(s) at %d tokens, %d token(s) run\n",
                  s.tokens - s.batch, s.batch, s.context, s.tokens);
    } else {
      std::printf("\n%s: %d sequence(s) x %d tokens, %d token(s) run\n", s.phase.c_str(), s.batch,
                  s.context, s.tokens);
    }
    std::printf("  %-17s %5s %-12s %5s %10s %10s %-9s %10s %9s %6s\n", "kernel", "x", "grid",
                "regs", "us/launch", "us total", "binding", "DRAM MB", "sect/req", "roof%");
    for (const KernelEstimate& k : s.kernels) {
      const emu::GlobalTraffic& g = k.counters.global_load;
      std::printf("  %-17s %5d %-12s %5s %10.2f %10.1f %-9s %10.3f %4.1f/%-4.1f %6.1f\n",
                  k.kernel.c_str(), k.count, Dims(k.counters.grid).c_str(),
                  k.registers > 0 ? absl::StrCat(k.registers).c_str() : "?", k.one.seconds * 1e6,
                  k.seconds * 1e6, k.one.binding.c_str(),
                  static_cast<double>(k.counters.dram_read_bytes + k.counters.dram_write_bytes) *
                      k.count / 1e6,
                  g.SectorsPerRequest(),
                  g.requests == 0
                      ? 0.0
                      : static_cast<double>(g.ideal_sectors) / static_cast<double>(g.requests),
                  k.RooflinePct());
    }
    std::printf(
        "  step: %.1f us estimated; DRAM %.1f MB (ideal %.1f MB); roofline %.1f us (%s) "
        "= %.1f%% of roofline; %.0f tokens/s\n",
        s.seconds * 1e6, s.dram_bytes / 1e6, s.ideal_bytes / 1e6, s.roofline_s * 1e6,
        s.phase == "decode"  ? "weights + K/V over DRAM bandwidth"
        : s.phase == "mixed" ? "the larger of bytes over bandwidth and FLOPs over the peak"
                             : "FLOPs over the f16 tensor peak",
        s.RooflinePct(), s.tokens / s.seconds);
  }
}

nlohmann::json ToJson(const ModelEstimate& m) {
  nlohmann::json out = {{"estimate", true},
                        {"model", m.model},
                        {"dtype", std::string(DTypeName(m.dtype))},
                        {"weights", m.weights},
                        {"device", m.device->name},
                        {"sample_ctas", m.sample_ctas},
                        {"device_weight_bytes", m.device_weight_bytes}};
  for (const StepEstimate& s : m.steps) {
    nlohmann::json step = {{"phase", s.phase},
                           {"batch", s.batch},
                           {"context", s.context},
                           {"tokens", s.tokens},
                           {"seconds", s.seconds},
                           {"dram_bytes", s.dram_bytes},
                           {"ideal_bytes", s.ideal_bytes},
                           {"flops", s.flops},
                           {"roofline_seconds", s.roofline_s},
                           {"roofline_pct", s.RooflinePct()}};
    for (const KernelEstimate& k : s.kernels) {
      step["kernels"].push_back({{"kernel", k.kernel},
                                 {"per_layer", k.per_layer},
                                 {"launches", k.count},
                                 {"registers", k.registers},
                                 {"seconds_per_launch", k.one.seconds},
                                 {"seconds", k.seconds},
                                 {"binding", k.one.binding},
                                 {"roofline_seconds", k.roofline_s},
                                 {"roofline_pct", k.RooflinePct()},
                                 {"counters", nlohmann::json::parse(k.counters.ToJson())}});
    }
    out["steps"].push_back(step);
  }
  return out;
}

int Run() {
  StepEstimateOptions o;
  o.device = absl::GetFlag(FLAGS_device);
  o.context = absl::GetFlag(FLAGS_context);
  o.prefill_tokens = absl::GetFlag(FLAGS_prefill);
  o.sample_ctas = absl::GetFlag(FLAGS_sample_ctas);
  o.cuda_graphs = !absl::GetFlag(FLAGS_eager);
  o.decode_batches.clear();
  for (absl::string_view b : absl::StrSplit(absl::GetFlag(FLAGS_batch), ',', absl::SkipEmpty())) {
    int v = 0;
    if (!absl::SimpleAtoi(b, &v) || v < 1) {
      return Fail(absl::StrCat("--batch: '", b, "' is not a positive integer"));
    }
    o.decode_batches.push_back(v);
  }
  for (absl::string_view m : absl::StrSplit(absl::GetFlag(FLAGS_mixed), ',', absl::SkipEmpty())) {
    const std::vector<absl::string_view> parts = absl::StrSplit(m, ':');
    int chunk = 0, decodes = 0;
    if (parts.size() != 2 || !absl::SimpleAtoi(parts[0], &chunk) ||
        !absl::SimpleAtoi(parts[1], &decodes) || chunk < 1 || decodes < 0) {
      return Fail(
          absl::StrCat("--mixed: '", m, "' is not CHUNK:DECODES (CHUNK >= 1, DECODES >= 0)"));
    }
    o.mixed.emplace_back(chunk, decodes);
  }
  o.mixed_decode_rows = absl::GetFlag(FLAGS_mixed_decode_rows);
  const std::string format = absl::GetFlag(FLAGS_format);
  if (format != "table" && format != "json") {
    return Fail("--format must be table or json, not '" + format + "'");
  }
  ScratchDir scratch;
  std::string dir = absl::GetFlag(FLAGS_model), name = dir;
  if (dir.empty()) {
    // A one-layer copy of the preset stands for all its layers (step_estimate.h).
    name = absl::GetFlag(FLAGS_preset);
    absl::StatusOr<SyntheticSpec> spec = SyntheticPreset(name);
    if (!spec.ok()) return Fail(std::string(spec.status().message()));
    DType dtype = DType::kF16;
    if (!ParseDType(absl::GetFlag(FLAGS_dtype), &dtype)) {
      return Fail("--dtype: '" + absl::GetFlag(FLAGS_dtype) + "' is not f16, bf16 or f32");
    }
    o.num_layers = spec->config.num_layers;
    spec->config.num_layers = 1;
    absl::StatusOr<std::string> at =
        scratch.Path(absl::StrCat(name, "-", std::string(DTypeName(dtype)), "-1layer"));
    if (!at.ok()) return Fail(std::string(at.status().message()));
    dir = *at;
    if (absl::Status st = WriteSyntheticModel(dir, *spec, 1, dtype); !st.ok()) {
      return Fail(std::string(st.message()));
    }
  }
  absl::StatusOr<Model> model = LoadModel(dir);
  if (!model.ok()) return Fail(std::string(model.status().message()));
  if (const std::string weights = absl::GetFlag(FLAGS_weights); !weights.empty()) {
    const std::optional<GgufWeightType> type = ParseGgufWeightType(weights);
    const bool hf = weights == "fp8" || weights == "int4";
    if (!type && !hf) {
      return Fail(absl::StrCat("--weights: '", weights, "' is not one of ",
                               absl::StrJoin(GgufWeightTypeNames(), ", "), ", fp8, int4"));
    }
    // As `ptxserve quantize` writes them, so the blocks are the file's: a GGUF, or for fp8
    // and int4 a checkpoint directory (AWQ's packing for int4) repacked at load.
    const absl::StatusOr<std::string> at =
        scratch.Path(absl::StrCat(std::filesystem::path(name).filename().string(), "-", weights,
                                  "-", model->config.num_layers, "layer", hf ? "" : ".gguf"));
    if (!at.ok()) return Fail(std::string(at.status().message()));
    const std::string& path = *at;
    absl::Status st;
    if (hf) {
      st = WriteHfQuantized(
          *model, weights == "fp8" ? HfQuantization::Method::kFp8 : HfQuantization::Method::kAwq,
          path);
    } else {
      GgufWriter w;
      st = AddModelToGguf(*model, *type, name, &w);
      if (st.ok()) st = w.Write(path);
    }
    if (!st.ok()) return Fail(std::string(st.message()));
    model = LoadModel(path);
    if (!model.ok()) return Fail(std::string(model.status().message()));
  }
  std::string ptxas = absl::GetFlag(FLAGS_ptxas);
  if (ptxas.empty()) ptxas = ptx::FindPtxas();
  if (!ptxas.empty() && ptxas != "none") {
    const std::string arch = o.device == "h100" ? "sm_90" : "sm_80";  // the profiles' targets
    o.registers = [ptxas, arch](const std::string& ptx) {
      const ptx::PtxasResult r = ptx::AssembleAll(ptxas, {{"kernel", ptx}}, arch);
      return r.ok ? std::max(r.entries.front().registers, 0) : 0;
    };
  }
  absl::StatusOr<ModelEstimate> m = EstimateModelSteps(*model, name, o);
  if (!m.ok()) return Fail(std::string(m.status().message()));
  if (format == "json") {
    std::printf("%s\n", ToJson(*m).dump(2).c_str());
  } else {
    PrintTable(*m);
  }
  return 0;
}

}  // namespace
}  // namespace ptxserve::cuda

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "gpu_estimate [--model DIR | --preset NAME --dtype f16] [--weights q8_0|q4_0|fp8|int4] "
      "[--device h100|a100] "
      "[--batch 1,16,64,256] [--context 1024] [--prefill 2048] [--mixed 512:64] "
      "[--mixed_decode_rows N] [--format table|json]");
  absl::ParseCommandLine(argc, argv);
  return ptxserve::cuda::Run();
}
