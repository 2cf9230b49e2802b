#include "server/http/openai_service.h"

#include <ctime>
#include <utility>

#include "absl/random/random.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "server/auth.h"
#include "server/http/completion_stream.h"
#include "server/http/metrics_route.h"
#include "server/http/openai_request.h"

namespace ptxserve::server::http {
namespace {

HttpResponse JsonResponse(int status, const json& body) {
  HttpResponse r;
  r.status = status;
  r.body = body.dump(-1, ' ', false, json::error_handler_t::replace);
  return r;
}

HttpResponse ErrorResponse(const ApiError& e) {
  HttpResponse r;
  r.status = e.status;
  r.body = ErrorBody(e);
  return r;
}

// "cmpl-" + 32 hex digits: unique across restarts (random), like OpenAI's ids.
std::string NewId(std::string_view prefix) {
  thread_local absl::BitGen gen;
  return absl::StrFormat("%s-%016x%016x", prefix, absl::Uniform<uint64_t>(gen),
                         absl::Uniform<uint64_t>(gen));
}

const char* OutcomeOf(int status) {
  if (status == 401) return kOutcomeUnauthenticated;
  if (status == 429 || status == 503) return kOutcomeRejected;
  return kOutcomeInvalid;
}

}  // namespace

OpenAiService::OpenAiService(ServerMetrics* metrics, const RequestLog* request_log,
                             std::string api_key, Hooks hooks)
    : metrics_(metrics),
      request_log_(request_log),
      api_key_(std::move(api_key)),
      hooks_(std::move(hooks)) {}

bool OpenAiService::Authorized(const HttpRequest& req) const {
  return api_key_.empty() || BearerTokenMatches(req.authorization, api_key_);
}

HttpResponse OpenAiService::Refuse(const absl::Status& status) {
  const ApiError e = ToApiError(status);
  metrics_->CountServerOutcome(OutcomeOf(e.status));
  return ErrorResponse(e);
}

absl::StatusOr<std::shared_ptr<ServedModel>> OpenAiService::LoadedModel(bool generating) {
  if (generating && draining_.load()) return absl::UnavailableError("the server is shutting down");
  std::shared_ptr<ServedModel> model = hooks_.model();
  if (!model) return absl::UnavailableError("the model is not loaded yet");
  return model;
}

HttpResponse OpenAiService::Handle(HttpRequest&& req) {
  struct Route {
    const char* path;
    const char* method;
  };
  static constexpr Route kRoutes[] = {{"/health", "GET"},          {"/v1/models", "GET"},
                                      {"/v1/completions", "POST"}, {"/v1/chat/completions", "POST"},
                                      {"/tokenize", "POST"},       {"/detokenize", "POST"},
                                      {kMetricsPath, "GET"}};
  const Route* route = nullptr;
  for (const Route& r : kRoutes) {
    if (req.path == r.path) route = &r;
  }
  if (!route) {
    return ErrorResponse({404, absl::StrCat("no route ", req.method, " ", req.path), ""});
  }
  if (req.method != route->method) {
    HttpResponse r = ErrorResponse({405, absl::StrCat(req.path, " takes ", route->method), ""});
    r.headers.emplace_back("Allow", route->method);
    return r;
  }
  // Like vLLM's: /metrics and /health answer without the API key (scrapers and probes).
  if (req.path == kMetricsPath) return ServeMetrics(*metrics_, req);
  if (req.path == "/health") {
    HttpResponse r;
    r.status = hooks_.serving() ? 200 : 503;
    r.content_type = "text/plain";
    return r;
  }
  if (!Authorized(req)) {
    HttpResponse r = Refuse(absl::UnauthenticatedError(
        "missing or wrong API key: send the header 'Authorization: Bearer <key>'"));
    r.headers.emplace_back("WWW-Authenticate", "Bearer");
    return r;
  }
  if (req.path == "/v1/completions") return Completions(req, /*chat=*/false);
  if (req.path == "/v1/chat/completions") return Completions(req, /*chat=*/true);
  if (req.path == "/v1/models") return Models();
  // /tokenize and /detokenize: a JSON object about the loaded model.
  auto model = LoadedModel(/*generating=*/false);
  if (!model.ok()) return Refuse(model.status());
  auto body = ParseJsonObject(req.body);
  if (!body.ok()) return Refuse(body.status());
  return req.path == "/tokenize" ? Tokenize(**model, *body) : Detokenize(**model, *body);
}

HttpResponse OpenAiService::Completions(const HttpRequest& req, bool chat) {
  auto loaded = LoadedModel(/*generating=*/true);
  if (!loaded.ok()) return Refuse(loaded.status());
  const std::shared_ptr<ServedModel> model = *std::move(loaded);
  JobContext ctx;
  ctx.tokenizer = model->tokenizer.get();
  ctx.limits = model->limits;
  ctx.model_name = model->info.name();
  ctx.render_chat = model->render_chat;
  ctx.id = NewId(chat ? "chatcmpl" : "cmpl");
  auto job = ParseCompletionJob(req.body, chat, ctx);
  if (!job.ok()) return Refuse(job.status());
  ResponseIdentity identity{ctx.id, ctx.model_name, static_cast<int64_t>(std::time(nullptr))};
  auto stream =
      CompletionStream::Create(model, *std::move(job), std::move(identity),
                               [log = request_log_, peer = req.peer](const EngineOutput& final) {
                                 log->Finished(final, "http", peer);
                               });
  if (!stream.ok()) return Refuse(stream.status());
  HttpResponse r;
  r.stream = *std::move(stream);
  return r;
}

HttpResponse OpenAiService::Models() {
  auto loaded = LoadedModel(/*generating=*/false);
  if (!loaded.ok()) return Refuse(loaded.status());
  const std::shared_ptr<ServedModel> model = *std::move(loaded);
  const std::string& name = model->info.name();
  return JsonResponse(200, {{"object", "list"},
                            {"data",
                             {{{"id", name},
                               {"object", "model"},
                               {"created", model->created_unix_seconds},
                               {"owned_by", "ptxserve"},
                               {"root", name},
                               {"parent", nullptr},
                               {"max_model_len", model->limits.context_length},
                               {"vocab_size", model->limits.vocab_size}}}}});
}

HttpResponse OpenAiService::Tokenize(const ServedModel& model, const json& body) {
  const Tokenizer& tok = *model.tokenizer;
  std::string text;
  // vLLM's defaults: special tokens for a prompt, none for messages (the template has them).
  bool add_special = true;
  if (auto it = body.find("messages"); it != body.end()) {
    add_special = false;
    auto messages = NormalizeChatMessages(*it);
    if (!messages.ok()) return Refuse(messages.status());
    if (!model.render_chat) {
      return Refuse(absl::InvalidArgumentError("messages: the model has no chat template"));
    }
    const json gen = body.value("add_generation_prompt", json(true));
    if (!gen.is_boolean()) {
      return Refuse(absl::InvalidArgumentError("add_generation_prompt must be a boolean"));
    }
    auto rendered = model.render_chat(*messages, gen.get<bool>(),
                                      body.value("chat_template_kwargs", json::object()));
    if (!rendered.ok()) {
      return Refuse(absl::InvalidArgumentError(
          absl::StrCat("messages: rejected by the chat template: ", rendered.status().message())));
    }
    text = *std::move(rendered);
  } else if (auto p = body.find("prompt"); p != body.end() && p->is_string()) {
    text = p->get<std::string>();
  } else {
    return Refuse(absl::InvalidArgumentError("prompt must be a string (or give messages)"));
  }
  if (auto it = body.find("add_special_tokens"); it != body.end()) {
    if (!it->is_boolean()) {
      return Refuse(absl::InvalidArgumentError("add_special_tokens must be a boolean"));
    }
    add_special = it->get<bool>();
  }
  auto ids = tok.Encode(text, add_special);
  if (!ids.ok()) {
    return Refuse(absl::InvalidArgumentError(absl::StrCat("prompt: ", ids.status().message())));
  }
  json token_strs = nullptr;
  if (body.value("return_token_strs", json(false)) == json(true)) {
    token_strs = json::array();
    for (int32_t id : *ids) token_strs.push_back(tok.IdToToken(id));
  }
  return JsonResponse(200, {{"count", ids->size()},
                            {"max_model_len", model.limits.context_length},
                            {"tokens", *ids},
                            {"token_strs", std::move(token_strs)}});
}

HttpResponse OpenAiService::Detokenize(const ServedModel& model, const json& body) {
  auto it = body.find("tokens");
  if (it == body.end() || !it->is_array()) {
    return Refuse(absl::InvalidArgumentError("tokens must be an array of token ids"));
  }
  std::vector<int32_t> ids;
  for (size_t i = 0; i < it->size(); ++i) {
    const json& v = (*it)[i];
    if (!v.is_number_integer() || v.get<int64_t>() < 0 ||
        v.get<int64_t>() >= model.limits.vocab_size) {
      return Refuse(absl::InvalidArgumentError(
          absl::StrCat("tokens[", i, "] is not a token id in [0, ", model.limits.vocab_size, ")")));
    }
    ids.push_back(v.get<int32_t>());
  }
  return JsonResponse(200, {{"prompt", model.tokenizer->Decode(ids)}});
}

}  // namespace ptxserve::server::http
