// The server on the GPU backend over the emulated device (--backend emulated), proved
// from its Prometheus metrics: greedy decode steps sample on the device, so each step of
// batch B moves one host->device copy and 4*B bytes device->host; after warm-up the
// kernel cache only hits, once per launch; an injected launch failure fails the request
// with INTERNAL and turns health NOT_SERVING while the process keeps answering; a
// cancelled or expired stream returns its device KV blocks and leaves the device's state
// right for the requests after it. Requests with log-probs stay on the device too: each
// step moves the log-prob records (168 bytes a sequence) back instead of the logits, and
// the log-probs are the CPU backend's.
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "engine/cuda/emulated_driver.h"
#include "server/client.h"
#include "tests/cuda/gpu_test_util.h"
#include "tests/server/test_server.h"

namespace ptxserve {
namespace {

using grpc::health::v1::HealthCheckResponse;
using testing::HttpGet;
using testing::MetricValue;
using testing::TestServer;
using testing::WaitIdle;

// A greedy request of `prompt_len` tokens generating exactly `max_new`.
v1::GenerateRequest Greedy(int prompt_len, int max_new, int seed) {
  v1::GenerateRequest req;
  req.set_request_id(absl::StrCat("emu-", seed));
  for (int i = 0; i < prompt_len; ++i) {
    req.mutable_token_ids()->add_ids(static_cast<int32_t>(3 + (seed * 131 + i * 17) % 1500));
  }
  req.mutable_sampling()->set_temperature(0.0f);
  req.mutable_stopping()->set_max_new_tokens(max_new);
  req.mutable_stopping()->set_ignore_eos(true);
  return req;
}

// Sum of every sample of a labelled family (e.g. all ptxserve_kernel_launches_total{...}).
double FamilySum(const std::string& text, const std::string& family) {
  double sum = 0;
  const std::string prefix = family + "{";
  size_t pos = 0;
  while ((pos = text.find(prefix, pos)) != std::string::npos) {
    const bool line_start = pos == 0 || text[pos - 1] == '\n';
    const size_t space = text.find(' ', pos);
    if (line_start && space != std::string::npos) {
      sum += std::stod(text.substr(space + 1, text.find('\n', space) - space - 1));
    }
    pos += prefix.size();
  }
  return sum;
}

struct Counters {
  double h2d_transfers, d2h_transfers, h2d_bytes, d2h_bytes, hits, misses, launches;
};

class EmulatedServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    cuda::SetEmulatedFault({});
    t_ = TestServer::Start();
    ASSERT_NE(t_, nullptr);
    server::ModelOptions mo = TestServer::DefaultModelOptions();
    mo.backend = "emulated";
    mo.emulated_device = cuda::testing::EmulatedDeviceUnderTest();
    mo.engine.max_batch_size = 4;
    mo.kv_blocks = 64;
    ASSERT_TRUE(t_->Load(mo).ok());
    server::ClientOptions o;
    o.target = t_->target;
    client_ = std::make_unique<server::DecodeClient>(o);
  }
  void TearDown() override { cuda::SetEmulatedFault({}); }

  Counters Read() {
    const std::string m = HttpGet(t_->server->metrics_port(), "/metrics");
    Counters c;
    c.h2d_transfers = MetricValue(m, "ptxserve_transfers_total{direction=\"h2d\"}");
    c.d2h_transfers = MetricValue(m, "ptxserve_transfers_total{direction=\"d2h\"}");
    c.h2d_bytes = MetricValue(m, "ptxserve_transfer_bytes_total{direction=\"h2d\"}");
    c.d2h_bytes = MetricValue(m, "ptxserve_transfer_bytes_total{direction=\"d2h\"}");
    c.hits = MetricValue(m, "ptxserve_kernel_cache_hits_total");
    c.misses = MetricValue(m, "ptxserve_kernel_cache_misses_total");
    c.launches = FamilySum(m, "ptxserve_kernel_launches_total");
    return c;
  }

  std::unique_ptr<TestServer> t_;
  std::unique_ptr<server::DecodeClient> client_;
};

// B prompts of one length in one batch call: a prefill step and max_new - 1 decode
// steps, each of batch B (every sequence samples in each).
TEST_F(EmulatedServerTest, EachGreedyStepMovesOneCopyUpAndFourBytesPerSequenceBack) {
  constexpr int kNew = 3;
  for (int B : {1, 3}) {
    const Counters c0 = Read();
    ASSERT_GE(c0.misses, 1) << "warm-up compiled the kernels";
    v1::GenerateBatchRequest batch;
    for (int i = 0; i < B; ++i) *batch.add_requests() = Greedy(5, kNew, 10 * B + i);
    std::vector<int> tokens(B, 0);
    grpc::Status st = client_->GenerateBatch(batch, [&](const v1::GenerateBatchResponse& m) {
      tokens.at(m.index()) += m.response().token_ids_size();
      return true;
    });
    ASSERT_TRUE(st.ok()) << st.error_message();
    EXPECT_EQ(tokens, std::vector<int>(B, kNew));
    const Counters c1 = Read();
    EXPECT_EQ(c1.h2d_transfers - c0.h2d_transfers, kNew) << "one metadata copy per step, B=" << B;
    EXPECT_GT(c1.h2d_bytes, c0.h2d_bytes);
    EXPECT_EQ(c1.d2h_transfers - c0.d2h_transfers, kNew) << "B=" << B;
    EXPECT_EQ(c1.d2h_bytes - c0.d2h_bytes, 4.0 * B * kNew) << "the sampled ids only, B=" << B;
    EXPECT_EQ(c1.misses, c0.misses) << "no compilation after warm-up, B=" << B;
    EXPECT_GT(c1.launches, c0.launches);
    EXPECT_EQ(c1.hits - c0.hits, c1.launches - c0.launches) << "every launch a hit, B=" << B;
  }
}

TEST_F(EmulatedServerTest, InjectedLaunchFailureFailsTheRequestAndTurnsHealthNotServing) {
  HealthCheckResponse::ServingStatus status;
  ASSERT_TRUE(client_->Check("", &status).ok());
  EXPECT_EQ(status, HealthCheckResponse::SERVING);
  EXPECT_EQ(MetricValue(HttpGet(t_->server->metrics_port(), "/metrics"), "ptxserve_health_serving"),
            1);
  cuda::EmulatedFault f;
  f.fail_launch = 3;  // inside the request's first step
  cuda::SetEmulatedFault(f);
  v1::GenerateResponse last;
  grpc::Status st = client_->Generate(Greedy(5, 3, 1), [&](const v1::GenerateResponse& m) {
    if (m.finish_reason() != v1::FINISH_REASON_UNSPECIFIED) last = m;
    return true;
  });
  EXPECT_EQ(st.error_code(), grpc::StatusCode::INTERNAL) << st.error_message();
  EXPECT_NE(st.error_message().find("cuLaunchKernel"), std::string::npos) << st.error_message();
  EXPECT_EQ(last.finish_reason(), v1::FINISH_REASON_ERROR);
  for (int i = 0; i < 300; ++i) {
    ASSERT_TRUE(client_->Check("", &status).ok()) << "the process still answers";
    if (status == HealthCheckResponse::NOT_SERVING) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_EQ(status, HealthCheckResponse::NOT_SERVING);
  cuda::SetEmulatedFault({});
  v1::ModelInfo info;
  EXPECT_TRUE(client_->GetModelInfo(&info).ok());
  grpc::Status again = client_->Generate(Greedy(5, 3, 2), [](const auto&) { return true; });
  EXPECT_EQ(again.error_code(), grpc::StatusCode::UNAVAILABLE) << again.error_message();
  const std::string m = HttpGet(t_->server->metrics_port(), "/metrics");
  EXPECT_EQ(MetricValue(m, "ptxserve_engine_failed"), 1);
  EXPECT_EQ(MetricValue(m, "ptxserve_health_serving"), 0);
}

// A kernel's illegal address loses the device's context for good, as on a GPU: both
// requests in flight end with INTERNAL naming the fault, health turns NOT_SERVING, and
// nothing more is launched on the dead context (the default policy fails the engine at
// its first failed step; a lost device would end it even under a tolerant one).
TEST_F(EmulatedServerTest, AnIllegalAddressFailsTheRequestsInFlightAndTheServerForGood) {
  cuda::EmulatedFault f;
  f.fail_launch = 3;  // inside the requests' first step
  f.site = cuda::EmulatedFault::Site::kSync;
  f.launch_code = cuda::CUDA_ERROR_ILLEGAL_ADDRESS;
  f.sticky = true;
  cuda::SetEmulatedFault(f);
  v1::GenerateBatchRequest batch;
  *batch.add_requests() = Greedy(5, 4, 1);
  *batch.add_requests() = Greedy(6, 4, 2);
  std::vector<v1::FinishReason> finish(2, v1::FINISH_REASON_UNSPECIFIED);
  grpc::Status st = client_->GenerateBatch(batch, [&](const v1::GenerateBatchResponse& m) {
    if (m.response().finish_reason() != v1::FINISH_REASON_UNSPECIFIED) {
      finish.at(m.index()) = m.response().finish_reason();
    }
    return true;
  });
  EXPECT_EQ(st.error_code(), grpc::StatusCode::INTERNAL) << st.error_message();
  EXPECT_NE(st.error_message().find("CUDA_ERROR_ILLEGAL_ADDRESS"), std::string::npos)
      << st.error_message();
  EXPECT_EQ(finish, std::vector<v1::FinishReason>(2, v1::FINISH_REASON_ERROR));
  HealthCheckResponse::ServingStatus status = HealthCheckResponse::SERVING;
  for (int i = 0; i < 300 && status != HealthCheckResponse::NOT_SERVING; ++i) {
    ASSERT_TRUE(client_->Check("", &status).ok()) << "the process still answers";
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_EQ(status, HealthCheckResponse::NOT_SERVING);
  const int64_t launches = cuda::GetEmulatedDeviceCounters().launches;
  grpc::Status again = client_->Generate(Greedy(5, 3, 3), [](const auto&) { return true; });
  EXPECT_EQ(again.error_code(), grpc::StatusCode::UNAVAILABLE) << again.error_message();
  EXPECT_EQ(cuda::GetEmulatedDeviceCounters().launches, launches);
  EXPECT_EQ(MetricValue(HttpGet(t_->server->metrics_port(), "/metrics"), "ptxserve_engine_failed"),
            1);
}

std::vector<int32_t> Tokens(server::DecodeClient& c, const v1::GenerateRequest& req) {
  std::vector<int32_t> out;
  grpc::Status st = c.Generate(req, [&](const v1::GenerateResponse& m) {
    out.insert(out.end(), m.token_ids().begin(), m.token_ids().end());
    return true;
  });
  EXPECT_TRUE(st.ok()) << st.error_message();
  return out;
}

// Client cancellation and an expired deadline, each while another stream decodes beside
// it on the device: the ended sequence's blocks go back (kv_cache_blocks_used returns to
// 0), it is counted as cancelled, the stream beside it keeps its tokens, and a later
// request still gets exactly the tokens it got before.
TEST_F(EmulatedServerTest, CancelledAndExpiredStreamsReturnTheirDeviceKvBlocks) {
  const v1::GenerateRequest probe = Greedy(7, 12, 77);
  const std::vector<int32_t> reference = Tokens(*client_, probe);
  ASSERT_EQ(reference.size(), 12u);
  const v1::GenerateRequest beside_req = Greedy(6, 40, 78);
  const std::vector<int32_t> beside_reference = Tokens(*client_, beside_req);
  const std::string m0 = HttpGet(t_->server->metrics_port(), "/metrics");
  const double cancelled0 = MetricValue(m0, "ptxserve_requests_total{outcome=\"cancelled\"}");

  for (const bool by_deadline : {false, true}) {
    SCOPED_TRACE(by_deadline ? "deadline" : "client cancel");
    std::vector<int32_t> beside;
    std::thread other([&] {
      server::ClientOptions o;
      o.target = t_->target;
      server::DecodeClient c(o);
      beside = Tokens(c, beside_req);
    });
    int received = 0;
    grpc::Status st = client_->Generate(
        Greedy(9, 480, 79),
        [&](const v1::GenerateResponse& m) {
          received += m.token_ids_size();
          return by_deadline || received < 3;  // false: the client cancels the call
        },
        by_deadline ? absl::Milliseconds(300) : absl::InfiniteDuration());
    other.join();
    EXPECT_EQ(st.error_code(),
              by_deadline ? grpc::StatusCode::DEADLINE_EXCEEDED : grpc::StatusCode::CANCELLED)
        << st.error_message();
    EXPECT_EQ(beside, beside_reference) << "the stream beside it is unaffected";
    ASSERT_TRUE(WaitIdle(t_->engine()));
    const std::string m = HttpGet(t_->server->metrics_port(), "/metrics");
    EXPECT_EQ(MetricValue(m, "ptxserve_kv_cache_blocks_used"), 0);
    EXPECT_EQ(MetricValue(m, "ptxserve_requests_total{outcome=\"cancelled\"}"),
              cancelled0 + (by_deadline ? 2 : 1));
  }
  EXPECT_EQ(Tokens(*client_, probe), reference) << "the device state is still right";
}

struct LogprobsRun {
  std::vector<std::vector<int32_t>> tokens;
  std::vector<std::vector<v1::GeneratedTokenLogprobs>> logprobs;
};

// Three requests with log-probs 0, 5 (greedy) and 20 (seeded stochastic) in one batch call.
LogprobsRun RunLogprobsBatch(server::DecodeClient& c, int new_tokens) {
  v1::GenerateBatchRequest batch;
  const int counts[] = {0, 5, 20};
  for (int i = 0; i < 3; ++i) {
    v1::GenerateRequest* r = batch.add_requests();
    *r = Greedy(5 + i, new_tokens, 40 + i);
    r->set_logprobs(counts[i]);
    if (i == 2) {
      r->mutable_sampling()->set_temperature(0.9f);
      r->mutable_sampling()->set_seed(1234);
    }
  }
  LogprobsRun run;
  run.tokens.resize(3);
  run.logprobs.resize(3);
  grpc::Status st = c.GenerateBatch(batch, [&](const v1::GenerateBatchResponse& m) {
    const v1::GenerateResponse& r = m.response();
    run.tokens.at(m.index()).insert(run.tokens[m.index()].end(), r.token_ids().begin(),
                                    r.token_ids().end());
    run.logprobs.at(m.index()).insert(run.logprobs[m.index()].end(), r.logprobs().begin(),
                                      r.logprobs().end());
    return true;
  });
  EXPECT_TRUE(st.ok()) << st.error_message();
  return run;
}

bool Close(float got, float want) {
  return std::abs(static_cast<double>(got) - want) <= 1e-5 + 1e-5 * std::abs(want);
}

// Log-probs through gRPC on the emulated backend: every step stays on the device (one
// copy back of 168 bytes per sequence, not 4 x vocab), and the log-probs equal the CPU
// backend's. Loaded without TestServer's ControlledBackend, which forwards only the
// three-argument StepSampled (a row wanting log-probs would fail with UNIMPLEMENTED).
TEST(EmulatedServerLogprobsTest, LogprobsStayOnTheDeviceAndEqualTheCpuBackends) {
  cuda::SetEmulatedFault({});
  constexpr int kNew = 4;
  auto emu = TestServer::Start();
  ASSERT_NE(emu, nullptr);
  server::ModelOptions mo = TestServer::DefaultModelOptions();
  mo.model_dir = testing::TestModelDir();
  mo.backend = "emulated";
  mo.emulated_device = cuda::testing::EmulatedDeviceUnderTest();
  mo.engine.max_batch_size = 4;
  mo.kv_blocks = 64;
  auto model = server::LoadServedModel(mo, &emu->server->metrics());
  ASSERT_TRUE(model.ok()) << model.status();
  const int64_t vocab = (*model)->engine->model_config().vocab_size;
  emu->server->SetModel(*std::move(model));
  server::ClientOptions o;
  o.target = emu->target;
  server::DecodeClient client(o);
  auto read = [&](const char* name) {
    return MetricValue(HttpGet(emu->server->metrics_port(), "/metrics"), name);
  };
  const double transfers0 = read("ptxserve_transfers_total{direction=\"d2h\"}");
  const double bytes0 = read("ptxserve_transfer_bytes_total{direction=\"d2h\"}");
  const LogprobsRun got = RunLogprobsBatch(client, kNew);
  EXPECT_EQ(read("ptxserve_transfers_total{direction=\"d2h\"}") - transfers0, kNew)
      << "one copy back per step";
  EXPECT_EQ(read("ptxserve_transfer_bytes_total{direction=\"d2h\"}") - bytes0, 168.0 * 3 * kNew)
      << "the records of 3 sequences per step, not their logits (" << 4 * vocab << " bytes each)";

  auto cpu = TestServer::Start();
  ASSERT_NE(cpu, nullptr);
  server::ModelOptions cmo = TestServer::DefaultModelOptions();
  cmo.engine.max_batch_size = 4;
  cmo.kv_blocks = 64;
  ASSERT_TRUE(cpu->Load(cmo).ok());
  server::ClientOptions co;
  co.target = cpu->target;
  server::DecodeClient cpu_client(co);
  const LogprobsRun want = RunLogprobsBatch(cpu_client, kNew);

  EXPECT_EQ(got.tokens, want.tokens);
  for (int i = 0; i < 3; ++i) {
    ASSERT_EQ(got.tokens[i].size(), static_cast<size_t>(kNew)) << "request " << i;
    ASSERT_EQ(got.logprobs[i].size(), i == 0 ? 0u : static_cast<size_t>(kNew)) << "request " << i;
    ASSERT_EQ(want.logprobs[i].size(), got.logprobs[i].size()) << "request " << i;
    for (size_t k = 0; k < got.logprobs[i].size(); ++k) {
      const v1::GeneratedTokenLogprobs& g = got.logprobs[i][k];
      const v1::GeneratedTokenLogprobs& w = want.logprobs[i][k];
      EXPECT_EQ(g.chosen().token_id(), got.tokens[i][k]);
      EXPECT_LE(g.chosen().logprob(), 0.0f);
      EXPECT_TRUE(Close(g.chosen().logprob(), w.chosen().logprob()))
          << "request " << i << " token " << k << ": " << g.chosen().logprob() << " vs "
          << w.chosen().logprob();
      ASSERT_EQ(g.top_size(), i == 1 ? 5 : 20) << "request " << i << " token " << k;
      ASSERT_EQ(g.top_size(), w.top_size());
      for (int j = 0; j < g.top_size(); ++j) {
        EXPECT_EQ(g.top(j).token_id(), w.top(j).token_id()) << "request " << i << " top " << j;
        EXPECT_TRUE(Close(g.top(j).logprob(), w.top(j).logprob()))
            << "request " << i << " token " << k << " top " << j;
      }
    }
  }
}

}  // namespace
}  // namespace ptxserve
