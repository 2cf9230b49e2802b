#include "server/cli/common_flags.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/reflection.h"
#include "absl/flags/usage.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "engine/model/synthetic.h"
#include "engine/util/log.h"
#include "server/cli/cli_util.h"

ABSL_FLAG(std::string, model, "",
          "Hugging Face model directory (config.json, *.safetensors, tokenizer.json) or a "
          "GGUF llama model file (*.gguf); empty: the synthetic default model");
ABSL_FLAG(std::string, model_cache_dir, "",
          "where the synthetic default model is written once (default: $XDG_CACHE_HOME/ptxserve "
          "or ~/.cache/ptxserve, else /tmp/ptxserve)");

ABSL_FLAG(uint64_t, seed, 0,
          "random seed: of the sampler (generate) or of the weights (make-model); same seed, "
          "same output");

ABSL_FLAG(std::string, out, "",
          "output: the model directory (make-model), the .gguf file or checkpoint directory "
          "(quantize), a PTX file "
          "(ptx --kernel) or directory (ptx --all)");

ABSL_FLAG(int32_t, kv_blocks, 0,
          "KV cache blocks; 0 = sized by the backend (GPU: a fraction of free memory; "
          "generate: room for the prompt and --max_tokens; see --kv_memory for serve)");
ABSL_FLAG(int32_t, block_size, 16, "tokens per KV cache block");
ABSL_FLAG(std::string, backend, "auto",
          "the backend running the model: cpu, cuda (libcuda.so.1, device 0), emulated (the "
          "PTX emulator, for tests) or auto (cuda when it comes up, else cpu)");
ABSL_FLAG(std::string, emulated_device, "small",
          "with --backend=emulated, the GPU the emulated device reports: small (8 SMs, 1 GiB), "
          "a100 (A100 80GB: sm_80, 108 SMs, 163 KiB opt-in shared memory) or h100 (H100 SXM5 "
          "80GB: sm_90, 132 SMs, 227 KiB); its memory is host RAM, taken only as allocated");
ABSL_FLAG(std::string, log_level, "info",
          "log messages at this level and above: debug, info, warning or error");
ABSL_FLAG(std::string, log_format, "text",
          "log lines as text or json (one JSON object per line, for log collectors)");
ABSL_FLAG(bool, cuda_graphs, true,
          "GPU backends: run decode-only steps as CUDA graphs, captured once per padded batch "
          "size; false launches kernel by kernel (vLLM's --enforce-eager)");

namespace ptxserve::cli {
namespace {

std::string DefaultCacheDir() {
  // Read here, at the edge, and nowhere deeper (DESIGN.md: no environment reads in engine/).
  if (const char* xdg = std::getenv("XDG_CACHE_HOME"); xdg && *xdg) {
    return absl::StrCat(xdg, "/ptxserve");
  }
  if (const char* home = std::getenv("HOME"); home && *home) {
    return absl::StrCat(home, "/.cache/ptxserve");
  }
  return "/tmp/ptxserve";
}

}  // namespace

absl::StatusOr<std::string> ResolveModelDir() {
  const std::string flag = absl::GetFlag(FLAGS_model);
  if (!flag.empty()) return flag;
  std::string cache = absl::GetFlag(FLAGS_model_cache_dir);
  if (cache.empty()) cache = DefaultCacheDir();
  const std::string dir = absl::StrCat(cache, "/models/tiny-seed0-f32");
  if (std::filesystem::exists(dir + "/config.json")) return dir;
  auto spec = SyntheticPreset("tiny");
  if (!spec.ok()) return spec.status();
  // Write into a temporary sibling and rename, so a crash never leaves half a model.
  const std::string tmp = absl::StrCat(dir, ".tmp", ::getpid());
  std::error_code ec;
  std::filesystem::create_directories(tmp, ec);
  if (ec) return absl::InternalError(absl::StrCat("cannot create ", tmp, ": ", ec.message()));
  PTX_LOG(INFO) << "writing the synthetic default model to " << dir;
  if (auto st = WriteSyntheticModel(tmp, *spec, /*seed=*/0, DType::kF32); !st.ok()) return st;
  std::filesystem::rename(tmp, dir, ec);
  if (ec && !std::filesystem::exists(dir + "/config.json")) {
    return absl::InternalError(
        absl::StrCat("cannot rename ", tmp, " to ", dir, ": ", ec.message()));
  }
  std::filesystem::remove_all(tmp, ec);
  return dir;
}

std::vector<char*> ParseSubcommandFlags(int argc, char** argv, const char* usage) {
  absl::SetProgramUsageMessage(usage);
  // Abseil flag names use underscores; accept the dashed spelling users expect from
  // other servers (--max-tokens) by rewriting the name part of each --flag in place.
  for (int i = 1; i < argc; ++i) {
    char* a = argv[i];
    if (a[0] != '-' || a[1] != '-') continue;
    if (a[2] == '\0') break;  // "--": the rest is positional
    for (char* c = a + 2; *c != '\0' && *c != '='; ++c) {
      if (*c == '-') *c = '_';
    }
  }
  for (int i = 1; i < argc; ++i) {
    const std::string_view a = argv[i];
    if (a == "--") break;
    if (a == "--help" || a == "-h" || a == "--helpfull" || a == "--helpshort") {
      PrintSubcommandHelp(usage);
      std::exit(0);
    }
  }
  // Every flag of every subcommand is defined in this one binary; one given to the wrong
  // subcommand would otherwise be accepted and silently ignored.
  for (int i = 1; i < argc; ++i) {
    std::string_view a = argv[i];
    if (a == "--") break;
    if (a.size() < 2 || a[0] != '-') continue;
    a.remove_prefix(a[1] == '-' ? 2 : 1);
    a = a.substr(0, a.find('='));
    const absl::CommandLineFlag* flag =
        absl::FindCommandLineFlag(absl::string_view(a.data(), a.size()));
    if (flag == nullptr && a.substr(0, 2) == "no") {  // --noflag for a bool
      flag = absl::FindCommandLineFlag(absl::string_view(a.data() + 2, a.size() - 2));
    }
    // Unknown names are Abseil's to report; --flagfile and friends are Abseil's own.
    if (flag == nullptr || IsSubcommandFlag(*flag) ||
        absl::StrContains(flag->Filename(), "absl/flags/")) {
      continue;
    }
    std::fprintf(stderr, "%s: --%s is not a flag of this subcommand (--help lists them)\n", argv[0],
                 std::string(flag->Name()).c_str());
    std::exit(1);
  }
  std::vector<char*> positional = absl::ParseCommandLine(argc, argv);
  LogLevel level;
  if (!ParseLogLevel(absl::GetFlag(FLAGS_log_level), &level)) {
    std::fprintf(stderr, "%s: --log_level=%s: want debug, info, warning or error\n", argv[0],
                 absl::GetFlag(FLAGS_log_level).c_str());
    std::exit(1);
  }
  SetMinLogLevel(level);
  const std::string format = absl::GetFlag(FLAGS_log_format);
  if (format != "text" && format != "json") {
    std::fprintf(stderr, "%s: --log_format=%s: want text or json\n", argv[0], format.c_str());
    std::exit(1);
  }
  SetLogFormat(format == "json" ? LogFormat::kJson : LogFormat::kText);
  return positional;
}

}  // namespace ptxserve::cli
