#include "server/cli/client_flags.h"

#include "absl/flags/flag.h"
#include "server/cli/cli_util.h"

ABSL_FLAG(std::string, target, "127.0.0.1:50051", "client/bench: the server, HOST:PORT");
ABSL_FLAG(std::string, tls_ca, "",
          "client/bench: PEM CA that signed the server's certificate; enables TLS");
ABSL_FLAG(std::string, tls_server_name, "",
          "client/bench: name to check in the server's certificate (default: the host)");
ABSL_FLAG(double, timeout, 0, "client/bench: call deadline in seconds; 0 = none");

// Defined in serve.cc: the same files serve both ends.
ABSL_DECLARE_FLAG(std::string, tls_cert);
ABSL_DECLARE_FLAG(std::string, tls_key);
ABSL_DECLARE_FLAG(std::string, api_key_file);

namespace ptxserve::cli {

absl::StatusOr<server::ClientOptions> ClientOptionsFromFlags() {
  server::ClientOptions o;
  o.target = absl::GetFlag(FLAGS_target);
  if (!absl::GetFlag(FLAGS_api_key_file).empty()) {
    auto key = ReadApiKey(absl::GetFlag(FLAGS_api_key_file));
    if (!key.ok()) return key.status();
    o.api_key = *key;
  }
  if (!absl::GetFlag(FLAGS_tls_ca).empty()) {
    auto ca = ReadFileToString(absl::GetFlag(FLAGS_tls_ca));
    if (!ca.ok()) return ca.status();
    o.tls = true;
    o.tls_ca_pem = *ca;
  }
  if (!absl::GetFlag(FLAGS_tls_cert).empty()) {
    auto cert = ReadFileToString(absl::GetFlag(FLAGS_tls_cert));
    if (!cert.ok()) return cert.status();
    auto key = ReadFileToString(absl::GetFlag(FLAGS_tls_key));
    if (!key.ok()) return key.status();
    o.tls = true;
    o.tls_cert_pem = *cert;
    o.tls_key_pem = *key;
  }
  o.tls_server_name = absl::GetFlag(FLAGS_tls_server_name);
  return o;
}

absl::Duration ClientTimeout(double fallback) {
  double s = absl::GetFlag(FLAGS_timeout);
  if (s <= 0) s = fallback;
  return s > 0 ? absl::Seconds(s) : absl::InfiniteDuration();
}

}  // namespace ptxserve::cli
