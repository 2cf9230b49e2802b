// libFuzzer target: a client's request bytes through the conversion and validation both
// fronts run before anything reaches the engine.
//
// Input: one selector byte, then the payload.
//   selector & 3:        0 = GenerateRequest (protobuf wire bytes, as gRPC parses them)
//                        1 = GenerateBatchRequest (same)
//                        2 = /v1/completions body (JSON)
//                        3 = /v1/chat/completions body (JSON)
//   (selector >> 2) & 3: the model's chat template: 0 none, 1 the test model's,
//                        2 Llama 3.1 Instruct, 3 Qwen2.5 Instruct (tests/ files)
// The tokenizer is the shared test model's (tinystories-656k), else the synthetic "tiny"
// one. Besides "no crash, no leak, no UB", every request a front accepts must pass the
// engine's own ValidateEngineRequest, and is then run through a StopChecker (its prompt
// ids stand in for generated tokens) as the engine thread would.
#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <span>
#include <string>

#include "engine/chat/chat_template.h"
#include "engine/engine_io.h"
#include "engine/model/synthetic.h"
#include "engine/stop_checker.h"
#include "engine/tokenizer/tokenizer.h"
#include "engine/util/file.h"
#include "fuzz/fuzz_util.h"
#include "google/protobuf/stubs/logging.h"
#include "server/convert.h"
#include "server/http/api_error.h"
#include "server/http/openai_request.h"

namespace ptxserve::fuzz {
namespace {

struct Fixture {
  std::unique_ptr<Tokenizer> tokenizer;
  server::RequestLimits limits;
  server::ChatRenderer renderers[4];  // [0] is empty: a model without a template
};

std::unique_ptr<Tokenizer> LoadTokenizer() {
  auto tok = Tokenizer::FromDir(PTXSERVE_SHARED_MODELS "/tinystories-656k");
  if (tok.ok()) return *std::move(tok);
  // No shared model here: the synthetic default model's tokenizer.
  const std::string dir = MakeScratchDir("ptxserve-fuzz-tok");
  auto spec = SyntheticPreset("tiny");
  Check(spec.ok() && WriteSyntheticModel(dir, *spec, 1, DType::kF32).ok(), "synthetic model");
  tok = Tokenizer::FromDir(dir);
  Check(tok.ok(), "synthetic tokenizer");
  std::filesystem::remove_all(dir);
  return *std::move(tok);
}

// The renderer serve builds from a template (server.cc's LoadChatRenderer).
server::ChatRenderer Renderer(const char* path, const Tokenizer& tok) {
  auto source = ReadFileToString(path);
  Check(source.ok(), path);
  auto compiled = ChatTemplate::Compile(*source, path);
  Check(compiled.ok(), path);
  std::map<std::string, std::string> special;
  if (tok.bos_id() >= 0) special["bos_token"] = tok.IdToToken(tok.bos_id());
  if (tok.eos_id() >= 0) special["eos_token"] = tok.IdToToken(tok.eos_id());
  return [t = *std::move(compiled), special](const nlohmann::ordered_json& messages,
                                             bool add_generation_prompt,
                                             const nlohmann::ordered_json& extra) {
    nlohmann::ordered_json ctx = ChatTemplateContext(messages, add_generation_prompt, special);
    for (const auto& [k, v] : extra.items()) ctx[k] = v;
    return t.Render(ctx);
  };
}

const Fixture& GetFixture() {
  static const Fixture* f = [] {
    // Bytes that are no protobuf (invalid UTF-8 in a string) make libprotobuf log a line
    // each; gRPC refuses them before the conversion anyway.
    google::protobuf::SetLogHandler(nullptr);
    auto* f = new Fixture;
    f->tokenizer = LoadTokenizer();
    // serve's defaults on a 2048-token model with a smaller KV cache (so both length checks
    // can refuse).
    f->limits.vocab_size = f->tokenizer->vocab_size();
    f->limits.context_length = 2048;
    f->limits.kv_capacity_tokens = 1500;
    f->limits.default_max_new_tokens = 256;
    f->limits.max_batch_prompts = 256;
    f->renderers[1] =
        Renderer(PTXSERVE_SOURCE_DIR "/tests/http/chat_template.jinja", *f->tokenizer);
    f->renderers[2] = Renderer(PTXSERVE_SOURCE_DIR "/tests/chat/templates/llama-3.1-instruct.jinja",
                               *f->tokenizer);
    f->renderers[3] =
        Renderer(PTXSERVE_SOURCE_DIR "/tests/chat/templates/qwen2.5-instruct.jinja", *f->tokenizer);
    return f;
  }();
  return *f;
}

// What the engine does with an accepted request before and while it runs.
void Admit(const EngineRequest& r, const Fixture& f) {
  const absl::Status st = ValidateEngineRequest(r, f.limits.vocab_size, f.limits.context_length,
                                                f.limits.kv_capacity_tokens);
  Check(st.ok(), "a front accepted a request the engine refuses");
  const size_t n = std::min<size_t>(r.prompt.size(), 64);
  StopChecker stop(r.stopping, *f.tokenizer, f.tokenizer->eos_id(),
                   std::span<const int32_t>(r.prompt).subspan(0, r.prompt.size() - n));
  for (size_t i = r.prompt.size() - n; i < r.prompt.size() && !stop.finished(); ++i) {
    stop.Push(r.prompt[i]);
  }
  stop.Flush();
}

void Grpc(const uint8_t* data, size_t size, bool batch, const Fixture& f,
          const server::ChatRenderer* render) {
  if (batch) {
    v1::GenerateBatchRequest req;
    if (!req.ParseFromArray(data, static_cast<int>(size))) {  // gRPC refuses it first
      Note("ParseFromArray", absl::InvalidArgumentError("not a GenerateBatchRequest"));
      return;
    }
    auto rs = server::ToEngineRequests(req, *f.tokenizer, f.limits, "fuzz", render);
    Note("ToEngineRequests", rs.status());
    if (rs.ok()) {
      for (const EngineRequest& r : *rs) Admit(r, f);
    }
    return;
  }
  v1::GenerateRequest req;
  if (!req.ParseFromArray(data, static_cast<int>(size))) {
    Note("ParseFromArray", absl::InvalidArgumentError("not a GenerateRequest"));
    return;
  }
  auto rs = server::ToEngineSamples(req, *f.tokenizer, f.limits, "", "fuzz", 0,
                                    f.limits.max_batch_prompts, render);
  Note("ToEngineSamples", rs.status());
  if (rs.ok()) {
    for (const EngineRequest& r : *rs) Admit(r, f);
  }
}

void Http(const uint8_t* data, size_t size, bool chat, const Fixture& f,
          const server::ChatRenderer& render) {
  server::http::JobContext ctx;
  ctx.tokenizer = f.tokenizer.get();
  ctx.limits = f.limits;
  ctx.model_name = "tinystories-656k";
  ctx.render_chat = render;
  ctx.id = "cmpl-fuzz";
  const absl::string_view body(reinterpret_cast<const char*>(data), size);
  auto job = server::http::ParseCompletionJob(body, chat, ctx);
  Note("ParseCompletionJob", job.status());
  if (!job.ok()) {
    // The refusal as the client sees it.
    server::http::ErrorBody(server::http::ToApiError(job.status()));
    return;
  }
  Check(!job->requests.empty(), "an accepted job without requests");
  for (const EngineRequest& r : job->requests) Admit(r, f);
}

}  // namespace
}  // namespace ptxserve::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace ptxserve::fuzz;
  if (size < 1) return 0;
  const Fixture& f = GetFixture();
  const uint8_t selector = data[0];
  const ptxserve::server::ChatRenderer& render = f.renderers[(selector >> 2) & 3];
  ++data;
  --size;
  switch (selector & 3) {
    case 0:
      Grpc(data, size, /*batch=*/false, f, &render);
      break;
    case 1:
      Grpc(data, size, /*batch=*/true, f, &render);
      break;
    case 2:
      Http(data, size, /*chat=*/false, f, render);
      break;
    default:
      Http(data, size, /*chat=*/true, f, render);
      break;
  }
  return 0;
}
