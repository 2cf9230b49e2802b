#include "server/http/metrics_route.h"

#include "absl/strings/str_cat.h"

namespace ptxserve::server::http {

HttpResponse ServeMetrics(ServerMetrics& metrics, const HttpRequest& req) {
  HttpResponse r;
  if (req.method != "GET" && req.method != "HEAD") {
    r.status = 405;
    r.content_type = "text/plain";
    r.body = "/metrics takes GET\n";
    r.headers.emplace_back("Allow", "GET");
    return r;
  }
  r.content_type = "text/plain; version=0.0.4; charset=utf-8";
  r.body = metrics.Serialize();
  return r;
}

HttpHandler MetricsOnlyHandler(ServerMetrics* metrics) {
  return [metrics](HttpRequest&& req) {
    if (req.path == kMetricsPath) return ServeMetrics(*metrics, req);
    HttpResponse r;
    r.status = 404;
    r.content_type = "text/plain";
    r.body = absl::StrCat("no route ", req.path, ": this port serves ", kMetricsPath, "\n");
    return r;
  };
}

}  // namespace ptxserve::server::http
