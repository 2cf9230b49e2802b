// libFuzzer target: the files of a model directory through everything `serve` parses at
// load: config.json and the safetensors weights (LoadModel), tokenizer.json and
// tokenizer_config.json (Tokenizer::FromDir), the chat template in tokenizer_config.json
// (compiled and rendered on a fixed conversation), then encode/decode with whatever
// tokenizer loaded.
//
// Input: files separated by the line "===" ("\n===\n"), in this order:
//   0 config.json   1 tokenizer.json   2 tokenizer_config.json
//   3 the safetensors weights: raw file bytes, or, when it starts with '{', the header
//     JSON alone, which the target frames (8-byte length) and follows with zeros up to
//     the largest data_offsets end (at most kMaxDataBytes), so a small input reaches the
//     tensor checks
//   4 model.safetensors.index.json; when present and not empty the weights are written as the shard
//     kShardName instead of model.safetensors
//   5 a text to encode besides the fixed ones
//   6 a chat template file as --chat-template reads it (raw Jinja, no JSON escaping)
// Missing sections are absent files. The files go to a scratch directory (in /dev/shm
// when there is one), rewritten for every input.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "engine/chat/chat_template.h"
#include "engine/model/model.h"
#include "engine/model/safetensors.h"
#include "engine/tokenizer/tokenizer.h"
#include "engine/util/log.h"
#include "fuzz/fuzz_util.h"
#include "nlohmann/json.hpp"

namespace ptxserve::fuzz {
namespace {

constexpr std::string_view kSeparator = "\n===\n";
constexpr char kShardName[] = "model-00001-of-00001.safetensors";
constexpr uint64_t kMaxDataBytes = 4 << 20;
const char* const kFiles[] = {"config.json",
                              "tokenizer.json",
                              "tokenizer_config.json",
                              "model.safetensors",
                              "model.safetensors.index.json",
                              kShardName};

// Text every tokenizer meets: ASCII, the test model's special tokens written literally,
// multi-byte UTF-8 (2, 3 and 4 bytes), control characters and runs of spaces.
constexpr std::string_view kTexts[] = {
    "Once upon a time, there was a little dog.",
    "<|start_story|>Hi<|end_story|><unk> <s></s>",
    " caf\xc3\xa9 \xe4\xb8\x96\xe7\x95\x8c \xf0\x9f\x99\x82\n\t  x  ",
    "",
};

const std::string& ScratchDir() {
  static const std::string* dir = [] {
    SetMinLogLevel(LogLevel::kError);  // the loaders log every mapped file
    auto* d = new std::string(MakeScratchDir("ptxserve-fuzz-model"));
    std::atexit([] { std::filesystem::remove_all(ScratchDir()); });
    return d;
  }();
  return *dir;
}

std::vector<std::string_view> Split(std::string_view in) {
  std::vector<std::string_view> out;
  for (;;) {
    const size_t at = in.find(kSeparator);
    out.push_back(in.substr(0, at));
    if (at == std::string_view::npos) return out;
    in.remove_prefix(at + kSeparator.size());
  }
}

void WriteFile(const std::string& path, std::string_view bytes, uint64_t zeros = 0) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  const std::string block(64 << 10, '\0');
  while (zeros > 0) {
    const uint64_t n = std::min<uint64_t>(zeros, block.size());
    f.write(block.data(), static_cast<std::streamsize>(n));
    zeros -= n;
  }
  Check(f.good(), "writing a scratch file");
}

// Writes the weights section (see the file comment).
void WriteWeights(const std::string& path, std::string_view section) {
  if (section.empty() || section.front() != '{') return WriteFile(path, section);
  uint64_t data_bytes = 0;
  const auto header = nlohmann::json::parse(section, nullptr, /*allow_exceptions=*/false);
  if (header.is_object()) {
    for (const auto& [name, entry] : header.items()) {
      if (!entry.is_object()) continue;
      auto offsets = entry.find("data_offsets");
      if (offsets == entry.end() || !offsets->is_array() || offsets->size() != 2) continue;
      if ((*offsets)[1].is_number_unsigned()) {
        data_bytes = std::max(data_bytes, (*offsets)[1].get<uint64_t>());
      }
    }
  }
  if (data_bytes > kMaxDataBytes) data_bytes = 0;
  std::string framed(8, '\0');
  const uint64_t len = section.size();
  for (int i = 0; i < 8; ++i) framed[i] = static_cast<char>((len >> (8 * i)) & 0xff);
  framed.append(section);
  WriteFile(path, framed, data_bytes);
}

void LoadWeights(const std::string& dir, const std::string& weights_path) {
  auto model = LoadModel(dir);
  Note("LoadModel", model.status());
  if (model.ok()) model->WeightBytes();
  // The weights file alone, whatever config.json says.
  auto file = SafetensorsFile::Open(weights_path);
  Note("SafetensorsFile::Open", file.status());
  if (!file.ok()) return;
  const size_t data_bytes = (*file)->file_size() - (*file)->data_offset();
  for (const SafetensorsEntry& e : (*file)->entries()) {
    Check(e.begin <= e.end && e.end <= data_bytes, "a tensor outside the data section");
    auto t = (*file)->GetTensor(e.name);
    if (t.ok()) Check(t->nbytes == e.end - e.begin, "a tensor view of another size");
  }
}

void UseTokenizer(const Tokenizer& tok, std::string_view extra_text) {
  const int32_t vocab = tok.vocab_size();
  std::vector<std::string_view> texts(std::begin(kTexts), std::end(kTexts));
  texts.push_back(extra_text);
  for (std::string_view text : texts) {
    for (bool special : {true, false}) {
      auto ids = tok.Encode(text, special);
      if (!ids.ok()) continue;
      for (int32_t id : *ids) Check(id >= 0 && id < vocab, "Encode gave an id outside the vocab");
      tok.Decode(*ids, /*skip_special_tokens=*/true);
      tok.Decode(*ids, /*skip_special_tokens=*/false);
      IncrementalDetokenizer detok(tok, std::span<const int32_t>(*ids).first(ids->size() / 2));
      for (size_t i = ids->size() / 2; i < ids->size(); ++i) detok.Push((*ids)[i]);
      detok.Flush();
    }
  }
  // Every id (the first 512) and a few outside the vocabulary.
  std::vector<int32_t> all;
  for (int32_t id = -2; id < std::min(vocab, 512) + 2; ++id) {
    all.push_back(id);
    tok.TokenBytes(id, true);
    tok.IsSpecial(id);
    const std::string s = tok.IdToToken(id);
    if (!s.empty()) tok.TokenToId(s);
  }
  tok.Decode(all, /*skip_special_tokens=*/false);
}

// A chat template as serve compiles it at load and renders it for a request.
void UseChatTemplate(std::string_view source, const char* origin, const Tokenizer* tok) {
  auto compiled = ChatTemplate::Compile(source, origin);
  Note("ChatTemplate::Compile", compiled.status());
  if (!compiled.ok()) return;
  std::map<std::string, std::string> special;
  if (tok != nullptr && tok->bos_id() >= 0) special["bos_token"] = tok->IdToToken(tok->bos_id());
  if (tok != nullptr && tok->eos_id() >= 0) special["eos_token"] = tok->IdToToken(tok->eos_id());
  const auto messages = nlohmann::ordered_json::parse(
      R"([{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"},
          {"role": "assistant", "content": "Hello!"}, {"role": "user", "content": "A story?"}])");
  auto text = compiled->Render(ChatTemplateContext(messages, true, special));
  Note("ChatTemplate::Render", text.status());
  if (text.ok() && tok != nullptr) tok->Encode(*text, /*add_special_tokens=*/false).IgnoreError();
}

// tokenizer_config.json's chat_template (a string or a list of named ones).
void UseConfigChatTemplate(std::string_view config_text, const Tokenizer* tok) {
  const auto config = nlohmann::json::parse(config_text, nullptr, /*allow_exceptions=*/false);
  auto source = ChatTemplateFromTokenizerConfig(config);
  Note("chat_template", source.status());
  if (source.ok() && source->has_value()) UseChatTemplate(**source, "tokenizer_config.json", tok);
}

}  // namespace
}  // namespace ptxserve::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace ptxserve::fuzz;
  namespace fs = std::filesystem;
  const std::string& dir = ScratchDir();
  for (const char* name : kFiles) fs::remove(fs::path(dir) / name);
  const std::vector<std::string_view> parts =
      Split(std::string_view(reinterpret_cast<const char*>(data), size));
  auto part = [&](size_t i) { return i < parts.size() ? parts[i] : std::string_view(); };
  for (size_t i = 0; i < 3 && i < parts.size(); ++i) WriteFile(dir + "/" + kFiles[i], parts[i]);
  const bool sharded = !part(4).empty();
  if (sharded) WriteFile(dir + "/model.safetensors.index.json", parts[4]);
  const std::string weights = dir + "/" + (sharded ? kShardName : "model.safetensors");
  if (parts.size() > 3) WriteWeights(weights, parts[3]);

  LoadWeights(dir, weights);
  auto tok = ptxserve::Tokenizer::FromDir(dir);
  Note("Tokenizer::FromDir", tok.status());
  if (tok.ok()) UseTokenizer(**tok, part(5));
  const ptxserve::Tokenizer* t = tok.ok() ? tok->get() : nullptr;
  if (parts.size() > 2) UseConfigChatTemplate(parts[2], t);
  if (parts.size() > 6) UseChatTemplate(parts[6], "--chat-template", t);
  return 0;
}
