// Per-sequence token sampling: penalties, temperature, top-k / top-p / min-p filtering,
// a per-sequence RNG, and log-probs.
//
// Pipeline (one Sample call):
//   logits -> repetition / presence / frequency penalties -> greedy argmax (temperature 0
//   or top_k == 1; lowest id wins ties) or: temperature -> top-k -> top-p -> min-p ->
//   inverse-CDF draw with one uniform from the sequence's own RNG.
// The filters keep: top-k the k best (logit descending, lower id first among ties); top-p
// the smallest such best-first set whose probability (renormalised after top-k) reaches
// top_p; min-p the tokens whose probability is >= min_p times the best one's.
// Log-probs are log_softmax of the RAW logits (before penalties and temperature), as vLLM
// reports by default, and are computed only when params.logprobs > 0.
//
// RNG: xoshiro256** (Blackman & Vigna) whose state is filled by splitmix64 from the seed;
// a uniform is (next() >> 11) * 2^-53 in [0, 1). Every Sample call consumes exactly one
// uniform (greedy ones too), so a seed fixes the token sequence whatever else runs in the
// batch. The weights use a fixed polynomial exp and fixed summation orders, so the same
// build gives the same tokens for the same seed and logits.
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
// InvalidArgument naming the field; stop strings must be non-empty valid UTF-8 and
// stop_token_ids inside [0, vocab_size).
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

// The sampling state of one sequence. Not thread-safe; one per sequence. Params must
// have passed ValidateSamplingParams.
class SequenceSampler {
 public:
  // `fallback_seed` is used when params.seed is empty (the engine derives it per sequence).
  SequenceSampler(const SamplingParams& params, uint64_t fallback_seed);

  // Records prompt tokens: they count for the repetition penalty only.
  void AddPromptTokens(std::span<const int32_t> tokens);
  // Picks the next token from one non-empty row of logits (size = vocab) and records it as
  // generated. NaN logits are treated as -inf.
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

  const SamplingParams& params() const { return params_; }
  // Tokens sampled so far.
  int32_t num_generated() const { return num_generated_; }

 private:
  bool greedy() const { return params_.temperature == 0.0f || params_.top_k == 1; }
  bool has_penalties() const;
  // Copies logits into logits_ (NaN -> -inf) and applies the penalties.
  std::span<const float> PenalizedCopy(std::span<const float> logits);
  // Temperature, filters and the draw, on NaN-free logits.
  int32_t SampleFiltered(std::span<const float> l, double u);
  // Draw over all ids in id order with weights_ (no ordering filter active).
  int32_t DrawAll(std::span<const float> l, double u);
  // Leaves the k best ids (logit descending, lower id first among ties) in idx_[0, k).
  void TopK(std::span<const float> l, size_t k);
  // Leaves in idx_[0, n) the smallest set of best ids holding top_p of the mass `total`
  // (weights_ filled, m = max logit); returns n.
  size_t TopPOverAll(std::span<const float> l, float m, double total);
  void ComputeLogprobs(std::span<const float> raw, SampleResult* out);
  void Record(int32_t token);

  SamplingParams params_;
  Xoshiro256 rng_;
  int32_t num_generated_ = 0;
  // Repetition penalty: every id seen in the prompt or output.
  absl::flat_hash_set<int32_t> seen_;
  // Presence / frequency penalties: occurrence count per generated id.
  absl::flat_hash_map<int32_t, int32_t> counts_;
  // Scratch reused across calls (sized to the vocab on first use).
  std::vector<float> logits_;
  std::vector<float> weights_;
  std::vector<double> block_sums_;
  std::vector<int32_t> idx_;
  std::vector<std::pair<float, int32_t>> heap_;
};

}  // namespace ptxserve
