#include "engine/tokenizer/normalizer.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_replace.h"
#include "engine/tokenizer/utf8.h"
#include "engine/util/status_macros.h"

namespace ptxserve::tok {

absl::StatusOr<Normalizer> Normalizer::FromJson(const Json* j, std::string_view origin) {
  Normalizer n;
  if (j == nullptr) return n;
  if (auto s = n.Parse(*j, origin, "normalizer"); !s.ok()) return s;
  return n;
}

absl::Status Normalizer::Parse(const Json& j, std::string_view origin, const std::string& path) {
  PTX_ASSIGN_OR_RETURN(auto type, ComponentType(j, origin, path));
  if (type == "Sequence") {
    return ParseSequence(j, "normalizers", origin, path,
                         [&](const Json& item, const std::string& item_path) {
                           return Parse(item, origin, item_path);
                         });
  }
  if (type == "Prepend") {
    PTX_ASSIGN_OR_RETURN(auto text, ReqString(j, "prepend", origin, path));
    steps_.push_back(Step{Kind::kPrepend, text, "", nullptr});
    return absl::OkStatus();
  }
  if (type == "Replace") {
    PTX_ASSIGN_OR_RETURN(auto p, ReqPattern(j, "pattern", origin, path));
    PTX_ASSIGN_OR_RETURN(auto content, ReqString(j, "content", origin, path));
    if (p.text.empty()) return FieldError(origin, path + ".pattern", "is empty");
    if (!p.is_regex) {
      steps_.push_back(Step{Kind::kReplace, p.text, content, nullptr});
      return absl::OkStatus();
    }
    PTX_ASSIGN_OR_RETURN(
        auto re, Regex::Compile(p.text, absl::StrCat(Sv(origin), ": ", path, ".pattern.Regex")));
    steps_.push_back(Step{Kind::kReplaceRegex, p.text, content, re});
    return absl::OkStatus();
  }
  if (type == "NFC") {
    steps_.push_back(Step{Kind::kNfc, "", "", nullptr});
    return absl::OkStatus();
  }
  return FieldUnimplemented(origin, path + ".type",
                            absl::StrCat("normalizer \"", type, "\" is not supported"));
}

absl::Status Normalizer::Apply(std::string* s, size_t offset) const {
  for (const Step& step : steps_) {
    switch (step.kind) {
      case Kind::kPrepend:
        // The reference leaves empty text empty.
        if (!s->empty()) s->insert(0, step.a);
        break;
      case Kind::kReplace:
        if (s->find(step.a) != std::string::npos) {
          *s = absl::StrReplaceAll(*s, {{step.a, step.b}});
        }
        break;
      case Kind::kReplaceRegex: {
        std::vector<std::pair<size_t, size_t>> matches;
        if (auto st = step.re->FindAll(*s, &matches); !st.ok()) return st;
        if (matches.empty()) break;
        std::string out;
        size_t last = 0;
        for (const auto& [b, e] : matches) {
          out.append(*s, last, b - last);
          out += step.b;
          last = e;
        }
        out.append(*s, last);
        *s = std::move(out);
        break;
      }
      case Kind::kNfc:
        for (size_t i = 0; i < s->size();) {
          const size_t at = i;
          const char32_t c = DecodeUtf8(*s, &i);
          if (!NfcStable(c)) {
            return absl::UnimplementedError(absl::StrFormat(
                "normalizer NFC: U+%04X at byte offset %d needs Unicode normalization tables, "
                "which this tokenizer does not have",
                static_cast<uint32_t>(c), offset + at));
          }
        }
        break;
    }
  }
  return absl::OkStatus();
}

bool Normalizer::PrependsMetaspace() const {
  for (const Step& step : steps_) {
    if (step.kind == Kind::kPrepend && step.a == "\xE2\x96\x81") return true;
  }
  return false;
}

bool NfcStable(char32_t c) {
  // Ranges whose code points all have NFC_Quick_Check=Yes and combining class 0, minus
  // the singleton decompositions and composition exclusions inside them (U+0374, U+037E,
  // U+0387, U+2000, U+2001, U+2126, U+212A, U+212B, U+2329, U+232A, U+2ADC). Text made
  // of them is already NFC, so passing it through is exact, not an approximation.
  if (c < 0x0300) return true;  // ASCII, Latin-1, Latin Extended-A/B, IPA, modifiers
  if (c >= 0x0370 && c <= 0x03FF) return c != 0x0374 && c != 0x037E && c != 0x0387;
  if ((c >= 0x0400 && c <= 0x0482) || (c >= 0x048A && c <= 0x052F)) return true;  // Cyrillic
  if (c >= 0x0531 && c <= 0x058A) return true;                                    // Armenian
  if (c >= 0x10A0 && c <= 0x10FF) return true;                                    // Georgian
  if (c >= 0x1E00 && c <= 0x1EFF) return true;  // Latin Extended Additional
  if (c >= 0x2002 && c <= 0x20CF) return true;  // punctuation, super/subscripts, currency
  if (c >= 0x2100 && c <= 0x2BFF) {             // letterlike, arrows, math, symbols, dingbats
    return c != 0x2126 && c != 0x212A && c != 0x212B && c != 0x2329 && c != 0x232A && c != 0x2ADC;
  }
  if (c >= 0x3000 && c <= 0x3029) return true;  // CJK symbols (U+302A..302F combine)
  if ((c >= 0x3030 && c <= 0x3098) || (c >= 0x309B && c <= 0x30FF)) return true;  // kana
  if (c >= 0x3100 && c <= 0x9FFF) return true;    // bopomofo, compat jamo, CJK (+Ext A)
  if (c >= 0xA000 && c <= 0xA4CF) return true;    // Yi
  if (c >= 0xAC00 && c <= 0xD7A3) return true;    // Hangul syllables
  if (c >= 0xFE00 && c <= 0xFE0F) return true;    // variation selectors
  if (c >= 0xFF01 && c <= 0xFFEE) return true;    // half/full-width forms
  if (c >= 0x1F000 && c <= 0x1FAFF) return true;  // emoji and pictographs
  if (c >= 0x20000 && c <= 0x2EBEF) return true;  // CJK Ext B-F (not the compat block)
  if (c >= 0xE0020 && c <= 0xE007F) return true;  // tag characters (flag sequences)
  return false;
}

}  // namespace ptxserve::tok
