// Per-sequence token sampling: penalties, temperature, top-k / top-p / min-p filtering,
// a per-sequence RNG, and log-probs.
//
// Pipeline (one Sample call):
//   logits -> repetition / presence / frequency penalties -> the canonical sampling
//   algorithm of kernels/sampling.h with one uniform from the sequence's own RNG.
// That algorithm (greedy argmax for temperature 0 or top_k 1, lowest id among ties;
// otherwise f32 weights exp((l - max) / T) by a fixed polynomial, integer weights
// floor(w * 2^40), top-k -> top-p (over the top-k survivors) -> min-p, and an inverse-CDF
// draw over the kept ids in ascending id order) is written down once, in
// kernels/sampling.h; the sampling kernel implements it too, bit for bit, so a token never
// depends on whether the host or the device drew it (Backend::CanSampleOnDevice).
// Log-probs are log_softmax of the RAW logits (before penalties and temperature), as vLLM
// reports by default, and are computed only when params.logprobs > 0.
//
// RNG: xoshiro256** (Blackman & Vigna) whose state is filled by splitmix64 from the seed;
// a uniform is (next() >> 11) * 2^-53 in [0, 1). Every Sample call consumes exactly one
// uniform (greedy ones too), so a seed fixes the token sequence whatever else runs in the
// batch.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "engine/request.h"

namespace ptxserve {

struct TokenLogprob {
  int32_t id = 0;
  float logprob = 0.0f;
};

struct SampleResult {
  int32_t token = 0;
  float logprob = 0.0f;  // of `token`; 0 when params.logprobs == 0
  // The params.logprobs best by raw logit, descending (ties: lower id); ids whose logit is
  // -inf or NaN are never listed, so it may be shorter.
  std::vector<TokenLogprob> top;
};

// InvalidArgument naming the field ("sampling.top_p must be in (0, 1], got 1.5").
absl::Status ValidateSamplingParams(const SamplingParams& p);
// Per-request limits on stopping criteria. A token costs the same whatever their number (the
// stop strings are one automaton, engine/stop_matcher.h); the limits bound the automaton's
// memory and build time per request.
inline constexpr size_t kMaxStopStrings = 64;
inline constexpr size_t kMaxStopStringBytes = 512;
inline constexpr size_t kMaxStopTokenIds = 256;

// InvalidArgument naming the field; stop strings must be non-empty valid UTF-8 (at most
// kMaxStopStrings of at most kMaxStopStringBytes) and stop_token_ids (at most
// kMaxStopTokenIds) inside [0, vocab_size).
absl::Status ValidateStoppingCriteria(const StoppingCriteria& c, int32_t vocab_size);

// Small, portable, seedable generator (see the file comment).
class Xoshiro256 {
 public:
  explicit Xoshiro256(uint64_t seed);
  uint64_t Next();
  // Uniform double in [0, 1) with 53 random bits.
  double Uniform() { return static_cast<double>(Next() >> 11) * 0x1.0p-53; }

 private:
  std::array<uint64_t, 4> s_;
};

// The canonical draw (kernels/sampling.h) of one token from one row of logits with the
// uniform `u` in [0, 1): what Sample does after the penalties. Reuses scratch buffers
// across calls; not thread-safe. The row must be shorter than 2^24 ids.
class RowDrawer {
 public:
  // Uses params' temperature, top_k, top_p and min_p (validated); ignores the rest.
  int32_t Draw(std::span<const float> logits, const SamplingParams& params, double u);

 private:
  // The kept set {key >= key(cut)} of kernels/sampling.h step 4, as its last member.
  struct Cut {
    float logit;
    int32_t id;
  };
  // Leaves the k best ids (logit descending, lower id first among ties) in idx_[0, k),
  // best first.
  void TopK(std::span<const float> l, size_t k);
  // Small top-k (any k < vocab works): everything on the k candidates.
  int32_t DrawFromTopK(std::span<const float> l, float m, float inv_t, const SamplingParams& p,
                       double u);
  // The top-p cut over the whole row (weights_ filled): the shortest best-first prefix
  // whose mass reaches `need`.
  Cut TopPCut(std::span<const float> l, float m, float temperature, double need);
  // The draw over ids at or above `cut` whose weight is >= min_p, in id order (weights_
  // filled; block_q_ too when `sums_ready`).
  int32_t DrawMasked(std::span<const float> l, Cut cut, float min_p, double u, bool sums_ready);

  std::vector<float> row_;      // the row with NaN as -inf (when it has NaN)
  std::vector<float> weights_;  // w per id
  std::vector<uint64_t> block_q_;
  std::vector<int32_t> idx_;
  std::vector<std::pair<float, int32_t>> heap_;
  std::vector<std::pair<int32_t, uint64_t>> kept_;  // (id, q)
};

// One id of a sequence's penalty history, as the device's penalties kernel takes it
// (kernels/penalties.h PenaltyEntryWords has the same layout).
struct PenaltyEntry {
  int32_t id = 0;
  int32_t count = 0;     // times generated: presence / frequency apply when > 0
  int32_t repeated = 0;  // 1: seen in the prompt or output, the repetition penalty applies
};

// The sampling state of one sequence. Not thread-safe; one per sequence. Params must
// have passed ValidateSamplingParams.
class SequenceSampler {
 public:
  // `fallback_seed` is used when params.seed is empty (the engine derives it per sequence).
  SequenceSampler(const SamplingParams& params, uint64_t fallback_seed);

  // Records prompt tokens: they count for the repetition penalty only.
  void AddPromptTokens(std::span<const int32_t> tokens);
  // Picks the next token from one non-empty row of logits (size = vocab) and records it as
  // generated. NaN logits are never picked unless every logit is NaN (then id 0).
  // Ids outside the row (prompt ids past the vocab) are ignored by the penalties.
  SampleResult Sample(std::span<const float> logits);

  // Device sampling: TakeUniform consumes the one uniform a Sample call would (the draw
  // for the device), and Accept records the token chosen with it as generated. Together
  // they keep the RNG stream and penalty state exactly as Sample would.
  double TakeUniform() { return rng_.Uniform(); }
  void Accept(int32_t token) { Record(token); }

  // Applies the repetition / presence / frequency penalties for the tokens recorded so far
  // to one row of logits, in place (what Sample does before anything else).
  void ApplyPenalties(std::span<float> logits) const;

  // Appends one entry per id ApplyPenalties rewrites in a row of `vocab` ids, each id
  // once, in no particular order (ids outside [0, vocab) are left out, as ApplyPenalties
  // ignores them). Nothing when the params have no penalties.
  void PenaltyEntries(int32_t vocab, std::vector<PenaltyEntry>* out) const;
  // True when a penalty parameter is set (ApplyPenalties may change a row).
  bool has_penalties() const;

  const SamplingParams& params() const { return params_; }
  // Tokens sampled so far.
  int32_t num_generated() const { return num_generated_; }

 private:
  // Copies logits into logits_ and applies the penalties.
  std::span<const float> PenalizedCopy(std::span<const float> logits);
  void ComputeLogprobs(std::span<const float> raw, SampleResult* out);
  void Record(int32_t token);

  SamplingParams params_;
  Xoshiro256 rng_;
  int32_t num_generated_ = 0;
  // Repetition penalty: every id seen in the prompt or output.
  absl::flat_hash_set<int32_t> seen_;
  // Presence / frequency penalties: occurrence count per generated id.
  absl::flat_hash_map<int32_t, int32_t> counts_;
  RowDrawer drawer_;
  // Scratch reused across calls (sized to the vocab on first use).
  std::vector<float> logits_;
  std::vector<float> weights_;
};

}  // namespace ptxserve
