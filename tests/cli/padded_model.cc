#include "tests/cli/padded_model.h"

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "engine/model/model.h"
#include "engine/model/safetensors_writer.h"
#include "nlohmann/json.hpp"

namespace ptxserve::cli_test {
namespace {

// `t` (shape [rows] or [rows, cols]) as f32 in the top-left corner of a zero tensor of
// `shape`, each value times `scale`.
absl::StatusOr<TensorToWrite> Padded(const Tensor& t, std::vector<int64_t> shape, float scale = 1) {
  if (t.quant != QuantType::kNone) {
    return absl::InvalidArgumentError(absl::StrCat("tensor '", t.name, "' is quantized"));
  }
  if (t.shape.size() != shape.size() || t.shape.size() > 2) {
    return absl::InvalidArgumentError(absl::StrCat("tensor '", t.name, "' is not 1-D or 2-D"));
  }
  const int64_t rows = t.shape[0], cols = t.shape.size() == 2 ? t.shape[1] : 1;
  const int64_t new_cols = shape.size() == 2 ? shape[1] : 1;
  if (shape[0] < rows || new_cols < cols) {
    return absl::InvalidArgumentError(absl::StrCat("tensor '", t.name, "' would shrink"));
  }
  std::vector<float> from(static_cast<size_t>(t.numel()));
  ConvertToFloat(t.dtype, t.data, from.size(), from.data());
  std::vector<float> to(static_cast<size_t>(shape[0] * new_cols), 0.0f);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) to[r * new_cols + c] = from[r * cols + c] * scale;
  }
  TensorToWrite w;
  w.name = t.name;
  w.dtype = DType::kF32;
  w.shape = std::move(shape);
  w.bytes.resize(to.size() * sizeof(float));
  std::memcpy(w.bytes.data(), to.data(), w.bytes.size());
  return w;
}

}  // namespace

absl::Status WriteZeroPaddedModel(const std::string& from, const std::string& to,
                                  const PaddedSizes& s) {
  auto model = LoadModel(from);
  if (!model.ok()) return model.status();
  const ModelConfig& c = model->config;
  if (s.hidden < c.hidden_size || s.heads < c.num_heads || s.kv_heads < c.num_kv_heads ||
      s.intermediate < c.intermediate_size) {
    return absl::InvalidArgumentError("padding cannot shrink a model");
  }
  if (s.kv_heads <= 0 || s.heads % s.kv_heads != 0 ||
      s.heads / s.kv_heads != c.num_heads / c.num_kv_heads) {
    return absl::InvalidArgumentError(absl::StrCat("padded heads must keep the group size ",
                                                   c.num_heads / c.num_kv_heads,
                                                   " (query head h reads kv head h / group)"));
  }
  const int64_t V = c.vocab_size, H = s.hidden, I = s.intermediate;
  const int64_t QD = s.heads * c.head_dim, KD = s.kv_heads * c.head_dim;
  const float norm_scale = static_cast<float>(
      std::sqrt(static_cast<double>(c.hidden_size) / static_cast<double>(s.hidden)));
  const ModelTensors& mt = model->tensors;
  std::vector<std::pair<const Tensor*, std::vector<int64_t>>> matrices = {{&mt.embed, {V, H}}};
  if (!c.tie_word_embeddings) matrices.push_back({&mt.lm_head, {V, H}});
  std::vector<const Tensor*> norms = {&mt.final_norm};
  for (const LayerTensors& l : mt.layers) {
    norms.push_back(&l.attn_norm);
    norms.push_back(&l.mlp_norm);
    for (auto m : {std::pair{&l.wq, std::vector<int64_t>{QD, H}},
                   {&l.wk, {KD, H}},
                   {&l.wv, {KD, H}},
                   {&l.wo, {H, QD}},
                   {&l.bq, {QD}},
                   {&l.bk, {KD}},
                   {&l.bv, {KD}},
                   {&l.w_gate, {I, H}},
                   {&l.w_up, {I, H}},
                   {&l.w_down, {H, I}}}) {
      if (m.first->present()) matrices.push_back(m);
    }
  }
  std::vector<TensorToWrite> tensors;
  for (const auto& [t, shape] : matrices) {
    auto w = Padded(*t, shape);
    if (!w.ok()) return w.status();
    tensors.push_back(std::move(*w));
  }
  for (const Tensor* t : norms) {
    auto w = Padded(*t, {H}, norm_scale);
    if (!w.ok()) return w.status();
    tensors.push_back(std::move(*w));
  }
  std::error_code ec;
  std::filesystem::create_directories(to, ec);
  if (ec) return absl::InternalError(absl::StrCat(to, ": ", ec.message()));
  if (absl::Status st = WriteSafetensors(to + "/model.safetensors", tensors, {{"format", "pt"}});
      !st.ok()) {
    return st;
  }
  std::ifstream in(from + "/config.json");
  nlohmann::json config = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (config.is_discarded()) return absl::InvalidArgumentError(from + "/config.json: not JSON");
  config["hidden_size"] = H;
  config["num_attention_heads"] = s.heads;
  config["num_key_value_heads"] = s.kv_heads;
  config["intermediate_size"] = I;
  config["head_dim"] = c.head_dim;
  config["rms_norm_eps"] =
      c.rms_norm_eps * static_cast<double>(c.hidden_size) / static_cast<double>(s.hidden);
  std::ofstream(to + "/config.json") << config.dump(2);
  for (const auto& entry : std::filesystem::directory_iterator(from)) {
    const std::string name = entry.path().filename().string();
    if (!entry.is_regular_file() || name == "config.json" || name.ends_with(".safetensors")) {
      continue;
    }
    std::filesystem::copy_file(entry.path(), to + "/" + name,
                               std::filesystem::copy_options::overwrite_existing, ec);
    if (ec) return absl::InternalError(absl::StrCat(name, ": ", ec.message()));
  }
  return absl::OkStatus();
}

}  // namespace ptxserve::cli_test
