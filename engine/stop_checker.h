// Turns a sequence's generated ids into the text to stream and decides when it stops:
// EOS, stop token ids, stop strings (matched across token boundaries in the detokenized
// text, never emitted) and max_new_tokens.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "engine/request.h"
#include "engine/stop_matcher.h"
#include "engine/tokenizer/tokenizer.h"

namespace ptxserve {

class StopChecker {
 public:
  struct Step {
    std::string text;                           // safe to emit now (complete UTF-8)
    FinishReason finish = FinishReason::kNone;  // kNone while the sequence runs
  };

  // `criteria` should have passed ValidateStoppingCriteria. `eos_id` < 0 means none.
  // `tok` must outlive the checker. `prompt` is what the generated ids continue: the text
  // is Decode(prompt + generated) minus Decode(prompt), as IncrementalDetokenizer
  // defines it (stop strings are matched in that text only, never in the prompt's).
  // With max_new_tokens == 0 the checker starts finished (kLength): the engine should
  // not generate at all.
  StopChecker(const StoppingCriteria& criteria, const Tokenizer& tok, int32_t eos_id,
              std::span<const int32_t> prompt, bool skip_special_tokens = true);

  // Feeds one generated token. Checks, in order: EOS (unless ignore_eos) and
  // stop_token_ids (kStop; the token's text is not emitted; held-back text is), stop
  // strings (kStop; text from the match on is dropped), max_new_tokens (kLength, flushing
  // held-back text). Held back, and nothing more: an incomplete UTF-8 sequence, and the
  // longest tail of the text that is a proper prefix of a stop string.
  // After the sequence finished, returns {"", finish()} and ignores the token.
  Step Push(int32_t token);
  // Releases everything held back (incomplete UTF-8 as U+FFFD), for cancellation paths.
  std::string Flush();

  FinishReason finish() const { return finish_; }
  bool finished() const { return finish_ != FinishReason::kNone; }
  // Tokens pushed while running (the finishing one included).
  int32_t num_generated() const { return num_generated_; }

 private:
  bool IsStopToken(int32_t token) const;
  Step Finish(FinishReason reason, std::string text);

  int32_t max_new_tokens_;
  bool ignore_eos_;
  std::vector<int32_t> stop_ids_;  // sorted
  StopMatcher stops_;
  IncrementalDetokenizer detok_;
  int32_t eos_id_;
  int32_t num_generated_ = 0;
  FinishReason finish_ = FinishReason::kNone;
  // Detokenized text not yet emitted: a possible stop-string prefix, the text stops_ was
  // last fed ending it.
  std::string held_;
};

}  // namespace ptxserve
