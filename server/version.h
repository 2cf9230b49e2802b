// ptxserve's version, from the CMake project version.
#pragma once

namespace ptxserve::server {

#ifndef PTXSERVE_VERSION
#define PTXSERVE_VERSION "0.0.0"
#endif
inline constexpr const char* kVersion = PTXSERVE_VERSION;

}  // namespace ptxserve::server
