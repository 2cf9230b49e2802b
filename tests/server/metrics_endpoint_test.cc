// /metrics as served: on the metrics port (its own address with --metrics-host) and on the
// OpenAI API port, scrapes that silent or half-open clients cannot hold up, and the KV
// usage gauge while a request holds blocks (issue finding 4 and the vLLM metrics).
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "server/client.h"
#include "server/http/http_client.h"
#include "tests/server/test_server.h"

namespace ptxserve {
namespace {

using server::http::HttpCall;
using testing::MetricValue;
using testing::TestServer;

// A client that connects and then sends `partial` (possibly nothing) and stalls.
int HalfOpen(int port, const std::string& partial) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0 && !partial.empty()) {
    (void)::send(fd, partial.data(), partial.size(), 0);
  }
  return fd;
}

TEST(MetricsEndpointTest, HalfOpenClientsDoNotHoldUpAScrape) {
  auto t = TestServer::Start({});
  ASSERT_NE(t, nullptr);
  ASSERT_TRUE(t->Load().ok());
  const int port = t->server->metrics_port();
  std::vector<int> stalled;
  for (int i = 0; i < 16; ++i) {
    stalled.push_back(HalfOpen(port, i % 2 ? "GET /metr" : ""));
  }
  // Before, two such clients took civetweb's two workers for its 30 s timeout.
  const auto start = std::chrono::steady_clock::now();
  const auto reply = HttpCall(port, "GET", "/metrics");
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  for (int fd : stalled) ::close(fd);
  EXPECT_EQ(reply.status, 200);
  EXPECT_NE(reply.body.find("ptxserve_requests_total"), std::string::npos);
  EXPECT_LT(seconds, 10) << "a scrape waited behind silent clients";
  EXPECT_EQ(HttpCall(port, "GET", "/v1/models").status, 404) << "the metrics port serves /metrics";
}

TEST(MetricsEndpointTest, ServedOnTheApiPortWithoutTheKeyAndOnMetricsHost) {
  server::ServerConfig config;
  config.api_key = "s3cret";
  config.host = "0.0.0.0";
  config.metrics_host = "127.0.0.2";  // a loopback address of its own
  auto t = TestServer::Start(config);
  ASSERT_NE(t, nullptr);
  ASSERT_TRUE(t->Load().ok());
  auto api = HttpCall(t->server->http_port(), "GET", "/metrics");
  EXPECT_EQ(api.status, 200);
  EXPECT_NE(api.headers["content-type"].find("text/plain; version=0.0.4"), std::string::npos);
  EXPECT_NE(api.body.find("process_resident_memory_bytes"), std::string::npos);
  EXPECT_EQ(HttpCall(t->server->http_port(), "GET", "/v1/models").status, 401);
  // The metrics port listens on 127.0.0.2 only: 127.0.0.1 is refused.
  EXPECT_EQ(HttpCall(t->server->metrics_port(), "GET", "/metrics").status, 0);
}

TEST(MetricsEndpointTest, KvUsageIsAShareWhileARequestHoldsBlocks) {
  auto t = TestServer::Start({});
  ASSERT_NE(t, nullptr);
  ASSERT_TRUE(t->Load().ok());
  const int port = t->server->metrics_port();
  EXPECT_EQ(MetricValue(HttpCall(port, "GET", "/metrics").body, "ptxserve_kv_cache_usage_ratio"),
            0);
  t->backend->stall_at_step(t->backend->steps() + 2);
  server::ClientOptions o;
  o.target = t->target;
  server::DecodeClient client(o);
  v1::GenerateRequest req;
  for (int i = 0; i < 40; ++i) req.mutable_token_ids()->add_ids(3 + i);
  req.mutable_stopping()->set_max_new_tokens(8);
  req.mutable_stopping()->set_ignore_eos(true);
  std::thread stream(
      [&] { (void)client.Generate(req, [](const v1::GenerateResponse&) { return true; }); });
  t->backend->AwaitStalled();
  const std::string during = HttpCall(port, "GET", "/metrics").body;
  t->backend->set_stalled(false);
  stream.join();
  const double usage = MetricValue(during, "ptxserve_kv_cache_usage_ratio");
  EXPECT_GT(usage, 0);
  EXPECT_LE(usage, 1);
  EXPECT_DOUBLE_EQ(usage, MetricValue(during, "ptxserve_kv_cache_blocks_used") /
                              MetricValue(during, "ptxserve_kv_cache_capacity_blocks"));
}

}  // namespace
}  // namespace ptxserve
