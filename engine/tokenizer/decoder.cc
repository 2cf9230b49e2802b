// The reference decoders work on the whole token list, but the ones LLM tokenizers use
// are per-token maps followed by one concatenation and at most one "strip a leading
// space" of the result. Reducing them to that shape is what lets the streaming
// detokenizer produce exactly Decode()'s text; anything that does not reduce is refused.
#include "engine/tokenizer/decoder.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "engine/tokenizer/byte_level.h"
#include "engine/tokenizer/utf8.h"
#include "engine/util/status_macros.h"

namespace ptxserve::tok {
namespace {

constexpr std::string_view kMetaspace = "\xE2\x96\x81";  // U+2581

int HexDigit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

}  // namespace

absl::StatusOr<TokenDecoder> TokenDecoder::FromJson(const Json* j, std::string_view origin) {
  TokenDecoder d;
  if (j == nullptr) {
    // No decoder: the reference joins the tokens with single spaces.
    d.steps_.push_back(Step{Kind::kPrefixSpace, "", ""});
    d.strip_leading_space_ = true;
    return d;
  }
  if (auto s = d.Parse(*j, origin, "decoder"); !s.ok()) return s;
  return d;
}

absl::Status TokenDecoder::Parse(const Json& j, std::string_view origin, const std::string& path) {
  PTX_ASSIGN_OR_RETURN(auto type, ComponentType(j, origin, path));
  if (strip_leading_space_) {
    return FieldUnimplemented(origin, path,
                              "decoders after a leading-space Strip are not supported");
  }
  if (type == "Sequence") {
    return ParseSequence(j, "decoders", origin, path,
                         [&](const Json& item, const std::string& item_path) {
                           return Parse(item, origin, item_path);
                         });
  }
  if (type == "Replace") {
    PTX_ASSIGN_OR_RETURN(auto p, ReqPattern(j, "pattern", origin, path));
    if (p.is_regex) {
      return FieldUnimplemented(origin, path + ".pattern",
                                "regex Replace decoder is not supported");
    }
    if (p.text.empty()) return FieldError(origin, path + ".pattern.String", "is empty");
    PTX_ASSIGN_OR_RETURN(auto content, ReqString(j, "content", origin, path));
    steps_.push_back(Step{Kind::kReplace, p.text, content});
    return absl::OkStatus();
  }
  if (type == "ByteFallback") {
    steps_.push_back(Step{Kind::kByteFallback, "", ""});
    return absl::OkStatus();
  }
  if (type == "Fuse") {
    fused_ = true;
    return absl::OkStatus();
  }
  if (type == "ByteLevel") {
    steps_.push_back(Step{Kind::kByteLevel, "", ""});
    return absl::OkStatus();
  }
  if (type == "Strip") {
    PTX_ASSIGN_OR_RETURN(auto content, ReqString(j, "content", origin, path));
    PTX_ASSIGN_OR_RETURN(auto start, OptInt(j, "start", origin, path));
    PTX_ASSIGN_OR_RETURN(auto stop, OptInt(j, "stop", origin, path));
    const int64_t n_start = start.value_or(0);
    const int64_t n_stop = stop.value_or(0);
    if (n_start == 0 && n_stop == 0) return absl::OkStatus();
    // Strip acts per token; only after Fuse is there one token, the whole text.
    if (fused_ && content == " " && n_start == 1 && n_stop == 0) {
      strip_leading_space_ = true;
      return absl::OkStatus();
    }
    return FieldUnimplemented(
        origin, path,
        absl::StrCat("Strip(content=\"", content, "\", start=", n_start, ", stop=", n_stop, ")",
                     fused_ ? "" : " before Fuse", " is not supported"));
  }
  if (type == "Metaspace") {
    PTX_ASSIGN_OR_RETURN(auto repl, OptString(j, "replacement", origin, path));
    PTX_ASSIGN_OR_RETURN(auto scheme, OptString(j, "prepend_scheme", origin, path));
    PTX_ASSIGN_OR_RETURN(auto aps, OptBool(j, "add_prefix_space", origin, path));
    const std::string replacement = repl.value_or(std::string(kMetaspace));
    if (replacement.empty()) return FieldError(origin, path + ".replacement", "is empty");
    steps_.push_back(Step{Kind::kReplace, replacement, " "});
    // The reference strips the first token's leading space unless prepending is off.
    const bool prepends = scheme.has_value() ? *scheme != "never" : aps.value_or(true);
    if (prepends) strip_leading_space_ = true;
    return absl::OkStatus();
  }
  return FieldUnimplemented(origin, path + ".type",
                            absl::StrCat("decoder \"", type, "\" is not supported"));
}

std::string TokenDecoder::TokenBytes(std::string_view token) const {
  std::string s(token);
  for (const Step& step : steps_) {
    switch (step.kind) {
      case Kind::kReplace:
        if (s.find(step.from) != std::string::npos)
          s = absl::StrReplaceAll(s, {{step.from, step.to}});
        break;
      case Kind::kByteFallback:
        if (s.size() == 6 && s.starts_with("<0x") && s[5] == '>' && HexDigit(s[3]) >= 0 &&
            HexDigit(s[4]) >= 0) {
          s = std::string(1, static_cast<char>(HexDigit(s[3]) * 16 + HexDigit(s[4])));
        }
        break;
      case Kind::kByteLevel: {
        // A token with a character outside the byte map (an added token such as
        // "<｜end▁of▁sentence｜>") stands for its own UTF-8 text, as in the reference.
        std::string bytes;
        bytes.reserve(s.size());
        bool mapped = true;
        for (size_t i = 0; i < s.size() && mapped;) {
          const int b = CharToByte(DecodeUtf8(s, &i));
          if (b < 0) mapped = false;
          bytes.push_back(static_cast<char>(b));
        }
        if (mapped) s = std::move(bytes);
        break;
      }
      case Kind::kPrefixSpace:
        s.insert(0, 1, ' ');
        break;
    }
  }
  return s;
}

}  // namespace ptxserve::tok
