#define PCRE2_CODE_UNIT_WIDTH 8
#include "engine/tokenizer/regex.h"

#include <pcre2.h>

#include "absl/strings/str_cat.h"
#include "engine/tokenizer/json_util.h"
#include "engine/tokenizer/utf8.h"

namespace ptxserve::tok {
namespace {

std::string Pcre2Message(int code) {
  PCRE2_UCHAR buf[256];
  if (pcre2_get_error_message(code, buf, sizeof(buf)) < 0) return absl::StrCat("error ", code);
  return reinterpret_cast<const char*>(buf);
}

struct MatchDataDeleter {
  void operator()(pcre2_match_data* md) const { pcre2_match_data_free(md); }
};

}  // namespace

absl::StatusOr<std::shared_ptr<const Regex>> Regex::Compile(std::string_view pattern,
                                                            std::string_view where) {
  int err = 0;
  PCRE2_SIZE err_offset = 0;
  pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                                   PCRE2_UTF | PCRE2_UCP, &err, &err_offset, /*ccontext=*/nullptr);
  if (code == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(Sv(where), ": regex does not compile at offset ",
                                                   err_offset, ": ", Pcre2Message(err)));
  }
  // JIT is a pure speed-up: when unavailable the interpreter gives the same matches.
  (void)pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);
  std::shared_ptr<Regex> re(new Regex());
  re->code_ = code;
  re->where_ = std::string(where);
  return std::shared_ptr<const Regex>(std::move(re));
}

Regex::~Regex() { pcre2_code_free(static_cast<pcre2_code*>(code_)); }

absl::Status Regex::FindAll(std::string_view s, std::vector<std::pair<size_t, size_t>>* out) const {
  auto* code = static_cast<pcre2_code*>(code_);
  std::unique_ptr<pcre2_match_data, MatchDataDeleter> md(
      pcre2_match_data_create_from_pattern(code, nullptr));
  if (md == nullptr) return absl::ResourceExhaustedError("pcre2 match data allocation failed");
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(s.data());
  size_t offset = 0;
  while (offset <= s.size()) {
    // The caller validated the UTF-8 once; re-checking per match would be quadratic.
    const int rc = pcre2_match(code, subject, s.size(), offset, PCRE2_NO_UTF_CHECK, md.get(),
                               /*mcontext=*/nullptr);
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc < 0) {
      return absl::ResourceExhaustedError(
          absl::StrCat(where_, ": regex match failed at byte ", offset, ": ", Pcre2Message(rc)));
    }
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md.get());
    const size_t begin = ov[0];
    const size_t end = ov[1];
    if (end > begin) {
      out->emplace_back(begin, end);
      offset = end;
    } else {
      // Empty match: step over one character so the scan always advances.
      if (begin >= s.size()) break;
      offset = begin + Utf8CharLength(static_cast<unsigned char>(s[begin]));
    }
  }
  return absl::OkStatus();
}

}  // namespace ptxserve::tok
