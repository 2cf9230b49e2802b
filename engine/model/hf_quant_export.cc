// The checkpoint is built in memory tensor by tensor (bytes of the quantized size), then
// written by the safetensors writer; config.json is the source's with one field added,
// so everything else a user set there survives.
#include "engine/model/hf_quant_export.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <vector>

#include "absl/strings/str_cat.h"
#include "engine/model/dtype.h"
#include "engine/model/gguf.h"
#include "engine/model/hf_quant_calibration.h"
#include "engine/model/hf_quant_layout.h"
#include "engine/model/json_util.h"
#include "engine/model/quant.h"
#include "engine/model/safetensors_writer.h"
#include "engine/model/weight_files.h"
#include "engine/util/status_macros.h"

namespace ptxserve {
namespace {

constexpr const char* kCopiedFiles[] = {"tokenizer.json", "tokenizer_config.json",
                                        "special_tokens_map.json", "generation_config.json",
                                        "tokenizer.model"};

std::vector<float> ToFloat(const Tensor& t) {
  std::vector<float> v(static_cast<size_t>(t.numel()));
  ConvertToFloat(t.dtype, t.data, v.size(), v.data());
  return v;
}

TensorToWrite Raw(std::string name, std::string dtype, size_t element_size,
                  std::vector<int64_t> shape, const void* data) {
  TensorToWrite w;
  w.name = std::move(name);
  w.raw_dtype = std::move(dtype);
  w.raw_element_size = element_size;
  w.shape = std::move(shape);
  w.bytes.resize(w.nbytes());
  std::memcpy(w.bytes.data(), data, w.bytes.size());
  return w;
}

TensorToWrite AsStored(const Tensor& t) {
  TensorToWrite w;
  w.name = t.name;
  w.dtype = t.dtype;
  w.shape = t.shape;
  const auto* p = static_cast<const uint8_t*>(t.data);
  w.bytes.assign(p, p + w.nbytes());
  return w;
}

absl::Status AddFp8(const Tensor& t, std::vector<TensorToWrite>* out) {
  const int block = LayoutOf(QuantType::kFp8E4M3).block_elems;
  if (t.shape[1] % block != 0) {
    return absl::InvalidArgumentError(absl::StrCat("tensor ", t.name, " of shape [", t.shape[0],
                                                   ", ", t.shape[1],
                                                   "]: fp8 rows must be a "
                                                   "multiple of ",
                                                   block, " elements"));
  }
  const std::vector<float> x = ToFloat(t);
  float amax = 0;
  for (float v : x) amax = std::max(amax, std::fabs(v));
  const float scale = amax > 0 ? amax / 448 : 1.0f;
  std::vector<uint8_t> codes(x.size());
  for (size_t i = 0; i < x.size(); ++i) codes[i] = FloatToE4M3(x[i] / scale);
  out->push_back(Raw(t.name, "F8_E4M3", 1, t.shape, codes.data()));
  out->push_back(Raw(t.name + "_scale", "F32", 4, {}, &scale));
  return absl::OkStatus();
}

// A tensor whose values calibration changed (a folded norm), in its stored dtype.
TensorToWrite Folded(const Tensor& t, const std::vector<float>& values) {
  TensorToWrite w;
  w.name = t.name;
  w.dtype = t.dtype;
  w.shape = t.shape;
  w.bytes.resize(w.nbytes());
  ConvertFromFloat(t.dtype, values.data(), values.size(), w.bytes.data());
  return w;
}

// `given`: calibrated int4_g128 rows of t, or null for round-to-nearest.
absl::Status AddInt4(const Tensor& t, Int4Packing packing, const std::vector<uint8_t>* given,
                     std::vector<TensorToWrite>* out) {
  const int64_t rows = t.shape[0], in = t.shape[1];
  if (in % 128 != 0 || rows % 8 != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("tensor ", t.name, " of shape [", rows, ", ", in,
                     "]: 4-bit groups need inputs a multiple of 128 and outputs a multiple of 8"));
  }
  std::vector<uint8_t> blocks;
  if (given == nullptr) {
    const std::vector<float> x = ToFloat(t);
    if (absl::Status s = QuantizeInt4Rows(x.data(), rows, in, &blocks, nullptr); !s.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("tensor ", t.name, " ", s.message()));
    }
  } else if (const int64_t size = rows * QuantRowBytes(QuantType::kInt4G128, in);
             static_cast<int64_t>(given->size()) != size) {
    return absl::InvalidArgumentError(absl::StrCat("tensor ", t.name, ": calibrated blocks of ",
                                                   given->size(), " bytes, expected ", size));
  } else {
    blocks = *given;
  }
  const PackedInt4 p = BlocksToInt4(packing, blocks.data(), in, rows, /*zero_minus_one=*/true);
  const std::string prefix = t.name.substr(0, t.name.size() - 7);  // ".weight"
  out->push_back(
      Raw(prefix + ".qweight", "I32", 4, QweightShape(packing, in, rows), p.qweight.data()));
  out->push_back(Raw(prefix + ".qzeros", "I32", 4, QzerosShape(in, rows), p.qzeros.data()));
  out->push_back(Raw(prefix + ".scales", "F16", 2, ScalesShape(in, rows), p.scales.data()));
  if (packing == Int4Packing::kGptq) {
    std::vector<int32_t> g_idx(static_cast<size_t>(in));
    for (int64_t i = 0; i < in; ++i) g_idx[i] = static_cast<int32_t>(i / 128);
    out->push_back(Raw(prefix + ".g_idx", "I32", 4, {in}, g_idx.data()));
  }
  return absl::OkStatus();
}

absl::Status WriteConfig(const Model& model, HfQuantization::Method method,
                         const std::string& out_dir) {
  const std::string from = model.dir + "/config.json";
  PTX_ASSIGN_OR_RETURN(const std::string text, ReadTextFile(from));
  PTX_ASSIGN_OR_RETURN(nlohmann::json config, ParseJsonObject(text, from));
  HfQuantization q;
  q.method = method;
  config["quantization_config"] = HfQuantizationJson(q);
  const std::string to = out_dir + "/config.json";
  std::ofstream f(to);
  f << config.dump(2) << "\n";
  f.close();
  if (!f) return absl::InternalError(absl::StrCat("writing ", to, " failed"));
  return absl::OkStatus();
}

}  // namespace

absl::Status WriteHfQuantized(const Model& model, HfQuantization::Method method,
                              const std::string& out_dir) {
  return WriteHfQuantized(model, method, CalibratedInt4{}, out_dir);
}

absl::Status WriteHfQuantized(const Model& model, HfQuantization::Method method,
                              const CalibratedInt4& calibrated, const std::string& out_dir) {
  if (IsGgufPath(model.dir)) {
    return absl::InvalidArgumentError(
        absl::StrCat(model.dir,
                     ": a Hugging Face quantized checkpoint is written from a model directory, "
                     "not a GGUF file"));
  }
  if (model.config.quantization.method != HfQuantization::Method::kNone) {
    return absl::InvalidArgumentError(
        absl::StrCat(model.dir, " is already quantized (",
                     std::string(HfQuantMethodName(model.config.quantization.method)), ")"));
  }
  std::error_code ec;
  std::filesystem::create_directories(out_dir, ec);
  if (ec) return absl::InternalError(absl::StrCat("creating ", out_dir, ": ", ec.message()));

  const ModelTensors& m = model.tensors;
  auto stored = [&](const Tensor& t) {
    const auto it = calibrated.folded.find(t.name);
    return it == calibrated.folded.end() ? AsStored(t) : Folded(t, it->second);
  };
  std::vector<TensorToWrite> tensors;
  tensors.push_back(AsStored(m.embed));
  if (!model.config.tie_word_embeddings) tensors.push_back(AsStored(m.lm_head));
  tensors.push_back(AsStored(m.final_norm));
  for (const LayerTensors& l : m.layers) {
    for (const Tensor* t : {&l.attn_norm, &l.mlp_norm, &l.bq, &l.bk, &l.bv}) {
      if (t->present()) tensors.push_back(stored(*t));
    }
    for (const Tensor* t : {&l.wq, &l.wk, &l.wv, &l.wo, &l.w_gate, &l.w_up, &l.w_down}) {
      if (t->quant != QuantType::kNone) {
        return absl::InvalidArgumentError(
            absl::StrCat("tensor ", t->name, " is already ", std::string(QuantName(t->quant))));
      }
      if (method == HfQuantization::Method::kFp8) {
        PTX_RETURN_IF_ERROR(AddFp8(*t, &tensors));
      } else {
        const auto given = calibrated.blocks.find(t->name);
        PTX_RETURN_IF_ERROR(AddInt4(
            *t, method == HfQuantization::Method::kAwq ? Int4Packing::kAwq : Int4Packing::kGptq,
            given == calibrated.blocks.end() ? nullptr : &given->second, &tensors));
      }
    }
  }
  PTX_RETURN_IF_ERROR(
      WriteSafetensors(out_dir + "/model.safetensors", tensors, {{"format", "pt"}}));
  PTX_RETURN_IF_ERROR(WriteConfig(model, method, out_dir));
  for (const char* name : kCopiedFiles) {
    const std::filesystem::path from = std::filesystem::path(model.dir) / name;
    if (!std::filesystem::exists(from, ec)) continue;
    const std::filesystem::path to = std::filesystem::path(out_dir) / name;
    std::filesystem::copy_file(from, to, std::filesystem::copy_options::overwrite_existing, ec);
    // A read-only source (a shared model store) must not make the copy read-only: the
    // checkpoint is the user's, to edit or overwrite.
    if (!ec) {
      std::filesystem::permissions(to, std::filesystem::perms::owner_write,
                                   std::filesystem::perm_options::add, ec);
    }
    if (ec) return absl::InternalError(absl::StrCat("copying ", from.string(), ": ", ec.message()));
  }
  return absl::OkStatus();
}

}  // namespace ptxserve
