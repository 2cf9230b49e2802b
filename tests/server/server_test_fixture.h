// The gRPC server tests' fixture: a served model, a client, and helpers that stream one
// request and build token-id requests.
#pragma once

#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "server/client.h"
#include "tests/server/test_server.h"

namespace ptxserve::testing {

// What one streamed request returned.
struct Result {
  grpc::Status status;
  std::vector<int32_t> tokens;
  std::string text;
  v1::GenerateResponse last;
  int messages = 0;
};

inline Result Stream(server::DecodeClient& c, const v1::GenerateRequest& req,
                     absl::Duration timeout = absl::InfiniteDuration()) {
  Result r;
  r.status = c.Generate(
      req,
      [&](const v1::GenerateResponse& m) {
        r.tokens.insert(r.tokens.end(), m.token_ids().begin(), m.token_ids().end());
        r.text += m.text();
        ++r.messages;
        if (m.finish_reason() != v1::FINISH_REASON_UNSPECIFIED) r.last = m;
        return true;
      },
      timeout);
  return r;
}

inline v1::GenerateRequest TokenRequest(int prompt_len, int max_new, uint64_t seed,
                                        float temperature = 1.0f) {
  v1::GenerateRequest req;
  req.set_request_id(absl::StrCat("req-", seed));
  for (int i = 0; i < prompt_len; ++i) {
    req.mutable_token_ids()->add_ids(static_cast<int32_t>(3 + (seed * 131 + i * 17) % 1500));
  }
  req.mutable_sampling()->set_temperature(temperature);
  req.mutable_sampling()->set_seed(seed);
  req.mutable_stopping()->set_max_new_tokens(max_new);
  req.mutable_stopping()->set_ignore_eos(true);
  return req;
}

inline server::ClientOptions Options(const TestServer& t) {
  server::ClientOptions o;
  o.target = t.target;
  return o;
}

class ServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    t_ = TestServer::Start(config_);
    ASSERT_NE(t_, nullptr);
    ASSERT_TRUE(t_->Load(model_options_).ok());
    client_ = std::make_unique<server::DecodeClient>(Options(*t_));
  }
  void TearDown() override {
    if (t_ && t_->backend) {
      t_->backend->set_stalled(false);
      t_->backend->set_delay_us(0);
    }
  }
  std::string Metrics() { return HttpGet(t_->server->metrics_port(), "/metrics"); }

  server::ServerConfig config_;
  server::ModelOptions model_options_ = TestServer::DefaultModelOptions();
  std::unique_ptr<TestServer> t_;
  std::unique_ptr<server::DecodeClient> client_;
};

}  // namespace ptxserve::testing
