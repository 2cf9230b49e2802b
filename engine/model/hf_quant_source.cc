// Repacking at load: the checkpoint's parts are checked against each other (dtype, shape,
// group size) before a byte is read, then rewritten row by row into blocks; the mapped
// originals are left as they are.
#include "engine/model/hf_quant_source.h"

#include <cmath>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "engine/model/dtype.h"
#include "engine/model/hf_quant_layout.h"
#include "engine/model/quant.h"
#include "engine/util/status_macros.h"

namespace ptxserve {
namespace {

constexpr std::string_view kWeightSuffix = ".weight";
constexpr int64_t kGroup = 128;

std::string Shape(const std::vector<int64_t>& s) {
  return absl::StrCat("[", absl::StrJoin(s, ", "), "]");
}

// The part `suffix` of layer `prefix`, which must have `dtype` and `shape`.
absl::StatusOr<WeightFiles::Stored> Part(const WeightFiles& files, const std::string& prefix,
                                         const std::string& suffix, std::string_view dtype,
                                         const std::vector<int64_t>& shape) {
  const std::string name = prefix + suffix;
  PTX_ASSIGN_OR_RETURN(WeightFiles::Stored s, files.GetStored(name));
  if (s.entry->dtype != dtype) {
    return absl::InvalidArgumentError(absl::StrCat(files.PathOf(name), ": tensor '", name,
                                                   "' has dtype ", s.entry->dtype, ", expected ",
                                                   std::string(dtype)));
  }
  if (s.entry->shape != shape) {
    return absl::InvalidArgumentError(absl::StrCat(files.PathOf(name), ": tensor '", name,
                                                   "' has shape ", Shape(s.entry->shape),
                                                   ", expected ", Shape(shape)));
  }
  return s;
}

}  // namespace

uint8_t* HfQuantSource::Allocate(size_t bytes) const {
  owned_->push_back(std::make_unique<uint8_t[]>(bytes));
  return owned_->back().get();
}

std::string HfQuantSource::QweightName(std::string_view hf_name) const {
  if (q_.method != HfQuantization::Method::kAwq && q_.method != HfQuantization::Method::kGptq) {
    return "";
  }
  if (!hf_name.ends_with(kWeightSuffix)) return "";
  std::string q(hf_name.substr(0, hf_name.size() - kWeightSuffix.size()));
  q += ".qweight";
  return files_.Contains(q) ? q : "";
}

bool HfQuantSource::Contains(std::string_view hf_name) const {
  return files_.Contains(hf_name) || !QweightName(hf_name).empty();
}

const std::string& HfQuantSource::PathOf(std::string_view hf_name) const {
  const std::string q = QweightName(hf_name);
  return files_.PathOf(q.empty() ? hf_name : std::string_view(q));
}

absl::StatusOr<Tensor> HfQuantSource::Get(std::string_view hf_name) const {
  if (const std::string q = QweightName(hf_name); !q.empty()) return GetInt4(hf_name, q);
  if (q_.method == HfQuantization::Method::kFp8 && files_.Contains(hf_name)) {
    PTX_ASSIGN_OR_RETURN(WeightFiles::Stored w, files_.GetStored(hf_name));
    if (w.entry->dtype == "F8_E4M3") return GetFp8(hf_name, w);
  }
  return files_.Get(hf_name);
}

// vLLM's and transformers' fp8 checkpoints scale a weight per tensor (weight_scale of
// shape [] or [1]); FBGEMM-style ones per output channel ([out] or [out, 1]); fine-grained
// ones (weight_block_size) per tile (weight_scale_inv [ceil(out / rows), ceil(in / cols)],
// a multiplier despite its name). Each becomes the scale of every block of 32 it covers.
absl::StatusOr<Tensor> HfQuantSource::GetFp8(std::string_view hf_name,
                                             const WeightFiles::Stored& w) const {
  const std::string name(hf_name);
  const std::string& path = files_.PathOf(name);
  const std::vector<int64_t>& shape = w.entry->shape;
  const int64_t block = LayoutOf(QuantType::kFp8E4M3).block_elems;
  if (shape.size() != 2 || shape[1] % block != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        path, ": tensor '", name, "' is F8_E4M3 of shape ", Shape(shape),
        "; FP8 weights must be matrices whose rows are a multiple of ", block, " elements"));
  }
  const int64_t out = shape[0], in = shape[1];
  const bool tiled = q_.fp8_block_rows > 0;
  const int64_t tile_rows = tiled ? q_.fp8_block_rows : 1;
  const int64_t tile_cols = tiled ? q_.fp8_block_cols : in;
  const std::vector<int64_t> tiles = {(out + tile_rows - 1) / tile_rows,
                                      (in + tile_cols - 1) / tile_cols};
  const std::string scale_name = name + (tiled ? "_scale_inv" : "_scale");
  PTX_ASSIGN_OR_RETURN(WeightFiles::Stored s, files_.GetStored(scale_name));
  int64_t numel = 1;
  for (int64_t d : s.entry->shape) numel *= d;
  const bool per_tensor = !tiled && numel == 1 && s.entry->shape.size() <= 1;
  const bool per_row = !tiled && (s.entry->shape == std::vector<int64_t>{out} ||
                                  s.entry->shape == std::vector<int64_t>{out, 1});
  DType scale_dtype;
  if (!ParseDType(s.entry->dtype, &scale_dtype) ||
      (tiled ? s.entry->shape != tiles : !per_tensor && !per_row)) {
    return absl::InvalidArgumentError(absl::StrCat(
        files_.PathOf(scale_name), ": tensor '", scale_name, "' is ", s.entry->dtype, " ",
        Shape(s.entry->shape), "; an FP8 weight scale must be F32, F16 or BF16 of shape ",
        tiled ? Shape(tiles) + " (one per weight_block_size tile)"
              : absl::StrCat("[], [1] (per tensor), [", out, "] or [", out,
                             ", 1] (per output channel)")));
  }
  std::vector<float> scales(numel);
  ConvertToFloat(scale_dtype, s.data, numel, scales.data());
  for (int64_t r = 0; r < numel; ++r) {
    if (!std::isfinite(scales[r]) || scales[r] < 0) {
      return absl::InvalidArgumentError(absl::StrCat(files_.PathOf(scale_name), ": tensor '",
                                                     scale_name, "' element ", r, " is ", scales[r],
                                                     ", not a finite scale >= 0"));
    }
  }
  const int64_t row_bytes = QuantRowBytes(QuantType::kFp8E4M3, in);
  uint8_t* blocks = Allocate(static_cast<size_t>(out * row_bytes));
  for (int64_t r = 0; r < out; ++r) {
    for (int64_t b = 0; b < in / block; ++b) {
      const float scale = per_tensor ? scales[0]
                          : per_row  ? scales[r]
                                     : scales[(r / tile_rows) * tiles[1] + b * block / tile_cols];
      uint8_t* dst = blocks + r * row_bytes + b * (4 + block);
      std::memcpy(dst, &scale, 4);
      std::memcpy(dst + 4, w.data + r * in + b * block, block);
    }
  }
  Tensor t;
  t.name = name;
  t.quant = QuantType::kFp8E4M3;
  t.shape = shape;
  t.data = blocks;
  t.nbytes = static_cast<size_t>(out * row_bytes);
  return t;
}

absl::StatusOr<Tensor> HfQuantSource::GetInt4(std::string_view hf_name,
                                              const std::string& qweight_name) const {
  const std::string prefix = qweight_name.substr(0, qweight_name.size() - 8);  // ".qweight"
  const Int4Packing packing =
      q_.method == HfQuantization::Method::kAwq ? Int4Packing::kAwq : Int4Packing::kGptq;
  PTX_ASSIGN_OR_RETURN(WeightFiles::Stored qw, files_.GetStored(qweight_name));
  const std::string& path = files_.PathOf(qweight_name);
  if (qw.entry->dtype != "I32" || qw.entry->shape.size() != 2) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": tensor '", qweight_name, "' is ",
                                                   qw.entry->dtype, " ", Shape(qw.entry->shape),
                                                   ", expected a 2-D I32 tensor"));
  }
  const std::vector<int64_t>& qs = qw.entry->shape;
  const int64_t in = packing == Int4Packing::kAwq ? qs[0] : qs[0] * 8;
  const int64_t out = packing == Int4Packing::kAwq ? qs[1] * 8 : qs[1];
  if (out % 8 != 0) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": tensor '", qweight_name, "' of shape ",
                                                   Shape(qs), " has ", out,
                                                   " outputs, not a multiple of 8"));
  }
  if (in % kGroup != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": tensor '", qweight_name, "' of shape ", Shape(qs), " packs ", in,
                     " inputs, not a multiple of group_size ", kGroup));
  }
  PTX_ASSIGN_OR_RETURN(WeightFiles::Stored qz,
                       Part(files_, prefix, ".qzeros", "I32", QzerosShape(in, out)));
  PTX_ASSIGN_OR_RETURN(WeightFiles::Stored sc,
                       Part(files_, prefix, ".scales", "F16", ScalesShape(in, out)));
  // GPTQ's act-order checkpoints permute inputs through g_idx; one in plain order (what
  // desc_act false writes) is group i / 128 for input i and changes nothing.
  if (packing == Int4Packing::kGptq && files_.Contains(prefix + ".g_idx")) {
    PTX_ASSIGN_OR_RETURN(WeightFiles::Stored g, Part(files_, prefix, ".g_idx", "I32", {in}));
    for (int64_t i = 0; i < in; ++i) {
      int32_t v;
      std::memcpy(&v, g.data + 4 * i, 4);
      if (v != i / kGroup) {
        return absl::InvalidArgumentError(
            absl::StrCat(files_.PathOf(prefix + ".g_idx"), ": tensor '", prefix, ".g_idx' element ",
                         i, " is ", v, ", expected ", i / kGroup,
                         ": act-order (desc_act) input reordering is not "
                         "supported"));
      }
    }
  }
  const int64_t row_bytes = QuantRowBytes(QuantType::kInt4G128, in);
  uint8_t* blocks = Allocate(static_cast<size_t>(out * row_bytes));
  Int4ToBlocks(packing, qw.data, qz.data, sc.data, in, out, q_.gptq_zero_minus_one, blocks);
  Tensor t;
  t.name = std::string(hf_name);
  t.quant = QuantType::kInt4G128;
  t.shape = {out, in};
  t.data = blocks;
  t.nbytes = static_cast<size_t>(out * row_bytes);
  return t;
}

}  // namespace ptxserve
