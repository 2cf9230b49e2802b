#include "server/convert.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "engine/tokenizer/utf8.h"

namespace ptxserve::server {
namespace {

constexpr int32_t kMaxLogprobs = 20;
// As the HTTP API's n.
constexpr int32_t kMaxSamples = 128;

absl::Status Invalid(std::string_view prefix, const std::string& msg) {
  return absl::InvalidArgumentError(absl::StrCat(std::string(prefix), msg));
}

SamplingParams FromProto(const v1::SamplingParams& p) {
  SamplingParams s;
  s.temperature = p.temperature();
  s.top_k = p.top_k();
  s.top_p = p.has_top_p() ? p.top_p() : 1.0f;
  s.min_p = p.min_p();
  s.repetition_penalty = p.has_repetition_penalty() ? p.repetition_penalty() : 1.0f;
  s.presence_penalty = p.presence_penalty();
  s.frequency_penalty = p.frequency_penalty();
  if (p.has_seed()) s.seed = p.seed();
  return s;
}

}  // namespace

absl::StatusOr<int32_t> ResolveMaxNewTokens(int64_t n, std::optional<int64_t> requested,
                                            int64_t default_max, const RequestLimits& limits,
                                            absl::string_view prompt_field,
                                            absl::string_view max_field) {
  if (n >= limits.context_length) {
    return absl::InvalidArgumentError(absl::StrCat(prompt_field, ": the prompt is ", n,
                                                   " tokens, longer than the context allows (",
                                                   limits.context_length - 1, " tokens at most)"));
  }
  if (requested) {
    const int64_t m = *requested;
    if (m < 0) return absl::InvalidArgumentError(absl::StrCat(max_field, " must be >= 0, got ", m));
    // Compared against what is left (n < context_length here), never as n + m: a requested
    // count near INT64_MAX overflowed the sum (found by fuzz/request_fuzzer.cc).
    if (m > limits.context_length - n) {
      return absl::InvalidArgumentError(absl::StrCat(max_field, " = ", m, " with a prompt of ", n,
                                                     " tokens exceeds the context of ",
                                                     limits.context_length, " tokens"));
    }
    if (m - 1 > limits.kv_capacity_tokens - n) {
      return absl::InvalidArgumentError(absl::StrCat(max_field, " = ", m, " with a prompt of ", n,
                                                     " tokens exceeds the KV cache capacity of ",
                                                     limits.kv_capacity_tokens, " tokens"));
    }
    return static_cast<int32_t>(m);
  }
  const int64_t room = std::min(limits.context_length - n, limits.kv_capacity_tokens + 1 - n);
  if (room < 1) {
    return absl::InvalidArgumentError(absl::StrCat(prompt_field, ": the prompt of ", n,
                                                   " tokens does not fit the KV cache capacity of ",
                                                   limits.kv_capacity_tokens, " tokens"));
  }
  return static_cast<int32_t>(std::min(default_max, room));
}

absl::StatusOr<std::string> RenderChat(const v1::ChatMessages& chat,
                                       const ChatRenderer* render_chat) {
  if (chat.messages().empty()) return absl::InvalidArgumentError("chat.messages is empty");
  nlohmann::ordered_json messages = nlohmann::ordered_json::array();
  for (int i = 0; i < chat.messages_size(); ++i) {
    const v1::ChatMessage& m = chat.messages(i);
    if (m.role().empty()) {
      return absl::InvalidArgumentError(absl::StrCat("chat.messages[", i, "].role is empty"));
    }
    messages.push_back({{"role", m.role()}, {"content", m.content()}});
  }
  if (render_chat == nullptr || !*render_chat) {
    return absl::InvalidArgumentError(
        "chat: the model has no chat template (tokenizer_config.json chat_template); start the "
        "server with --chat-template FILE");
  }
  auto text = (*render_chat)(messages,
                             chat.has_add_generation_prompt() ? chat.add_generation_prompt() : true,
                             nlohmann::ordered_json::object());
  if (!text.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("chat: rejected by the chat template: ", text.status().message()));
  }
  return text;
}

std::string TokenText(const Tokenizer& tokenizer, int32_t id) {
  std::string text;
  AppendRepairedUtf8(tokenizer.TokenBytes(id, /*skip_special_tokens=*/false), &text);
  return text;
}

absl::StatusOr<EngineRequest> ToEngineRequest(const v1::GenerateRequest& req,
                                              const Tokenizer& tokenizer,
                                              const RequestLimits& limits, std::string_view prefix,
                                              std::string assigned_id,
                                              const ChatRenderer* render_chat) {
  EngineRequest r;
  if (req.request_id().size() > limits.max_request_id_bytes) {
    return Invalid(prefix, absl::StrCat("request_id is ", req.request_id().size(),
                                        " bytes, at most ", limits.max_request_id_bytes));
  }
  r.request_id = req.request_id().empty() ? std::move(assigned_id) : req.request_id();
  r.priority = req.priority();

  // The prompt.
  std::string input_field;
  switch (req.input_case()) {
    case v1::GenerateRequest::kText: {
      input_field = "text";
      if (req.text().empty()) return Invalid(prefix, "text is empty");
      auto ids = tokenizer.Encode(req.text(), /*add_special_tokens=*/true);
      if (!ids.ok()) return Invalid(prefix, absl::StrCat("text: ", ids.status().message()));
      r.prompt = *std::move(ids);
      if (r.prompt.empty()) return Invalid(prefix, "text encodes to no tokens");
      break;
    }
    case v1::GenerateRequest::kTokenIds: {
      input_field = "token_ids.ids";
      const auto& ids = req.token_ids().ids();
      if (ids.empty()) return Invalid(prefix, "token_ids.ids is empty");
      for (int i = 0; i < ids.size(); ++i) {
        if (ids[i] < 0 || ids[i] >= limits.vocab_size) {
          return Invalid(prefix,
                         absl::StrCat("token_ids.ids[", i, "] = ", ids[i],
                                      " is outside the vocabulary [0, ", limits.vocab_size, ")"));
        }
      }
      r.prompt.assign(ids.begin(), ids.end());
      break;
    }
    case v1::GenerateRequest::kChat: {
      input_field = "chat";
      auto text = RenderChat(req.chat(), render_chat);
      if (!text.ok()) return Invalid(prefix, std::string(text.status().message()));
      // The template writes the special tokens itself.
      auto ids = tokenizer.Encode(*text, /*add_special_tokens=*/false);
      if (!ids.ok()) return Invalid(prefix, absl::StrCat("chat: ", ids.status().message()));
      r.prompt = *std::move(ids);
      if (r.prompt.empty()) return Invalid(prefix, "chat renders to no tokens");
      break;
    }
    case v1::GenerateRequest::INPUT_NOT_SET:
      return Invalid(prefix, "input is empty: set text, token_ids or chat");
  }
  const int64_t n = static_cast<int64_t>(r.prompt.size());

  // Sampling.
  if (req.has_sampling())
    r.sampling = FromProto(req.sampling());
  else
    r.sampling.temperature = 0.0f;  // greedy, as the proto default says
  if (req.logprobs() < 0 || req.logprobs() > kMaxLogprobs) {
    return Invalid(
        prefix, absl::StrCat("logprobs must be in [0, ", kMaxLogprobs, "], got ", req.logprobs()));
  }
  r.sampling.logprobs = req.logprobs();
  if (auto st = ValidateSamplingParams(r.sampling); !st.ok()) {
    return Invalid(prefix, std::string(st.message()));
  }

  // Stopping.
  const v1::StoppingCriteria& sc = req.stopping();
  r.stopping.stop.assign(sc.stop().begin(), sc.stop().end());
  r.stopping.stop_token_ids.assign(sc.stop_token_ids().begin(), sc.stop_token_ids().end());
  r.stopping.ignore_eos = sc.ignore_eos();
  auto max_new = ResolveMaxNewTokens(
      n, sc.has_max_new_tokens() ? std::optional<int64_t>(sc.max_new_tokens()) : std::nullopt,
      limits.default_max_new_tokens, limits, input_field, "stopping.max_new_tokens");
  if (!max_new.ok()) return Invalid(prefix, std::string(max_new.status().message()));
  r.stopping.max_new_tokens = *max_new;
  if (auto st = ValidateStoppingCriteria(r.stopping, static_cast<int32_t>(limits.vocab_size));
      !st.ok()) {
    return Invalid(prefix, std::string(st.message()));
  }
  return r;
}

absl::StatusOr<std::vector<EngineRequest>> ToEngineSamples(
    const v1::GenerateRequest& req, const Tokenizer& tokenizer, const RequestLimits& limits,
    std::string_view prefix, std::string assigned_id, int32_t index, int64_t max_sequences,
    const ChatRenderer* render_chat) {
  if (req.n() < 0 || req.n() > kMaxSamples) {
    return Invalid(prefix, absl::StrCat("n must be in [0, ", kMaxSamples, "], got ", req.n()));
  }
  const int32_t n = std::max(req.n(), 1);
  if (n > max_sequences) {
    return Invalid(prefix, absl::StrCat("n = ", n, " would pass the ", limits.max_batch_prompts,
                                        " sequences a call may hold (--max-batch-prompts)"));
  }
  auto r = ToEngineRequest(req, tokenizer, limits, prefix, std::move(assigned_id), render_chat);
  if (!r.ok()) return r.status();
  r->index = index;
  std::vector<EngineRequest> samples;
  samples.reserve(n);
  const uint64_t seed = r->sampling.seed.value_or(SeedFromRequestId(r->request_id));
  for (int32_t i = 0; i < n; ++i) {
    EngineRequest& s = samples.emplace_back(*r);
    s.sample = i;
    if (n > 1) s.sampling.seed = seed + static_cast<uint64_t>(i);
  }
  return samples;
}

absl::StatusOr<std::vector<EngineRequest>> ToEngineRequests(const v1::GenerateBatchRequest& req,
                                                            const Tokenizer& tokenizer,
                                                            const RequestLimits& limits,
                                                            const std::string& id_base,
                                                            const ChatRenderer* render_chat) {
  if (req.requests().empty()) return absl::InvalidArgumentError("requests is empty");
  if (req.requests_size() > limits.max_batch_prompts) {
    return absl::InvalidArgumentError(absl::StrCat("requests has ", req.requests_size(),
                                                   " prompts, at most ", limits.max_batch_prompts,
                                                   " are allowed (--max-batch-prompts)"));
  }
  std::vector<EngineRequest> out;
  out.reserve(req.requests_size());
  for (int i = 0; i < req.requests_size(); ++i) {
    // The prompts after this one need a sequence each at least.
    const int64_t room =
        limits.max_batch_prompts - static_cast<int64_t>(out.size()) - (req.requests_size() - 1 - i);
    auto samples =
        ToEngineSamples(req.requests(i), tokenizer, limits, absl::StrCat("requests[", i, "]."),
                        absl::StrCat(id_base, "-", i), i, room, render_chat);
    if (!samples.ok()) return samples.status();
    for (EngineRequest& s : *samples) out.push_back(std::move(s));
  }
  return out;
}

namespace {

// Each engine finish reason and its wire value, for both directions.
constexpr std::pair<FinishReason, v1::FinishReason> kFinishReasons[] = {
    {FinishReason::kNone, v1::FINISH_REASON_UNSPECIFIED},
    {FinishReason::kLength, v1::FINISH_REASON_LENGTH},
    {FinishReason::kStop, v1::FINISH_REASON_STOP},
    {FinishReason::kEos, v1::FINISH_REASON_EOS},
    {FinishReason::kCancelled, v1::FINISH_REASON_CANCELLED},
    {FinishReason::kError, v1::FINISH_REASON_ERROR},
};

}  // namespace

v1::FinishReason ToProto(FinishReason reason) {
  for (const auto& [engine, wire] : kFinishReasons) {
    if (engine == reason) return wire;
  }
  return v1::FINISH_REASON_ERROR;
}

FinishReason FromProto(v1::FinishReason reason) {
  for (const auto& [engine, wire] : kFinishReasons) {
    if (wire == reason) return engine;
  }
  return FinishReason::kNone;
}

void ToProto(const EngineOutput& out, const Tokenizer& tokenizer, v1::GenerateResponse* resp) {
  resp->set_sample_index(out.sample);
  resp->mutable_token_ids()->Add(out.token_ids.begin(), out.token_ids.end());
  resp->set_text(out.text);
  for (const SampleResult& s : out.logprobs) {
    v1::GeneratedTokenLogprobs* lp = resp->add_logprobs();
    lp->mutable_chosen()->set_token_id(s.token);
    lp->mutable_chosen()->set_logprob(s.logprob);
    lp->mutable_chosen()->set_token(TokenText(tokenizer, s.token));
    for (const TokenLogprob& t : s.top) {
      v1::TokenLogprob* alt = lp->add_top();
      alt->set_token_id(t.id);
      alt->set_logprob(t.logprob);
      alt->set_token(TokenText(tokenizer, t.id));
    }
  }
  if (!out.final()) return;
  resp->set_finish_reason(ToProto(out.finish));
  if (out.sample == 0) {  // the prompt counts once however many samples share it
    resp->mutable_usage()->set_prompt_tokens(out.prompt_tokens);
    resp->mutable_usage()->set_cached_prompt_tokens(out.cached_prompt_tokens);
  }
  resp->mutable_usage()->set_generated_tokens(out.generated_tokens);
  resp->mutable_timing()->set_queue_seconds(out.queue_seconds);
  resp->mutable_timing()->set_time_to_first_token_seconds(out.ttft_seconds);
  resp->mutable_timing()->set_total_seconds(out.total_seconds);
  resp->set_request_id(out.request_id);
  if (!out.error.ok()) resp->set_error_message(std::string(out.error.message()));
}

}  // namespace ptxserve::server
