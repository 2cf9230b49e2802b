// The API key check both fronts (gRPC metadata, HTTP header) share.
#pragma once

#include <string_view>

namespace ptxserve::server {

// True when `authorization` is "Bearer <key>". Compares without an early exit, so the
// response time says nothing about how much of the key matched.
bool BearerTokenMatches(std::string_view authorization, std::string_view key);

}  // namespace ptxserve::server
