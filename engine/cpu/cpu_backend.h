// The CPU backend: weight matrices in the dtype the checkpoint stores (f32, f16 or bf16,
// widened to f32 inside the GEMM: exact, so results equal an f32 copy's) or its block
// format (q8_0, q4_0, q4_k, q6_k: see cpu::Gemm for how close to the f32 copy), a paged
// f32/f16/bf16 KV cache, and the reference ops in engine/cpu/ops.h. It is the numerical
// reference for the GPU backend.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/backend.h"
#include "engine/model/model.h"
#include "engine/util/huge_page_buffer.h"

namespace ptxserve {

class CpuBackend final : public Backend {
 public:
  // Copies the model's weights (norms and biases as f32, matrices in their dtype) and
  // allocates the K/V pools. Errors name the missing or mis-shaped tensor or the bad KV
  // setting. The Model need not outlive the backend.
  static absl::StatusOr<std::unique_ptr<CpuBackend>> Create(const Model& model,
                                                            const KvCacheConfig& kv);

  // Validates `batch` (InvalidArgument naming the field) and runs it; see Backend.
  // One caller at a time (the engine thread); the ops parallelise internally.
  absl::Status Step(const StepBatch& batch, std::vector<float>* logits) override;
  const ModelConfig& config() const override { return config_; }
  const KvCacheConfig& kv_config() const override { return kv_; }
  std::string name() const override { return "cpu"; }

  // Bytes of all weights held (a tied embedding counted once).
  size_t weight_bytes() const;
  // Bytes the GEMMs read per step whatever the batch: every layer's linear weights
  // plus the LM head. Divided by memory bandwidth it is the decode roofline time.
  size_t step_weight_bytes() const;

 private:
  // A weight matrix, or several stacked parts in one format, as stored (one dtype or block
  // format). Always a copy, on huge pages (engine/util/huge_page_buffer.h): every decode
  // step streams all of it.
  struct Matrix {
    HugePageBuffer bytes;
    DType dtype = DType::kF32;
    QuantType quant = QuantType::kNone;

    // Bytes of one row of `width` elements.
    size_t RowBytes(int64_t width) const;
  };
  // Projections stored one after another (q/k/v, gate/up): each run of consecutive parts
  // in one format is one Matrix, so parts sharing a format run as one GEMM, and a part in
  // another (Q4_K_M's q6_k attn_v beside q4_k q/k) keeps its own format, not widened.
  struct Stacked {
    int64_t width = 0;  // elements per row
    std::vector<Matrix> runs;
    std::vector<int> run_of;         // per part: its run
    std::vector<int64_t> first_row;  // per part: its first row in its run
    size_t size() const;             // bytes of all runs
  };
  struct Layer {
    std::vector<float> attn_norm;
    Stacked wqkv;             // [q_dim + 2 kv_dim, hidden]: wq, wk, wv
    std::vector<float> bqkv;  // [q_dim + 2 kv_dim] or empty without attention_bias
    Matrix wo;                // [hidden, q_dim]
    std::vector<float> mlp_norm;
    Stacked w_gate_up;         // [2 intermediate, hidden]: gate then up
    Matrix w_down;             // [hidden, intermediate]
    std::vector<char> k_pool;  // [num_blocks][num_kv_heads][block_size][head_dim]
    std::vector<char> v_pool;
  };

  // The forward pass's ops (engine/model/forward.h) over this backend's weights and
  // buffers for one step (cpu_backend.cc).
  class StepOps;

  struct Part;

  CpuBackend(const ModelConfig& config, const KvCacheConfig& kv) : config_(config), kv_(kv) {}
  // The parts (tensor, expected shape, name), checked and copied into `out`, and a lone
  // tensor into a Matrix; the tensors' file pages are released (Model::ReleasePages), so a
  // model loads in about its file size.
  static absl::Status Stack(const Model& model, const std::vector<Part>& parts, Stacked* out);
  static absl::Status Copy(const Model& model, const Part& part, Matrix* out);
  // Grows the activation buffers to hold `tokens` rows (never shrinks).
  void Reserve(int64_t tokens);

  ModelConfig config_;
  KvCacheConfig kv_;
  Matrix embed_;
  std::vector<float> final_norm_;
  Matrix lm_head_;  // empty when tied: embed_ is used
  std::vector<float> inv_freq_;
  std::vector<Layer> layers_;

  // The activations (forward.h's Act) and the products merged GEMMs write first.
  int64_t capacity_ = 0;  // rows the buffers below hold
  std::vector<float> x_;  // [tokens, hidden] residual stream
  std::vector<float> h_;  // [tokens, max(hidden, q_dim)] normed input / attention output
  std::vector<float> q_, k_, v_;
  std::vector<float> gate_up_;  // [tokens, 2 intermediate]: gate and up, row by row
  std::vector<float> act_;      // [tokens, intermediate]
  std::vector<float> rows_;     // [tokens, hidden] the logits rows
  std::vector<float> product_;  // [tokens, max(q_dim + 2 kv_dim, hidden)] a GEMM's output
};

// A CpuBackend behind the Backend interface (engine/backend_factory.h chooses between
// backends). kv.num_blocks <= 0 takes DefaultHostKvBlocks(model.config, kv, 1)
// (engine/kv_sizing.h).
absl::StatusOr<std::unique_ptr<Backend>> CreateCpuBackend(const Model& model,
                                                          const KvCacheConfig& kv);

}  // namespace ptxserve
