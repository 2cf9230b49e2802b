// `ptxserve quantize`: write a llama.cpp-compatible GGUF from a model ptxserve loads (a
// Hugging Face directory, or a GGUF of f32/f16/bf16 tensors to re-encode), or, for
// --type fp8|awq|gptq, a Hugging Face quantized checkpoint directory from a model directory,
// awq, gptq and q4_0 calibrated on a text with --calibration.
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <iterator>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "engine/model/gguf.h"
#include "engine/model/gguf_export.h"
#include "engine/model/gguf_writer.h"
#include "engine/model/hf_quant_calibrate.h"
#include "engine/model/hf_quant_export.h"
#include "engine/model/model.h"
#include "engine/model/weight_files.h"
#include "engine/tokenizer/gguf_vocab.h"
#include "engine/tokenizer/tokenizer.h"
#include "server/cli/cli_util.h"
#include "server/cli/common_flags.h"
#include "server/cli/subcommands.h"

ABSL_FLAG(std::string, type, "f16",
          "quantize: the matrices' type: a GGUF type (f32, f16, bf16, q8_0, q4_0, q4_k; --out "
          "names a .gguf file; q4_k is llama.cpp's Q4_K_M mix: q6_k for the LM head or the tied "
          "embedding and for attn_v and ffn_down in the first and last eighth of the layers and "
          "every third between, q4_k for the rest, every row whole super-blocks of 256) or a "
          "Hugging Face quantized checkpoint (fp8, awq, gptq; --out "
          "names a directory, created when missing, that gets config.json with its "
          "quantization_config, model.safetensors and the tokenizer files)");
ABSL_FLAG(std::string, calibration, "",
          "quantize: a text file for awq, gptq and q4_0 to calibrate on: AWQ's activation-aware "
          "scale search, GPTQ's error feedback, or for q4_0 GPTQ's error feedback against "
          "block scales weighted by each input's mean square (llama.cpp's imatrix; the LM "
          "head gets the weighted scales alone), over the model's activations on its first "
          "--calibration-tokens tokens; without it they round to nearest (use a text other "
          "than the one you evaluate on)");
ABSL_FLAG(std::string, awq_rounding, "nearest",
          "quantize: how --type awq --calibration picks each weight's 4-bit integer after its "
          "scale and clipping searches: nearest (round to nearest, as AutoAWQ; the default) or "
          "gptq (GPTQ's error feedback against the same groups' scales and zeros, as "
          "llm-compressor's AWQModifier stacked with GPTQModifier); the file is a plain AWQ "
          "checkpoint either way");
ABSL_FLAG(int32_t, calibration_tokens, 1024,
          "quantize: tokens of --calibration to run, in windows of up to 256 positions");

namespace ptxserve::cli {
namespace {

// general.name: the directory's (or file's) name.
std::string ModelName(const std::string& path) {
  const std::filesystem::path p = std::filesystem::path(path).lexically_normal();
  std::string name = IsGgufPath(path) ? p.stem().string() : p.filename().string();
  if (name.empty()) name = p.parent_path().filename().string();
  return name;
}

constexpr const char* kHfTypes[] = {"fp8", "awq", "gptq"};

// The Hugging Face checkpoint kind --type names, or nullopt for a GGUF type.
std::optional<HfQuantization::Method> HfMethod(const std::string& type) {
  if (type == "fp8") return HfQuantization::Method::kFp8;
  if (type == "awq") return HfQuantization::Method::kAwq;
  if (type == "gptq") return HfQuantization::Method::kGptq;
  return std::nullopt;
}

// Whether --out can be created: a .gguf name (a directory for a Hugging Face checkpoint)
// in an existing directory.
std::string OutProblem(const std::string& out, bool hf) {
  if (out.empty()) return "--out is required";
  if (hf && out.ends_with(".gguf")) {
    return "--out names the checkpoint directory for fp8, awq and gptq, got '" + out + "'";
  }
  if (!hf && !out.ends_with(".gguf")) return "--out must name a .gguf file, got '" + out + "'";
  const std::filesystem::path parent = std::filesystem::path(out).parent_path();
  std::error_code ec;
  if (!parent.empty() && !std::filesystem::is_directory(parent, ec)) {
    return "--out: directory '" + parent.string() + "' does not exist";
  }
  return "";
}

// A directory's tokenizer.json, or a GGUF's tokenizer metadata as it is.
absl::Status AddTokenizer(const std::string& model_path, GgufWriter* w) {
  if (!IsGgufPath(model_path)) return tok::AddTokenizerToGguf(model_path, w);
  auto from = GgufFile::Open(model_path);
  if (!from.ok()) return from.status();
  CopyTokenizerMetadata(**from, w);
  return absl::OkStatus();
}

int Fail(const absl::Status& s) {
  std::fprintf(stderr, "quantize: %s\n", s.ToString().c_str());
  return 1;
}

// The first `tokens` tokens of the text at `path` (with BOS, as `perplexity` reads a text)
// in windows of up to 256 positions, each run from position 0.
absl::StatusOr<std::vector<std::vector<int32_t>>> CalibrationWindows(const Model& model,
                                                                     const std::string& path,
                                                                     int32_t tokens) {
  auto text = ReadTextFile(path);
  if (!text.ok()) return text.status();
  auto tokenizer = Tokenizer::FromModelPath(model.dir);
  if (!tokenizer.ok()) return tokenizer.status();
  auto ids = (*tokenizer)->Encode(*text);
  if (!ids.ok()) return ids.status();
  if (ids->empty()) return absl::InvalidArgumentError(absl::StrCat(path, " gives no tokens"));
  const size_t window =
      static_cast<size_t>(std::min<int64_t>(256, model.config.max_position_embeddings));
  const size_t total = std::min(ids->size(), static_cast<size_t>(tokens));
  std::vector<std::vector<int32_t>> windows;
  for (size_t start = 0; start < total; start += window) {
    windows.emplace_back(ids->begin() + start, ids->begin() + std::min(total, start + window));
  }
  return windows;
}

// The matrices' summed output error on the calibration inputs, against plain rounding.
void PrintCalibration(const CalibratedInt4& c, const std::string& calibration) {
  std::fprintf(stderr,
               "quantize: calibrated on %lld tokens of %s: output error %.4g, %.1f%% of "
               "round-to-nearest's %.4g\n",
               static_cast<long long>(c.tokens), calibration.c_str(), c.error,
               c.rtn_error > 0 ? 100 * c.error / c.rtn_error : 100.0, c.rtn_error);
}

// --awq-rounding's value, or nullopt for another.
std::optional<AwqRounding> ParseAwqRounding(const std::string& name) {
  if (name == "nearest") return AwqRounding::kNearest;
  if (name == "gptq") return AwqRounding::kGptq;
  return std::nullopt;
}

// Writes the Hugging Face checkpoint of `method` into the directory `out`, calibrated on
// the text `calibration` when not empty (awq's integers chosen by `awq_rounding`).
int QuantizeToHf(const std::string& model_path, HfQuantization::Method method,
                 const std::string& calibration, AwqRounding awq_rounding, const std::string& out) {
  auto model = LoadModel(model_path);
  if (!model.ok()) return Fail(model.status());
  CalibratedInt4 calibrated;
  if (!calibration.empty()) {
    auto windows = CalibrationWindows(*model, calibration, absl::GetFlag(FLAGS_calibration_tokens));
    if (!windows.ok()) return Fail(windows.status());
    auto c = CalibrateInt4(*model, method, *windows, awq_rounding);
    if (!c.ok()) return Fail(c.status());
    calibrated = std::move(*c);
    PrintCalibration(calibrated, calibration);
  }
  if (absl::Status s = WriteHfQuantized(*model, method, calibrated, out); !s.ok()) return Fail(s);
  std::error_code ec;
  const auto bytes = std::filesystem::file_size(out + "/model.safetensors", ec);
  std::fprintf(stderr, "quantize: wrote %s/ (%s, model.safetensors %llu bytes)\n", out.c_str(),
               std::string(HfQuantMethodName(method)).c_str(),
               static_cast<unsigned long long>(bytes));
  return 0;
}

}  // namespace

int RunQuantize(int argc, char** argv) {
  std::vector<std::string> types = GgufWeightTypeNames();
  types.insert(types.end(), std::begin(kHfTypes), std::end(kHfTypes));
  const std::string usage =
      "ptxserve quantize --model DIR|FILE.gguf --out PATH.gguf|DIR --type " +
      absl::StrJoin(types, "|") +
      " [--calibration TEXT [--calibration-tokens N] [--awq-rounding nearest|gptq]]"
      "\n  GGUF types write --out PATH.gguf; fp8, awq and gptq write a Hugging Face checkpoint "
      "directory --out DIR (from a model directory); awq, gptq and q4_0 calibrate on TEXT when "
      "--calibration names it (AWQ scales, rounded to nearest or with GPTQ's error feedback; "
      "GPTQ error feedback; q4_0: GPTQ's error feedback against importance-weighted scales), "
      "else round to nearest";
  SetSubcommandFlags({"server/cli/quantize.cc", "model", "out"});
  ParseSubcommandFlags(argc, argv, usage.c_str());
  const std::string model_path = absl::GetFlag(FLAGS_model);
  const std::string out = absl::GetFlag(FLAGS_out);
  const std::optional<HfQuantization::Method> hf = HfMethod(absl::GetFlag(FLAGS_type));
  const auto type = ParseGgufWeightType(absl::GetFlag(FLAGS_type));
  std::string problem =
      model_path.empty() ? "--model is required" : OutProblem(out, hf.has_value());
  if (problem.empty() && !type.has_value() && !hf.has_value()) {
    problem = "--type must be one of " + absl::StrJoin(types, ", ") + ", got '" +
              absl::GetFlag(FLAGS_type) + "'";
  }
  const std::string calibration = absl::GetFlag(FLAGS_calibration);
  const bool calibrates = hf.has_value() ? *hf != HfQuantization::Method::kFp8
                                         : type.has_value() && type->quant == QuantType::kQ4_0;
  if (problem.empty() && !calibration.empty() && !calibrates) {
    problem =
        "--calibration is for --type awq, gptq and q4_0, got '" + absl::GetFlag(FLAGS_type) + "'";
  }
  if (problem.empty() && absl::GetFlag(FLAGS_calibration_tokens) < 1) {
    problem = absl::StrCat("--calibration-tokens must be at least 1, got ",
                           absl::GetFlag(FLAGS_calibration_tokens));
  }
  const std::optional<AwqRounding> awq_rounding =
      ParseAwqRounding(absl::GetFlag(FLAGS_awq_rounding));
  if (problem.empty() && !awq_rounding.has_value()) {
    problem =
        "--awq-rounding must be nearest or gptq, got '" + absl::GetFlag(FLAGS_awq_rounding) + "'";
  }
  if (problem.empty() && awq_rounding == AwqRounding::kGptq &&
      (hf != HfQuantization::Method::kAwq || calibration.empty())) {
    problem = "--awq-rounding gptq is for --type awq with --calibration";
  }
  if (!problem.empty()) {
    std::fprintf(stderr, "quantize: %s\n%s\n", problem.c_str(), usage.c_str());
    return 2;
  }
  if (hf.has_value()) return QuantizeToHf(model_path, *hf, calibration, *awq_rounding, out);
  auto model = LoadModel(model_path);
  if (!model.ok()) return Fail(model.status());
  CalibratedInt4 calibrated;
  if (!calibration.empty()) {
    auto windows = CalibrationWindows(*model, calibration, absl::GetFlag(FLAGS_calibration_tokens));
    if (!windows.ok()) return Fail(windows.status());
    auto c = CalibrateQ4_0(*model, *windows);
    if (!c.ok()) return Fail(c.status());
    calibrated = std::move(*c);
    PrintCalibration(calibrated, calibration);
  }
  GgufWriter w;
  if (absl::Status s = AddModelToGguf(*model, *type, ModelName(model_path), &w,
                                      calibration.empty() ? nullptr : &calibrated.blocks);
      !s.ok()) {
    return Fail(s);
  }
  if (absl::Status s = AddTokenizer(model_path, &w); !s.ok()) return Fail(s);
  if (absl::Status s = w.Write(out); !s.ok()) return Fail(s);
  std::error_code ec;
  const auto bytes = std::filesystem::file_size(out, ec);
  std::fprintf(stderr, "quantize: wrote %s (%s, %llu bytes)\n", out.c_str(),
               absl::GetFlag(FLAGS_type).c_str(), static_cast<unsigned long long>(bytes));
  return 0;
}

}  // namespace ptxserve::cli
