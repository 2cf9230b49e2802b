// What a decode step and a prefill of a model would cost on a named GPU, estimated without
// one: the GPU backend runs the step on the emulated device (the named GPU's profile: its
// sm target, SM count and memory, so the backend picks the kernels and split plans it
// would pick there), the emulator counts each launch over a sample of its CTAs, and the
// cost model (kernels/cost) turns each launch's counters into a time. Every figure is an
// estimate, never a measurement.
//
// The layers of a Llama model are alike, so one layer is run and its launches count once
// per layer; the embedding and the head (gather, final norm, LM head, greedy sampling)
// count once. The K/V pools hold exactly the step's blocks, zero-filled.
//
// Rooflines: a mixed step against the larger of its decode and prefill rooflines (bytes
// over bandwidth, FLOPs over the tensor peak); a decode step against (every weight, as stored:
// blocks for q8_0/q4_0, + the context's K and V bytes) / the datasheet DRAM bandwidth; a prefill
// against its FLOPs (the projections of every token, causal attention, the LM head of the last
// token) / the dense f16 tensor-core peak. A kernel's own roofline is the larger of its DRAM bytes
// over that bandwidth and its FLOPs (tensor and FP32 alike) over the tensor peak: what it would
// take on tensor cores.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/model/model.h"
#include "kernels/cost/cost_model.h"
#include "kernels/decode_attention.h"
#include "kernels/emu/counters.h"

namespace ptxserve::cuda {

struct StepEstimateOptions {
  std::string device = "h100";  // cost-model device and emulated profile (h100, a100)
  std::vector<int> decode_batches = {1, 16, 64, 256};
  int context = 1024;         // tokens of each sequence in a decode step (its new one included)
  int prefill_tokens = 2048;  // one sequence's prompt; 0 = no prefill estimate
  // Mixed steps: (chunk, decode rows) = a prompt chunk of `chunk` tokens (the last of
  // max(context, chunk)) beside `decode rows` sequences decoding at `context`.
  std::vector<std::pair<int, int>> mixed;
  // GpuBackendOptions::mixed_decode_rows: decode rows of a mixed step from which they run
  // apart from flash attention.
  int mixed_decode_rows = kernels::kMixedDecodeRows;
  int block_size = 16;
  DType kv_dtype = DType::kF16;
  bool cuda_graphs = true;  // decode steps replay a CUDA graph, as the server's do
  // The layers the step has (0 = the model's): a one-layer copy of a model stands for all
  // of them, and need not be written whole.
  int64_t num_layers = 0;
  uint64_t sample_ctas = 64;  // CTAs emulated per launch (kernels/emu/cta_sample.h)
  // Registers per thread of a kernel from its PTX (ptxas), or 0 when unknown (the cost
  // model then assumes 32); none given: all unknown.
  std::function<int(const std::string& ptx)> registers;
};

// One launch of a step, or one launch per layer counted `count` times.
struct KernelEstimate {
  std::string kernel;            // the PTX .entry
  bool per_layer = false;        // runs once per layer
  int count = 1;                 // launches in the step
  emu::KernelCounters counters;  // of one launch
  int registers = 0;             // per thread; 0 = unknown
  cost::Estimate one;            // one launch
  double seconds = 0;            // all `count` launches
  double roofline_s = 0;         // all `count` launches at the kernel's own roofline
  double RooflinePct() const { return seconds > 0 ? 100.0 * roofline_s / seconds : 0; }
};

struct StepEstimate {
  std::string phase;                    // "decode", "mixed" or "prefill"
  int batch = 0;                        // sequences (mixed: the decode rows)
  int context = 0;                      // tokens per sequence after the step
  int tokens = 0;                       // tokens the step runs
  std::vector<KernelEstimate> kernels;  // in launch order (one layer's launches once)
  double seconds = 0;                   // the sum of the kernels' times
  uint64_t dram_bytes = 0;              // the kernels' DRAM bytes, every launch
  uint64_t ideal_bytes = 0;             // decode: weights + K/V; prefill: weights + K/V written
  double flops = 0;                     // the step's model FLOPs (see above)
  double roofline_s = 0;                // decode: ideal bytes / bandwidth; prefill: flops / peak
  double RooflinePct() const { return seconds > 0 ? 100.0 * roofline_s / seconds : 0; }
};

struct ModelEstimate {
  const cost::DeviceSpec* device = nullptr;
  std::string model;  // the model's directory or preset name
  DType dtype = DType::kF16;
  std::string weights;  // the linear weights' format (Model::WeightFormat: "f16", "q4_0", ...)
  uint64_t sample_ctas = 0;
  // Bytes of the weights as the backend uploads them, for all the model's layers (the
  // one-layer copy's, plus its layer's bytes for each further layer): a count, not an estimate.
  uint64_t device_weight_bytes = 0;
  std::vector<StepEstimate> steps;  // decode steps by batch, the mixed steps, then the prefill
};

// Estimates `model`'s steps on options.device. `name` labels the result. Errors name the
// unknown device or the step that failed on the emulated device.
absl::StatusOr<ModelEstimate> EstimateModelSteps(const Model& model, const std::string& name,
                                                 const StepEstimateOptions& options);

}  // namespace ptxserve::cuda
