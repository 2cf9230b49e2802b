// Flags of the subcommands that connect to a server (client, bench).
#pragma once

#include <string>

#include "absl/flags/declare.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "server/client.h"

ABSL_DECLARE_FLAG(std::string, target);
ABSL_DECLARE_FLAG(std::string, tls_ca);
ABSL_DECLARE_FLAG(std::string, tls_server_name);
ABSL_DECLARE_FLAG(double, timeout);

namespace ptxserve::cli {

// --target, --api_key_file, --tls_ca, --tls_cert/--tls_key (mutual TLS),
// --tls_server_name; errors name the unreadable file.
absl::StatusOr<server::ClientOptions> ClientOptionsFromFlags();
// --timeout as a call deadline; `fallback` seconds when --timeout is 0 (0 = none).
absl::Duration ClientTimeout(double fallback = 0);

}  // namespace ptxserve::cli
