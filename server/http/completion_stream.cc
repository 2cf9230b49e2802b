#include "server/http/completion_stream.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "server/http/api_error.h"

namespace ptxserve::server::http {
namespace {

// JSON has no -inf: vLLM reports impossible tokens at this floor, and so do we.
constexpr float kLogprobFloor = -9999.0f;

std::string Dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

std::string Event(const json& j) { return absl::StrCat("data: ", Dump(j), "\n\n"); }

json Bytes(const std::string& raw) {
  json out = json::array();
  for (unsigned char c : raw) out.push_back(static_cast<int>(c));
  return out;
}

}  // namespace

const char* FinishReasonString(FinishReason reason) {
  return reason == FinishReason::kLength ? "length" : "stop";
}

absl::StatusOr<std::unique_ptr<CompletionStream>> CompletionStream::Create(
    std::shared_ptr<ServedModel> model, CompletionJob job, ResponseIdentity identity,
    OnFinished on_finished) {
  std::unique_ptr<CompletionStream> s(new CompletionStream(
      std::move(model), std::move(job), std::move(identity), std::move(on_finished)));
  std::vector<EngineRequest> requests = std::move(s->job_.requests);
  s->job_.requests.clear();
  CompletionStream* raw = s.get();
  s->results_ = std::make_shared<ResultStream>([raw] { raw->OnReady(); });
  auto ids = s->model_->engine->Enqueue(std::move(requests), s->results_);
  if (!ids.ok()) {
    s->results_->Close();
    return ids.status();
  }
  s->ids_ = *std::move(ids);
  return s;
}

CompletionStream::CompletionStream(std::shared_ptr<ServedModel> model, CompletionJob job,
                                   ResponseIdentity identity, OnFinished on_finished)
    : model_(std::move(model)),
      job_(std::move(job)),
      identity_(std::move(identity)),
      on_finished_(std::move(on_finished)) {
  choices_.resize(job_.requests.size());
  remaining_ = static_cast<int>(job_.requests.size());
  for (size_t k = 0; k < choices_.size(); ++k) {
    choices_[k].logprobs = job_.chat ? json::array() : json::object();
    if (job_.echo && !job_.stream) choices_[k].text = job_.prompt_texts[k / job_.n];
  }
}

CompletionStream::~CompletionStream() { Cancel(); }

void CompletionStream::OnReady() {
  // On the engine thread: only hand over to the transport.
  absl::MutexLock lock(&wake_mu_);
  if (wake_) wake_();
}

void CompletionStream::Start(std::function<void()> wake) {
  absl::MutexLock lock(&wake_mu_);
  wake_ = std::move(wake);
}

void CompletionStream::Cancel() {
  if (cancelled_) return;
  cancelled_ = true;
  // After Close no notification runs or will run, so the transport's wake is not used.
  if (results_) results_->Close();
  if (!done_ && model_) {
    for (uint64_t id : ids_) model_->engine->Cancel(id);
  }
}

json CompletionStream::ChunkFrame() const {
  json frame = {{"id", identity_.id},
                {"object", job_.chat ? "chat.completion.chunk" : "text_completion"},
                {"created", identity_.created},
                {"model", identity_.model},
                {"choices", json::array()}};
  if (job_.include_usage) frame["usage"] = nullptr;
  return frame;
}

std::string CompletionStream::Preamble() const {
  std::string events;
  for (size_t k = 0; k < choices_.size(); ++k) {
    json frame = ChunkFrame();
    if (job_.chat) {
      frame["choices"].push_back({{"index", k},
                                  {"delta", {{"role", "assistant"}, {"content", ""}}},
                                  {"logprobs", nullptr},
                                  {"finish_reason", nullptr}});
    } else if (job_.echo) {
      frame["choices"].push_back({{"index", k},
                                  {"text", job_.prompt_texts[k / job_.n]},
                                  {"logprobs", nullptr},
                                  {"finish_reason", nullptr}});
    } else {
      continue;
    }
    events += Event(frame);
  }
  return events;
}

json CompletionStream::Logprobs(const EngineOutput& out, Choice* choice) const {
  const Tokenizer& tok = *model_->tokenizer;
  const size_t top_n = static_cast<size_t>(job_.logprobs);
  if (job_.chat) {
    json content = json::array();
    for (const SampleResult& s : out.logprobs) {
      const std::string text = TokenText(tok, s.token);
      json top = json::array();
      for (size_t i = 0; i < std::min(top_n, s.top.size()); ++i) {
        const std::string alt = TokenText(tok, s.top[i].id);
        top.push_back({{"token", alt},
                       {"logprob", std::max(s.top[i].logprob, kLogprobFloor)},
                       {"bytes", Bytes(alt)}});
      }
      content.push_back({{"token", text},
                         {"logprob", std::max(s.logprob, kLogprobFloor)},
                         {"bytes", Bytes(text)},
                         {"top_logprobs", std::move(top)}});
    }
    return content;
  }
  json lp = {{"tokens", json::array()},
             {"token_logprobs", json::array()},
             {"top_logprobs", json::array()},
             {"text_offset", json::array()}};
  for (const SampleResult& s : out.logprobs) {
    const std::string text = TokenText(tok, s.token);
    lp["tokens"].push_back(text);
    lp["token_logprobs"].push_back(std::max(s.logprob, kLogprobFloor));
    json top = json::object();
    for (size_t i = 0; i < std::min(top_n, s.top.size()); ++i) {
      top[TokenText(tok, s.top[i].id)] = std::max(s.top[i].logprob, kLogprobFloor);
    }
    if (top_n == 0) top[text] = std::max(s.logprob, kLogprobFloor);
    lp["top_logprobs"].push_back(std::move(top));
    lp["text_offset"].push_back(choice->text_offset);
    choice->text_offset += static_cast<int64_t>(text.size());
  }
  return lp;
}

void CompletionStream::Apply(EngineOutput& out, std::string* events) {
  if (out.index < 0 || out.index >= static_cast<int32_t>(choices_.size())) return;
  Choice& c = choices_[out.index];
  json logprobs = nullptr;
  if (job_.logprobs >= 0 && !out.logprobs.empty()) logprobs = Logprobs(out, &c);
  absl::Status failure;
  c.generated += static_cast<int32_t>(out.token_ids.size());
  if (out.final()) {
    c.finish = out.finish;
    c.generated = out.generated_tokens;
    c.cached_prompt = out.cached_prompt_tokens;
    --remaining_;
    if (on_finished_) on_finished_(out);
    failure = ServerFailure(out);
    if (!failure.ok() && error_.ok()) error_ = failure;
  }
  if (!job_.stream) {
    c.text += out.text;
    if (!logprobs.is_null()) {
      if (job_.chat) {
        for (auto& e : logprobs) c.logprobs.push_back(std::move(e));
      } else {
        for (const char* key : {"tokens", "token_logprobs", "top_logprobs", "text_offset"}) {
          for (auto& e : logprobs[key]) c.logprobs[key].push_back(std::move(e));
        }
      }
    }
    return;
  }
  if (!failure.ok()) {
    // vLLM's convention: the failure as an error event; the stream still ends with [DONE].
    *events += Event(ErrorObject(ToApiError(failure)));
    return;
  }
  const bool finished = out.final() && out.finish != FinishReason::kCancelled;
  if (out.text.empty() && logprobs.is_null() && !finished) return;
  if (job_.chat && !logprobs.is_null()) logprobs = {{"content", std::move(logprobs)}};
  json choice = {
      {"index", out.index},
      {"logprobs", std::move(logprobs)},
      {"finish_reason", finished ? json(FinishReasonString(out.finish)) : json(nullptr)}};
  if (job_.chat) {
    choice["delta"] = out.text.empty() ? json::object() : json{{"content", out.text}};
  } else {
    choice["text"] = out.text;
  }
  json frame = ChunkFrame();
  frame["choices"].push_back(std::move(choice));
  if (job_.continuous_usage) {
    const int32_t prompt = job_.prompt_tokens[out.index / job_.n];
    frame["usage"] = {{"prompt_tokens", prompt},
                      {"completion_tokens", c.generated},
                      {"total_tokens", prompt + c.generated}};
  }
  *events += Event(frame);
}

json CompletionStream::Usage() const {
  int64_t prompt = 0, completion = 0, cached = 0;
  for (int32_t p : job_.prompt_tokens) prompt += p;
  for (const Choice& c : choices_) completion += c.generated;
  // A prompt counts once however many samples it has: its first sample's cache hits.
  for (size_t k = 0; k < choices_.size(); k += static_cast<size_t>(job_.n)) {
    cached += choices_[k].cached_prompt;
  }
  return {{"prompt_tokens", prompt},
          {"completion_tokens", completion},
          {"total_tokens", prompt + completion},
          {"prompt_tokens_details", {{"cached_tokens", cached}}}};
}

std::string CompletionStream::Epilogue() const {
  std::string events;
  if (job_.include_usage) {
    json frame = ChunkFrame();
    frame["usage"] = Usage();
    events += Event(frame);
  }
  return events + "data: [DONE]\n\n";
}

std::string CompletionStream::Body() const {
  json choices = json::array();
  for (size_t k = 0; k < choices_.size(); ++k) {
    const Choice& c = choices_[k];
    json logprobs = job_.logprobs >= 0 ? c.logprobs : json(nullptr);
    json choice = {{"index", k},
                   {"logprobs", std::move(logprobs)},
                   {"finish_reason", FinishReasonString(c.finish)}};
    if (job_.chat) {
      choice["message"] = {{"role", "assistant"}, {"content", c.text}};
      if (!choice["logprobs"].is_null()) choice["logprobs"] = {{"content", c.logprobs}};
    } else {
      choice["text"] = c.text;
    }
    choices.push_back(std::move(choice));
  }
  return Dump({{"id", identity_.id},
               {"object", job_.chat ? "chat.completion" : "text_completion"},
               {"created", identity_.created},
               {"model", identity_.model},
               {"choices", std::move(choices)},
               {"usage", Usage()}});
}

ResponseStream::Poll CompletionStream::Next(std::string* out) {
  out->clear();
  if (done_) return Poll::kLast;
  if (job_.stream && !preamble_sent_) {
    preamble_sent_ = true;
    *out = Preamble();
  }
  // Take everything pending; PopAll returning false has armed the next notification.
  while (remaining_ > 0 && results_->PopAll(&popped_)) {
    for (EngineOutput& o : popped_) Apply(o, out);
    if (job_.stream && !out->empty()) break;
  }
  if (remaining_ > 0) return out->empty() ? Poll::kPending : Poll::kChunk;
  done_ = true;
  if (job_.stream) {
    *out += Epilogue();
  } else if (!error_.ok()) {
    const ApiError e = ToApiError(error_);
    status_ = e.status;
    *out = ErrorBody(e);
  } else {
    *out = Body();
  }
  return Poll::kLast;
}

}  // namespace ptxserve::server::http
