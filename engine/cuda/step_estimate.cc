#include "engine/cuda/step_estimate.h"

#include <algorithm>
#include <map>
#include <memory>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "engine/cuda/device.h"
#include "engine/cuda/emulated_driver.h"
#include "engine/cuda/gpu_backend.h"

namespace ptxserve::cuda {
namespace {

// One decode step of `batch` sequences of `context` tokens (the last one new), or the
// prefill of one sequence of `context` tokens; each sequence owns its blocks.
StepBatch MakeStep(int batch, int context, int block_size, int64_t vocab, bool decode) {
  const int blocks = (context + block_size - 1) / block_size;
  StepBatch b;
  b.query_start.push_back(0);
  b.max_blocks_per_seq = blocks;
  for (int s = 0; s < batch; ++s) {
    for (int p = decode ? context - 1 : 0; p < context; ++p) {
      b.token_ids.push_back(static_cast<int32_t>(3 + (s * 131 + p * 7) % (vocab - 3)));
      b.positions.push_back(p);
      b.slot_mapping.push_back(int64_t{s * blocks + p / block_size} * block_size + p % block_size);
    }
    b.query_start.push_back(b.num_tokens());
    b.seq_lens.push_back(context);
    for (int j = 0; j < blocks; ++j) b.block_tables.push_back(s * blocks + j);
    b.logits_rows.push_back(b.num_tokens() - 1);
  }
  return b;
}

// A mixed step: one sequence's chunk of `chunk` tokens, the last of max(context, chunk),
// then `decodes` sequences decoding their `context`th token (the order a scheduler gives
// a running prompt and the decodes that joined after it, say).
StepBatch MakeMixedStep(int chunk, int decodes, int context, int block_size, int64_t vocab) {
  const int prefill_context = std::max(context, chunk);
  StepBatch b = MakeStep(1, prefill_context, block_size, vocab, false);
  const int first = prefill_context - chunk;  // drop the cached prefix's rows
  b.token_ids.erase(b.token_ids.begin(), b.token_ids.begin() + first);
  b.positions.erase(b.positions.begin(), b.positions.begin() + first);
  b.slot_mapping.erase(b.slot_mapping.begin(), b.slot_mapping.begin() + first);
  b.query_start = {0, chunk};
  b.logits_rows = {chunk - 1};
  const StepBatch d = MakeStep(decodes, context, block_size, vocab, true);
  const int32_t mb = std::max(b.max_blocks_per_seq, d.max_blocks_per_seq);
  std::vector<int32_t> tables;
  auto add_tables = [&](const StepBatch& s, int32_t block0) {
    for (int i = 0; i < s.num_seqs(); ++i) {
      for (int j = 0; j < mb; ++j) {
        tables.push_back(
            j < s.max_blocks_per_seq ? block0 + s.block_tables[i * s.max_blocks_per_seq + j] : 0);
      }
    }
  };
  const int32_t prefill_blocks = b.max_blocks_per_seq;
  add_tables(b, 0);
  add_tables(d, prefill_blocks);
  b.block_tables = std::move(tables);
  b.max_blocks_per_seq = mb;
  for (int t = 0; t < d.num_tokens(); ++t) {
    b.token_ids.push_back(d.token_ids[t]);
    b.positions.push_back(d.positions[t]);
    b.slot_mapping.push_back(d.slot_mapping[t] + int64_t{prefill_blocks} * block_size);
    b.query_start.push_back(b.num_tokens());
    b.seq_lens.push_back(d.seq_lens[t]);
    b.logits_rows.push_back(b.num_tokens() - 1);
  }
  return b;
}

struct CountedStep {
  std::vector<emu::KernelCounters> launches;
  size_t weight_bytes = 0, layer_weight_bytes = 0;  // the one-layer model's on the device
  std::map<uint64_t, int> registers;                // by PtxHash of the launches' modules
};

// The launches of one step on a one-layer copy of the model, counted over sampled CTAs.
absl::StatusOr<CountedStep> CountStep(const Model& one_layer, const StepEstimateOptions& o,
                                      const StepBatch& step, bool decode) {
  absl::StatusOr<EmulatedDeviceOptions> profile = EmulatedDeviceProfile(o.device);
  if (!profile.ok()) return profile.status();
  profile->poison_allocations = false;  // zero K/V and activations: no NaN takes a branch
  absl::StatusOr<std::unique_ptr<DriverTable>> driver = LoadEmulatedDriver(*profile);
  if (!driver.ok()) return driver.status();
  absl::StatusOr<std::unique_ptr<Device>> device = Device::Open(*std::move(driver));
  if (!device.ok()) return device.status();
  int32_t blocks = 0;  // every block the step's tables name
  for (const int32_t b : step.block_tables) blocks = std::max(blocks, b + 1);
  const KvCacheConfig kv{blocks, o.block_size, o.kv_dtype};
  GpuBackendOptions bo;
  bo.max_tokens = std::max(step.num_tokens(), 1);
  bo.max_seqs = std::max(step.num_seqs(), 1);
  bo.cuda_graphs = decode && o.cuda_graphs;
  bo.emulated_device = o.device;
  bo.mixed_decode_rows = o.mixed_decode_rows;
  bo.log_progress = false;
  absl::StatusOr<std::unique_ptr<GpuBackend>> backend =
      GpuBackend::Create(one_layer, kv, *std::move(device), bo);
  if (!backend.ok()) return backend.status();
  // Counters on (with the sample) from the first step: the emulator runs only sampled CTAs
  // while it counts. Decode runs until its graph replays (an eager run, the capture, a
  // replay), as a server's steady decode does; the last step's launches are the estimate.
  SetEmulatedKernelCounters(true, o.sample_ctas);
  const int runs = bo.cuda_graphs ? 3 : 1;
  std::vector<int32_t> ids;
  absl::Status st;
  for (int r = 0; r < runs && st.ok(); ++r) {
    (void)TakeEmulatedKernelCounters();
    st = (*backend)->StepSampled(step, std::vector<RowSampling>(step.logits_rows.size()), &ids);
  }
  CountedStep out;
  out.launches = TakeEmulatedKernelCounters();
  out.weight_bytes = (*backend)->weight_bytes();
  out.layer_weight_bytes = (*backend)->layer_weight_bytes();
  SetEmulatedKernelCounters(false);
  if (!st.ok()) return st;
  for (const emu::KernelCounters& k : out.launches) {
    if (o.registers && out.registers.count(k.ptx_hash) == 0) {
      out.registers[k.ptx_hash] = o.registers(EmulatedModulePtx(k.ptx_hash));
    }
  }
  return out;
}

// Folds one step's launches into kernel estimates: the launches after the embedding and
// before the gather (the second embedding launch) are the layer's.
StepEstimate Summarise(const cost::DeviceSpec& d, CountedStep counted, int64_t num_layers,
                       bool in_graph) {
  StepEstimate s;
  std::vector<emu::KernelCounters>& launches = counted.launches;
  size_t gather = launches.size();
  for (size_t i = launches.size(); i-- > 1;) {
    if (launches[i].kernel == "embedding") {
      gather = i;
      break;
    }
  }
  // Each launch's time without its launch overhead: what a programmatic dependent launch
  // after it overlaps (cost_model.h).
  std::vector<double> body(launches.size());
  std::vector<cost::LaunchResources> resources(launches.size());
  for (size_t i = 0; i < launches.size(); ++i) {
    resources[i].registers_per_thread = counted.registers[launches[i].ptx_hash];
    const cost::Estimate e = cost::EstimateLaunch(d, launches[i], resources[i], in_graph);
    body[i] = e.seconds - e.launch_s;
  }
  for (size_t i = 0; i < launches.size(); ++i) {
    KernelEstimate k;
    k.kernel = launches[i].kernel;
    k.per_layer = i > 0 && i < gather;
    k.count = k.per_layer ? static_cast<int>(num_layers) : 1;
    k.counters = std::move(launches[i]);
    k.registers = resources[i].registers_per_thread;
    k.one = cost::EstimateLaunch(d, k.counters, resources[i], in_graph, i > 0 ? body[i - 1] : 0);
    k.seconds = k.one.seconds * k.count;
    if (i == 1 && k.per_layer && k.count > 1) {
      // The first layer's first launch follows the embedding; every later layer's follows
      // the layer before's last launch.
      const cost::Estimate later =
          cost::EstimateLaunch(d, k.counters, resources[i], in_graph, body[gather - 1]);
      k.seconds = k.one.seconds + later.seconds * (k.count - 1);
    }
    const double bytes =
        static_cast<double>(k.counters.dram_read_bytes + k.counters.dram_write_bytes);
    const double flops =
        static_cast<double>(k.counters.tensor_flops) + static_cast<double>(k.counters.fp32_flops);
    k.roofline_s = std::max(bytes / d.dram_bytes_per_s, flops / d.tensor_f16_flops) * k.count;
    s.seconds += k.seconds;
    s.dram_bytes +=
        (k.counters.dram_read_bytes + k.counters.dram_write_bytes) * static_cast<uint64_t>(k.count);
    s.kernels.push_back(std::move(k));
  }
  return s;
}

// Bytes per element of the model's linear weights: a block format's share of its blocks
// (q8_0: 34 / 32), else the dtype's size.
double WeightElemBytes(const Model& m) {
  const Tensor& t = m.tensors.layers.at(0).wq;
  if (t.quant == QuantType::kNone) return static_cast<double>(DTypeSize(t.dtype));
  const QuantLayout& q = LayoutOf(t.quant);
  return static_cast<double>(q.block_bytes) / q.block_elems;
}

// Every linear weight and the LM head, in bytes at `elem` bytes per element.
double WeightBytes(const ModelConfig& c, double elem) {
  const double h = static_cast<double>(c.hidden_size);
  const double per_layer =
      h * (2.0 * static_cast<double>(c.q_dim()) + 2.0 * static_cast<double>(c.kv_dim()) +
           3.0 * static_cast<double>(c.intermediate_size));
  return (per_layer * static_cast<double>(c.num_layers) + h * static_cast<double>(c.vocab_size)) *
         elem;
}

}  // namespace

absl::StatusOr<ModelEstimate> EstimateModelSteps(const Model& model, const std::string& name,
                                                 const StepEstimateOptions& o) {
  ModelEstimate out;
  out.device = cost::FindDevice(o.device);
  if (out.device == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat("device '", o.device, "' is not one of ",
                                                   absl::StrJoin(cost::DeviceNames(), ", ")));
  }
  if (o.context < 1 || o.prefill_tokens < 0 || o.block_size < 1) {
    return absl::InvalidArgumentError("context must be >= 1, prefill tokens >= 0");
  }
  out.model = name;
  out.dtype = model.tensors.embed.dtype;
  out.weights = model.WeightFormat();
  out.sample_ctas = o.sample_ctas;
  ModelConfig c = model.config;
  if (o.num_layers > 0) c.num_layers = o.num_layers;
  Model one_layer = model;
  one_layer.tensors.layers.resize(1);
  one_layer.config.num_layers = 1;

  const cost::DeviceSpec& d = *out.device;
  const double elem_bytes = WeightElemBytes(model);
  const double weights = WeightBytes(c, elem_bytes);
  // K and V of one token over all layers, as the ideal reads them (head_dim unpadded).
  const double kv_per_token = 2.0 * static_cast<double>(c.num_layers) *
                              static_cast<double>(c.kv_dim()) *
                              static_cast<double>(DTypeSize(o.kv_dtype));
  for (const int batch : o.decode_batches) {
    if (batch < 1) return absl::InvalidArgumentError(absl::StrCat("decode batch ", batch, " < 1"));
    const StepBatch step = MakeStep(batch, o.context, o.block_size, c.vocab_size, true);
    absl::StatusOr<CountedStep> launches = CountStep(one_layer, o, step, true);
    if (!launches.ok()) {
      return absl::Status(launches.status().code(),
                          absl::StrCat("decode batch ", batch, ": ", launches.status().message()));
    }
    out.device_weight_bytes =
        launches->weight_bytes + (c.num_layers - 1) * launches->layer_weight_bytes;
    StepEstimate s = Summarise(d, *std::move(launches), c.num_layers, o.cuda_graphs);
    s.phase = "decode";
    s.batch = batch;
    s.context = o.context;
    s.tokens = batch;
    s.ideal_bytes = static_cast<uint64_t>(weights + kv_per_token * batch * o.context);
    s.flops = 2.0 * weights / elem_bytes * batch +
              4.0 * static_cast<double>(c.num_layers * c.q_dim()) * o.context * batch;
    s.roofline_s = static_cast<double>(s.ideal_bytes) / d.dram_bytes_per_s;
    out.steps.push_back(std::move(s));
  }
  for (const auto& [chunk, decodes] : o.mixed) {
    if (chunk < 1 || decodes < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("mixed step ", chunk, ":", decodes, ": want a chunk >= 1, decodes >= 0"));
    }
    const StepBatch step = MakeMixedStep(chunk, decodes, o.context, o.block_size, c.vocab_size);
    absl::StatusOr<CountedStep> launches = CountStep(one_layer, o, step, false);
    if (!launches.ok()) {
      return absl::Status(
          launches.status().code(),
          absl::StrCat("mixed step ", chunk, ":", decodes, ": ", launches.status().message()));
    }
    out.device_weight_bytes =
        launches->weight_bytes + (c.num_layers - 1) * launches->layer_weight_bytes;
    StepEstimate s = Summarise(d, *std::move(launches), c.num_layers, false);
    s.phase = "mixed";
    s.batch = decodes;
    s.context = o.context;
    s.tokens = chunk + decodes;
    const double prefill_context = std::max(o.context, chunk);
    s.ideal_bytes =
        static_cast<uint64_t>(weights + kv_per_token * (decodes * o.context + prefill_context));
    // The chunk's rows attend to the prefix and causally among themselves.
    const double chunk_pairs = chunk * (prefill_context - chunk) + chunk * (chunk + 1) / 2.0;
    s.flops = 2.0 * weights / elem_bytes * s.tokens +
              4.0 * static_cast<double>(c.num_layers * c.q_dim()) *
                  (chunk_pairs + static_cast<double>(decodes) * o.context);
    s.roofline_s = std::max(static_cast<double>(s.ideal_bytes) / d.dram_bytes_per_s,
                            s.flops / d.tensor_f16_flops);
    out.steps.push_back(std::move(s));
  }
  if (o.prefill_tokens > 0) {
    const int n = o.prefill_tokens;
    const StepBatch step = MakeStep(1, n, o.block_size, c.vocab_size, false);
    absl::StatusOr<CountedStep> launches = CountStep(one_layer, o, step, false);
    if (!launches.ok()) {
      return absl::Status(launches.status().code(),
                          absl::StrCat("prefill: ", launches.status().message()));
    }
    out.device_weight_bytes =
        launches->weight_bytes + (c.num_layers - 1) * launches->layer_weight_bytes;
    StepEstimate s = Summarise(d, *std::move(launches), c.num_layers, false);
    s.phase = "prefill";
    s.batch = 1;
    s.context = n;
    s.tokens = n;
    s.ideal_bytes = static_cast<uint64_t>(weights + kv_per_token * n);
    const double lm_head = 2.0 * static_cast<double>(c.hidden_size * c.vocab_size);
    const double linear = 2.0 * weights / elem_bytes - lm_head;
    // QK^T and PV over the causal triangle: 2 x 2 x q_dim per (query, key) pair.
    const double attention = 4.0 * static_cast<double>(c.num_layers * c.q_dim()) * n * (n + 1) / 2;
    s.flops = linear * n + attention + lm_head;
    s.roofline_s = s.flops / d.tensor_f16_flops;
    out.steps.push_back(std::move(s));
  }
  return out;
}

}  // namespace ptxserve::cuda
