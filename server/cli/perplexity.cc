// `ptxserve perplexity`: a model's perplexity on a text file, as llama.cpp's perplexity
// tool reports it: the text is tokenized once (with BOS), cut into windows of --context
// tokens, each window run from an empty KV cache, and every token after a window's first
// scored by the log-softmax of the logits before it. PPL = exp(mean negative log-likelihood).
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "engine/backend_factory.h"
#include "engine/model/model.h"
#include "engine/model/weight_files.h"
#include "engine/step_batch.h"
#include "engine/tokenizer/tokenizer.h"
#include "server/cli/cli_util.h"
#include "server/cli/common_flags.h"
#include "server/cli/subcommands.h"

ABSL_FLAG(std::string, text, "", "perplexity: the UTF-8 text file to score");
ABSL_FLAG(int32_t, context, 256, "perplexity: tokens per window (each from an empty cache)");

namespace ptxserve::cli {
namespace {

constexpr int64_t kChunk = 128;  // prompt rows per step

struct Score {
  double nll = 0;  // summed negative log-likelihood, nats
  int64_t tokens = 0;
};

// -log softmax(logits)[target], in double.
double NegLogProb(const float* logits, int64_t vocab, int32_t target) {
  double mx = logits[0];
  for (int64_t i = 1; i < vocab; ++i) mx = std::max<double>(mx, logits[i]);
  double sum = 0;
  for (int64_t i = 0; i < vocab; ++i) sum += std::exp(logits[i] - mx);
  return std::log(sum) + mx - logits[target];
}

// Runs `window` from an empty cache (blocks 0, 1, ...) and adds the score of each token
// after its first.
absl::Status ScoreWindow(Backend& backend, const std::vector<int32_t>& window, Score* score) {
  const int64_t vocab = backend.config().vocab_size;
  const int32_t bs = backend.kv_config().block_size;
  const int64_t n = static_cast<int64_t>(window.size());
  std::vector<int32_t> table(static_cast<size_t>((n + bs - 1) / bs));
  for (size_t b = 0; b < table.size(); ++b) table[b] = static_cast<int32_t>(b);
  std::vector<float> logits;
  for (int64_t start = 0; start < n; start += kChunk) {
    const int64_t end = std::min(n, start + kChunk);
    StepBatch b;
    for (int64_t p = start; p < end; ++p) {
      b.token_ids.push_back(window[p]);
      b.positions.push_back(static_cast<int32_t>(p));
      b.slot_mapping.push_back(int64_t{table[p / bs]} * bs + p % bs);
      b.logits_rows.push_back(static_cast<int32_t>(p - start));
    }
    b.query_start = {0, b.num_tokens()};
    b.seq_lens = {static_cast<int32_t>(end)};
    b.block_tables = table;
    b.max_blocks_per_seq = static_cast<int32_t>(table.size());
    if (absl::Status s = backend.Step(b, &logits); !s.ok()) return s;
    for (int64_t p = start; p < end && p + 1 < n; ++p) {
      score->nll += NegLogProb(logits.data() + (p - start) * vocab, vocab, window[p + 1]);
      ++score->tokens;
    }
  }
  return absl::OkStatus();
}

}  // namespace

int RunPerplexity(int argc, char** argv) {
  SetSubcommandFlags(
      {"server/cli/perplexity.cc", "model", "model_cache_dir", "backend", "emulated_device"});
  ParseSubcommandFlags(argc, argv,
                       "ptxserve perplexity --model DIR|FILE.gguf --text FILE [--context N] "
                       "[--backend auto|cpu|cuda|emulated]");
  auto fail = [](const absl::Status& st) {
    std::fprintf(stderr, "perplexity: %s\n", st.ToString().c_str());
    return 1;
  };
  const std::string text_path = absl::GetFlag(FLAGS_text);
  const int32_t context = absl::GetFlag(FLAGS_context);
  if (text_path.empty()) {
    std::fprintf(stderr, "perplexity: --text is required\n");
    return 2;
  }
  if (context < 2) {
    std::fprintf(stderr, "perplexity: --context must be at least 2, got %d\n", context);
    return 2;
  }
  auto text = ReadTextFile(text_path);
  if (!text.ok()) return fail(text.status());
  auto dir = ResolveModelDir();
  if (!dir.ok()) return fail(dir.status());
  auto model = LoadModel(*dir);
  if (!model.ok()) return fail(model.status());
  if (context > model->config.max_position_embeddings) {
    return fail(absl::InvalidArgumentError(
        absl::StrCat("--context ", context, " exceeds the model's ",
                     model->config.max_position_embeddings, " positions")));
  }
  auto tokenizer = Tokenizer::FromModelPath(*dir);
  if (!tokenizer.ok()) return fail(tokenizer.status());
  auto ids = (*tokenizer)->Encode(*text);
  if (!ids.ok()) return fail(ids.status());
  if (ids->size() < 2) {
    return fail(absl::InvalidArgumentError(
        absl::StrCat(text_path, " gives ", ids->size(), " token(s); at least 2 are scored")));
  }

  KvCacheConfig kv;
  kv.block_size = 16;
  kv.num_blocks = (context + kv.block_size - 1) / kv.block_size;
  BackendOptions options;
  options.max_seqs = 1;
  options.max_tokens = kChunk;
  options.emulated_device = absl::GetFlag(FLAGS_emulated_device);
  auto backend = CreateBackend(absl::GetFlag(FLAGS_backend), *model, kv, std::move(options));
  if (!backend.ok()) return fail(backend.status());

  Score score;
  for (size_t start = 0; start + 1 < ids->size(); start += static_cast<size_t>(context)) {
    const size_t end = std::min(ids->size(), start + static_cast<size_t>(context));
    const std::vector<int32_t> window(ids->begin() + start, ids->begin() + end);
    if (absl::Status s = ScoreWindow(**backend, window, &score); !s.ok()) return fail(s);
  }
  const double mean = score.nll / static_cast<double>(score.tokens);
  std::printf("perplexity %.4f (mean NLL %.5f nats over %lld tokens, windows of %d, backend %s)\n",
              std::exp(mean), mean, static_cast<long long>(score.tokens), context,
              (*backend)->name().c_str());
  return 0;
}

}  // namespace ptxserve::cli
