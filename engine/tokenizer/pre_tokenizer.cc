// Split behaviors reproduce the reference implementation's folds over (range, is_match)
// segments, so a merged delimiter lands on the same side as in Hugging Face tokenizers.
#include "engine/tokenizer/pre_tokenizer.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "engine/tokenizer/byte_level.h"
#include "engine/util/status_macros.h"

namespace ptxserve::tok {
namespace {

constexpr std::string_view kMetaspace = "\xE2\x96\x81";  // U+2581

struct Segment {
  size_t begin;
  size_t end;
  bool is_match;
};

// Covers [0, size) with the matches and the gaps between them.
std::vector<Segment> ToSegments(const std::vector<std::pair<size_t, size_t>>& matches, size_t size,
                                bool invert) {
  std::vector<Segment> segs;
  size_t last = 0;
  for (const auto& [b, e] : matches) {
    if (b > last) segs.push_back({last, b, invert});
    segs.push_back({b, e, !invert});
    last = e;
  }
  if (last < size) segs.push_back({last, size, invert});
  return segs;
}

void FindLiteral(std::string_view s, std::string_view lit,
                 std::vector<std::pair<size_t, size_t>>* out) {
  if (lit.empty()) return;
  for (size_t pos = s.find(lit); pos != std::string_view::npos; pos = s.find(lit, pos)) {
    out->emplace_back(pos, pos + lit.size());
    pos += lit.size();
  }
}

}  // namespace

absl::StatusOr<PreTokenizer> PreTokenizer::FromJson(const Json* j, std::string_view origin) {
  PreTokenizer p;
  if (j == nullptr) return p;
  if (auto s = p.Parse(*j, origin, "pre_tokenizer"); !s.ok()) return s;
  return p;
}

absl::Status PreTokenizer::Parse(const Json& j, std::string_view origin, const std::string& path) {
  PTX_ASSIGN_OR_RETURN(auto type, ComponentType(j, origin, path));
  if (type == "Sequence") {
    return ParseSequence(j, "pretokenizers", origin, path,
                         [&](const Json& item, const std::string& item_path) {
                           return Parse(item, origin, item_path);
                         });
  }
  Step step{};
  if (type == "Split") {
    step.kind = Kind::kSplit;
    PTX_ASSIGN_OR_RETURN(auto p, ReqPattern(j, "pattern", origin, path));
    if (p.is_regex) {
      PTX_ASSIGN_OR_RETURN(
          auto re, Regex::Compile(p.text, absl::StrCat(Sv(origin), ": ", path, ".pattern.Regex")));
      step.re = re;
    } else {
      if (p.text.empty()) return FieldError(origin, path + ".pattern.String", "is empty");
      step.literal = p.text;
    }
    PTX_ASSIGN_OR_RETURN(auto behavior, ReqString(j, "behavior", origin, path));
    static constexpr std::pair<std::string_view, Behavior> kBehaviors[] = {
        {"Removed", Behavior::kRemoved},
        {"Isolated", Behavior::kIsolated},
        {"MergedWithPrevious", Behavior::kMergedWithPrevious},
        {"MergedWithNext", Behavior::kMergedWithNext},
        {"Contiguous", Behavior::kContiguous}};
    bool known = false;
    for (const auto& [name, b] : kBehaviors) {
      if (behavior == name) {
        step.behavior = b;
        known = true;
      }
    }
    if (!known) {
      return FieldError(origin, path + ".behavior",
                        absl::StrCat("unknown split behavior \"", behavior, "\""));
    }
    PTX_ASSIGN_OR_RETURN(auto invert, OptBool(j, "invert", origin, path));
    step.invert = invert.value_or(false);
  } else if (type == "ByteLevel") {
    step.kind = Kind::kByteLevel;
    PTX_ASSIGN_OR_RETURN(auto aps, OptBool(j, "add_prefix_space", origin, path));
    step.add_prefix_space = aps.value_or(true);
    PTX_ASSIGN_OR_RETURN(auto use_regex, OptBool(j, "use_regex", origin, path));
    if (use_regex.value_or(true)) {
      PTX_ASSIGN_OR_RETURN(
          auto re,
          Regex::Compile(kGpt2Pattern, absl::StrCat(Sv(origin), ": ", path, " (GPT-2 regex)")));
      step.re = re;
    }
    byte_level_ = true;
  } else if (type == "Metaspace") {
    step.kind = Kind::kMetaspace;
    PTX_ASSIGN_OR_RETURN(auto repl, OptString(j, "replacement", origin, path));
    step.replacement = repl.value_or(std::string(kMetaspace));
    if (step.replacement.empty()) return FieldError(origin, path + ".replacement", "is empty");
    PTX_ASSIGN_OR_RETURN(auto scheme, OptString(j, "prepend_scheme", origin, path));
    // add_prefix_space: before prepend_scheme existed.
    PTX_ASSIGN_OR_RETURN(auto aps, OptBool(j, "add_prefix_space", origin, path));
    const std::string s = scheme.value_or(aps.value_or(true) ? "always" : "never");
    if (s == "always") {
      step.prepend = Prepend::kAlways;
    } else if (s == "first") {
      step.prepend = Prepend::kFirst;
    } else if (s == "never") {
      step.prepend = Prepend::kNever;
    } else {
      return FieldError(origin, path + ".prepend_scheme",
                        absl::StrCat("unknown value \"", s, "\""));
    }
    PTX_ASSIGN_OR_RETURN(auto split, OptBool(j, "split", origin, path));
    step.split = split.value_or(true);
    metaspace_ = true;
  } else if (type == "Digits") {
    // Digits is a Split on numeric characters: one each, or runs of them.
    step.kind = Kind::kSplit;
    PTX_ASSIGN_OR_RETURN(auto individual, OptBool(j, "individual_digits", origin, path));
    PTX_ASSIGN_OR_RETURN(auto re,
                         Regex::Compile(individual.value_or(false) ? R"(\p{N})" : R"(\p{N}+)",
                                        absl::StrCat(Sv(origin), ": ", path)));
    step.re = re;
    step.behavior = Behavior::kIsolated;
  } else {
    return FieldUnimplemented(origin, path + ".type",
                              absl::StrCat("pre-tokenizer \"", type, "\" is not supported"));
  }
  steps_.push_back(std::move(step));
  return absl::OkStatus();
}

absl::Status PreTokenizer::ApplySplit(const Step& step, const Word& w,
                                      std::vector<Word>* out) const {
  std::vector<std::pair<size_t, size_t>> matches;
  if (step.re != nullptr) {
    if (auto s = step.re->FindAll(w.text, &matches); !s.ok()) return s;
  } else {
    FindLiteral(w.text, step.literal, &matches);
  }
  std::vector<Segment> segs = ToSegments(matches, w.text.size(), step.invert);
  std::vector<Segment> pieces;
  switch (step.behavior) {
    case Behavior::kIsolated:
      pieces = std::move(segs);
      break;
    case Behavior::kRemoved:
      for (const Segment& s : segs) {
        if (!s.is_match) pieces.push_back(s);
      }
      break;
    case Behavior::kMergedWithPrevious: {
      bool prev_match = false;
      for (const Segment& s : segs) {
        if (s.is_match && !prev_match && !pieces.empty()) {
          pieces.back().end = s.end;
        } else {
          pieces.push_back(s);
        }
        prev_match = s.is_match;
      }
      break;
    }
    case Behavior::kMergedWithNext: {
      bool next_match = false;
      for (auto it = segs.rbegin(); it != segs.rend(); ++it) {
        if (it->is_match && !next_match && !pieces.empty()) {
          pieces.back().begin = it->begin;
        } else {
          pieces.push_back(*it);
        }
        next_match = it->is_match;
      }
      std::reverse(pieces.begin(), pieces.end());
      break;
    }
    case Behavior::kContiguous: {
      bool prev_match = false;
      for (const Segment& s : segs) {
        if (s.is_match == prev_match && !pieces.empty()) {
          pieces.back().end = s.end;
        } else {
          pieces.push_back(s);
        }
        prev_match = s.is_match;
      }
      break;
    }
  }
  for (const Segment& s : pieces) {
    if (s.end > s.begin) {
      out->push_back(Word{w.text.substr(s.begin, s.end - s.begin), w.first && s.begin == 0});
    }
  }
  return absl::OkStatus();
}

absl::Status PreTokenizer::Split(std::string_view segment, bool at_text_start,
                                 std::vector<std::string>* words) const {
  std::vector<Word> cur;
  if (!segment.empty()) cur.push_back(Word{std::string(segment), at_text_start});
  std::vector<Word> next;
  for (const Step& step : steps_) {
    next.clear();
    for (Word& w : cur) {
      switch (step.kind) {
        case Kind::kSplit:
          if (auto s = ApplySplit(step, w, &next); !s.ok()) return s;
          break;
        case Kind::kByteLevel: {
          if (step.add_prefix_space && w.text[0] != ' ') w.text.insert(0, 1, ' ');
          std::vector<Word> parts;
          if (step.re != nullptr) {
            Step isolate{};
            isolate.kind = Kind::kSplit;
            isolate.re = step.re;
            if (auto s = ApplySplit(isolate, w, &parts); !s.ok()) return s;
          } else {
            parts.push_back(std::move(w));
          }
          for (Word& p : parts) {
            std::string mapped;
            mapped.reserve(p.text.size() * 2);
            AppendByteLevel(p.text, &mapped);
            next.push_back(Word{std::move(mapped), p.first});
          }
          break;
        }
        case Kind::kMetaspace: {
          if (w.text.find(' ') != std::string::npos) {
            w.text = absl::StrReplaceAll(w.text, {{" ", step.replacement}});
          }
          const bool prepend =
              step.prepend == Prepend::kAlways || (step.prepend == Prepend::kFirst && w.first);
          if (prepend && !w.text.starts_with(step.replacement)) {
            w.text.insert(0, step.replacement);
          }
          if (step.split) {
            Step merge_next{};
            merge_next.kind = Kind::kSplit;
            merge_next.literal = step.replacement;
            merge_next.behavior = Behavior::kMergedWithNext;
            if (auto s = ApplySplit(merge_next, w, &next); !s.ok()) return s;
          } else {
            next.push_back(std::move(w));
          }
          break;
        }
      }
    }
    std::swap(cur, next);
  }
  for (Word& w : cur) words->push_back(std::move(w.text));
  return absl::OkStatus();
}

}  // namespace ptxserve::tok
