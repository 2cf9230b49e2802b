// `ptxserve make-model`: write a deterministic synthetic Llama model directory.
#include <cstdio>
#include <string>

#include "absl/flags/flag.h"
#include "absl/strings/str_join.h"
#include "engine/model/dtype.h"
#include "engine/model/synthetic.h"
#include "server/cli/cli_util.h"
#include "server/cli/common_flags.h"
#include "server/cli/subcommands.h"

ABSL_FLAG(std::string, preset, "tiny", "make-model: preset name (see --help)");
ABSL_FLAG(std::string, dtype, "f32", "make-model: weight dtype f32|f16|bf16");

namespace ptxserve::cli {

int RunMakeModel(int argc, char** argv) {
  const std::string usage =
      "ptxserve make-model --out DIR --preset NAME [--seed N] [--dtype f32|f16|bf16]\npresets: " +
      absl::StrJoin(SyntheticPresetNames(), ", ");
  SetSubcommandFlags({"server/cli/make_model.cc", "seed", "out"});
  ParseSubcommandFlags(argc, argv, usage.c_str());
  const std::string out = absl::GetFlag(FLAGS_out);
  if (out.empty()) {
    std::fprintf(stderr, "make-model: --out is required\n%s\n", usage.c_str());
    return 2;
  }
  DType dtype;
  if (!ParseDType(absl::GetFlag(FLAGS_dtype), &dtype)) {
    std::fprintf(stderr, "make-model: --dtype must be f32, f16 or bf16\n");
    return 2;
  }
  auto spec = SyntheticPreset(absl::GetFlag(FLAGS_preset));
  if (!spec.ok()) {
    std::fprintf(stderr, "make-model: %s\n", spec.status().ToString().c_str());
    return 2;
  }
  const uint64_t seed = absl::GetFlag(FLAGS_seed);
  if (auto st = WriteSyntheticModel(out, *spec, seed, dtype); !st.ok()) {
    std::fprintf(stderr, "make-model: %s\n", st.ToString().c_str());
    return 1;
  }
  std::fprintf(stderr, "make-model: wrote %s (preset %s, seed %llu, %s)\n", out.c_str(),
               absl::GetFlag(FLAGS_preset).c_str(), static_cast<unsigned long long>(seed),
               std::string(DTypeName(dtype)).c_str());
  return 0;
}

}  // namespace ptxserve::cli
