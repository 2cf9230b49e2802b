// A Hugging Face tokenizer.json -> tokenizer.ggml.* metadata. Only what the GGUF reader
// (gguf_vocab_read.cc) turns back into the same tokenizer is accepted; anything else is
// refused by name rather than written as a different tokenizer.
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "engine/tokenizer/gguf_vocab.h"
#include "engine/tokenizer/tokenizer.h"
#include "engine/util/status_macros.h"

namespace ptxserve::tok {
namespace {

constexpr std::string_view kMetaspace = "\xE2\x96\x81";  // U+2581

absl::StatusOr<Json> ReadJson(const std::string& path, bool optional) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    if (optional) return Json::object();
    return absl::NotFoundError(absl::StrCat(path, ": cannot open"));
  }
  std::ostringstream ss;
  ss << in.rdbuf();
  Json j = Json::parse(ss.str(), nullptr, false);
  if (j.is_discarded() || !j.is_object()) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": not a JSON object"));
  }
  return j;
}

// The vocabulary by id; ids no entry names become "[PAD<id>]" of type unused.
struct Vocab {
  std::vector<std::string> tokens;
  std::vector<int> types;
  std::vector<float> scores;
  std::vector<GgufValue> normalized_ids;  // added tokens matched in normalized text
};

absl::StatusOr<Vocab> ReadVocab(const Json& tok, const std::string& origin, bool byte_tokens) {
  const Json& model = tok.value("model", Json::object());
  const Json& vocab = model.value("vocab", Json::object());
  const Json& added = tok.value("added_tokens", Json::array());
  int64_t size = 0;
  for (const auto& [t, id] : vocab.items()) {
    if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() >= (1 << 24)) {
      return FieldError(origin, absl::StrCat("model.vocab[\"", t, "\"]"), "bad id");
    }
    size = std::max(size, id.get<int64_t>() + 1);
  }
  for (const Json& a : added) {
    const int64_t id = a.value("id", int64_t{-1});
    if (id < 0 || id >= (1 << 24)) return FieldError(origin, "added_tokens", "bad id");
    size = std::max(size, id + 1);
  }
  Vocab v;
  v.tokens.resize(size);
  v.types.assign(size, kTokenUnused);
  for (const auto& [t, id] : vocab.items()) {
    v.tokens[id.get<int64_t>()] = t;
    const bool is_byte = t.size() == 6 && t.starts_with("<0x") && t.ends_with(">");
    v.types[id.get<int64_t>()] = byte_tokens && is_byte ? kTokenByte : kTokenNormal;
  }
  for (const Json& a : added) {
    const int64_t id = a["id"].get<int64_t>();
    v.tokens[id] = a.value("content", "");
    const bool special = a.value("special", false);
    v.types[id] = special ? kTokenControl : kTokenUserDefined;
    // The reference defaults "normalized" to the opposite of "special".
    if (a.value("normalized", !special)) {
      v.normalized_ids.push_back(GgufValue::U32(static_cast<uint32_t>(id)));
    }
  }
  if (const Json* unk = Member(model, "unk_token"); unk != nullptr && unk->is_string()) {
    if (const Json* id = Member(vocab, unk->get<std::string>()); id != nullptr) {
      v.types[id->get<int64_t>()] = kTokenUnknown;
    }
  }
  for (int64_t i = 0; i < size; ++i) {
    if (v.types[i] == kTokenUnused) v.tokens[i] = absl::StrCat("[PAD", i, "]");
  }
  return v;
}

// model.merges as GGUF's "a b" strings.
absl::StatusOr<std::vector<std::string>> ReadMerges(const Json& tok, const std::string& origin) {
  const Json& merges = tok.value("model", Json::object()).value("merges", Json::array());
  std::vector<std::string> out;
  out.reserve(merges.size());
  for (size_t i = 0; i < merges.size(); ++i) {
    const Json& m = merges[i];
    std::string a, b;
    if (m.is_string()) {
      out.push_back(m.get<std::string>());
      continue;
    }
    if (!m.is_array() || m.size() != 2 || !m[0].is_string() || !m[1].is_string()) {
      return FieldError(origin, absl::StrCat("model.merges[", i, "]"), "expected a pair");
    }
    a = m[0].get<std::string>();
    b = m[1].get<std::string>();
    if (a.find(' ') != std::string::npos || b.find(' ') != std::string::npos) {
      return FieldUnimplemented(origin, absl::StrCat("model.merges[", i, "]"),
                                "a token holds a space, which GGUF's \"a b\" merges cannot");
    }
    out.push_back(absl::StrCat(a, " ", b));
  }
  return out;
}

// Score of each token: -rank of the first merge producing it, so that merges derived
// from the scores rank like the written ones; tokens no merge produces rank below all.
std::vector<float> MergeScores(const Vocab& v, const std::vector<std::string>& merges) {
  std::map<std::string, size_t> ids;
  for (size_t i = 0; i < v.tokens.size(); ++i) ids.emplace(v.tokens[i], i);
  std::vector<float> scores(v.tokens.size(), -static_cast<float>(merges.size()));
  std::vector<bool> seen(v.tokens.size(), false);
  for (size_t r = 0; r < merges.size(); ++r) {
    const size_t space = merges[r].find(' ');
    std::string merged = merges[r];
    merged.erase(space, 1);
    auto it = ids.find(merged);
    if (it == ids.end() || seen[it->second]) continue;
    seen[it->second] = true;
    scores[it->second] = -static_cast<float>(r);
  }
  return scores;
}

// "llama" when the tokenizer is the SentencePiece-style one the reader rebuilds (Prepend
// + Replace normalizer or Replace alone, no pre-tokenizer); sets *add_space_prefix.
bool IsSentencePieceStyle(const Json& tok, bool* add_space_prefix) {
  const Json* norm = Member(tok, "normalizer");
  const Json* pre = Member(tok, "pre_tokenizer");
  if (norm == nullptr || !norm->is_object() || (pre != nullptr && !pre->is_null())) return false;
  const Json prepend = {{"type", "Prepend"}, {"prepend", kMetaspace}};
  const Json replace = {
      {"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", kMetaspace}};
  const Json& steps = norm->value("normalizers", Json::array());
  if (norm->value("type", "") != "Sequence") return false;
  if (steps == Json::array({prepend, replace})) {
    *add_space_prefix = true;
    return true;
  }
  if (steps == Json::array({replace})) {
    *add_space_prefix = false;
    return true;
  }
  return false;
}

// tokenizer.ggml.pre for a byte-level tokenizer, or "" when not one the reader rebuilds.
std::string ByteLevelPre(const Json& tok) {
  const Json* pre = Member(tok, "pre_tokenizer");
  if (pre == nullptr || !pre->is_object()) return "";
  if (pre->value("type", "") == "ByteLevel" && pre->value("use_regex", true)) return "gpt2";
  const std::string dump = pre->dump();
  if (dump.find(R"(\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*)") != std::string::npos) {
    return "llama-bpe";
  }
  if (dump.find(R"(\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*)") != std::string::npos) return "qwen2";
  return "";
}

// BOS/EOS ids and whether Encode adds them, as the Hugging Face tokenizer itself says.
absl::Status AddSpecials(const std::string& dir, GgufWriter* w) {
  PTX_ASSIGN_OR_RETURN(std::unique_ptr<Tokenizer> t, Tokenizer::FromDir(dir));
  PTX_ASSIGN_OR_RETURN(const std::vector<int32_t> empty, t->Encode("", true));
  if (t->bos_id() >= 0) {
    w->Set("tokenizer.ggml.bos_token_id", GgufValue::U32(t->bos_id()));
  }
  if (t->eos_id() >= 0) {
    w->Set("tokenizer.ggml.eos_token_id", GgufValue::U32(t->eos_id()));
  }
  w->Set("tokenizer.ggml.add_bos_token",
         GgufValue::Bool(!empty.empty() && empty.front() == t->bos_id()));
  w->Set("tokenizer.ggml.add_eos_token",
         GgufValue::Bool(!empty.empty() && empty.back() == t->eos_id() && t->eos_id() >= 0));
  return absl::OkStatus();
}

}  // namespace

absl::Status AddTokenizerToGguf(const std::string& dir, GgufWriter* w) {
  const std::string origin = dir + "/tokenizer.json";
  PTX_ASSIGN_OR_RETURN(const Json tok, ReadJson(origin, false));
  PTX_ASSIGN_OR_RETURN(const Json config, ReadJson(dir + "/tokenizer_config.json", true));
  const Json& model = tok.value("model", Json::object());
  if (model.value("type", "BPE") != "BPE") {
    return FieldUnimplemented(origin, "model.type", "only BPE tokenizers can be written to GGUF");
  }
  bool add_space_prefix = false;
  const bool llama = IsSentencePieceStyle(tok, &add_space_prefix);
  const std::string pre = llama ? "" : ByteLevelPre(tok);
  if (!llama && pre.empty()) {
    return FieldUnimplemented(origin, "normalizer/pre_tokenizer",
                              "neither the Llama SentencePiece-style normalizer nor a GPT-2, "
                              "Llama 3 or Qwen2 byte-level pre-tokenizer");
  }
  PTX_ASSIGN_OR_RETURN(Vocab v,
                       ReadVocab(tok, origin, llama && model.value("byte_fallback", false)));
  PTX_ASSIGN_OR_RETURN(const std::vector<std::string> merges, ReadMerges(tok, origin));
  w->Set("tokenizer.ggml.model", GgufValue::String(llama ? "llama" : "gpt2"));
  if (!llama) w->Set("tokenizer.ggml.pre", GgufValue::String(pre));
  w->Set("tokenizer.ggml.tokens", GgufValue::StringArray(v.tokens));
  if (llama) {
    std::vector<GgufValue> scores;
    for (float s : MergeScores(v, merges)) scores.push_back(GgufValue::F32(s));
    w->Set("tokenizer.ggml.scores", GgufValue::Array(GgufType::kF32, std::move(scores)));
    w->Set("tokenizer.ggml.add_space_prefix", GgufValue::Bool(add_space_prefix));
  }
  std::vector<GgufValue> types;
  for (int t : v.types) types.push_back(GgufValue::I32(t));
  w->Set("tokenizer.ggml.token_type", GgufValue::Array(GgufType::kI32, std::move(types)));
  w->Set("tokenizer.ggml.merges", GgufValue::StringArray(merges));
  if (!v.normalized_ids.empty()) {
    w->Set(kNormalizedTokensKey, GgufValue::Array(GgufType::kU32, std::move(v.normalized_ids)));
  }
  for (size_t i = 0; i < v.types.size(); ++i) {
    if (v.types[i] == kTokenUnknown) {
      w->Set("tokenizer.ggml.unknown_token_id", GgufValue::U32(static_cast<uint32_t>(i)));
    }
  }
  PTX_RETURN_IF_ERROR(AddSpecials(dir, w));
  if (const Json* t = Member(config, "chat_template"); t != nullptr && t->is_string()) {
    w->Set("tokenizer.chat_template", GgufValue::String(t->get<std::string>()));
  }
  return absl::OkStatus();
}

}  // namespace ptxserve::tok
