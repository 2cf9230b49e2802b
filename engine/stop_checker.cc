// Stop strings are matched on text, not ids: a stop string may be spread over several
// tokens or sit inside one. So text is emitted only once it is certain that no stop string
// can begin in it; the tail that could still grow into one is held back.
#include "engine/stop_checker.h"

#include <algorithm>
#include <utility>

namespace ptxserve {

StopChecker::StopChecker(const StoppingCriteria& criteria, const Tokenizer& tok, int32_t eos_id,
                         std::span<const int32_t> prompt, bool skip_special_tokens)
    : max_new_tokens_(criteria.max_new_tokens),
      ignore_eos_(criteria.ignore_eos),
      stop_ids_(criteria.stop_token_ids),
      stops_(criteria.stop),
      detok_(tok, prompt, skip_special_tokens),
      eos_id_(eos_id) {
  std::sort(stop_ids_.begin(), stop_ids_.end());
  if (max_new_tokens_ <= 0) finish_ = FinishReason::kLength;
}

bool StopChecker::IsStopToken(int32_t token) const {
  return std::binary_search(stop_ids_.begin(), stop_ids_.end(), token);
}

StopChecker::Step StopChecker::Finish(FinishReason reason, std::string text) {
  finish_ = reason;
  return Step{std::move(text), reason};
}

StopChecker::Step StopChecker::Push(int32_t token) {
  if (finished()) return Step{"", finish_};
  ++num_generated_;
  if (eos_id_ >= 0 && token == eos_id_ && !ignore_eos_) {
    return Finish(FinishReason::kEos, Flush());
  }
  if (IsStopToken(token)) return Finish(FinishReason::kStop, Flush());

  std::string piece = detok_.Push(token);
  std::string out;
  if (stops_.empty()) {
    out = std::move(piece);
  } else {
    held_ += piece;
    if (const size_t back = stops_.Feed(piece); back != StopMatcher::kNoMatch) {
      // Earliest match wins, whichever stop string it is: everything before it is output.
      out = held_.substr(0, held_.size() - back);
      held_.clear();
      return Finish(FinishReason::kStop, std::move(out));
    }
    // No stop string can begin before the tail that is still a prefix of one.
    size_t n = held_.size() - stops_.PartialLength();
    if (n < held_.size()) {
      // Valid UTF-8 stop strings start on a character boundary; stepping back to one only
      // matters for stop strings that skipped validation.
      while (n > 0 && (static_cast<unsigned char>(held_[n]) & 0xC0) == 0x80) --n;
    }
    out = held_.substr(0, n);
    held_.erase(0, n);
  }
  if (num_generated_ >= max_new_tokens_) {
    out += Flush();
    return Finish(FinishReason::kLength, std::move(out));
  }
  return Step{std::move(out), FinishReason::kNone};
}

std::string StopChecker::Flush() {
  std::string out = std::move(held_);
  held_.clear();
  stops_.Reset();
  out += detok_.Flush();
  return out;
}

}  // namespace ptxserve
