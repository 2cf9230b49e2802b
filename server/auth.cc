#include "server/auth.h"

namespace ptxserve::server {
namespace {

bool ConstantTimeEquals(std::string_view a, std::string_view b) {
  unsigned char diff = a.size() == b.size() ? 0 : 1;
  for (size_t i = 0; i < a.size(); ++i) {
    diff |= static_cast<unsigned char>(a[i] ^ (i < b.size() ? b[i] : 0));
  }
  return diff == 0;
}

}  // namespace

bool BearerTokenMatches(std::string_view authorization, std::string_view key) {
  constexpr std::string_view kScheme = "Bearer ";
  return authorization.size() > kScheme.size() &&
         authorization.substr(0, kScheme.size()) == kScheme &&
         ConstantTimeEquals(authorization.substr(kScheme.size()), key);
}

}  // namespace ptxserve::server
