#include "tests/model/test_files.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <fstream>

#include "engine/model/dtype.h"

namespace ptxserve::test_files {

std::string F32Bytes(const std::vector<float>& v) {
  std::string s(v.size() * 4, '\0');
  if (!v.empty()) std::memcpy(s.data(), v.data(), s.size());
  return s;
}

std::string U16Bytes(const std::vector<uint16_t>& v) {
  std::string s(v.size() * 2, '\0');
  if (!v.empty()) std::memcpy(s.data(), v.data(), s.size());
  return s;
}

std::vector<float> Ramp(int64_t n, float seed) {
  std::vector<float> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[static_cast<size_t>(i)] = seed + 0.25f * static_cast<float>(i);
  return v;
}

std::string RawSafetensors(std::string_view header, std::string_view data) {
  std::string s(8, '\0');
  uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) s[static_cast<size_t>(i)] = static_cast<char>((n >> (8 * i)) & 0xff);
  s.append(header);
  s.append(data);
  return s;
}

nlohmann::json SafetensorsHeader(const std::vector<RawTensor>& tensors,
                                 const std::map<std::string, std::string>& metadata) {
  nlohmann::json h = nlohmann::json::object();
  if (!metadata.empty()) h["__metadata__"] = metadata;
  uint64_t offset = 0;
  for (const RawTensor& t : tensors) {
    nlohmann::json e = {{"dtype", t.dtype},
                        {"shape", t.shape},
                        {"data_offsets", {offset, offset + t.bytes.size()}}};
    if (!t.patch.is_null()) e.merge_patch(t.patch);
    h[t.name] = e;
    offset += t.bytes.size();
  }
  return h;
}

std::string BuildSafetensors(const std::vector<RawTensor>& tensors,
                             const std::map<std::string, std::string>& metadata, int extra_spaces) {
  std::string header = SafetensorsHeader(tensors, metadata).dump();
  while ((8 + header.size()) % 8 != 0) header.push_back(' ');
  header.append(static_cast<size_t>(extra_spaces), ' ');
  std::string data;
  for (const RawTensor& t : tensors) data += t.bytes;
  return RawSafetensors(header, data);
}

TempDir::TempDir() {
  static std::atomic<int> counter{0};
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  std::string name = info != nullptr ? std::string(info->test_suite_name()) + "." + info->name()
                                     : std::string("model_test");
  for (char& c : name) {
    if (c == '/') c = '_';
  }
  path_ = ::testing::TempDir() + "ptxserve_" + std::to_string(::getpid()) + "_" +
          std::to_string(counter++) + "_" + name;
  std::filesystem::remove_all(path_);
  std::filesystem::create_directories(path_);
}

TempDir::~TempDir() {
  std::error_code ec;
  std::filesystem::remove_all(path_, ec);
}

std::string TempDir::Write(const std::string& name, std::string_view content) const {
  std::string p = path_ + "/" + name;
  // Replacing beats truncating: ext4 flushes a truncated-and-rewritten file on close
  // (auto_da_alloc), which made the many-file tests take seconds.
  std::error_code ec;
  std::filesystem::remove(p, ec);
  std::ofstream out(p, std::ios::binary | std::ios::trunc);
  out.write(content.data(), static_cast<std::streamsize>(content.size()));
  EXPECT_TRUE(out.good()) << "cannot write " << p;
  return p;
}

TinyModel TinyModel::Make(const std::string& dtype) {
  TinyModel m;
  m.config = {{"architectures", {"LlamaForCausalLM"}},
              {"model_type", "llama"},
              {"vocab_size", 16},
              {"hidden_size", 8},
              {"intermediate_size", 12},
              {"num_hidden_layers", 2},
              {"num_attention_heads", 2},
              {"num_key_value_heads", 1},
              {"max_position_embeddings", 64},
              {"rms_norm_eps", 1e-6},
              {"rope_theta", 10000.0},
              {"tie_word_embeddings", false},
              {"bos_token_id", 1},
              {"eos_token_id", 2},
              {"hidden_act", "silu"},
              {"torch_dtype", "float32"}};
  int k = 0;
  auto add = [&](const std::string& name, std::vector<int64_t> shape) {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    // Values stay exact in f16 and bf16: |v| < 64 in steps of 0.25.
    const std::vector<float> v = Ramp(n, static_cast<float>(k++) - 10.0f);
    RawTensor t{name, dtype, std::move(shape), ""};
    if (dtype == "F32") {
      t.bytes = F32Bytes(v);
    } else {
      std::vector<uint16_t> h(v.size());
      for (size_t i = 0; i < v.size(); ++i)
        h[i] = dtype == "F16" ? FloatToHalf(v[i]) : FloatToBF16(v[i]);
      t.bytes = U16Bytes(h);
    }
    m.tensors.push_back(std::move(t));
  };
  add("model.embed_tokens.weight", {16, 8});
  for (int l = 0; l < 2; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    add(p + "input_layernorm.weight", {8});
    add(p + "self_attn.q_proj.weight", {8, 8});
    add(p + "self_attn.k_proj.weight", {4, 8});
    add(p + "self_attn.v_proj.weight", {4, 8});
    add(p + "self_attn.o_proj.weight", {8, 8});
    add(p + "post_attention_layernorm.weight", {8});
    add(p + "mlp.gate_proj.weight", {12, 8});
    add(p + "mlp.up_proj.weight", {12, 8});
    add(p + "mlp.down_proj.weight", {8, 12});
  }
  add("model.norm.weight", {8});
  add("lm_head.weight", {16, 8});
  return m;
}

RawTensor* TinyModel::Find(const std::string& name) {
  for (RawTensor& t : tensors) {
    if (t.name == name) return &t;
  }
  ADD_FAILURE() << "no tensor " << name << " in the tiny model";
  return nullptr;
}

void TinyModel::Remove(const std::string& name) {
  std::erase_if(tensors, [&](const RawTensor& t) { return t.name == name; });
}

void TinyModel::WriteTo(const TempDir& dir, int extra_spaces) const {
  dir.Write("config.json", config.dump(2));
  dir.Write("model.safetensors", BuildSafetensors(tensors, metadata, extra_spaces));
}

}  // namespace ptxserve::test_files
