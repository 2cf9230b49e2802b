// GET /metrics: the Prometheus text exposition, served by the metrics port's own HTTP
// server and by the OpenAI API port (where vLLM's users find it). Both run on the
// asynchronous HTTP transport, so a client that connects and sends nothing, or half a
// request, holds no thread: it cannot delay a scrape (civetweb's two workers could, for
// its 30 s timeout, which fired false "down" alerts).
#pragma once

#include "server/http/http_types.h"
#include "server/metrics.h"

namespace ptxserve::server::http {

inline constexpr char kMetricsPath[] = "/metrics";

// The exposition for a GET (405 for another method).
HttpResponse ServeMetrics(ServerMetrics& metrics, const HttpRequest& req);

// The metrics port's whole application: /metrics, else 404.
HttpHandler MetricsOnlyHandler(ServerMetrics* metrics);

}  // namespace ptxserve::server::http
