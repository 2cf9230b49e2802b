#include "engine/generator.h"

#include <chrono>
#include <memory>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_format.h"
#include "engine/stop_checker.h"

namespace ptxserve {
namespace {

struct Sequence {
  const GenerationRequest* request;
  std::vector<int32_t> tokens;  // prompt then generated
  int64_t computed = 0;         // tokens whose K/V are in the cache
  std::vector<int32_t> blocks;
  std::unique_ptr<SequenceSampler> sampler;
  std::unique_ptr<StopChecker> stop;
  GenerationResult result;
  bool done() const { return result.finish != FinishReason::kNone; }
};

}  // namespace

Generator::Generator(Backend& backend, const Tokenizer& tokenizer, KvBlockManager& kv)
    : backend_(backend), tokenizer_(tokenizer), kv_(kv) {}

absl::StatusOr<std::vector<GenerationResult>> Generator::Run(
    const std::vector<GenerationRequest>& requests,
    const std::function<void(size_t, std::string_view)>& on_text, GenerationStats* stats) {
  const int64_t vocab = backend_.config().vocab_size;
  const int64_t max_len = backend_.config().max_position_embeddings;
  std::vector<Sequence> seqs(requests.size());
  absl::Cleanup free_blocks = [&] {
    for (auto& s : seqs) kv_.FreeSequence(&s.blocks);
  };
  for (size_t i = 0; i < requests.size(); ++i) {
    const auto& r = requests[i];
    if (r.prompt.empty())
      return absl::InvalidArgumentError(absl::StrFormat("request %d: empty prompt", i));
    if (static_cast<int64_t>(r.prompt.size()) >= max_len) {
      return absl::InvalidArgumentError(
          absl::StrFormat("request %d: prompt of %d tokens does not fit the context of %d", i,
                          r.prompt.size(), max_len));
    }
    for (size_t t = 0; t < r.prompt.size(); ++t) {
      if (r.prompt[t] < 0 || r.prompt[t] >= vocab) {
        return absl::InvalidArgumentError(
            absl::StrFormat("request %d: prompt token %d (index %d) outside the vocabulary [0, %d)",
                            i, r.prompt[t], t, vocab));
      }
    }
    if (auto st = ValidateSamplingParams(r.sampling); !st.ok()) return st;
    if (auto st = ValidateStoppingCriteria(r.stopping, static_cast<int32_t>(vocab)); !st.ok()) {
      return st;
    }
    Sequence& s = seqs[i];
    s.request = &r;
    s.tokens = r.prompt;
    s.sampler = std::make_unique<SequenceSampler>(r.sampling, /*fallback_seed=*/i);
    s.sampler->AddPromptTokens(r.prompt);
    s.stop = std::make_unique<StopChecker>(r.stopping, tokenizer_, tokenizer_.eos_id());
    if (r.stopping.max_new_tokens == 0) s.result.finish = FinishReason::kLength;
  }
  if (stats) stats->prompt_tokens = 0;

  std::vector<float> logits;
  StepBatch batch;
  const int32_t block_size = kv_.block_size();
  while (true) {
    batch = StepBatch{};
    std::vector<Sequence*> in_batch;
    bool has_prefill = false;
    for (auto& s : seqs) {
      if (s.done()) continue;
      const int64_t total = static_cast<int64_t>(s.tokens.size());
      if (total >= max_len) {  // the context is full: stop as if by length
        s.result.finish = FinishReason::kLength;
        continue;
      }
      if (auto st = kv_.EnsureCapacity(&s.blocks, total); !st.ok()) return st;
      batch.query_start.push_back(batch.num_tokens());
      for (int64_t p = s.computed; p < total; ++p) {
        batch.token_ids.push_back(s.tokens[p]);
        batch.positions.push_back(static_cast<int32_t>(p));
        batch.slot_mapping.push_back(static_cast<int64_t>(s.blocks[p / block_size]) * block_size +
                                     p % block_size);
      }
      has_prefill |= total - s.computed > 1;
      if (stats && s.computed == 0) stats->prompt_tokens += total;
      batch.seq_lens.push_back(static_cast<int32_t>(total));
      batch.logits_rows.push_back(batch.num_tokens() - 1);
      batch.max_blocks_per_seq =
          std::max(batch.max_blocks_per_seq, static_cast<int32_t>(s.blocks.size()));
      in_batch.push_back(&s);
    }
    if (in_batch.empty()) break;
    batch.query_start.push_back(batch.num_tokens());
    batch.block_tables.assign(in_batch.size() * batch.max_blocks_per_seq, 0);
    for (size_t i = 0; i < in_batch.size(); ++i) {
      std::copy(in_batch[i]->blocks.begin(), in_batch[i]->blocks.end(),
                batch.block_tables.begin() + i * batch.max_blocks_per_seq);
    }

    const auto t0 = std::chrono::steady_clock::now();
    if (auto st = backend_.Step(batch, &logits); !st.ok()) return st;
    const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (stats) {
      ++stats->steps;
      (has_prefill ? stats->prefill_seconds : stats->decode_seconds) += dt;
    }

    for (size_t i = 0; i < in_batch.size(); ++i) {
      Sequence& s = *in_batch[i];
      s.computed = static_cast<int64_t>(s.tokens.size());
      SampleResult sample =
          s.sampler->Sample(std::span<const float>(logits.data() + i * vocab, vocab));
      s.tokens.push_back(sample.token);
      s.result.tokens.push_back(sample.token);
      s.result.samples.push_back(std::move(sample));
      if (stats) ++stats->generated_tokens;
      StopChecker::Step step = s.stop->Push(s.result.tokens.back());
      s.result.text += step.text;
      if (on_text && !step.text.empty()) on_text(&s - seqs.data(), step.text);
      if (step.finish != FinishReason::kNone) {
        s.result.finish = step.finish;
        kv_.FreeSequence(&s.blocks);
      }
    }
  }

  std::vector<GenerationResult> out;
  out.reserve(seqs.size());
  for (auto& s : seqs) out.push_back(std::move(s.result));
  return out;
}

}  // namespace ptxserve
