// Stop strings are matched on text, not ids: a stop string may be spread over several
// tokens or sit inside one. So text is emitted only once it is certain that no stop string
// can begin in it; the tail that could still grow into one is held back.
#include "engine/stop_checker.h"

#include <algorithm>
#include <string_view>
#include <utility>

namespace ptxserve {

StopChecker::StopChecker(const StoppingCriteria& criteria, const Tokenizer& tok, int32_t eos_id,
                         std::span<const int32_t> prompt, bool skip_special_tokens)
    : criteria_(criteria), detok_(tok, prompt, skip_special_tokens), eos_id_(eos_id) {
  for (const auto& s : criteria_.stop) max_stop_len_ = std::max(max_stop_len_, s.size());
  if (criteria_.max_new_tokens <= 0) finish_ = FinishReason::kLength;
}

bool StopChecker::IsStopToken(int32_t token) const {
  return std::find(criteria_.stop_token_ids.begin(), criteria_.stop_token_ids.end(), token) !=
         criteria_.stop_token_ids.end();
}

size_t StopChecker::ReleasableLength() const {
  if (max_stop_len_ == 0) return held_.size();
  // Only a tail shorter than the longest stop string can be a proper prefix of one.
  const size_t from = held_.size() >= max_stop_len_ ? held_.size() - (max_stop_len_ - 1) : 0;
  for (size_t q = from; q < held_.size(); ++q) {
    const std::string_view tail = std::string_view(held_).substr(q);
    for (const auto& s : criteria_.stop) {
      if (s.size() > tail.size() && std::string_view(s).substr(0, tail.size()) == tail) {
        // Valid UTF-8 stop strings start on a character boundary; stepping back to one
        // only matters for stop strings that skipped validation.
        while (q > 0 && (static_cast<unsigned char>(held_[q]) & 0xC0) == 0x80) --q;
        return q;
      }
    }
  }
  return held_.size();
}

StopChecker::Step StopChecker::Finish(FinishReason reason, std::string text) {
  finish_ = reason;
  return Step{std::move(text), reason};
}

StopChecker::Step StopChecker::Push(int32_t token) {
  if (finished()) return Step{"", finish_};
  ++num_generated_;
  if (eos_id_ >= 0 && token == eos_id_ && !criteria_.ignore_eos) {
    return Finish(FinishReason::kEos, Flush());
  }
  if (IsStopToken(token)) return Finish(FinishReason::kStop, Flush());

  held_ += detok_.Push(token);
  std::string out;
  if (max_stop_len_ > 0) {
    // Earliest match wins, whichever stop string it is: everything before it is output.
    size_t match = std::string::npos;
    for (const auto& s : criteria_.stop) match = std::min(match, held_.find(s));
    if (match != std::string::npos) {
      out = held_.substr(0, match);
      held_.clear();
      return Finish(FinishReason::kStop, std::move(out));
    }
    const size_t n = ReleasableLength();
    out = held_.substr(0, n);
    held_.erase(0, n);
  } else {
    out = std::move(held_);
    held_.clear();
  }
  if (num_generated_ >= criteria_.max_new_tokens) {
    out += Flush();
    return Finish(FinishReason::kLength, std::move(out));
  }
  return Step{std::move(out), FinishReason::kNone};
}

std::string StopChecker::Flush() {
  std::string out = std::move(held_);
  held_.clear();
  out += detok_.Flush();
  return out;
}

}  // namespace ptxserve
