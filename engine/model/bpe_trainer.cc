#include "engine/model/bpe_trainer.h"

#include <algorithm>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace ptxserve {
namespace {

constexpr std::string_view kSpace = "\xE2\x96\x81";  // "▁" U+2581, SentencePiece's space

size_t Utf8CharLen(unsigned char lead) {
  if (lead < 0x80) return 1;
  if ((lead >> 5) == 0x6) return 2;
  if ((lead >> 4) == 0xE) return 3;
  if ((lead >> 3) == 0x1E) return 4;
  return 1;  // stray continuation or invalid lead byte: one byte, never merged
}

// The added (special) tokens, shared by tokenizer.json and tokenizer_config.json.
// "normalized": true as in the shared TinyStories tokenizer, so one loader path serves both.
nlohmann::ordered_json AddedToken(int id, std::string_view content, bool with_id) {
  nlohmann::ordered_json t;
  if (with_id) t["id"] = id;
  t["content"] = content;
  t["single_word"] = false;
  t["lstrip"] = false;
  t["rstrip"] = false;
  t["normalized"] = true;
  t["special"] = true;
  return t;
}

constexpr const char* kSpecials[] = {"<unk>", "<s>", "</s>"};

}  // namespace

BpeTrainResult TrainBpe(const std::vector<std::vector<std::string>>& words, size_t max_new_tokens) {
  BpeTrainResult result;
  std::vector<std::string> symbols;
  std::map<std::string, int> symbol_ids;
  auto intern = [&](const std::string& s) {
    auto [it, inserted] = symbol_ids.emplace(s, static_cast<int>(symbols.size()));
    if (inserted) symbols.push_back(s);
    return it->second;
  };
  // Identical words are merged identically, so train on (word, count) pairs.
  std::map<std::vector<int>, int64_t> counted;
  for (const auto& w : words) {
    std::vector<int> ids;
    for (const std::string& s : w) ids.push_back(intern(s));
    if (ids.size() > 1) ++counted[ids];
  }
  std::vector<std::pair<std::vector<int>, int64_t>> corpus(counted.begin(), counted.end());

  while (result.new_tokens.size() < max_new_tokens) {
    std::map<std::pair<int, int>, int64_t> pairs;
    for (const auto& [w, count] : corpus) {
      for (size_t i = 0; i + 1 < w.size(); ++i) pairs[{w[i], w[i + 1]}] += count;
    }
    if (pairs.empty()) break;
    auto best = pairs.begin();
    for (auto it = pairs.begin(); it != pairs.end(); ++it) {
      if (it->second != best->second) {
        if (it->second > best->second) best = it;
        continue;
      }
      // Break ties on the strings, not on interning order, so the choice is self-evident.
      const auto& [a, b] = it->first;
      const auto& [ba, bb] = best->first;
      if (std::tie(symbols[a], symbols[b]) < std::tie(symbols[ba], symbols[bb])) best = it;
    }
    const auto [left, right] = best->first;
    const std::string merged = symbols[left] + symbols[right];
    const size_t before = symbols.size();
    const int merged_id = intern(merged);
    if (symbols.size() > before) result.new_tokens.push_back(merged);
    result.merges.emplace_back(symbols[left], symbols[right]);
    for (auto& [w, count] : corpus) {
      std::vector<int> out;
      out.reserve(w.size());
      for (size_t i = 0; i < w.size(); ++i) {
        if (i + 1 < w.size() && w[i] == left && w[i + 1] == right) {
          out.push_back(merged_id);
          ++i;
        } else {
          out.push_back(w[i]);
        }
      }
      w = std::move(out);
    }
  }
  return result;
}

std::vector<std::string> LlamaBaseVocab() {
  std::vector<std::string> vocab(std::begin(kSpecials), std::end(kSpecials));
  for (int b = 0; b < 256; ++b) vocab.push_back(absl::StrFormat("<0x%02X>", b));
  vocab.emplace_back(kSpace);
  for (char c = '!'; c <= '~'; ++c) vocab.emplace_back(1, c);
  return vocab;
}

std::vector<std::vector<std::string>> SplitLlamaWords(std::string_view text,
                                                      const std::vector<std::string>& alphabet) {
  const std::set<std::string, std::less<>> allowed(alphabet.begin(), alphabet.end());
  std::string normalized(kSpace);
  for (char c : text) {
    if (c == ' ') {
      normalized.append(kSpace);
    } else {
      normalized.push_back(c);
    }
  }
  std::vector<std::vector<std::string>> words;
  std::vector<std::string> word;
  auto finish = [&] {
    if (!word.empty()) words.push_back(std::move(word));
    word.clear();
  };
  for (size_t i = 0; i < normalized.size();) {
    const size_t n =
        std::min(Utf8CharLen(static_cast<unsigned char>(normalized[i])), normalized.size() - i);
    const std::string_view ch(normalized.data() + i, n);
    i += n;
    if (ch == kSpace) finish();
    if (allowed.find(ch) == allowed.end()) {
      finish();
      continue;
    }
    word.emplace_back(ch);
  }
  finish();
  return words;
}

absl::StatusOr<std::string> LlamaTokenizerJson(std::string_view corpus, int64_t vocab_size) {
  std::vector<std::string> vocab = LlamaBaseVocab();
  if (vocab_size < static_cast<int64_t>(vocab.size())) {
    return absl::InvalidArgumentError(absl::StrCat("vocab_size ", vocab_size,
                                                   " is below the Llama base vocabulary of ",
                                                   vocab.size(), " tokens"));
  }
  // Train on "▁" and the printable characters except '<': then no merged token contains
  // '<', so none can collide with <unk>, <s>, <0xNN> or <extra_N>, and the padding stays
  // unreachable from any text.
  std::vector<std::string> alphabet;
  for (const std::string& t : vocab) {
    if (t.size() == 1 ? t != "<" : t == kSpace) alphabet.push_back(t);
  }
  const BpeTrainResult trained =
      TrainBpe(SplitLlamaWords(corpus, alphabet), static_cast<size_t>(vocab_size) - vocab.size());
  vocab.insert(vocab.end(), trained.new_tokens.begin(), trained.new_tokens.end());
  for (int64_t i = 0; static_cast<int64_t>(vocab.size()) < vocab_size; ++i) {
    vocab.push_back(absl::StrCat("<extra_", i, ">"));
  }

  nlohmann::ordered_json tok;
  tok["version"] = "1.0";
  tok["truncation"] = nullptr;
  tok["padding"] = nullptr;
  tok["added_tokens"] = nlohmann::ordered_json::array();
  for (int id = 0; id < 3; ++id) tok["added_tokens"].push_back(AddedToken(id, kSpecials[id], true));
  tok["normalizer"] = {
      {"type", "Sequence"},
      {"normalizers",
       {{{"type", "Prepend"}, {"prepend", kSpace}},
        {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", kSpace}}}}};
  tok["pre_tokenizer"] = nullptr;
  auto special = [](const char* id, int type_id) {
    return nlohmann::ordered_json{{"SpecialToken", {{"id", id}, {"type_id", type_id}}}};
  };
  auto sequence = [](const char* id, int type_id) {
    return nlohmann::ordered_json{{"Sequence", {{"id", id}, {"type_id", type_id}}}};
  };
  tok["post_processor"] = {
      {"type", "TemplateProcessing"},
      {"single", {special("<s>", 0), sequence("A", 0)}},
      {"pair", {special("<s>", 0), sequence("A", 0), special("<s>", 1), sequence("B", 1)}},
      {"special_tokens", {{"<s>", {{"id", "<s>"}, {"ids", {1}}, {"tokens", {"<s>"}}}}}}};
  tok["decoder"] = {{"type", "Sequence"},
                    {"decoders",
                     {{{"type", "Replace"}, {"pattern", {{"String", kSpace}}}, {"content", " "}},
                      {{"type", "ByteFallback"}},
                      {{"type", "Fuse"}},
                      {{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}}}}};
  nlohmann::ordered_json model;
  model["type"] = "BPE";
  model["dropout"] = nullptr;
  model["unk_token"] = "<unk>";
  model["continuing_subword_prefix"] = nullptr;
  model["end_of_word_suffix"] = nullptr;
  model["fuse_unk"] = true;
  model["byte_fallback"] = true;
  model["ignore_merges"] = false;
  // ordered_json's operator[] searches linearly; append to the underlying vector instead
  // (the tokens are distinct by construction), or 128K-entry vocabularies take minutes.
  nlohmann::ordered_json::object_t vocab_object;
  auto& entries = static_cast<nlohmann::ordered_json::object_t::Container&>(vocab_object);
  entries.reserve(vocab.size());
  for (size_t id = 0; id < vocab.size(); ++id) entries.emplace_back(vocab[id], id);
  model["vocab"] = std::move(vocab_object);
  model["merges"] = nlohmann::ordered_json::array();
  for (const auto& [a, b] : trained.merges) model["merges"].push_back(absl::StrCat(a, " ", b));
  tok["model"] = std::move(model);
  return tok.dump(2);
}

std::string LlamaTokenizerConfigJson(int64_t model_max_length) {
  nlohmann::ordered_json cfg;
  cfg["add_bos_token"] = true;
  cfg["add_eos_token"] = false;
  cfg["added_tokens_decoder"] = nlohmann::ordered_json::object();
  for (int id = 0; id < 3; ++id) {
    cfg["added_tokens_decoder"][std::to_string(id)] = AddedToken(id, kSpecials[id], false);
  }
  cfg["bos_token"] = "<s>";
  cfg["clean_up_tokenization_spaces"] = false;
  cfg["eos_token"] = "</s>";
  cfg["legacy"] = false;
  cfg["model_max_length"] = model_max_length;
  cfg["pad_token"] = nullptr;
  cfg["sp_model_kwargs"] = nlohmann::ordered_json::object();
  cfg["tokenizer_class"] = "LlamaTokenizer";
  cfg["unk_token"] = "<unk>";
  cfg["use_default_system_prompt"] = false;
  return cfg.dump(2);
}

std::string LlamaSpecialTokensMapJson() {
  nlohmann::ordered_json map;
  for (const auto& [key, content] : {std::pair{"bos_token", "<s>"}, std::pair{"eos_token", "</s>"},
                                     std::pair{"unk_token", "<unk>"}}) {
    map[key] = {{"content", content},
                {"lstrip", false},
                {"normalized", true},
                {"rstrip", false},
                {"single_word", false}};
  }
  return map.dump(2);
}

}  // namespace ptxserve
