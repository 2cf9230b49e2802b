#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "engine/model/gguf.h"
#include "engine/model/gguf_model.h"
#include "engine/model/hf_quant_source.h"
#include "engine/model/model.h"
#include "engine/model/safetensors.h"
#include "engine/model/weight_files.h"
#include "engine/util/log.h"
#include "engine/util/status_macros.h"

namespace ptxserve {
namespace {

// What Model::storage owns: the mappings, plus aligned copies of any tensor whose
// offset in its file is not a multiple of its element size, and the repacked weights of
// a quantized Hugging Face checkpoint.
struct ModelStorage {
  std::vector<std::unique_ptr<SafetensorsFile>> files;
  std::unique_ptr<GgufFile> gguf;
  std::vector<std::unique_ptr<uint8_t[]>> copies;
};

// One expected dimension: its size and the config.json field(s) it comes from.
struct Dim {
  int64_t size;
  const char* field;
};

class TensorMapper {
 public:
  TensorMapper(const std::string& config_path, const TensorSource& files, ModelStorage* storage)
      : config_path_(config_path), files_(files), storage_(storage) {}

  // Tensor `name` (its Hugging Face name), checked against `dims`. Errors name the file,
  // the tensor as stored and both shapes. The result is named as stored.
  absl::Status Get(const std::string& name, const std::vector<Dim>& dims, Tensor* out) {
    PTX_ASSIGN_OR_RETURN(Tensor t, files_.Get(name));
    const std::string stored = files_.StoredName(name);
    std::vector<int64_t> want;
    std::vector<std::string> fields;
    for (const Dim& d : dims) {
      want.push_back(d.size);
      fields.push_back(d.field);
    }
    if (t.shape != want) {
      return absl::InvalidArgumentError(
          absl::StrCat(files_.PathOf(name), ": tensor '", stored, "' has shape [",
                       absl::StrJoin(t.shape, ", "), "], expected [", absl::StrJoin(want, ", "),
                       "] ([", absl::StrJoin(fields, ", "), "] from ", config_path_, ")"));
    }
    // Block formats suit matrices only: a norm or bias is read element by element.
    if (t.quant != QuantType::kNone && dims.size() == 1) {
      return absl::InvalidArgumentError(absl::StrCat(
          files_.PathOf(name), ": tensor '", stored, "' is ", std::string(QuantName(t.quant)),
          "; norms and biases must be f32, f16 or bf16"));
    }
    t.data = Aligned(t);
    t.name = stored;
    *out = std::move(t);
    return absl::OkStatus();
  }

  // Says once how much was copied, so an unusual file layout is visible in the log.
  void LogCopies(const std::string& dir) const {
    if (copied_.empty()) return;
    PTX_LOG(WARNING) << dir << ": " << copied_.size()
                     << " tensors are not aligned to their element size in the file; copied "
                     << copied_bytes_ << " bytes into aligned memory";
  }

 private:
  // Backends read tensors as typed arrays; an offset that is not a multiple of the
  // element size (legal in the format, rare in practice) would make that UB, so such
  // tensors are copied once. Aliased names share the copy.
  // Quantized blocks are read as f16 scales and bytes, so 2 bytes is their alignment.
  const void* Aligned(const Tensor& t) {
    const size_t align = t.quant == QuantType::kNone ? DTypeSize(t.dtype) : 2;
    if (reinterpret_cast<uintptr_t>(t.data) % align == 0) return t.data;
    auto it = copied_.find(t.data);
    if (it != copied_.end()) return it->second;
    auto buf = std::make_unique<uint8_t[]>(t.nbytes == 0 ? 1 : t.nbytes);
    if (t.nbytes != 0) std::memcpy(buf.get(), t.data, t.nbytes);
    const void* p = buf.get();
    storage_->copies.push_back(std::move(buf));
    copied_.emplace(t.data, p);
    copied_bytes_ += t.nbytes;
    return p;
  }

  const std::string& config_path_;
  const TensorSource& files_;
  ModelStorage* storage_;
  std::map<const void*, const void*> copied_;
  size_t copied_bytes_ = 0;
};

absl::Status MapLayer(const ModelConfig& c, const TensorSource& files, int64_t i, TensorMapper& m,
                      LayerTensors* l) {
  const std::string p = absl::StrCat("model.layers.", i, ".");
  const Dim hidden{c.hidden_size, "hidden_size"};
  const Dim q{c.q_dim(), "num_attention_heads*head_dim"};
  const Dim kv{c.kv_dim(), "num_key_value_heads*head_dim"};
  const Dim inter{c.intermediate_size, "intermediate_size"};
  PTX_RETURN_IF_ERROR(m.Get(p + "input_layernorm.weight", {hidden}, &l->attn_norm));
  PTX_RETURN_IF_ERROR(m.Get(p + "self_attn.q_proj.weight", {q, hidden}, &l->wq));
  PTX_RETURN_IF_ERROR(m.Get(p + "self_attn.k_proj.weight", {kv, hidden}, &l->wk));
  PTX_RETURN_IF_ERROR(m.Get(p + "self_attn.v_proj.weight", {kv, hidden}, &l->wv));
  PTX_RETURN_IF_ERROR(m.Get(p + "self_attn.o_proj.weight", {hidden, q}, &l->wo));
  if (c.attention_bias) {
    PTX_RETURN_IF_ERROR(m.Get(p + "self_attn.q_proj.bias", {q}, &l->bq));
    PTX_RETURN_IF_ERROR(m.Get(p + "self_attn.k_proj.bias", {kv}, &l->bk));
    PTX_RETURN_IF_ERROR(m.Get(p + "self_attn.v_proj.bias", {kv}, &l->bv));
  } else if (i == 0 && files.Contains(p + "self_attn.q_proj.bias")) {
    PTX_LOG(WARNING) << files.source() << " holds q/k/v biases but config.json does not set "
                     << "attention_bias; they are ignored";
  }
  PTX_RETURN_IF_ERROR(m.Get(p + "post_attention_layernorm.weight", {hidden}, &l->mlp_norm));
  PTX_RETURN_IF_ERROR(m.Get(p + "mlp.gate_proj.weight", {inter, hidden}, &l->w_gate));
  PTX_RETURN_IF_ERROR(m.Get(p + "mlp.up_proj.weight", {inter, hidden}, &l->w_up));
  PTX_RETURN_IF_ERROR(m.Get(p + "mlp.down_proj.weight", {hidden, inter}, &l->w_down));
  return absl::OkStatus();
}

// Tied models are saved with one of the two matrices (safetensors keeps one copy of a
// shared tensor), so either name may be the stored one; the other becomes a view of it.
absl::Status MapEmbeddings(const ModelConfig& c, const TensorSource& files, TensorMapper& m,
                           ModelTensors* t) {
  const std::string kEmbed = "model.embed_tokens.weight";
  const std::string kHead = "lm_head.weight";
  const std::vector<Dim> dims = {{c.vocab_size, "vocab_size"}, {c.hidden_size, "hidden_size"}};
  const bool has_embed = files.Contains(kEmbed);
  if (!c.tie_word_embeddings) {
    PTX_RETURN_IF_ERROR(m.Get(kEmbed, dims, &t->embed));
    if (!files.Contains(kHead)) {
      return absl::NotFoundError(absl::StrCat("tensor '", kHead, "' not found in ", files.source(),
                                              " (config.json sets tie_word_embeddings false)"));
    }
    return m.Get(kHead, dims, &t->lm_head);
  }
  if (!has_embed && !files.Contains(kHead)) {
    return absl::NotFoundError(absl::StrCat("tensor '", kEmbed, "' not found in ", files.source(),
                                            " (nor '", kHead, "', which tied embeddings may use)"));
  }
  if (has_embed) {
    PTX_RETURN_IF_ERROR(m.Get(kEmbed, dims, &t->embed));
    t->lm_head = t->embed;  // tied: lm_head.weight in the file (if any) is ignored, as in HF
    t->lm_head.name = files.StoredName(kHead);
    return absl::OkStatus();
  }
  PTX_RETURN_IF_ERROR(m.Get(kHead, dims, &t->lm_head));
  t->embed = t->lm_head;
  t->embed.name = files.StoredName(kEmbed);
  return absl::OkStatus();
}

}  // namespace

std::string Model::WeightFormat() const {
  if (tensors.layers.empty()) return std::string(DTypeName(config.torch_dtype));
  const Tensor& wq = tensors.layers.front().wq;
  return std::string(wq.quant != QuantType::kNone ? QuantName(wq.quant) : DTypeName(wq.dtype));
}

void Model::ReleasePages(const Tensor& t) const {
  const auto* data = static_cast<const uint8_t*>(t.data);
  const bool in_a_file =
      std::any_of(file_mappings.begin(), file_mappings.end(), [&](const auto& m) {
        return data >= m.first && t.nbytes <= m.second &&
               data - m.first <= static_cast<ptrdiff_t>(m.second - t.nbytes);
      });
  if (data == nullptr || t.nbytes == 0 || !in_a_file) return;
  // Only the pages wholly inside the tensor: its neighbours' pages stay resident.
  const uintptr_t page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
  const uintptr_t begin = reinterpret_cast<uintptr_t>(t.data);
  const uintptr_t first = (begin + page - 1) / page * page;
  const uintptr_t last = (begin + t.nbytes) / page * page;
  // MADV_DONTNEED on a private, never-written file mapping only unmaps the pages; their
  // contents stay the file's. A failure leaves them resident, which is harmless.
  if (last > first) ::madvise(reinterpret_cast<void*>(first), last - first, MADV_DONTNEED);
}

size_t Model::WeightBytes() const {
  std::set<const void*> seen;
  size_t total = 0;
  auto add = [&](const Tensor& t) {
    if (t.present() && seen.insert(t.data).second) total += t.nbytes;
  };
  add(tensors.embed);
  add(tensors.final_norm);
  add(tensors.lm_head);
  for (const LayerTensors& l : tensors.layers) {
    for (const Tensor* t : {&l.attn_norm, &l.wq, &l.wk, &l.wv, &l.wo, &l.bq, &l.bk, &l.bv,
                            &l.mlp_norm, &l.w_gate, &l.w_up, &l.w_down}) {
      add(*t);
    }
  }
  return total;
}

namespace {

// Maps and checks every tensor of `c` from `files` (the same for both sources).
absl::Status MapTensors(const ModelConfig& c, const TensorSource& files,
                        const std::string& config_path, ModelStorage* storage, ModelTensors* t) {
  TensorMapper mapper(config_path, files, storage);
  PTX_RETURN_IF_ERROR(MapEmbeddings(c, files, mapper, t));
  PTX_RETURN_IF_ERROR(
      mapper.Get("model.norm.weight", {{c.hidden_size, "hidden_size"}}, &t->final_norm));
  // Grown layer by layer: a corrupt num_hidden_layers fails on a missing tensor, not
  // on an allocation.
  for (int64_t i = 0; i < c.num_layers; ++i) {
    PTX_RETURN_IF_ERROR(MapLayer(c, files, i, mapper, &t->layers.emplace_back()));
    if ((i + 1) % 16 == 0 && i + 1 < c.num_layers) {
      PTX_LOG(INFO) << "checked layers " << i + 1 << "/" << c.num_layers;
    }
  }
  mapper.LogCopies(files.source());
  return absl::OkStatus();
}

absl::Status LoadHfModel(const std::string& dir, Model* model, ModelStorage* storage) {
  const std::string config_path = absl::StrCat(dir, "/config.json");
  PTX_ASSIGN_OR_RETURN(std::string text, ReadTextFile(config_path));
  PTX_ASSIGN_OR_RETURN(model->config, ParseModelConfig(text, config_path));
  PTX_ASSIGN_OR_RETURN(WeightFiles files, WeightFiles::Open(dir));
  if (model->config.quantization.method != HfQuantization::Method::kNone) {
    const HfQuantSource quantized(files, model->config.quantization, &storage->copies);
    PTX_RETURN_IF_ERROR(
        MapTensors(model->config, quantized, config_path, storage, &model->tensors));
  } else {
    PTX_RETURN_IF_ERROR(MapTensors(model->config, files, config_path, storage, &model->tensors));
  }
  storage->files = files.TakeFiles();
  return absl::OkStatus();
}

absl::Status LoadGgufModel(const std::string& path, Model* model, ModelStorage* storage) {
  PTX_ASSIGN_OR_RETURN(storage->gguf, GgufFile::Open(path));
  PTX_ASSIGN_OR_RETURN(model->config, GgufModelConfig(*storage->gguf));
  const GgufTensorSource files(*storage->gguf);
  return MapTensors(model->config, files, path, storage, &model->tensors);
}

}  // namespace

absl::StatusOr<Model> LoadModel(const std::string& dir) {
  Model model;
  model.dir = dir;
  auto storage = std::make_shared<ModelStorage>();
  PTX_RETURN_IF_ERROR(IsGgufPath(dir) ? LoadGgufModel(dir, &model, storage.get())
                                      : LoadHfModel(dir, &model, storage.get()));
  for (const auto& f : storage->files)
    model.file_mappings.emplace_back(f->mapping(), f->file_size());
  if (storage->gguf != nullptr && storage->gguf->mapping() != nullptr) {
    model.file_mappings.emplace_back(storage->gguf->mapping(), storage->gguf->file_size());
  }
  model.storage = std::move(storage);
  model.storage_holds_tensors = true;
  const ModelConfig& c = model.config;
  PTX_LOG(INFO) << "loaded " << c.architecture << " from " << dir << ": " << c.num_layers
                << " layers, hidden " << c.hidden_size << ", " << c.num_heads << " heads / "
                << c.num_kv_heads << " kv heads, vocab " << c.vocab_size << ", "
                << (model.WeightBytes() >> 20) << " MiB of weights";
  if (c.sliding_window > 0) {
    PTX_LOG(WARNING) << "sliding-window attention (" << c.sliding_window
                     << " tokens): the context is capped at the window";
  }
  return model;
}

}  // namespace ptxserve
