#include "server/cli/cli_util.h"

#include "absl/flags/usage_config.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace ptxserve::cli {

absl::StatusOr<std::string> ReadApiKey(const std::string& path) {
  auto key = ReadFileToString(path);
  if (!key.ok()) return key.status();
  while (!key->empty() && (key->back() == '\n' || key->back() == '\r' || key->back() == ' ' ||
                           key->back() == '\t')) {
    key->pop_back();
  }
  if (key->empty()) return absl::InvalidArgumentError(absl::StrCat(path, " holds no API key"));
  return key;
}

void ShowFlagsInHelp(std::vector<std::string> files) {
  absl::FlagsUsageConfig config;
  config.contains_help_flags = [files](absl::string_view path) {
    for (const auto& f : files) {
      if (absl::EndsWith(path, f)) return true;
    }
    return false;
  };
  config.contains_helpshort_flags = config.contains_help_flags;
  absl::SetFlagsUsageConfig(config);
}

}  // namespace ptxserve::cli
