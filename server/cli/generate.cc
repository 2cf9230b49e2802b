// `ptxserve generate`: load a model, stream one completion to stdout, report speed.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/str_format.h"
#include "engine/backend_factory.h"
#include "engine/engine.h"
#include "engine/model/model.h"
#include "engine/tokenizer/tokenizer.h"
#include "server/cli/cli_util.h"
#include "server/cli/common_flags.h"
#include "server/cli/sampling_flags.h"
#include "server/cli/subcommands.h"

namespace ptxserve::cli {

int RunGenerate(int argc, char** argv) {
  SetSubcommandFlags({"server/cli/generate.cc", "server/cli/sampling_flags.cc", "model",
                      "model_cache_dir", "seed", "kv_blocks", "block_size", "backend",
                      "emulated_device", "cuda_graphs"});
  ParseSubcommandFlags(argc, argv,
                       "ptxserve generate [--model DIR|FILE.gguf] --prompt TEXT [--max-tokens N] "
                       "[--temperature T] [--top-k K] [--top-p P] [--seed S] "
                       "[--backend auto|cpu|cuda|emulated] [--emulated-device small|a100|h100]");
  if (absl::Status st = CheckEmulatedDeviceFlag(absl::GetFlag(FLAGS_backend),
                                                absl::GetFlag(FLAGS_emulated_device));
      !st.ok()) {
    std::fprintf(stderr, "generate: %s\n", st.ToString().c_str());
    return 1;
  }
  const std::string prompt = absl::GetFlag(FLAGS_prompt);
  if (prompt.empty()) {
    std::fprintf(stderr, "generate: --prompt is required\n");
    return 2;
  }
  auto fail = [](const absl::Status& st) {
    std::fprintf(stderr, "generate: %s\n", st.ToString().c_str());
    return 1;
  };

  using Clock = std::chrono::steady_clock;
  auto seconds_since = [](Clock::time_point t) {
    return std::chrono::duration<double>(Clock::now() - t).count();
  };
  const Clock::time_point t_load = Clock::now();
  auto dir = ResolveModelDir();
  if (!dir.ok()) return fail(dir.status());
  auto model = LoadModel(*dir);
  if (!model.ok()) return fail(model.status());
  auto tokenizer = Tokenizer::FromModelPath(*dir);
  if (!tokenizer.ok()) return fail(tokenizer.status());
  const double load_seconds = seconds_since(t_load);
  auto ids = (*tokenizer)->Encode(prompt);
  if (!ids.ok()) return fail(ids.status());

  KvCacheConfig kv;
  kv.block_size = absl::GetFlag(FLAGS_block_size);
  kv.num_blocks = absl::GetFlag(FLAGS_kv_blocks);
  if (kv.block_size <= 0) return fail(absl::InvalidArgumentError("--block_size must be > 0"));
  if (kv.num_blocks <= 0) {
    // One sequence needs room for its prompt and the tokens it may generate, no more: a
    // whole context of a 128K-position model is gigabytes of host KV to zero before the
    // first token (the engine still stops the sequence at max_position_embeddings).
    const int64_t wanted =
        static_cast<int64_t>(ids->size()) + std::max<int64_t>(absl::GetFlag(FLAGS_max_tokens), 1);
    const int64_t positions = std::min<int64_t>(wanted, model->config.max_position_embeddings);
    kv.num_blocks = static_cast<int32_t>((positions + kv.block_size - 1) / kv.block_size);
  }
  // One sequence: buffers for one prefill chunk.
  BackendOptions backend_options;
  backend_options.max_seqs = 1;
  backend_options.max_tokens = EngineConfig{}.prefill_chunk;
  backend_options.cuda_graphs = absl::GetFlag(FLAGS_cuda_graphs);
  backend_options.emulated_device = absl::GetFlag(FLAGS_emulated_device);
  const Clock::time_point t_backend = Clock::now();
  auto backend =
      CreateBackend(absl::GetFlag(FLAGS_backend), *model, kv, std::move(backend_options));
  if (!backend.ok()) return fail(backend.status());
  // Cold vs warm start: with the driver's JIT cache (CUDA_CACHE_PATH) warm, the backend
  // part shrinks to the weight upload and PTX generation.
  std::fprintf(stderr, "backend %s: model loaded in %.2f s, backend ready in %.2f s\n",
               (*backend)->name().c_str(), load_seconds, seconds_since(t_backend));

  EngineRequest req;
  req.request_id = "generate";
  req.prompt = *std::move(ids);
  req.sampling.temperature = static_cast<float>(absl::GetFlag(FLAGS_temperature));
  req.sampling.top_k = absl::GetFlag(FLAGS_top_k);
  req.sampling.top_p = static_cast<float>(absl::GetFlag(FLAGS_top_p));
  req.sampling.min_p = static_cast<float>(absl::GetFlag(FLAGS_min_p));
  req.sampling.seed = absl::GetFlag(FLAGS_seed);
  req.stopping.max_new_tokens = absl::GetFlag(FLAGS_max_tokens);
  req.stopping.ignore_eos = absl::GetFlag(FLAGS_ignore_eos);

  // The same engine the server runs (scheduler, chunked prefill, sampling, stops), with
  // one request and this thread as its only consumer.
  Engine engine(*std::move(backend), **tokenizer, EngineConfig{});
  if (auto st = engine.Start(); !st.ok()) return fail(st);
  auto stream = std::make_shared<ResultStream>();
  if (auto queued = engine.Enqueue({std::move(req)}, stream); !queued.ok()) {
    return fail(queued.status());
  }
  std::fputs(prompt.c_str(), stdout);
  std::fflush(stdout);
  std::vector<EngineOutput> outs;
  EngineOutput last;
  while (!last.final() && stream->WaitPopAll(&outs)) {
    for (auto& out : outs) {
      std::fwrite(out.text.data(), 1, out.text.size(), stdout);
      if (out.final()) last = std::move(out);
    }
    std::fflush(stdout);
  }
  std::fputc('\n', stdout);
  std::fflush(stdout);
  engine.Stop();
  if (last.finish == FinishReason::kError || last.finish == FinishReason::kCancelled) {
    return fail(last.error.ok() ? absl::InternalError("generation did not finish") : last.error);
  }
  const double decode_secs = last.total_seconds - last.ttft_seconds;
  std::fprintf(stderr,
               "prompt tokens: %d, generated tokens: %d, finish: %s, %.1f tokens/s "
               "(prefill %.1f tokens/s to the first token, decode %.1f tokens/s)\n",
               last.prompt_tokens, last.generated_tokens,
               std::string(FinishReasonName(last.finish)).c_str(),
               last.total_seconds > 0 ? last.generated_tokens / last.total_seconds : 0.0,
               last.ttft_seconds > 0 ? last.prompt_tokens / last.ttft_seconds : 0.0,
               decode_secs > 0 ? (last.generated_tokens - 1) / decode_secs : 0.0);
  return 0;
}

}  // namespace ptxserve::cli
