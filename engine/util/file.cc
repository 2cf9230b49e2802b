#include "engine/util/file.h"

#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"

namespace ptxserve {

absl::StatusOr<std::string> ReadFileToString(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return absl::NotFoundError(absl::StrCat("cannot read ", path));
  std::ostringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

}  // namespace ptxserve
