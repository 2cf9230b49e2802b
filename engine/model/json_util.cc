#include "engine/model/json_util.h"

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace ptxserve {

absl::StatusOr<nlohmann::json> ParseJsonObject(std::string_view text, const std::string& file) {
  nlohmann::json root;
  try {
    root = nlohmann::json::parse(text);
  } catch (const nlohmann::json::parse_error& e) {
    return absl::InvalidArgumentError(
        absl::StrCat(file, ": invalid JSON at byte ", e.byte, ": ", e.what()));
  } catch (const nlohmann::json::exception& e) {
    // A number beyond double's range (1e309) is out_of_range, which has no byte offset.
    return absl::InvalidArgumentError(absl::StrCat(file, ": invalid JSON: ", e.what()));
  }
  if (!root.is_object()) {
    return absl::InvalidArgumentError(
        absl::StrCat(file, ": expected a JSON object at the top level, got ", root.type_name()));
  }
  return root;
}

}  // namespace ptxserve
