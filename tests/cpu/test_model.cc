#include "tests/cpu/test_model.h"

#include <algorithm>
#include <cmath>
#include <memory>
#include <random>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace ptxserve::testing {
namespace {

// Owns the bytes of every tensor; lives in Model::storage.
struct Storage {
  std::vector<std::vector<uint8_t>> buffers;
};

class Builder {
 public:
  Builder(const RandomModelSpec& spec, Storage* storage)
      : spec_(spec), storage_(storage), rng_(spec.seed) {}

  // A tensor of `shape` with values center + uniform(-scale, scale), in spec.dtype.
  Tensor Make(const std::string& name, std::vector<int64_t> shape, double center, double scale) {
    Tensor t;
    t.name = name;
    t.dtype = spec_.dtype;
    t.shape = std::move(shape);
    const size_t n = static_cast<size_t>(t.numel());
    std::vector<float> values(n);
    std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
    for (float& v : values) v = static_cast<float>(center + scale * dist(rng_));
    auto& buf = storage_->buffers.emplace_back(n * DTypeSize(t.dtype));
    ConvertFromFloat(t.dtype, values.data(), n, buf.data());
    t.data = buf.data();
    t.nbytes = buf.size();
    return t;
  }
  Tensor Linear(const std::string& name, int64_t out, int64_t in) {
    return Make(name, {out, in}, 0.0, std::sqrt(3.0 / static_cast<double>(in)));
  }

 private:
  const RandomModelSpec& spec_;
  Storage* storage_;
  std::mt19937_64 rng_;
};

}  // namespace

std::string RandomModelSpec::Name() const {
  std::string n =
      absl::StrCat(std::string(DTypeName(dtype)), "_h", heads, "kv", kv_heads, "hd", head_dim);
  if (attention_bias) absl::StrAppend(&n, "_bias");
  if (tied) absl::StrAppend(&n, "_tied");
  if (rope_style == RopeStyle::kInterleaved) absl::StrAppend(&n, "_interleaved");
  if (rope_scaling.type == RopeScaling::Type::kLinear) absl::StrAppend(&n, "_linear");
  if (rope_scaling.type == RopeScaling::Type::kLlama3) absl::StrAppend(&n, "_llama3");
  return n;
}

Model MakeRandomModel(const RandomModelSpec& s) {
  auto storage = std::make_shared<Storage>();
  Builder b(s, storage.get());
  Model m;
  ModelConfig& c = m.config;
  c.architecture = "LlamaForCausalLM";
  c.model_type = "llama";
  c.vocab_size = s.vocab;
  c.hidden_size = s.hidden;
  c.intermediate_size = s.intermediate;
  c.num_layers = s.layers;
  c.num_heads = s.heads;
  c.num_kv_heads = s.kv_heads;
  c.head_dim = s.head_dim;
  c.rms_norm_eps = 1e-5;
  c.rope_theta = 10000.0;
  c.rope_style = s.rope_style;
  c.rope_scaling = s.rope_scaling;
  c.tie_word_embeddings = s.tied;
  c.attention_bias = s.attention_bias;
  c.torch_dtype = s.dtype;

  const int64_t H = s.hidden, I = s.intermediate, QD = s.heads * s.head_dim;
  const int64_t KD = s.kv_heads * s.head_dim;
  ModelTensors& t = m.tensors;
  t.embed = b.Make("model.embed_tokens.weight", {s.vocab, H}, 0.0, 1.0);
  t.final_norm = b.Make("model.norm.weight", {H}, 1.0, 0.1);
  t.lm_head = s.tied ? t.embed : b.Linear("lm_head.weight", s.vocab, H);
  for (int64_t i = 0; i < s.layers; ++i) {
    const std::string p = absl::StrCat("model.layers.", i, ".");
    LayerTensors l;
    l.attn_norm = b.Make(p + "input_layernorm.weight", {H}, 1.0, 0.1);
    l.wq = b.Linear(p + "self_attn.q_proj.weight", QD, H);
    l.wk = b.Linear(p + "self_attn.k_proj.weight", KD, H);
    l.wv = b.Linear(p + "self_attn.v_proj.weight", KD, H);
    if (s.attention_bias) {
      l.bq = b.Make(p + "self_attn.q_proj.bias", {QD}, 0.0, 0.2);
      l.bk = b.Make(p + "self_attn.k_proj.bias", {KD}, 0.0, 0.2);
      l.bv = b.Make(p + "self_attn.v_proj.bias", {KD}, 0.0, 0.2);
    }
    l.wo = b.Linear(p + "self_attn.o_proj.weight", H, QD);
    l.mlp_norm = b.Make(p + "post_attention_layernorm.weight", {H}, 1.0, 0.1);
    l.w_gate = b.Linear(p + "mlp.gate_proj.weight", I, H);
    l.w_up = b.Linear(p + "mlp.up_proj.weight", I, H);
    l.w_down = b.Linear(p + "mlp.down_proj.weight", H, I);
    t.layers.push_back(std::move(l));
  }
  m.storage = storage;
  return m;
}

StepBatch MakeBatch(const std::vector<Seq*>& seqs, const std::vector<int64_t>& counts,
                    KvBlockManager* blocks, bool all_rows) {
  StepBatch b;
  b.query_start.push_back(0);
  for (size_t i = 0; i < seqs.size(); ++i) {
    Seq& s = *seqs[i];
    const int64_t n = counts[i];
    if (absl::Status st = blocks->EnsureCapacity(&s.table, s.cached + n); !st.ok()) {
      ADD_FAILURE() << st;
      return StepBatch();
    }
    b.max_blocks_per_seq = std::max<int32_t>(b.max_blocks_per_seq, s.table.size());
    for (int64_t j = 0; j < n; ++j) {
      const int64_t p = s.cached + j;
      b.token_ids.push_back(s.tokens[p]);
      b.positions.push_back(static_cast<int32_t>(p));
      b.slot_mapping.push_back(static_cast<int64_t>(s.table[p / blocks->block_size()]) *
                                   blocks->block_size() +
                               p % blocks->block_size());
      if (all_rows || j == n - 1) b.logits_rows.push_back(b.num_tokens() - 1);
    }
    s.cached += n;
    b.seq_lens.push_back(static_cast<int32_t>(s.cached));
    b.query_start.push_back(b.num_tokens());
  }
  b.max_blocks_per_seq = std::max(b.max_blocks_per_seq, 1);
  for (Seq* s : seqs) {
    for (int32_t j = 0; j < b.max_blocks_per_seq; ++j) {
      b.block_tables.push_back(j < static_cast<int32_t>(s->table.size()) ? s->table[j] : 0);
    }
  }
  return b;
}

double RelErr(const float* a, const float* b, int64_t n) {
  double diff = 0, mag = 0;
  for (int64_t i = 0; i < n; ++i) {
    diff = std::max(diff, std::abs(static_cast<double>(a[i]) - b[i]));
    mag = std::max(mag, std::abs(static_cast<double>(b[i])));
  }
  return diff / std::max(mag, 1e-30);
}

double RelErr(const float* a, const double* b, int64_t n) {
  double diff = 0, mag = 0;
  for (int64_t i = 0; i < n; ++i) {
    diff = std::max(diff, std::abs(static_cast<double>(a[i]) - b[i]));
    mag = std::max(mag, std::abs(b[i]));
  }
  return diff / std::max(mag, 1e-30);
}

int32_t ArgMax(const float* v, int64_t n) {
  return static_cast<int32_t>(std::max_element(v, v + n) - v);
}

Model ConvertTensors(const Model& m, bool vectors_too, const TensorConversion& convert) {
  auto buffers = std::make_shared<std::vector<std::vector<uint8_t>>>();
  Model out = m;
  auto rewrite = [&](Tensor& t) {
    if (!t.present()) return;
    std::vector<uint8_t>& bytes = buffers->emplace_back();
    convert(t, bytes);
    t.data = bytes.data();  // moving the vector later keeps its buffer
    t.nbytes = bytes.size();
  };
  const bool tied = m.tensors.lm_head.data == m.tensors.embed.data;
  rewrite(out.tensors.embed);
  if (tied) {
    out.tensors.lm_head = out.tensors.embed;
  } else {
    rewrite(out.tensors.lm_head);
  }
  if (vectors_too) rewrite(out.tensors.final_norm);
  for (LayerTensors& l : out.tensors.layers) {
    for (Tensor* t : {&l.wq, &l.wk, &l.wv, &l.wo, &l.w_gate, &l.w_up, &l.w_down}) rewrite(*t);
    if (!vectors_too) continue;
    for (Tensor* t : {&l.attn_norm, &l.bq, &l.bk, &l.bv, &l.mlp_norm}) rewrite(*t);
  }
  out.storage = std::make_shared<std::pair<std::shared_ptr<const void>, decltype(buffers)>>(
      m.storage, buffers);
  return out;
}

Model DequantizedModel(const Model& m) {
  return ConvertTensors(m, /*vectors_too=*/false, [](Tensor& t, std::vector<uint8_t>& b) {
    b.resize(static_cast<size_t>(t.numel()) * sizeof(float));
    auto* f = reinterpret_cast<float*>(b.data());
    if (t.quant == QuantType::kNone) {
      ConvertToFloat(t.dtype, t.data, static_cast<size_t>(t.numel()), f);
    } else {
      const int64_t row = t.shape.back(), row_bytes = QuantRowBytes(t.quant, row);
      for (int64_t r = 0; r * row < t.numel(); ++r) {
        DequantizeRow(t.quant, static_cast<const uint8_t*>(t.data) + r * row_bytes, row,
                      f + r * row);
      }
    }
    t.quant = QuantType::kNone;
    t.dtype = DType::kF32;
  });
}

}  // namespace ptxserve::testing
