// The OpenAI-compatible HTTP front end to end, in-process on loopback: the same tokens as
// gRPC, status codes and error objects, keep-alive, a hang-up that cancels the sequence,
// backpressure (429), loading and draining (503), engine failures (500), body limits.
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "nlohmann/json.hpp"
#include "server/client.h"
#include "server/http/http_client.h"
#include "tests/server/test_server.h"

namespace ptxserve {
namespace {

using json = nlohmann::json;
using server::http::HttpCall;
using server::http::HttpConnection;
using server::http::HttpReply;
using testing::TestServer;
using testing::WaitIdle;

// The JSON events of a server-sent-event body, [DONE] excluded; *done tells whether it came.
std::vector<json> Events(const std::string& body, bool* done) {
  std::vector<json> out;
  *done = false;
  size_t pos = 0;
  while (pos < body.size()) {
    size_t end = body.find("\n\n", pos);
    if (end == std::string::npos) end = body.size();
    const std::string event = body.substr(pos, end - pos);
    pos = end + 2;
    if (event == "data: [DONE]") {
      *done = true;
    } else if (event.rfind("data: ", 0) == 0) {
      out.push_back(json::parse(event.substr(6)));
    }
  }
  return out;
}

class HttpTest : public ::testing::Test {
 protected:
  void Start() {
    t_ = TestServer::Start(config_);
    ASSERT_NE(t_, nullptr);
    ASSERT_TRUE(t_->Load(model_options_).ok());
    port_ = t_->server->http_port();
    ASSERT_GT(port_, 0);
  }
  void SetUp() override { Start(); }
  void TearDown() override {
    if (t_ && t_->backend) {
      t_->backend->set_stalled(false);
      t_->backend->set_delay_us(0);
    }
  }
  HttpReply Post(const std::string& path, const json& body) {
    return HttpCall(port_, "POST", path, body.dump(), "Content-Type: application/json\r\n");
  }
  json TokenPrompt(int n, int max_tokens) {
    json ids = json::array();
    for (int i = 0; i < n; ++i) ids.push_back(3 + (i * 37) % 1000);
    return {{"prompt", ids}, {"max_tokens", max_tokens}, {"temperature", 0}, {"ignore_eos", true}};
  }

  server::ServerConfig config_;
  server::ModelOptions model_options_ = WithChatTemplate(TestServer::DefaultModelOptions());
  std::unique_ptr<TestServer> t_;
  int port_ = 0;

  static server::ModelOptions WithChatTemplate(server::ModelOptions mo) {
    mo.chat_template_path = PTXSERVE_SOURCE_DIR "/tests/http/chat_template.jinja";
    return mo;
  }
};

TEST_F(HttpTest, CompletionTokensEqualGrpcTokens) {
  json req = TokenPrompt(6, 16);
  HttpReply r = Post("/v1/completions", req);
  ASSERT_EQ(r.status, 200) << r.body;
  const json body = json::parse(r.body);
  EXPECT_EQ(body["object"], "text_completion");
  EXPECT_EQ(body["usage"]["completion_tokens"], 16);
  EXPECT_EQ(body["usage"]["prompt_tokens"], 6);

  server::ClientOptions o;
  o.target = t_->target;
  server::DecodeClient c(o);
  v1::GenerateRequest g;
  for (int id : req["prompt"]) g.mutable_token_ids()->add_ids(id);
  g.mutable_stopping()->set_max_new_tokens(16);
  g.mutable_stopping()->set_ignore_eos(true);
  std::string grpc_text;
  ASSERT_TRUE(c.Generate(g, [&](const v1::GenerateResponse& m) {
                 grpc_text += m.text();
                 return true;
               }).ok());
  EXPECT_EQ(body["choices"][0]["text"], grpc_text);
}

TEST_F(HttpTest, EachFinishedRequestIsOneLogLine) {
  ::testing::internal::CaptureStderr();
  HttpReply r = Post("/v1/completions", TokenPrompt(5, 7));
  const std::string log = ::testing::internal::GetCapturedStderr();
  ASSERT_EQ(r.status, 200) << r.body;
  const size_t at = log.find("request finished");
  ASSERT_NE(at, std::string::npos) << log;
  const std::string line = log.substr(at, log.find('\n', at) - at);
  for (const char* field : {"api=http", "peer=127.0.0.1:", "prompt_tokens=5", "generated_tokens=7",
                            "finish=length", "ttft_ms=", "queue_ms="}) {
    EXPECT_NE(line.find(field), std::string::npos) << field << " in " << line;
  }
}

TEST_F(HttpTest, UsageSaysWhichPromptTokensThePrefixCacheHeld) {
  const json req = TokenPrompt(40, 2);
  HttpReply first = Post("/v1/completions", req);
  ASSERT_EQ(first.status, 200) << first.body;
  EXPECT_EQ(json::parse(first.body)["usage"]["prompt_tokens_details"]["cached_tokens"], 0);
  HttpReply again = Post("/v1/completions", req);
  ASSERT_EQ(again.status, 200) << again.body;
  // Two full blocks of 16; the last token is always recomputed.
  EXPECT_EQ(json::parse(again.body)["usage"]["prompt_tokens_details"]["cached_tokens"], 32);
}

TEST_F(HttpTest, StreamIsServerSentEventsEndingWithDone) {
  json req = TokenPrompt(4, 12);
  req["stream"] = true;
  req["stream_options"] = {{"include_usage", true}};
  HttpReply r = Post("/v1/completions", req);
  ASSERT_EQ(r.status, 200);
  EXPECT_EQ(r.headers["content-type"], "text/event-stream");
  bool done = false;
  std::vector<json> events = Events(r.body, &done);
  EXPECT_TRUE(done);
  ASSERT_GE(events.size(), 2u);
  EXPECT_EQ(events.back()["usage"]["completion_tokens"], 12);
  EXPECT_TRUE(events.back()["choices"].empty());
  std::string text;
  for (size_t i = 0; i + 1 < events.size(); ++i) text += events[i]["choices"][0]["text"];
  req.erase("stream");
  req.erase("stream_options");
  HttpReply whole = Post("/v1/completions", req);
  EXPECT_EQ(json::parse(whole.body)["choices"][0]["text"], text);
}

TEST_F(HttpTest, ContinuationKeepsItsLeadingSpace) {
  // The text after a prompt is decode(prompt + generated) minus decode(prompt), streamed or
  // not: "The cat" continues with " and", not "and".
  json req = {{"prompt", "The cat"}, {"max_tokens", 4}, {"temperature", 0}};
  HttpReply whole = Post("/v1/completions", req);
  ASSERT_EQ(whole.status, 200);
  EXPECT_EQ(json::parse(whole.body)["choices"][0]["text"].get<std::string>().rfind(" and", 0), 0u)
      << whole.body;
  req["stream"] = true;
  bool done = false;
  std::vector<json> events = Events(Post("/v1/completions", req).body, &done);
  ASSERT_FALSE(events.empty());
  EXPECT_EQ(events[0]["choices"][0]["text"].get<std::string>().rfind(" and", 0), 0u);
}

TEST_F(HttpTest, KeepAliveServesSeveralRequestsOnOneConnection) {
  HttpConnection c(port_);
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(c.Send("POST", "/v1/completions", TokenPrompt(3, 2).dump()));
    HttpReply r = c.ReadResponse();
    EXPECT_EQ(r.status, 200) << i;
  }
  ASSERT_TRUE(c.Send("GET", "/v1/models"));
  EXPECT_EQ(c.ReadResponse().status, 200);
}

TEST_F(HttpTest, ErrorsAreOpenAiErrorObjectsNamingTheParameter) {
  json req = TokenPrompt(3, 4);
  req["top_p"] = 1.5;
  HttpReply r = Post("/v1/completions", req);
  EXPECT_EQ(r.status, 400);
  json e = json::parse(r.body)["error"];
  EXPECT_EQ(e["param"], "top_p");
  EXPECT_EQ(e["code"], 400);
  EXPECT_NE(e["message"].get<std::string>().find("top_p"), std::string::npos);

  r = HttpCall(port_, "POST", "/v1/completions", "{\"prompt\": [1, 2,");
  EXPECT_EQ(r.status, 400);
  EXPECT_NE(r.body.find("byte"), std::string::npos) << r.body;

  req = TokenPrompt(3, 4);
  req["prompt"][1] = 1 << 30;
  r = Post("/v1/completions", req);
  EXPECT_EQ(r.status, 400);
  EXPECT_EQ(json::parse(r.body)["error"]["param"], "prompt[1]");

  EXPECT_EQ(HttpCall(port_, "GET", "/v1/nothing").status, 404);
  EXPECT_EQ(HttpCall(port_, "GET", "/v1/completions").status, 405);
  req = TokenPrompt(3, 4);
  req["model"] = "another-model";
  EXPECT_EQ(Post("/v1/completions", req).status, 404);
  EXPECT_EQ(Post("/v1/chat/completions", {{"messages", json::array()}}).status, 400);
  EXPECT_EQ(Post("/v1/completions", {{"prompt", "x"}, {"logprobs", 3}, {"echo", true}}).status,
            400);
  // The server keeps serving.
  EXPECT_EQ(Post("/v1/completions", TokenPrompt(3, 2)).status, 200);
}

TEST_F(HttpTest, OversizedBodyIs413) {
  std::string big(5 << 20, ' ');
  HttpReply r = HttpCall(port_, "POST", "/v1/completions", "{\"prompt\": \"x\"}" + big);
  EXPECT_EQ(r.status, 413);
  EXPECT_EQ(Post("/v1/completions", TokenPrompt(3, 2)).status, 200);
}

TEST_F(HttpTest, HangingUpCancelsTheSequence) {
  t_->backend->set_delay_us(2000);
  HttpConnection c(port_);
  json req = TokenPrompt(4, 400);
  req["stream"] = true;
  ASSERT_TRUE(c.Send("POST", "/v1/completions", req.dump()));
  HttpReply head;
  ASSERT_TRUE(c.ReadHead(&head));
  EXPECT_EQ(head.status, 200);
  std::string piece;
  ASSERT_TRUE(c.ReadChunk(&piece));
  const int64_t before = t_->engine().Stats().generated_tokens_total;
  c.Close();
  EXPECT_TRUE(WaitIdle(t_->engine()));
  EXPECT_LT(t_->engine().Stats().generated_tokens_total - before, 200);
}

TEST_F(HttpTest, HealthFollowsTheEngine) {
  EXPECT_EQ(HttpCall(port_, "GET", "/health").status, 200);
  t_->backend->set_fail_always(true);
  HttpReply r = Post("/v1/completions", TokenPrompt(3, 4));
  EXPECT_EQ(r.status, 500) << r.body;
  EXPECT_EQ(json::parse(r.body)["error"]["code"], 500);
  for (int i = 0; i < 200 && HttpCall(port_, "GET", "/health").status == 200; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_EQ(HttpCall(port_, "GET", "/health").status, 503);
}

TEST_F(HttpTest, QueueFullIs429) {
  t_.reset();
  model_options_.engine.max_queued = 1;
  model_options_.engine.max_batch_size = 1;
  Start();
  t_->backend->set_stalled(true);
  std::thread running([&] { Post("/v1/completions", TokenPrompt(3, 4)); });
  t_->backend->AwaitStalled();
  std::thread queued([&] { Post("/v1/completions", TokenPrompt(3, 4)); });
  for (int i = 0; i < 200 && t_->engine().Stats().requests_waiting < 1; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  HttpReply r = Post("/v1/completions", TokenPrompt(3, 4));
  EXPECT_EQ(r.status, 429) << r.body;
  t_->backend->set_stalled(false);
  running.join();
  queued.join();
}

TEST_F(HttpTest, DrainLetsStreamsFinishAndRefusesNewCalls) {
  t_->backend->set_delay_us(3000);
  HttpReply streamed;
  std::thread client([&] {
    json req = TokenPrompt(4, 30);
    req["stream"] = true;
    streamed = Post("/v1/completions", req);
  });
  for (int i = 0; i < 400 && t_->engine().num_live() == 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  std::thread drain([&] { t_->server->Shutdown(absl::Seconds(30)); });
  for (int i = 0; i < 200 && HttpCall(port_, "GET", "/health").status == 200; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  EXPECT_EQ(Post("/v1/completions", TokenPrompt(3, 2)).status, 503);
  client.join();
  drain.join();
  bool done = false;
  std::vector<json> events = Events(streamed.body, &done);
  EXPECT_EQ(streamed.status, 200);
  EXPECT_TRUE(done);
  ASSERT_FALSE(events.empty());
  EXPECT_EQ(events.back()["choices"][0]["finish_reason"], "length");
}

json ChatRequest() {
  return {{"messages",
           {{{"role", "system"}, {"content", "Tell a story."}},
            {{"role", "user"}, {"content", {{{"type", "text"}, {"text", "Once upon"}}}}}}},
          {"max_completion_tokens", 12},
          {"temperature", 0}};
}

TEST_F(HttpTest, ChatCompletionRendersTheTemplate) {
  HttpReply r = Post("/v1/chat/completions", ChatRequest());
  ASSERT_EQ(r.status, 200) << r.body;
  const json body = json::parse(r.body);
  EXPECT_EQ(body["object"], "chat.completion");
  EXPECT_EQ(body["choices"][0]["message"]["role"], "assistant");
  EXPECT_FALSE(body["choices"][0]["message"]["content"].get<std::string>().empty());
  // The prompt is the template's rendering, tokenized without an extra BOS.
  HttpReply tok = Post("/tokenize", {{"messages", ChatRequest()["messages"]}});
  ASSERT_EQ(tok.status, 200) << tok.body;
  EXPECT_EQ(body["usage"]["prompt_tokens"], json::parse(tok.body)["count"]);
  HttpReply text = Post("/tokenize", {{"prompt",
                                       "<|system|>\nTell a story.\n<|user|>\nOnce upon\n"
                                       "<|assistant|>\n"},
                                      {"add_special_tokens", false}});
  EXPECT_EQ(json::parse(tok.body)["tokens"], json::parse(text.body)["tokens"]);
}

TEST_F(HttpTest, ChatStreamStartsWithTheRoleAndCarriesLogprobs) {
  json req = ChatRequest();
  req["stream"] = true;
  req["logprobs"] = true;
  req["top_logprobs"] = 2;
  HttpReply r = Post("/v1/chat/completions", req);
  ASSERT_EQ(r.status, 200) << r.body;
  bool done = false;
  std::vector<json> events = Events(r.body, &done);
  ASSERT_TRUE(done);
  ASSERT_GE(events.size(), 2u);  // the role, then the content (one chunk when merged)
  EXPECT_EQ(events[0]["object"], "chat.completion.chunk");
  EXPECT_EQ(events[0]["choices"][0]["delta"]["role"], "assistant");
  int tokens = 0;
  std::string text;
  for (const json& e : events) {
    const json& c = e["choices"][0];
    if (c["delta"].contains("content")) text += c["delta"]["content"].get<std::string>();
    if (!c["logprobs"].is_null()) {
      for (const json& entry : c["logprobs"]["content"]) {
        ++tokens;
        EXPECT_TRUE(entry["token"].is_string());
        EXPECT_EQ(entry["top_logprobs"].size(), 2u);
        EXPECT_LE(entry["logprob"].get<double>(), 0.0);
      }
    }
  }
  EXPECT_EQ(tokens, 12);
  EXPECT_EQ(events.back()["choices"][0]["finish_reason"], "length");
  req.erase("stream");
  EXPECT_EQ(json::parse(Post("/v1/chat/completions", req).body)["choices"][0]["message"]["content"],
            text);
}

TEST_F(HttpTest, ChatErrorsNameTheMessage) {
  json req = ChatRequest();
  req["messages"][1]["role"] = "robot";
  HttpReply r = Post("/v1/chat/completions", req);
  EXPECT_EQ(r.status, 400);
  EXPECT_NE(r.body.find("Unknown role: robot"), std::string::npos) << r.body;
  req = ChatRequest();
  req["messages"][1]["content"] = {{{"type", "image_url"}, {"image_url", "x"}}};
  r = Post("/v1/chat/completions", req);
  EXPECT_EQ(r.status, 400);
  EXPECT_EQ(json::parse(r.body)["error"]["param"], "messages[1].content[0]");
  req = ChatRequest();
  req["tools"] = {{{"type", "function"}}};
  EXPECT_EQ(Post("/v1/chat/completions", req).status, 400);
}

TEST_F(HttpTest, GrpcChatTokenizeAndDetokenizeMatchHttp) {
  auto channel = grpc::CreateChannel(t_->target, grpc::InsecureChannelCredentials());
  auto stub = v1::DecodeService::NewStub(channel);
  v1::TokenizeRequest treq;
  auto* system = treq.mutable_chat()->add_messages();
  system->set_role("system");
  system->set_content("Tell a story.");
  auto* user = treq.mutable_chat()->add_messages();
  user->set_role("user");
  user->set_content("Once upon");
  v1::TokenizeResponse tresp;
  grpc::ClientContext c1;
  ASSERT_TRUE(stub->Tokenize(&c1, treq, &tresp).ok());
  HttpReply http = Post("/tokenize", {{"messages", ChatRequest()["messages"]}});
  std::vector<int> grpc_ids(tresp.ids().begin(), tresp.ids().end());
  EXPECT_EQ(json::parse(http.body)["tokens"].get<std::vector<int>>(), grpc_ids);
  EXPECT_EQ(tresp.tokens_size(), tresp.ids_size());

  v1::DetokenizeRequest dreq;
  dreq.mutable_ids()->CopyFrom(tresp.ids());
  v1::DetokenizeResponse dresp;
  grpc::ClientContext c2;
  ASSERT_TRUE(stub->Detokenize(&c2, dreq, &dresp).ok());
  EXPECT_EQ(dresp.text(), "<|system|>\nTell a story.\n<|user|>\nOnce upon\n<|assistant|>\n");
  dreq.add_ids(1 << 30);
  grpc::ClientContext c3;
  EXPECT_EQ(stub->Detokenize(&c3, dreq, &dresp).error_code(), grpc::StatusCode::INVALID_ARGUMENT);

  // A chat Generate streams what the HTTP chat endpoint answers, log-probs with token text.
  v1::GenerateRequest g;
  *g.mutable_chat() = treq.chat();
  g.mutable_stopping()->set_max_new_tokens(12);
  g.set_logprobs(1);
  server::ClientOptions o;
  o.target = t_->target;
  server::DecodeClient client(o);
  std::string text;
  int with_token_text = 0;
  ASSERT_TRUE(client
                  .Generate(g,
                            [&](const v1::GenerateResponse& m) {
                              text += m.text();
                              for (const auto& lp : m.logprobs())
                                with_token_text += !lp.chosen().token().empty();
                              return true;
                            })
                  .ok());
  EXPECT_EQ(with_token_text, 12);
  HttpReply chat = Post("/v1/chat/completions", ChatRequest());
  EXPECT_EQ(json::parse(chat.body)["choices"][0]["message"]["content"], text);
}

class HttpAuthTest : public HttpTest {
 protected:
  HttpAuthTest() { config_.api_key = "s3cret"; }
};

TEST_F(HttpAuthTest, EveryRouteButHealthNeedsTheKey) {
  EXPECT_EQ(HttpCall(port_, "GET", "/health").status, 200);
  HttpReply r = HttpCall(port_, "GET", "/v1/models");
  EXPECT_EQ(r.status, 401);
  EXPECT_EQ(json::parse(r.body)["error"]["code"], 401);
  EXPECT_EQ(HttpCall(port_, "GET", "/v1/models", "", "Authorization: Bearer s3cre\r\n").status,
            401);
  EXPECT_EQ(HttpCall(port_, "GET", "/v1/models", "", "Authorization: Bearer s3cret\r\n").status,
            200);
  EXPECT_EQ(HttpCall(port_, "POST", "/tokenize", "{\"prompt\":\"a\"}").status, 401);
}

TEST(HttpLifecycleTest, UnavailableUntilTheModelIsLoaded) {
  auto t = TestServer::Start();
  ASSERT_NE(t, nullptr);
  const int port = t->server->http_port();
  EXPECT_EQ(HttpCall(port, "GET", "/health").status, 503);
  EXPECT_EQ(HttpCall(port, "POST", "/v1/completions", "{\"prompt\":\"a\"}").status, 503);
  ASSERT_TRUE(t->Load().ok());
  EXPECT_EQ(HttpCall(port, "GET", "/health").status, 200);
}

}  // namespace
}  // namespace ptxserve
