// Fixtures for the GPU backend tests: synthetic models on disk, a toy scheduler that
// drives any Backend through greedy generation (staggered arrivals, chunked prefill,
// shuffled KV blocks), and CPU-vs-GPU comparisons.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <functional>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/backend.h"
#include "engine/cuda/gpu_backend.h"
#include "engine/model/model.h"
#include "engine/step_batch.h"
#include "engine/tokenizer/tokenizer.h"

namespace ptxserve {
// Parameterised tests print a DType by name, not as a byte.
inline void PrintTo(DType t, std::ostream* os) { *os << DTypeName(t); }
}  // namespace ptxserve

namespace ptxserve::cuda::testing {

// Writes synthetic preset `preset` (after `tweak` edits its config) in `dtype` into a
// fresh temp directory and loads it. Cached per (preset, dtype, tag) for the process.
absl::StatusOr<Model> SyntheticModel(const std::string& preset, DType dtype,
                                     const std::function<void(ModelConfig&)>& tweak = nullptr,
                                     const std::string& tag = "");

// A synthetic preset and its tokenizer, for tests that run the engine.
struct ModelWithTokenizer {
  std::unique_ptr<Model> model;
  std::unique_ptr<Tokenizer> tokenizer;
};
absl::StatusOr<ModelWithTokenizer> SyntheticModelWithTokenizer(const std::string& preset,
                                                               DType dtype);

struct GenRequest {
  std::vector<int32_t> prompt;
  int32_t start_step = 0;  // the step at which the sequence joins the batch
  int32_t new_tokens = 3;
};

struct GenResult {
  std::vector<std::vector<int32_t>> tokens;  // generated ids per request
  std::vector<std::vector<float>> logits;    // every step's logits, in step order
  std::vector<StepBatch> batches;            // every step's batch
};

// How a step produces the next token ids of its logits rows. Default: Backend::Step and
// the CPU argmax (lowest id among ties).
using StepFn = std::function<absl::Status(const StepBatch&, std::vector<float>* logits,
                                          std::vector<int32_t>* ids)>;

// Greedy generation over `backend` (see header comment). Prompts are fed in chunks of at
// most `chunk` tokens; KV blocks come from a free list shuffled with `block_seed`.
absl::StatusOr<GenResult> Generate(Backend& backend, const std::vector<GenRequest>& requests,
                                   int chunk, uint32_t block_seed = 1, StepFn step = nullptr);

// The step function of GpuBackend::StepSampled with greedy rows (ids only, no logits).
StepFn DeviceGreedy(GpuBackend& backend);

// ../shared/models as configured at build time, or $PTXSERVE_SHARED_MODELS when set (a
// bundle run elsewhere: scripts/gpu-bundle copies the test model next to the binaries).
// (Inline, for test sources only: they get PTXSERVE_SHARED_MODELS.)
#ifdef PTXSERVE_SHARED_MODELS
inline std::string SharedModelsDir() {
  const char* env = std::getenv("PTXSERVE_SHARED_MODELS");
  return env != nullptr && *env != '\0' ? std::string(env) : std::string(PTXSERVE_SHARED_MODELS);
}
#endif

// A prefill step of `rows` sequences, sequence s a prompt of min_len + s ids
// (Prompt(.., seed + s)) in KV block s, each with one logits row (its last token).
StepBatch PrefillBatch(int rows, int64_t vocab, int min_len, uint32_t seed, int32_t block_size);

// n sequences of `len` tokens whose K/V live in blocks 2s, 2s + 1 of 16 tokens
// (len <= 32): the prefill step of their whole prompts, or (decode) the step of their
// last token after that prefill. One logits row per sequence.
StepBatch TwoBlockStep(int n, int32_t len, int64_t vocab, bool decode);

// Deterministic prompt of n ids in [3, vocab).
std::vector<int32_t> Prompt(int64_t n, int64_t vocab, uint32_t seed);

int32_t ArgMax(const float* v, int64_t n);

// How far the GPU backend's logits may be from the CPU backend's, relative to their
// largest magnitude, for the rounding tensor cores add: the tensor-core GEMM rounds its f32
// input to the weights' type (unit roundoff u = 2^-11 for f16, 2^-8 for bf16) and is
// otherwise exact up to f32 sums, so a GEMM's output is off by at most u * sum_k |x_k w_k|,
// about u times its norm. Flash attention (prefill and mixed steps on an f16/bf16 KV cache,
// the weights' type here) rounds q and the softmax weights P the same way. A model of L
// layers rounds at 6 L + 1 such points on the way to the logits (the q/k/v, attention q and
// P, o, gate/up, down and LM-head inputs); norms keep each error's scale, so to first order
// the logits are off by at most (6 L + 1) u. With the model's f16/bf16 activations
// (KernelSet::act_dtype) the q/k/v, o, gate/up and down inputs are rounded once by their
// producer's store instead (u each, the tensor-core GEMM then adding none): the same points,
// so the same bound. 0 for f32 weights, which take the FMA forms.
double TensorCoreLogitsTolerance(const Model& model);
// The same for q8_0/q4_0 weights. Both backends read the same blocks, and the GPU's GEMV
// is the f32 GEMM over their decoded values up to f32 rounding, but the CPU's integer kernel
// (engine/cpu/ops.h, its choice for q4_0 and small q8_0 batches) first rounds each GEMM input to
// 8-bit codes per block of 32, moving an input by at most amax_b / 254: a unit roundoff u = 1/254
// of the block's largest input, far above f32's. With the 4 L + 1 GEMM inputs above, the logits
// are off by about (4 L + 1) / 254 of the largest to first order, plus flash attention's 2 L
// roundings to the KV cache's type (the model's torch_dtype) where that is f16 or bf16.
double QuantizedLogitsTolerance(const Model& model);
// max |a - b| / max |b| over n values.
double RelErr(const float* a, const float* b, int64_t n);

// Empty when a device of `kind` ("emulated" or "cuda") can run here, else why not (no
// driver, no device); computed once per process.
std::string Unavailable(const std::string& kind);

// The emulated device profile the GPU suites run on: $PTXSERVE_EMULATED_DEVICE when set
// (tests/cuda/CMakeLists.txt registers some suites a second time with h100), else
// "small". Read here, at the tests' edge, never in the library.
std::string EmulatedDeviceUnderTest();

// An emulated-device GpuBackend for `model` (warm-up on unless options say otherwise) on
// EmulatedDeviceUnderTest().
absl::StatusOr<std::unique_ptr<GpuBackend>> EmulatedBackend(const Model& model,
                                                            const KvCacheConfig& kv,
                                                            GpuBackendOptions options = {});

}  // namespace ptxserve::cuda::testing
