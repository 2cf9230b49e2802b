#include "engine/model/model_checks.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"

namespace ptxserve {

absl::Status CheckModelShape(const ModelConfig& c, const ModelTensors& tensors) {
  if (c.vocab_size <= 0 || c.hidden_size <= 0 || c.intermediate_size <= 0 || c.num_layers <= 0 ||
      c.num_heads <= 0 || c.num_kv_heads <= 0 || c.head_dim <= 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "model config has a non-positive size (vocab %d, hidden %d, intermediate %d, layers %d, "
        "heads %d, kv heads %d, head_dim %d)",
        c.vocab_size, c.hidden_size, c.intermediate_size, c.num_layers, c.num_heads, c.num_kv_heads,
        c.head_dim));
  }
  if (c.num_heads % c.num_kv_heads != 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "num_heads %d is not a multiple of num_kv_heads %d", c.num_heads, c.num_kv_heads));
  }
  if (c.head_dim % 2 != 0) {
    return absl::InvalidArgumentError(absl::StrFormat("head_dim %d is odd", c.head_dim));
  }
  if (static_cast<int64_t>(tensors.layers.size()) != c.num_layers) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "model has %d layers of tensors, config says %d", tensors.layers.size(), c.num_layers));
  }
  return absl::OkStatus();
}

absl::Status CheckTensorShape(const Tensor& t, const std::vector<int64_t>& shape,
                              const std::string& what, bool blocks_ok) {
  const std::string name = t.name.empty() ? what : t.name;
  if (!t.present()) return absl::InvalidArgumentError(absl::StrCat("tensor ", name, " is missing"));
  if (t.shape != shape) {
    return absl::InvalidArgumentError(absl::StrCat("tensor ", name, " has shape [",
                                                   absl::StrJoin(t.shape, ", "), "], expected [",
                                                   absl::StrJoin(shape, ", "), "]"));
  }
  const QuantLayout& q = LayoutOf(t.quant);
  if (t.quant != QuantType::kNone && !blocks_ok) {
    return absl::UnimplementedError(absl::StrFormat(
        "tensor %s is block-quantized (%s), which this backend does not read", name, q.name));
  }
  if (t.quant != QuantType::kNone && (t.shape.empty() || t.shape.back() % q.block_elems != 0)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "tensor %s is %s, whose rows must be a multiple of %d elements; its shape is [%s]", name,
        q.name, q.block_elems, absl::StrJoin(t.shape, ", ")));
  }
  // Quantized rows are whole blocks, so the tensor is numel / block_elems blocks.
  const size_t need = t.quant == QuantType::kNone
                          ? static_cast<size_t>(t.numel()) * DTypeSize(t.dtype)
                          : static_cast<size_t>(t.numel() / q.block_elems) * q.block_bytes;
  if (t.nbytes < need) {
    return absl::InvalidArgumentError(
        absl::StrFormat("tensor %s holds %d bytes, its shape needs %d", name, t.nbytes, need));
  }
  return absl::OkStatus();
}

}  // namespace ptxserve
