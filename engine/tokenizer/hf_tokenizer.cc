// Encoding mirrors the Hugging Face pipeline: split out added tokens that match the raw
// text, normalize each remaining piece, split out added tokens that match the normalized
// text, pre-tokenize into words, run BPE per word, then add the template's specials.
#include "engine/tokenizer/hf_tokenizer.h"

#include <fstream>
#include <sstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "engine/model/gguf.h"
#include "engine/tokenizer/gguf_vocab.h"
#include "engine/tokenizer/utf8.h"
#include "engine/util/log.h"

namespace ptxserve {
namespace tok {

absl::StatusOr<std::unique_ptr<HfTokenizer>> HfTokenizer::Create(const Json& tok,
                                                                 const Json* config,
                                                                 const std::string& tok_origin,
                                                                 const std::string& config_origin) {
  if (!tok.is_object()) return FieldError(tok_origin, "(top level)", "expected a JSON object");
  const Json* model_json = Member(tok, "model");
  auto model = BpeModel::FromJson(model_json != nullptr ? *model_json : Json(), tok_origin);
  if (!model.ok()) return model.status();
  auto normalizer = Normalizer::FromJson(Member(tok, "normalizer"), tok_origin);
  if (!normalizer.ok()) return normalizer.status();
  auto pre = PreTokenizer::FromJson(Member(tok, "pre_tokenizer"), tok_origin);
  if (!pre.ok()) return pre.status();
  auto decoder = TokenDecoder::FromJson(Member(tok, "decoder"), tok_origin);
  if (!decoder.ok()) return decoder.status();
  std::unique_ptr<HfTokenizer> t(new HfTokenizer(*std::move(model), *std::move(normalizer),
                                                 *std::move(pre), *std::move(decoder)));
  if (auto s = t->LoadAddedTokens(tok, config, tok_origin, config_origin); !s.ok()) return s;

  const bool sentencepiece_kind = t->normalizer_.PrependsMetaspace() || t->pre_.metaspace();
  auto specials = ResolveSpecialTokens(
      Member(tok, "post_processor"), config, sentencepiece_kind,
      [&](std::string_view s) { return t->TokenToId(s); }, tok_origin, config_origin);
  if (!specials.ok()) return specials.status();
  t->specials_ = *std::move(specials);
  for (const auto* list : {&t->specials_.prefix, &t->specials_.suffix}) {
    for (const int32_t id : *list) {
      if (id < 0 || id >= t->vocab_size()) {
        return FieldError(tok_origin, "post_processor",
                          absl::StrCat("special token id ", id, " is outside the vocabulary"));
      }
    }
  }

  const int32_t n = t->vocab_size();
  for (int32_t id = 0; id < n; ++id) {
    t->token_bytes_[id] = t->decoder_.TokenBytes(t->IdToToken(id));
  }
  return t;
}

absl::Status HfTokenizer::LoadAddedTokens(const Json& tok, const Json* config,
                                          const std::string& tok_origin,
                                          const std::string& config_origin) {
  std::vector<AddedToken> added;
  auto parse = [&](const Json& entry, const std::string& origin, const std::string& path,
                   std::optional<int64_t> id_from_key) -> absl::Status {
    if (!entry.is_object()) return FieldError(origin, path, "expected an object");
    AddedToken a;
    auto id = OptInt(entry, "id", origin, path);
    if (!id.ok()) return id.status();
    const std::optional<int64_t> the_id = id->has_value() ? *id : id_from_key;
    if (!the_id.has_value() || *the_id < 0 || *the_id >= (int64_t{1} << 24)) {
      return FieldError(origin, path + ".id", "missing or out of range");
    }
    a.id = static_cast<int32_t>(*the_id);
    auto content = ReqString(entry, "content", origin, path);
    if (!content.ok()) return content.status();
    if (content->empty()) return FieldError(origin, path + ".content", "is empty");
    a.content = *content;
    for (auto [key, dst] : {std::pair{"special", &a.special},
                            {"lstrip", &a.lstrip},
                            {"rstrip", &a.rstrip},
                            {"single_word", &a.single_word},
                            {"normalized", &a.normalized}}) {
      auto v = OptBool(entry, key, origin, path);
      if (!v.ok()) return v.status();
      // The reference defaults "normalized" to the opposite of "special".
      *dst = v->value_or(std::string_view(key) == "normalized" ? !a.special : false);
    }
    added.push_back(std::move(a));
    return absl::OkStatus();
  };
  if (const Json* list = Member(tok, "added_tokens"); list != nullptr) {
    if (!list->is_array()) return FieldError(tok_origin, "added_tokens", "expected an array");
    for (size_t i = 0; i < list->size(); ++i) {
      if (auto s =
              parse((*list)[i], tok_origin, absl::StrCat("added_tokens[", i, "]"), std::nullopt);
          !s.ok()) {
        return s;
      }
    }
  }
  // tokenizer_config.json may declare tokens the tokenizer.json lacks.
  if (const Json* decl = config == nullptr ? nullptr : Member(*config, "added_tokens_decoder");
      decl != nullptr && decl->is_object()) {
    for (const auto& [key, entry] : decl->items()) {
      int64_t id = -1;
      if (!absl::SimpleAtoi(key, &id)) {
        return FieldError(config_origin, absl::StrCat("added_tokens_decoder[\"", key, "\"]"),
                          "key is not a token id");
      }
      bool known = false;
      for (const AddedToken& a : added) known = known || a.id == id;
      if (known) continue;
      if (auto s =
              parse(entry, config_origin, absl::StrCat("added_tokens_decoder[\"", key, "\"]"), id);
          !s.ok()) {
        return s;
      }
    }
  }

  int32_t size = model_.size();
  for (const AddedToken& a : added) size = std::max(size, a.id + 1);
  token_bytes_.assign(size, "");
  special_.assign(size, 0);
  for (const AddedToken& a : added) {
    if (const int32_t model_id = model_.TokenToId(a.content); model_id >= 0 && model_id != a.id) {
      PTX_LOG(WARNING) << tok_origin << ": added token \"" << a.content << "\" has id " << a.id
                       << " but model.vocab gives it " << model_id << "; using " << a.id;
    }
    added_ids_[a.content] = a.id;
    added_tokens_[a.id] = a.content;
    special_[a.id] = a.special ? 1 : 0;
    if (!a.normalized || normalizer_.empty()) {
      raw_matcher_.Add(a.content, a);
      continue;
    }
    // A normalized token is looked for in normalized text, so in its normalized form.
    std::string pattern = a.content;
    if (!normalizer_.Apply(&pattern, 0).ok()) pattern = a.content;
    normalized_matcher_.Add(pattern, a);
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<int32_t>> HfTokenizer::Encode(std::string_view text,
                                                         bool add_special_tokens) const {
  int64_t bad = -1;
  if (const size_t ok = Utf8ValidPrefix(text, &bad); ok != text.size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        bad >= 0 ? "invalid UTF-8 at byte offset " : "truncated UTF-8 sequence at byte offset ", ok,
        " of ", text.size()));
  }
  std::vector<int32_t> ids;
  ids.reserve(text.size() / 3 + 4);
  if (add_special_tokens) ids = specials_.prefix;
  std::vector<AddedTokenMatcher::Piece> pieces;
  if (raw_matcher_.empty()) {
    pieces.push_back({0, text.size(), -1});
  } else {
    raw_matcher_.Split(text, &pieces);
  }
  for (const auto& p : pieces) {
    if (p.id >= 0) {
      ids.push_back(p.id);
    } else if (auto s = EncodeSegment(text.substr(p.begin, p.end - p.begin), p.begin, &ids);
               !s.ok()) {
      return s;
    }
  }
  if (add_special_tokens) ids.insert(ids.end(), specials_.suffix.begin(), specials_.suffix.end());
  return ids;
}

absl::Status HfTokenizer::EncodeSegment(std::string_view text, size_t offset,
                                        std::vector<int32_t>* ids) const {
  std::string normalized(text);
  if (auto s = normalizer_.Apply(&normalized, offset); !s.ok()) return s;
  std::vector<AddedTokenMatcher::Piece> pieces;
  if (normalized_matcher_.empty()) {
    pieces.push_back({0, normalized.size(), -1});
  } else {
    normalized_matcher_.Split(normalized, &pieces);
  }
  std::vector<std::string> words;
  for (const auto& p : pieces) {
    if (p.id >= 0) {
      ids->push_back(p.id);
      continue;
    }
    words.clear();
    const std::string_view piece = std::string_view(normalized).substr(p.begin, p.end - p.begin);
    if (auto s = pre_.Split(piece, offset == 0 && p.begin == 0, &words); !s.ok()) return s;
    for (const std::string& w : words) {
      if (auto s = model_.EncodeWord(w, offset, ids); !s.ok()) return s;
    }
  }
  return absl::OkStatus();
}

std::string HfTokenizer::Decode(std::span<const int32_t> ids, bool skip_special_tokens) const {
  std::string bytes;
  for (const int32_t id : ids) {
    if (id < 0 || id >= vocab_size() || (skip_special_tokens && special_[id])) continue;
    bytes += token_bytes_[id];
  }
  std::string_view view = bytes;
  if (StripsLeadingSpace() && view.starts_with(' ')) view.remove_prefix(1);
  std::string out;
  out.reserve(view.size());
  AppendRepairedUtf8(view, &out);
  return out;
}

std::string HfTokenizer::TokenBytes(int32_t id, bool skip_special_tokens) const {
  if (id < 0 || id >= vocab_size() || (skip_special_tokens && special_[id])) return {};
  return token_bytes_[id];
}

std::string HfTokenizer::IdToToken(int32_t id) const {
  if (auto it = added_tokens_.find(id); it != added_tokens_.end()) return it->second;
  if (id < 0 || id >= model_.size()) return {};
  return model_.IdToToken(id);
}

int32_t HfTokenizer::TokenToId(std::string_view token) const {
  if (auto it = added_ids_.find(Sv(token)); it != added_ids_.end()) return it->second;
  return model_.TokenToId(token);
}

}  // namespace tok

namespace {

absl::StatusOr<tok::Json> ParseJson(std::string_view text, const std::string& origin) {
  try {
    return tok::Json::parse(text.begin(), text.end());
  } catch (const tok::Json::exception& e) {
    // nlohmann's message carries the line/column or byte position of the error.
    return absl::InvalidArgumentError(absl::StrCat(origin, ": not valid JSON: ", e.what()));
  }
}

absl::StatusOr<std::string> ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat(path, ": cannot open"));
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) return absl::DataLossError(absl::StrCat(path, ": read failed"));
  return ss.str();
}

}  // namespace

absl::StatusOr<std::unique_ptr<Tokenizer>> Tokenizer::FromJson(std::string_view tokenizer_json,
                                                               std::string_view config_json,
                                                               const std::string& origin) {
  const std::string tok_origin = absl::StrCat(origin, "/tokenizer.json");
  const std::string config_origin = absl::StrCat(origin, "/tokenizer_config.json");
  auto tok_json = ParseJson(tokenizer_json, tok_origin);
  if (!tok_json.ok()) return tok_json.status();
  std::optional<tok::Json> config;
  if (!config_json.empty()) {
    auto c = ParseJson(config_json, config_origin);
    if (!c.ok()) return c.status();
    if (!c->is_object()) return tok::FieldError(config_origin, "(top level)", "expected an object");
    config = *std::move(c);
  }
  auto t =
      tok::HfTokenizer::Create(*tok_json, config ? &*config : nullptr, tok_origin, config_origin);
  if (!t.ok()) return t.status();
  return std::unique_ptr<Tokenizer>(*std::move(t));
}

absl::StatusOr<std::unique_ptr<Tokenizer>> Tokenizer::FromDir(const std::string& dir) {
  auto tok = ReadFile(dir + "/tokenizer.json");
  if (!tok.ok()) return tok.status();
  std::string config;
  if (std::ifstream probe(dir + "/tokenizer_config.json"); probe) {
    auto c = ReadFile(dir + "/tokenizer_config.json");
    if (!c.ok()) return c.status();
    config = *std::move(c);
  }
  return FromJson(*tok, config, dir);
}

absl::StatusOr<std::unique_ptr<Tokenizer>> Tokenizer::FromModelPath(const std::string& path) {
  if (!IsGgufPath(path)) return FromDir(path);
  auto file = GgufFile::Open(path);
  if (!file.ok()) return file.status();
  auto json = tok::TokenizerJsonFromGguf(**file);
  if (!json.ok()) return json.status();
  auto t = tok::HfTokenizer::Create(json->tokenizer, &json->config,
                                    absl::StrCat(path, " (tokenizer.ggml.*)"), path);
  if (!t.ok()) return t.status();
  return std::unique_ptr<Tokenizer>(*std::move(t));
}

}  // namespace ptxserve
