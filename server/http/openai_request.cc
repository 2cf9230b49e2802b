#include "server/http/openai_request.h"

#include <cmath>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "engine/sampler.h"
#include "server/http/json_fields.h"

namespace ptxserve::server::http {
namespace {

// OpenAI's default for /v1/completions; chat completions default to the room left.
constexpr int64_t kCompletionsDefaultMaxTokens = 16;
constexpr int32_t kMaxLogprobs = 20;
constexpr int64_t kMaxN = 128;

// Reads `name` into *out when given (a float field of the engine's params).
absl::Status ReadFloat(const json& obj, const char* name, float* out) {
  auto v = OptNumber(obj, name);
  if (!v.ok()) return v.status();
  if (*v) *out = static_cast<float>(**v);
  return absl::OkStatus();
}

absl::Status CheckRange(const char* name, float v, float lo, float hi) {
  if (!(v >= lo && v <= hi)) {
    return Invalid(name, absl::StrCat("must be in [", lo, ", ", hi, "], got ", v));
  }
  return absl::OkStatus();
}

absl::Status CheckLogprobs(const char* name, std::optional<int64_t> v) {
  if (v && (*v < 0 || *v > kMaxLogprobs)) {
    return Invalid(name, absl::StrCat("must be in [0, ", kMaxLogprobs, "], got ", *v));
  }
  return absl::OkStatus();
}

// The sampling fields both endpoints share.
absl::StatusOr<SamplingParams> ParseSampling(const json& body) {
  SamplingParams s;  // temperature 1, as OpenAI's default
  for (auto [name, field] : {std::pair{"temperature", &s.temperature},
                             {"top_p", &s.top_p},
                             {"min_p", &s.min_p},
                             {"presence_penalty", &s.presence_penalty},
                             {"frequency_penalty", &s.frequency_penalty},
                             {"repetition_penalty", &s.repetition_penalty}}) {
    if (absl::Status st = ReadFloat(body, name, field); !st.ok()) return st;
  }
  if (auto st = CheckRange("presence_penalty", s.presence_penalty, -2, 2); !st.ok()) return st;
  if (auto st = CheckRange("frequency_penalty", s.frequency_penalty, -2, 2); !st.ok()) return st;
  auto top_k = OptInt(body, "top_k");
  if (!top_k.ok()) return top_k.status();
  if (*top_k) {
    // vLLM's convention: -1 (and 0) disable top-k.
    if (**top_k < -1 || **top_k > INT32_MAX) {
      return Invalid("top_k", absl::StrCat("must be -1 (off) or >= 0, got ", **top_k));
    }
    s.top_k = static_cast<int32_t>(std::max<int64_t>(**top_k, 0));
  }
  if (const json* seed = Field(body, "seed")) {
    if (!seed->is_number_integer()) {
      return Invalid("seed", absl::StrCat("must be an integer, got ", TypeName(*seed)));
    }
    s.seed = seed->is_number_unsigned() ? seed->get<uint64_t>()
                                        : static_cast<uint64_t>(seed->get<int64_t>());
  }
  return s;
}

absl::Status ParseStops(const json& body, StoppingCriteria* stopping) {
  if (const json* stop = Field(body, "stop")) {
    if (stop->is_string()) {
      stopping->stop.push_back(stop->get<std::string>());
    } else if (stop->is_array()) {
      for (size_t i = 0; i < stop->size(); ++i) {
        if (!(*stop)[i].is_string()) {
          return Invalid(absl::StrCat("stop[", i, "]"), "must be a string");
        }
        stopping->stop.push_back((*stop)[i].get<std::string>());
      }
    } else {
      return Invalid("stop", "must be a string or an array of strings");
    }
  }
  if (const json* ids = Field(body, "stop_token_ids")) {
    if (!ids->is_array()) return Invalid("stop_token_ids", "must be an array of integers");
    for (size_t i = 0; i < ids->size(); ++i) {
      const json& v = (*ids)[i];
      if (!v.is_number_integer() || v.get<int64_t>() < INT32_MIN || v.get<int64_t>() > INT32_MAX) {
        return Invalid(absl::StrCat("stop_token_ids[", i, "]"), "must be a token id");
      }
      stopping->stop_token_ids.push_back(v.get<int32_t>());
    }
  }
  auto ignore_eos = OptBool(body, "ignore_eos", false);
  if (!ignore_eos.ok()) return ignore_eos.status();
  stopping->ignore_eos = *ignore_eos;
  return absl::OkStatus();
}

// Fields OpenAI defines that ptxserve does not implement: refused, never silently ignored.
absl::Status RefuseUnsupported(const json& body, bool chat, int64_t n) {
  if (const json* best_of = Field(body, "best_of")) {
    if (!best_of->is_number_integer() || best_of->get<int64_t>() != n) {
      return Invalid("best_of", "other than n is not supported");
    }
  }
  if (const json* bias = Field(body, "logit_bias"); bias && !bias->empty()) {
    return Invalid("logit_bias", "is not supported");
  }
  if (!chat) {
    if (Field(body, "suffix")) return Invalid("suffix", "is not supported");
    return absl::OkStatus();
  }
  if (const json* tools = Field(body, "tools"); tools && !tools->empty()) {
    return Invalid("tools", "are not supported (no tool calling)");
  }
  if (const json* choice = Field(body, "tool_choice"); choice && *choice != "none") {
    return Invalid("tool_choice", "is not supported (no tool calling)");
  }
  if (const json* format = Field(body, "response_format")) {
    const json* type = format->is_object() ? Field(*format, "type") : nullptr;
    if (!type || *type != "text")
      return Invalid("response_format", "other than text is not supported");
  }
  auto cont = OptBool(body, "continue_final_message", false);
  if (!cont.ok()) return cont.status();
  if (*cont) return Invalid("continue_final_message", "is not supported");
  return absl::OkStatus();
}

struct Prompt {
  std::vector<int32_t> ids;
  std::string text;
};

absl::StatusOr<Prompt> TokenPrompt(const json& arr, absl::string_view param,
                                   const JobContext& ctx) {
  Prompt p;
  for (size_t i = 0; i < arr.size(); ++i) {
    const json& v = arr[i];
    if (!v.is_number_integer() || v.get<int64_t>() < 0 ||
        v.get<int64_t>() >= ctx.limits.vocab_size) {
      return Invalid(absl::StrCat(param, "[", i, "]"),
                     absl::StrCat("is not a token id in [0, ", ctx.limits.vocab_size, ")"));
    }
    p.ids.push_back(v.get<int32_t>());
  }
  if (p.ids.empty()) return Invalid(param, "is empty");
  p.text = ctx.tokenizer->Decode(p.ids);
  return p;
}

absl::StatusOr<Prompt> TextPrompt(std::string text, absl::string_view param, bool add_special,
                                  const JobContext& ctx) {
  auto ids = ctx.tokenizer->Encode(text, add_special);
  if (!ids.ok()) return Invalid(param, ids.status().message());
  if (ids->empty()) return Invalid(param, "encodes to no tokens");
  return Prompt{*std::move(ids), std::move(text)};
}

// /v1/completions' prompt: a string, an array of token ids, or an array of either.
absl::StatusOr<std::vector<Prompt>> CompletionPrompts(const json& body, const JobContext& ctx) {
  const json* prompt = Field(body, "prompt");
  if (!prompt) return Invalid("prompt", "is required");
  std::vector<Prompt> out;
  if (prompt->is_string()) {
    auto p = TextPrompt(prompt->get<std::string>(), "prompt", true, ctx);
    if (!p.ok()) return p.status();
    out.push_back(*std::move(p));
    return out;
  }
  if (!prompt->is_array() || prompt->empty()) {
    return Invalid("prompt", "must be a string, an array of token ids, or an array of either");
  }
  if ((*prompt)[0].is_number()) {
    auto p = TokenPrompt(*prompt, "prompt", ctx);
    if (!p.ok()) return p.status();
    out.push_back(*std::move(p));
    return out;
  }
  for (size_t i = 0; i < prompt->size(); ++i) {
    const json& item = (*prompt)[i];
    const std::string param = absl::StrCat("prompt[", i, "]");
    absl::StatusOr<Prompt> p = absl::InvalidArgumentError("");
    if (item.is_string()) {
      p = TextPrompt(item.get<std::string>(), param, true, ctx);
    } else if (item.is_array()) {
      p = TokenPrompt(item, param, ctx);
    } else {
      return Invalid(param, "must be a string or an array of token ids");
    }
    if (!p.ok()) return p.status();
    out.push_back(*std::move(p));
  }
  return out;
}

absl::StatusOr<Prompt> ChatPrompt(const json& body, const JobContext& ctx) {
  const json* messages = Field(body, "messages");
  if (!messages) return Invalid("messages", "is required");
  auto normalized = NormalizeChatMessages(*messages);
  if (!normalized.ok()) return normalized.status();
  if (!ctx.render_chat) {
    return Invalid("messages",
                   "cannot be rendered: the model has no chat template (tokenizer_config.json "
                   "chat_template); start the server with --chat-template FILE");
  }
  auto add_generation_prompt = OptBool(body, "add_generation_prompt", true);
  if (!add_generation_prompt.ok()) return add_generation_prompt.status();
  json extra = json::object();
  if (const json* kwargs = Field(body, "chat_template_kwargs")) {
    if (!kwargs->is_object()) return Invalid("chat_template_kwargs", "must be an object");
    extra = *kwargs;
  }
  auto text = ctx.render_chat(*normalized, *add_generation_prompt, extra);
  if (!text.ok()) {
    return Invalid("messages",
                   absl::StrCat("rejected by the chat template: ", text.status().message()));
  }
  // The template writes the special tokens (BOS) itself, as in vLLM.
  return TextPrompt(*std::move(text), "messages", /*add_special=*/false, ctx);
}

// The engine's own checks name its fields; say them as the request did.
absl::Status RenameEngineFields(const absl::Status& st) {
  if (st.ok()) return st;
  std::string msg(st.message());
  for (auto [from, to] :
       {std::pair{"sampling.", ""}, {"stopping.max_new_tokens", "max_tokens"}, {"stopping.", ""}}) {
    if (absl::StartsWith(msg, from)) {
      msg = absl::StrCat(to, msg.substr(absl::string_view(from).size()));
      break;
    }
  }
  return absl::Status(st.code(), msg);
}

}  // namespace

absl::StatusOr<json> NormalizeChatMessages(const json& messages) {
  if (!messages.is_array() || messages.empty()) {
    return Invalid("messages", "must be a non-empty array");
  }
  json out = json::array();
  for (size_t i = 0; i < messages.size(); ++i) {
    const json& m = messages[i];
    const std::string at = absl::StrCat("messages[", i, "]");
    if (!m.is_object()) return Invalid(at, "must be an object");
    const json* role = Field(m, "role");
    if (!role || !role->is_string()) return Invalid(absl::StrCat(at, ".role"), "must be a string");
    json msg = {{"role", *role}};
    const json* content = Field(m, "content");
    if (!content) {
      msg["content"] = nullptr;
    } else if (content->is_string()) {
      msg["content"] = *content;
    } else if (content->is_array()) {
      // Text parts joined by newlines, as vLLM does for templates that take strings.
      std::vector<std::string> parts;
      for (size_t j = 0; j < content->size(); ++j) {
        const json& part = (*content)[j];
        const std::string pat = absl::StrCat(at, ".content[", j, "]");
        const json* type = part.is_object() ? Field(part, "type") : nullptr;
        if (!type || *type != "text") {
          return Invalid(pat, "is not a text part (only {\"type\": \"text\"} is supported)");
        }
        const json* text = Field(part, "text");
        if (!text || !text->is_string())
          return Invalid(absl::StrCat(pat, ".text"), "must be a string");
        parts.push_back(text->get<std::string>());
      }
      msg["content"] = absl::StrJoin(parts, "\n");
    } else {
      return Invalid(absl::StrCat(at, ".content"), "must be a string or an array of text parts");
    }
    if (const json* name = Field(m, "name"); name && name->is_string()) msg["name"] = *name;
    out.push_back(std::move(msg));
  }
  return out;
}

absl::StatusOr<CompletionJob> ParseCompletionJob(absl::string_view body_text, bool chat,
                                                 const JobContext& ctx) {
  auto parsed = ParseJsonObject(body_text);
  if (!parsed.ok()) return parsed.status();
  const json& body = *parsed;
  if (const json* model = Field(body, "model")) {
    if (!model->is_string() || *model != ctx.model_name) {
      return absl::NotFoundError(
          absl::StrCat("model: the model `", model->is_string() ? model->get<std::string>() : "",
                       "` does not exist; this server serves `", ctx.model_name, "`"));
    }
  }
  CompletionJob job;
  job.chat = chat;
  auto n = OptInt(body, "n");
  if (!n.ok()) return n.status();
  const int64_t n_value = n->value_or(1);
  if (n_value < 1 || n_value > kMaxN) {
    return Invalid("n", absl::StrCat("must be in [1, ", kMaxN, "], got ", n_value));
  }
  job.n = static_cast<int32_t>(n_value);
  if (absl::Status st = RefuseUnsupported(body, chat, n_value); !st.ok()) return st;

  auto stream = OptBool(body, "stream", false);
  if (!stream.ok()) return stream.status();
  job.stream = *stream;
  if (const json* options = Field(body, "stream_options")) {
    if (!job.stream) return Invalid("stream_options", "is only allowed with stream: true");
    if (!options->is_object()) return Invalid("stream_options", "must be an object");
    auto usage = OptBool(*options, "include_usage", false);
    if (!usage.ok()) return usage.status();
    job.include_usage = *usage;
    auto continuous = OptBool(*options, "continuous_usage_stats", false);
    if (!continuous.ok()) return continuous.status();
    job.continuous_usage = *continuous;
  }

  // Log-probs.
  if (chat) {
    auto want = OptBool(body, "logprobs", false);
    if (!want.ok()) return want.status();
    auto top = OptInt(body, "top_logprobs");
    if (!top.ok()) return top.status();
    if (*top && !*want) return Invalid("top_logprobs", "needs logprobs: true");
    if (absl::Status st = CheckLogprobs("top_logprobs", *top); !st.ok()) return st;
    if (*want) job.logprobs = static_cast<int32_t>(top->value_or(0));
  } else {
    auto lp = OptInt(body, "logprobs");
    if (!lp.ok()) return lp.status();
    if (absl::Status st = CheckLogprobs("logprobs", *lp); !st.ok()) return st;
    if (*lp) job.logprobs = static_cast<int32_t>(**lp);
    auto echo = OptBool(body, "echo", false);
    if (!echo.ok()) return echo.status();
    job.echo = *echo;
    if (job.echo && job.logprobs >= 0) {
      return Invalid("echo", "with logprobs is not supported (no prompt log-probs)");
    }
  }

  // Prompts.
  std::vector<Prompt> prompts;
  if (chat) {
    auto p = ChatPrompt(body, ctx);
    if (!p.ok()) return p.status();
    prompts.push_back(*std::move(p));
  } else {
    auto p = CompletionPrompts(body, ctx);
    if (!p.ok()) return p.status();
    prompts = *std::move(p);
  }
  const int64_t sequences = static_cast<int64_t>(prompts.size()) * job.n;
  if (sequences > ctx.limits.max_batch_prompts) {
    return Invalid(
        chat ? "n" : "prompt",
        absl::StrCat("asks for ", sequences, " sequences (prompts x n), at most ",
                     ctx.limits.max_batch_prompts, " are allowed (--max-batch-prompts)"));
  }

  // Parameters every sequence shares.
  auto sampling = ParseSampling(body);
  if (!sampling.ok()) return sampling.status();
  sampling->logprobs = job.logprobs < 0 ? 0 : std::max(job.logprobs, 1);
  if (absl::Status st = ValidateSamplingParams(*sampling); !st.ok()) return RenameEngineFields(st);
  StoppingCriteria stopping;
  if (absl::Status st = ParseStops(body, &stopping); !st.ok()) return st;
  const char* max_name = "max_tokens";
  auto max_tokens = OptInt(body, "max_tokens");
  if (!max_tokens.ok()) return max_tokens.status();
  if (chat) {
    auto mct = OptInt(body, "max_completion_tokens");
    if (!mct.ok()) return mct.status();
    if (*mct) {
      max_tokens = *mct;
      max_name = "max_completion_tokens";
    }
  }

  for (size_t i = 0; i < prompts.size(); ++i) {
    Prompt& p = prompts[i];
    const int64_t len = static_cast<int64_t>(p.ids.size());
    const std::string prompt_param =
        chat ? "messages" : (prompts.size() > 1 ? absl::StrCat("prompt[", i, "]") : "prompt");
    auto max_new = ResolveMaxNewTokens(
        len, *max_tokens, chat ? ctx.limits.context_length : kCompletionsDefaultMaxTokens,
        ctx.limits, prompt_param, max_name);
    if (!max_new.ok()) return max_new.status();
    for (int32_t j = 0; j < job.n; ++j) {
      EngineRequest r;
      r.index = static_cast<int32_t>(job.requests.size());
      r.sample = j;
      r.request_id = absl::StrCat(ctx.id, "-", r.index);
      r.prompt = p.ids;
      r.sampling = *sampling;
      // Sample j of a seeded request draws from seed + j, so the n samples differ and each
      // is reproducible on its own.
      if (r.sampling.seed) r.sampling.seed = *r.sampling.seed + static_cast<uint64_t>(j);
      r.stopping = stopping;
      r.stopping.max_new_tokens = *max_new;
      if (absl::Status st =
              ValidateStoppingCriteria(r.stopping, static_cast<int32_t>(ctx.limits.vocab_size));
          !st.ok()) {
        return RenameEngineFields(st);
      }
      job.requests.push_back(std::move(r));
    }
    job.prompt_tokens.push_back(static_cast<int32_t>(len));
    job.prompt_texts.push_back(std::move(p.text));
  }
  return job;
}

}  // namespace ptxserve::server::http
