#include "server/cli/cli_util.h"

#include <cstdio>
#include <map>

#include "absl/flags/commandlineflag.h"
#include "absl/flags/reflection.h"
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

namespace {

std::vector<std::string>& Sources() {
  static std::vector<std::string> sources;
  return sources;
}

}  // namespace

bool IsSubcommandFlag(const absl::CommandLineFlag& flag) {
  for (const std::string& s : Sources()) {
    if (absl::EndsWith(s, ".cc") ? absl::EndsWith(flag.Filename(), s) : flag.Name() == s) {
      return true;
    }
  }
  return false;
}

void PrintSubcommandHelp(const char* usage) {
  // Abseil's own --help exits 1 and names the flags' build paths; a user asked for help
  // and gets it on stdout with exit 0, in Abseil's line format (tools parse it).
  std::printf("%s\n\nFlags (dashes and underscores are the same):\n", usage);
  std::map<std::string, const absl::CommandLineFlag*> shown;
  for (const auto& [name, flag] : absl::GetAllFlags()) {
    if (IsSubcommandFlag(*flag)) shown[std::string(name)] = flag;
  }
  for (const auto& [name, flag] : shown) {
    const std::string value = flag->IsOfType<std::string>()
                                  ? absl::StrCat("\"", flag->DefaultValue(), "\"")
                                  : flag->DefaultValue();
    std::printf("    --%s (%s); default: %s;\n", name.c_str(), flag->Help().c_str(), value.c_str());
  }
}

void SetSubcommandFlags(std::vector<std::string> sources) {
  sources.push_back("log_level");
  sources.push_back("log_format");
  Sources() = std::move(sources);
}

}  // namespace ptxserve::cli
