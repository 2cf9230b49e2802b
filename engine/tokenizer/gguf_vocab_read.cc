// GGUF tokenizer metadata -> the tokenizer.json structure: the same BPE model, normalizer,
// pre-tokenizer and decoder types a Hugging Face export of the same tokenizer uses.
#include <algorithm>
#include <map>

#include "absl/strings/str_cat.h"
#include "engine/tokenizer/gguf_vocab.h"
#include "engine/util/log.h"
#include "engine/util/status_macros.h"

namespace ptxserve::tok {
namespace {

constexpr std::string_view kMetaspace = "\xE2\x96\x81";  // U+2581

// The byte-level pre-tokenizer regexes, by tokenizer.ggml.pre.
constexpr std::string_view kLlama3Regex =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr std::string_view kQwen2Regex =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

// What the metadata says about the vocabulary, read once.
struct GgufVocab {
  std::string kind;
  std::vector<std::string> tokens;
  std::vector<double> scores;  // empty when absent
  std::vector<int> types;      // kTokenNormal when absent
  std::vector<std::string> merges;
  bool has_merges = false;
  std::vector<bool> normalized;  // per id: an added token matched in normalized text
};

// An optional key: NotFound becomes `fallback`.
template <typename T, typename Get>
absl::StatusOr<T> Optional(Get get, T fallback) {
  auto v = get();
  if (absl::IsNotFound(v.status())) return fallback;
  if (!v.ok()) return v.status();
  return static_cast<T>(*v);
}

absl::StatusOr<GgufVocab> ReadVocab(const GgufFile& f) {
  GgufVocab v;
  PTX_ASSIGN_OR_RETURN(v.kind, f.GetString("tokenizer.ggml.model"));
  PTX_ASSIGN_OR_RETURN(v.tokens, f.GetStringArray("tokenizer.ggml.tokens"));
  const size_t n = v.tokens.size();
  if (f.Find("tokenizer.ggml.scores") != nullptr) {
    PTX_ASSIGN_OR_RETURN(v.scores, f.GetNumberArray("tokenizer.ggml.scores"));
    if (v.scores.size() != n) {
      return f.KeyError("tokenizer.ggml.scores",
                        absl::StrCat("has ", v.scores.size(), " entries for ", n, " tokens"));
    }
  }
  v.types.assign(n, kTokenNormal);
  if (f.Find("tokenizer.ggml.token_type") != nullptr) {
    PTX_ASSIGN_OR_RETURN(const std::vector<double> types,
                         f.GetNumberArray("tokenizer.ggml.token_type"));
    if (types.size() != n) {
      return f.KeyError("tokenizer.ggml.token_type",
                        absl::StrCat("has ", types.size(), " entries for ", n, " tokens"));
    }
    for (size_t i = 0; i < n; ++i) v.types[i] = static_cast<int>(types[i]);
  }
  v.normalized.assign(n, false);
  if (f.Find(kNormalizedTokensKey) != nullptr) {
    PTX_ASSIGN_OR_RETURN(const std::vector<double> ids, f.GetNumberArray(kNormalizedTokensKey));
    for (double id : ids) {
      if (id < 0 || id >= static_cast<double>(n)) {
        return f.KeyError(kNormalizedTokensKey,
                          absl::StrCat("holds id ", id, " outside the ", n, " tokens"));
      }
      v.normalized[static_cast<size_t>(id)] = true;
    }
  }
  if (f.Find("tokenizer.ggml.merges") != nullptr) {
    PTX_ASSIGN_OR_RETURN(v.merges, f.GetStringArray("tokenizer.ggml.merges"));
    v.has_merges = true;
  }
  return v;
}

// The BPE "model" object; the first of duplicate token strings keeps the string.
Json BpeModelJson(const GgufVocab& v, int64_t unk_id) {
  Json vocab = Json::object();
  for (size_t i = 0; i < v.tokens.size(); ++i) {
    if (!vocab.contains(v.tokens[i])) vocab[v.tokens[i]] = i;
  }
  Json model = {{"type", "BPE"}, {"vocab", std::move(vocab)}, {"merges", v.merges}};
  if (unk_id >= 0) model["unk_token"] = v.tokens[unk_id];
  model["fuse_unk"] = v.kind == "llama";
  model["byte_fallback"] = std::find(v.types.begin(), v.types.end(), kTokenByte) != v.types.end();
  return model;
}

// Control and unknown tokens are special; user-defined ones are added but not special.
// llama.cpp matches both in the raw text; kNormalizedTokensKey says otherwise.
Json AddedTokensJson(const GgufVocab& v) {
  Json added = Json::array();
  for (size_t i = 0; i < v.tokens.size(); ++i) {
    const int t = v.types[i];
    if (t != kTokenControl && t != kTokenUnknown && t != kTokenUserDefined) continue;
    if (v.tokens[i].empty()) continue;
    added.push_back({{"id", i},
                     {"content", v.tokens[i]},
                     {"special", t != kTokenUserDefined},
                     {"normalized", v.normalized[i]}});
  }
  return added;
}

void SetSentencePieceParts(bool add_space_prefix, Json* tok) {
  const Json replace_space = {
      {"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", kMetaspace}};
  Json normalizers = Json::array();
  if (add_space_prefix) normalizers.push_back({{"type", "Prepend"}, {"prepend", kMetaspace}});
  normalizers.push_back(replace_space);
  (*tok)["normalizer"] = {{"type", "Sequence"}, {"normalizers", std::move(normalizers)}};
  Json decoders = {{{"type", "Replace"}, {"pattern", {{"String", kMetaspace}}}, {"content", " "}},
                   {{"type", "ByteFallback"}},
                   {{"type", "Fuse"}}};
  if (add_space_prefix) {
    decoders.push_back({{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}});
  }
  (*tok)["decoder"] = {{"type", "Sequence"}, {"decoders", std::move(decoders)}};
}

absl::Status SetByteLevelParts(const GgufFile& f, Json* tok) {
  PTX_ASSIGN_OR_RETURN(
      const std::string pre,
      Optional<std::string>([&] { return f.GetString("tokenizer.ggml.pre"); }, "default"));
  Json byte_level = {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", false}};
  std::string_view regex;
  if (pre == "llama-bpe" || pre == "llama3") {
    regex = kLlama3Regex;
  } else if (pre == "qwen2") {
    regex = kQwen2Regex;
  } else if (pre != "default" && pre != "gpt2") {
    return absl::UnimplementedError(
        absl::StrCat(f.path(), ": tokenizer.ggml.pre '", pre,
                     "' is not supported (default, gpt2, llama-bpe, llama3 and qwen2 are)"));
  }
  if (regex.empty()) {
    byte_level["use_regex"] = true;
    (*tok)["pre_tokenizer"] = byte_level;
  } else {
    byte_level["use_regex"] = false;
    const Json split = {{"type", "Split"},
                        {"pattern", {{"Regex", regex}}},
                        {"behavior", "Isolated"},
                        {"invert", false}};
    (*tok)["pre_tokenizer"] = {{"type", "Sequence"}, {"pretokenizers", {split, byte_level}}};
  }
  (*tok)["decoder"] = {{"type", "ByteLevel"}};
  return absl::OkStatus();
}

// tokenizer_config.json's fields: which specials Encode adds, and the chat template.
absl::StatusOr<Json> ConfigJson(const GgufFile& f, const GgufVocab& v) {
  const bool llama = v.kind == "llama";
  Json config = Json::object();
  for (const auto& [key, name, add_default] :
       {std::tuple{"bos", "bos_token", llama}, {"eos", "eos_token", false}}) {
    const std::string id_key = absl::StrCat("tokenizer.ggml.", key, "_token_id");
    PTX_ASSIGN_OR_RETURN(const int64_t id, Optional<int64_t>([&] { return f.GetInt(id_key); }, -1));
    if (id >= static_cast<int64_t>(v.tokens.size())) {
      return f.KeyError(id_key,
                        absl::StrCat("= ", id, " is outside the ", v.tokens.size(), " tokens"));
    }
    if (id >= 0) config[name] = v.tokens[id];
    const std::string add_key = absl::StrCat("tokenizer.ggml.add_", key, "_token");
    PTX_ASSIGN_OR_RETURN(const bool add,
                         Optional<bool>([&] { return f.GetBool(add_key); }, add_default));
    config[absl::StrCat("add_", key, "_token")] = add && id >= 0;
  }
  if (f.Find("tokenizer.chat_template") != nullptr) {
    PTX_ASSIGN_OR_RETURN(std::string t, f.GetString("tokenizer.chat_template"));
    config["chat_template"] = std::move(t);
  }
  return config;
}

absl::StatusOr<int64_t> UnknownId(const GgufFile& f, const GgufVocab& v) {
  PTX_ASSIGN_OR_RETURN(
      int64_t id,
      Optional<int64_t>([&] { return f.GetInt("tokenizer.ggml.unknown_token_id"); }, -1));
  if (id >= static_cast<int64_t>(v.tokens.size())) {
    return f.KeyError("tokenizer.ggml.unknown_token_id", "is outside the vocabulary");
  }
  if (id < 0) {
    const auto it = std::find(v.types.begin(), v.types.end(), kTokenUnknown);
    if (it != v.types.end()) id = it - v.types.begin();
  }
  return id;
}

}  // namespace

absl::StatusOr<TokenizerJson> TokenizerJsonFromGguf(const GgufFile& f) {
  PTX_ASSIGN_OR_RETURN(GgufVocab v, ReadVocab(f));
  if (v.kind != "llama" && v.kind != "gpt2") {
    return absl::UnimplementedError(absl::StrCat(f.path(), ": tokenizer.ggml.model '", v.kind,
                                                 "' is not supported (llama and gpt2 are)"));
  }
  if (!v.has_merges) {
    if (v.kind == "gpt2") {
      return absl::InvalidArgumentError(
          absl::StrCat(f.path(), ": a gpt2 tokenizer needs tokenizer.ggml.merges"));
    }
    if (v.scores.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(
          f.path(), ": a llama tokenizer needs tokenizer.ggml.merges or tokenizer.ggml.scores"));
    }
    v.merges = MergesFromScores(v.tokens, v.scores, v.types);
  }
  PTX_ASSIGN_OR_RETURN(const int64_t unk_id, UnknownId(f, v));
  TokenizerJson out;
  Json& tok = out.tokenizer;
  tok = {{"model", BpeModelJson(v, unk_id)}, {"added_tokens", AddedTokensJson(v)}};
  if (v.kind == "llama") {
    PTX_ASSIGN_OR_RETURN(
        const bool prefix,
        Optional<bool>([&] { return f.GetBool("tokenizer.ggml.add_space_prefix"); }, true));
    SetSentencePieceParts(prefix, &tok);
  } else {
    PTX_RETURN_IF_ERROR(SetByteLevelParts(f, &tok));
  }
  PTX_ASSIGN_OR_RETURN(out.config, ConfigJson(f, v));
  return out;
}

std::vector<std::string> MergesFromScores(const std::vector<std::string>& tokens,
                                          const std::vector<double>& scores,
                                          const std::vector<int>& types) {
  std::map<std::string_view, size_t> ids;
  for (size_t i = 0; i < tokens.size(); ++i) ids.emplace(tokens[i], i);
  struct Ranked {
    double score;
    size_t id;
    size_t split;
  };
  std::vector<Ranked> found;
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (types[i] != kTokenNormal) continue;
    const std::string_view t = tokens[i];
    if (t.find(' ') != std::string_view::npos) continue;  // not expressible as "a b"
    for (size_t k = 1; k < t.size(); ++k) {
      if (ids.count(t.substr(0, k)) != 0 && ids.count(t.substr(k)) != 0) {
        found.push_back({scores[i], i, k});
      }
    }
  }
  std::stable_sort(found.begin(), found.end(), [](const Ranked& a, const Ranked& b) {
    return a.score != b.score ? a.score > b.score : a.id < b.id;
  });
  std::vector<std::string> merges;
  merges.reserve(found.size());
  for (const Ranked& r : found) {
    const std::string& t = tokens[r.id];
    merges.push_back(absl::StrCat(t.substr(0, r.split), " ", t.substr(r.split)));
  }
  return merges;
}

}  // namespace ptxserve::tok
