// `ptxserve generate`: load a model, stream one completion to stdout, report speed.
#include <chrono>
#include <cstdio>
#include <string>

#include "absl/flags/flag.h"
#include "absl/strings/str_format.h"
#include "engine/cpu/cpu_backend.h"
#include "engine/generator.h"
#include "engine/model/model.h"
#include "engine/tokenizer/tokenizer.h"
#include "server/cli/cli_util.h"
#include "server/cli/common_flags.h"
#include "server/cli/sampling_flags.h"
#include "server/cli/subcommands.h"

namespace ptxserve::cli {

int RunGenerate(int argc, char** argv) {
  ShowFlagsInHelp(
      {"server/cli/generate.cc", "server/cli/common_flags.cc", "server/cli/sampling_flags.cc"});
  ParseSubcommandFlags(argc, argv,
                       "ptxserve generate [--model DIR] --prompt TEXT [--max-tokens N] "
                       "[--temperature T] [--top-k K] [--top-p P] [--seed S]");
  const std::string prompt = absl::GetFlag(FLAGS_prompt);
  if (prompt.empty()) {
    std::fprintf(stderr, "generate: --prompt is required\n");
    return 2;
  }
  auto fail = [](const absl::Status& st) {
    std::fprintf(stderr, "generate: %s\n", st.ToString().c_str());
    return 1;
  };

  auto dir = ResolveModelDir();
  if (!dir.ok()) return fail(dir.status());
  auto model = LoadModel(*dir);
  if (!model.ok()) return fail(model.status());
  auto tokenizer = Tokenizer::FromDir(*dir);
  if (!tokenizer.ok()) return fail(tokenizer.status());

  KvCacheConfig kv;
  kv.block_size = absl::GetFlag(FLAGS_block_size);
  kv.num_blocks = absl::GetFlag(FLAGS_kv_blocks);
  if (kv.block_size <= 0) return fail(absl::InvalidArgumentError("--block_size must be > 0"));
  if (kv.num_blocks <= 0) {
    kv.num_blocks = static_cast<int32_t>(
        (model->config.max_position_embeddings + kv.block_size - 1) / kv.block_size);
  }
  auto backend = CreateCpuBackend(*model, kv);
  if (!backend.ok()) return fail(backend.status());
  KvBlockManager blocks(kv.num_blocks, kv.block_size);

  GenerationRequest req;
  auto ids = (*tokenizer)->Encode(prompt);
  if (!ids.ok()) return fail(ids.status());
  req.prompt = *std::move(ids);
  req.sampling.temperature = static_cast<float>(absl::GetFlag(FLAGS_temperature));
  req.sampling.top_k = absl::GetFlag(FLAGS_top_k);
  req.sampling.top_p = static_cast<float>(absl::GetFlag(FLAGS_top_p));
  req.sampling.min_p = static_cast<float>(absl::GetFlag(FLAGS_min_p));
  req.sampling.seed = absl::GetFlag(FLAGS_seed);
  req.stopping.max_new_tokens = absl::GetFlag(FLAGS_max_tokens);
  req.stopping.ignore_eos = absl::GetFlag(FLAGS_ignore_eos);

  std::fputs(prompt.c_str(), stdout);
  std::fflush(stdout);
  Generator gen(**backend, **tokenizer, blocks);
  GenerationStats stats;
  const auto t0 = std::chrono::steady_clock::now();
  auto results = gen.Run(
      {req},
      [](size_t, std::string_view text) {
        std::fwrite(text.data(), 1, text.size(), stdout);
        std::fflush(stdout);
      },
      &stats);
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::fputc('\n', stdout);
  if (!results.ok()) return fail(results.status());
  const auto& r = (*results)[0];
  std::fprintf(stderr,
               "prompt tokens: %lld, generated tokens: %zu, finish: %s, %.1f tokens/s "
               "(decode %.1f tokens/s)\n",
               static_cast<long long>(stats.prompt_tokens), r.tokens.size(),
               std::string(FinishReasonName(r.finish)).c_str(), r.tokens.size() / secs,
               stats.decode_seconds > 0 ? (stats.steps - 1) / stats.decode_seconds : 0.0);
  return 0;
}

}  // namespace ptxserve::cli
