// The HTTP/1.1 transport of the OpenAI-compatible front: Boost.Beast on Asio, every socket
// operation asynchronous, a fixed number of threads (`threads`) whatever the number of
// connections, so thousands of long-lived event streams cost memory, not threads.
//
// Per connection: requests are read one after another (keep-alive); each goes to the
// handler; a whole response is written at once, a ResponseStream's pieces as they come
// (chunked transfer encoding), one write in flight. While a stream runs, a read stays
// posted on the socket so that a client that hangs up cancels its work at once.
#pragma once

#include <atomic>
#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "server/http/http_types.h"

namespace ptxserve::server::http {

struct HttpServerConfig {
  std::string host = "127.0.0.1";
  int port = 8000;  // 0 = any free port (see HttpServer::port())
  int threads = 2;
  std::string tls_cert_pem;          // empty: plain HTTP
  std::string tls_key_pem;           // the certificate's key
  std::string tls_client_ca_pem;     // non-empty: clients must present a certificate it signed
  int64_t max_body_bytes = 4 << 20;  // larger bodies get 413
  absl::Duration idle_timeout = absl::Seconds(60);   // a request's head, or keep-alive idle
  absl::Duration write_timeout = absl::Seconds(60);  // one write to a slow client
};

// Whether the certificate, key and client CA of `config` can serve TLS: InvalidArgument
// naming the flag when one does not parse or the key is not the certificate's. Both
// fronts use the same files; checking first turns "cannot listen" into the reason.
absl::Status CheckTlsFiles(const HttpServerConfig& config);

class HttpServer {
 public:
  HttpServer(HttpServerConfig config, HttpHandler handler);
  ~HttpServer();  // Stop(zero)
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Binds, listens and starts the threads. InvalidArgument for unusable TLS material,
  // Unavailable when the address cannot be bound.
  absl::Status Start();
  int port() const { return port_; }
  // Requests being answered (a stream counts until its last piece is written).
  int active_exchanges() const;

  // Stops accepting connections, waits up to `grace` for the exchanges in progress to
  // finish, then cancels the rest and closes every connection. Idempotent.
  void Stop(absl::Duration grace);

  // Internal: the shared state a connection reaches (defined in http_server.cc).
  struct Shared;

 private:
  HttpServerConfig config_;
  std::shared_ptr<Shared> shared_;
  std::vector<std::thread> threads_;
  int port_ = 0;
  bool stopped_ = false;
};

}  // namespace ptxserve::server::http
