// 60 greedy tokens of f16 and bf16 models on the emulated GPU against the CPU backend, with
// the GEMM forms the backend picks, tensor cores among them (kernels/gemm.h), and flash
// attention for the steps with prefill chunks (kernels/flash_attention.h).
//
// Which GEMMs run on tensor cores depends on the device: GemmConfigFor weighs a step's rows
// against the SM count, so on the h100 profile (132 SMs) the small models' 40-row chunks keep
// the GEMV. Every step's tensor-core GEMM launches must be the ones its forms in the backend's
// kernel set have for its rows; on the default profile (8 SMs) the steps must reach them.
//
// Both backends run the same steps (the CPU's tokens feed both: teacher forcing), so every
// step compares logits over the same context. Prompts come in chunks of up to 40 rows next
// to decoding sequences: steps mix prefill chunks with decode rows, and contexts reach 100.
//
// The same for q8_0 and q4_0 GGUFs (`ptxserve quantize`'s encoding) of the models, and for
// its fp8, AWQ and GPTQ checkpoints (loaded as fp8_e4m3 and int4_g128 blocks): the GPU runs
// its quantized GEMV (kernels/gemm_quant.h) on the blocks as stored.
//
// Tolerance: testing::TensorCoreLogitsTolerance, (6 L + 1) u of the largest logit for L
// layers and the weights' unit roundoff u, and for q8_0/q4_0 weights
// testing::QuantizedLogitsTolerance, (4 L + 1) / 254 + 2 L u_kv (both derived in gpu_test_util.h).
// fp8_e4m3 and int4_g128 have no integer kernel on the CPU: it widens them to f32 exactly
// (engine/cpu/gemm_quant.cc), so both backends compute the f32 model over the decoded
// weights and the bound is the one below against the decoded model, (4 L + 1) K 2^-24 +
// 2 L u_kv.
// Steps of 32 rows and more run block weights on tensor cores (kernels/gemm_quant_mma.cc):
// each GEMM input is rounded to f16 and so is each weight d * code, which f16 does not always
// hold (q8_0's f16 d times an 8-bit q has up to 18 significant bits, q4_0's d (q - 8) up to
// 14, int4's d (q - z) up to 19, fp8's f32 scale times an E4M3 value up to 28): each product
// is off by at most (2 u + u^2) |x w|, u = 2^-11, so against the decoded model those steps
// add (4 L + 1)(2 u + u^2) to the bound, and so do all later steps, whose attention reads the
// K/V rows those steps wrote (weights below f16's normal range, |w| < 2^-14, lose
// at most 2^-25 |x| each instead, far less). Against the CPU's integer kernel (q8_0, q4_0)
// 2 u stays far inside its 1/254 per GEMM input.
// A step may pick a different token only where the CPU's best two logits lie within twice its
// absolute size (a near-tie: every one is printed). The largest error seen is printed beside
// it.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "engine/cpu/cpu_backend.h"
#include "engine/cuda/emulated_driver.h"
#include "engine/cuda/gpu_backend.h"
#include "engine/cuda/kernel_set.h"
#include "engine/model/gguf_export.h"
#include "engine/model/gguf_writer.h"
#include "engine/model/hf_quant_export.h"
#include "gtest/gtest.h"
#include "kernels/flash_attention.h"
#include "kernels/gemm.h"
#include "kernels/gemm_quant.h"
#include "tests/cpu/test_model.h"
#include "tests/cuda/gpu_test_util.h"

namespace ptxserve::cuda {
namespace {

using testing::GenRequest;
using testing::Prompt;

// A copy of `m` whose every tensor is converted to `dtype` (an f16 or bf16 checkpoint of it).
Model CastModel(const Model& m, DType dtype) {
  Model out = ::ptxserve::testing::ConvertTensors(
      m, /*vectors_too=*/true, [dtype](Tensor& t, std::vector<uint8_t>& bytes) {
        std::vector<float> f(static_cast<size_t>(t.numel()));
        ConvertToFloat(t.dtype, t.data, f.size(), f.data());
        bytes.resize(f.size() * DTypeSize(dtype));
        ConvertFromFloat(dtype, f.data(), f.size(), bytes.data());
        t.dtype = dtype;
      });
  out.config.torch_dtype = dtype;
  return out;
}

// The best two entries of a logits row.
struct TopTwo {
  int32_t first = 0;
  float gap = 0;  // best minus second best
};
TopTwo BestTwo(const float* v, int64_t n) {
  const int32_t best = testing::ArgMax(v, n);
  float second = -INFINITY;
  for (int64_t i = 0; i < n; ++i) {
    if (i != best) second = std::max(second, v[i]);
  }
  return {best, v[best] - second};
}

// The tensor-core GEMM launches of a step of `tokens` rows, `rows` of them wanted as logits:
// RunForward's GEMMs (engine/model/forward.cc), each in the form GemmForm gives its rows in
// `k`. Forms with a fused RMSNorm are GEMVs, and block weights run the quantized GEMV.
int64_t TensorCoreGemms(const KernelSet& k, int64_t layers, int64_t tokens, int64_t rows) {
  const auto on_tensor_cores = [](const GemmSlots& g, int64_t m) -> int64_t {
    const int form = GemmForm(m);
    return !g.quant && g.slot[form].used() && g.cfg[form].tensor_cores ? 1 : 0;
  };
  const int64_t mlp =
      k.fused_gate_up ? on_tensor_cores(k.gate_up, tokens) : 2 * on_tensor_cores(k.gate, tokens);
  const int64_t per_layer = on_tensor_cores(k.qkv, tokens) + on_tensor_cores(k.o, tokens) + mlp +
                            on_tensor_cores(k.down, tokens);
  return layers * per_layer + (rows > 0 ? on_tensor_cores(k.lm_head, rows) : 0);
}

struct Outcome {
  int steps = 0, rows = 0, near_ties = 0;
  double worst_error = 0;        // largest |gpu - cpu| / max |cpu| over the rows
  double worst_exact_error = 0;  // the same against the decoded model (block weights)
  // Both over the steps from the first whose block weights ran on tensor cores.
  double worst_mma_error = 0, worst_mma_exact_error = 0;
};

Outcome RunTeacherForced(const Model& model, const std::string& name) {
  Outcome o;
  KvCacheConfig kv;
  kv.num_blocks = 64;
  kv.block_size = 16;
  kv.dtype = model.config.torch_dtype;
  auto cpu = CpuBackend::Create(model, kv);
  EXPECT_TRUE(cpu.ok()) << cpu.status();
  GpuBackendOptions opts;
  opts.log_progress = false;
  opts.emulated_device = testing::EmulatedDeviceUnderTest();
  auto gpu = CreateGpuBackend(model, kv, "emulated", opts);
  // Counters tell which launches ran on tensor cores.
  SetEmulatedKernelCounters(true);
  TakeEmulatedKernelCounters();
  int64_t tensor_core_launches = 0, quant_gemm_launches = 0, quant_mma_launches = 0,
          flash_launches = 0;
  int64_t chosen_tensor_core_launches = 0;  // what the kernel set's forms say (TensorCoreGemms)
  const bool quantized = model.tensors.layers.at(0).wq.quant != QuantType::kNone;
  EXPECT_TRUE(gpu.ok()) << gpu.status();
  if (!cpu.ok() || !gpu.ok()) return o;
  // Block weights: the CPU backend over the decoded model is also the GPU's exact reference,
  // since the GPU's GEMV is the f32 GEMM over those values and differs from the CPU's f32
  // GEMM only in f32 rounding (the order of its sums, the scale applied per block): at most
  // about K 2^-24 of sum |x w| per GEMM of depth K, at the same 4 L + 1 points. Over an
  // f16/bf16 cache flash attention adds two roundings per layer to the cache's type (q and
  // the softmax weights; the CPU keeps both in f32): 2 L u_kv. That bound, with the deepest
  // K, catches what the integer rounding's looser tolerance would hide.
  const ModelConfig& c = model.config;
  const int64_t deepest = std::max({c.hidden_size, c.intermediate_size, c.num_heads * c.head_dim});
  const double kv_roundoff = kv.dtype == DType::kF16    ? 0x1p-11
                             : kv.dtype == DType::kBF16 ? 0x1p-8
                                                        : 0.0;
  const double layers = static_cast<double>(c.num_layers);
  const double exact_tolerance =
      (4.0 * layers + 1) * static_cast<double>(deepest) * 0x1p-24 + 2.0 * layers * kv_roundoff;
  // The quantized tensor-core form's f16 roundings of inputs and weights (see the top).
  const double mma_tolerance = (4.0 * layers + 1) * (2 * 0x1p-11 + 0x1p-22);
  const Model decoded = quantized ? ::ptxserve::testing::DequantizedModel(model) : Model{};
  std::unique_ptr<CpuBackend> exact;
  if (quantized) {
    auto e = CpuBackend::Create(decoded, kv);
    EXPECT_TRUE(e.ok()) << e.status();
    if (!e.ok()) return o;
    exact = *std::move(e);
  }
  std::vector<float> exact_logits;
  // The backend's kernels (GpuBackend::InitKernels builds the same set: every weight in the
  // model's dtype, the device's target and SM count), for the GEMM forms it chose.
  const DeviceInfo& device = (*gpu)->device_info();
  absl::StatusOr<ptx::Target> target =
      KernelTarget(device.cc_major, device.cc_minor, opts.ptx_version);
  EXPECT_TRUE(target.ok()) << target.status();
  if (!target.ok()) return o;
  absl::StatusOr<KernelSet> kernel_set = BuildKernelSet(
      c, WeightTypes::Uniform(ToElemType(c.torch_dtype)), kv, *target, device.num_sms);
  EXPECT_TRUE(kernel_set.ok()) << kernel_set.status();
  if (!kernel_set.ok()) return o;

  const int64_t vocab = model.config.vocab_size;
  const QuantType q = model.tensors.layers.at(0).wq.quant;
  const bool widened_on_cpu = q == QuantType::kFp8E4M3 || q == QuantType::kInt4G128;
  const double tolerance = widened_on_cpu ? exact_tolerance
                           : quantized    ? testing::QuantizedLogitsTolerance(model)
                                          : testing::TensorCoreLogitsTolerance(model);
  std::vector<float> gpu_logits;
  bool mma_seen = false;  // a step so far ran block weights on tensor cores
  auto step = [&](const StepBatch& b, std::vector<float>* logits, std::vector<int32_t>* ids) {
    if (absl::Status s = (*cpu)->Step(b, logits); !s.ok()) return s;
    if (absl::Status s = (*gpu)->Step(b, &gpu_logits); !s.ok()) return s;
    if (quantized) {
      if (absl::Status s = exact->Step(b, &exact_logits); !s.ok()) return s;
    }
    int64_t step_tensor_core = 0;
    bool step_mma = false;  // block weights ran on tensor cores in this step
    for (const emu::KernelCounters& c : TakeEmulatedKernelCounters()) {
      if (c.kernel == kernels::kGemmEntry && c.tensor_flops > 0) ++step_tensor_core;
      if (c.kernel == kernels::kQuantGemmEntry) ++quant_gemm_launches;
      if (c.kernel == kernels::kQuantGemmEntry && c.tensor_flops > 0) {
        ++quant_mma_launches;
        step_mma = true;
      }
      if (c.kernel == kernels::kFlashAttentionEntry && c.tensor_flops > 0) ++flash_launches;
    }
    const int64_t chosen = quantized ? 0
                                     : TensorCoreGemms(*kernel_set, c.num_layers, b.num_tokens(),
                                                       static_cast<int64_t>(b.logits_rows.size()));
    EXPECT_EQ(step_tensor_core, chosen)
        << name << " step " << o.steps + 1 << " (" << b.num_tokens()
        << " rows): tensor-core GEMM launches against the forms chosen for its rows";
    tensor_core_launches += step_tensor_core;
    chosen_tensor_core_launches += chosen;
    ++o.steps;
    ids->clear();
    mma_seen = mma_seen || step_mma;
    const double step_exact = exact_tolerance + (mma_seen ? mma_tolerance : 0.0);
    const double step_tolerance = widened_on_cpu ? step_exact : tolerance;
    for (size_t r = 0; r < b.logits_rows.size(); ++r) {
      const float* want = logits->data() + r * vocab;
      const float* got = gpu_logits.data() + r * vocab;
      const double error = testing::RelErr(got, want, vocab);
      o.worst_error = std::max(o.worst_error, error);
      if (mma_seen) o.worst_mma_error = std::max(o.worst_mma_error, error);
      EXPECT_LE(error, step_tolerance) << name << " step " << o.steps << " row " << r;
      if (quantized) {
        const double exact_error = testing::RelErr(got, exact_logits.data() + r * vocab, vocab);
        o.worst_exact_error = std::max(o.worst_exact_error, exact_error);
        if (mma_seen) o.worst_mma_exact_error = std::max(o.worst_mma_exact_error, exact_error);
        EXPECT_LE(exact_error, step_exact) << name << " step " << o.steps << " row " << r;
      }
      const TopTwo cpu_top = BestTwo(want, vocab);
      const int32_t gpu_top = testing::ArgMax(got, vocab);
      if (gpu_top != cpu_top.first) {
        double magnitude = 0;
        for (int64_t i = 0; i < vocab; ++i)
          magnitude = std::max<double>(magnitude, std::abs(want[i]));
        const double allowed = 2 * step_tolerance * magnitude;
        std::printf(
            "[ near-tie ] %s step %d row %zu: cpu picks %d, gpu %d; cpu gap %.3g, allowed %.3g\n",
            name.c_str(), o.steps, r, cpu_top.first, gpu_top, want[cpu_top.first] - want[gpu_top],
            allowed);
        EXPECT_LE(want[cpu_top.first] - want[gpu_top], allowed) << name << " step " << o.steps;
        ++o.near_ties;
      }
      ids->push_back(cpu_top.first);
      ++o.rows;
    }
    return absl::OkStatus();
  };
  // Three sequences: a 90-token prompt in chunks of 40 beside two short ones decoding.
  const std::vector<GenRequest> requests = {{Prompt(90, vocab, 21), 1, 60},
                                            {Prompt(5, vocab, 22), 0, 60},
                                            {Prompt(17, vocab, 23), 2, 60}};
  absl::StatusOr<testing::GenResult> r =
      testing::Generate(**cpu, requests, /*chunk=*/40, /*block_seed=*/3, step);
  EXPECT_TRUE(r.ok()) << r.status();
  // The tolerance the steps were held to: widened from the first quantized tensor-core step
  // on where the CPU widens the blocks to f32 (step_tolerance above).
  const std::string applied =
      widened_on_cpu && mma_seen
          ? absl::StrFormat("tolerance %.2e, %.2e from the first quantized tensor-core step",
                            tolerance, exact_tolerance + mma_tolerance)
          : absl::StrFormat("tolerance %.2e", tolerance);
  std::printf(
      "[ parity ] %s: %d steps, %d rows, worst logit error %.2e of the largest logit "
      "(%s), %d near-ties, %lld tensor-core GEMM launches (%lld chosen on %s, %d "
      "SMs), %lld quantized GEMV launches, %lld flash attention launches\n",
      name.c_str(), o.steps, o.rows, o.worst_error, applied.c_str(), o.near_ties,
      static_cast<long long>(tensor_core_launches),
      static_cast<long long>(chosen_tensor_core_launches),
      testing::EmulatedDeviceUnderTest().c_str(), device.num_sms,
      static_cast<long long>(quant_gemm_launches), static_cast<long long>(flash_launches));
  if (quantized) {
    const std::string widened =
        mma_seen ? absl::StrFormat("; %.2e from the first quantized tensor-core step",
                                   exact_tolerance + mma_tolerance)
                 : "";
    std::printf(
        "[ parity ] %s against the decoded f32 model: worst logit error %.2e (tolerance %.2e: "
        "4 L + 1 sums of depth %lld, 2 L roundings to the cache's type%s)\n",
        name.c_str(), o.worst_exact_error, exact_tolerance, static_cast<long long>(deepest),
        widened.c_str());
    std::printf(
        "[ parity ] %s: %lld quantized tensor-core GEMM launches; from the first one's step, worst "
        "logit "
        "error %.2e against the CPU, %.2e against the decoded model (tolerance %.2e + %.2e)\n",
        name.c_str(), static_cast<long long>(quant_mma_launches), o.worst_mma_error,
        o.worst_mma_exact_error, exact_tolerance, mma_tolerance);
  }
  SetEmulatedKernelCounters(false);
  if (quantized) {
    EXPECT_GT(quant_gemm_launches, 0) << name << ": no step ran the quantized GEMV";
    // On the default profile the chunk steps (40 prompt rows beside decode rows: the 64-row
    // form) run the wider GEMMs of block weights on tensor cores (gemm_quant.h's
    // QuantGemmFormFor; it weighs the GEMV's CTAs against the SM count, so on 132 SMs these
    // tiny shapes may stay GEMVs).
    if (testing::EmulatedDeviceUnderTest() == "small") {
      EXPECT_GT(quant_mma_launches, 0) << name << ": no step ran the quantized tensor-core GEMM";
    }
  } else {
    // Each step ran the forms chosen for it (above); on the default profile some of them are
    // on tensor cores, so the tensor-core GEMM's parity is checked at least there.
    if (testing::EmulatedDeviceUnderTest() == "small") {
      EXPECT_GT(tensor_core_launches, 0) << name << ": no step ran the tensor-core GEMM";
    }
    // The prefill chunks (and the decode rows beside them) ran on tensor cores too.
    EXPECT_GT(flash_launches, 0) << name << ": no step ran flash attention";
  }
  return o;
}

// (model, dtype): "tinystories-656k" (the trained test model, converted) or a synthetic preset.
class GpuGreedyParity : public ::testing::TestWithParam<std::tuple<std::string, DType>> {
 protected:
  void SetUp() override {
    if (std::string why = testing::Unavailable("emulated"); !why.empty()) GTEST_SKIP() << why;
  }
};

TEST_P(GpuGreedyParity, SixtyTokens) {
  const auto& [name, dtype] = GetParam();
  const std::string label = absl::StrCat(name, " ", std::string(DTypeName(dtype)));
  if (name != "tinystories-656k") {
    absl::StatusOr<Model> m = testing::SyntheticModel(name, dtype);
    ASSERT_TRUE(m.ok()) << m.status();
    RunTeacherForced(*m, label);
    return;
  }
  const std::string dir = testing::SharedModelsDir() + "/" + name;
  if (!std::filesystem::exists(dir + "/model.safetensors")) {
    GTEST_SKIP() << "test model absent: " << dir;
  }
  absl::StatusOr<Model> m = LoadModel(dir);
  ASSERT_TRUE(m.ok()) << m.status();
  RunTeacherForced(CastModel(*m, dtype), label);
}

INSTANTIATE_TEST_SUITE_P(Models, GpuGreedyParity,
                         ::testing::Combine(::testing::Values("tinystories-656k", "gqa1", "gqa4",
                                                              "gqa8", "hd128"),
                                            ::testing::Values(DType::kF16, DType::kBF16)),
                         [](const auto& info) {
                           std::string model = std::get<0>(info.param);
                           std::replace(model.begin(), model.end(), '-', '_');
                           return model + "_" + std::string(DTypeName(std::get<1>(info.param)));
                         });

// (model, block format): the model written as a GGUF of that format (or a checkpoint
// directory of fp8/awq/gptq) and loaded back, the way `ptxserve quantize` makes one.
// tinystories-656k pads its 16-wide heads (q/k/v block rows scattered, o decoded to f32);
// hd128 reads every projection as blocks (q4_0 only: the emulator takes minutes on it, and
// the layout is the format's only difference).
class GpuQuantGreedyParity : public ::testing::TestWithParam<std::tuple<std::string, std::string>> {
 protected:
  void SetUp() override {
    if (std::string why = testing::Unavailable("emulated"); !why.empty()) GTEST_SKIP() << why;
  }
};

TEST_P(GpuQuantGreedyParity, SixtyTokens) {
  const auto& [name, format] = GetParam();
  absl::StatusOr<Model> m;
  if (name == "tinystories-656k") {
    const std::string dir = testing::SharedModelsDir() + "/" + name;
    if (!std::filesystem::exists(dir + "/model.safetensors")) {
      GTEST_SKIP() << "test model absent: " << dir;
    }
    m = LoadModel(dir);
  } else {
    m = testing::SyntheticModel(name, DType::kF32);
  }
  ASSERT_TRUE(m.ok()) << m.status();
  if (format == "fp8" || format == "awq" || format == "gptq") {
    const HfQuantization::Method method = format == "fp8"   ? HfQuantization::Method::kFp8
                                          : format == "awq" ? HfQuantization::Method::kAwq
                                                            : HfQuantization::Method::kGptq;
    const std::string dir = absl::StrCat(::testing::TempDir(), "/parity-", name, "-", format);
    ASSERT_TRUE(WriteHfQuantized(*m, method, dir).ok());
    absl::StatusOr<Model> q = LoadModel(dir);
    ASSERT_TRUE(q.ok()) << q.status();
    ASSERT_EQ(q->tensors.layers.at(0).w_down.quant,
              format == "fp8" ? QuantType::kFp8E4M3 : QuantType::kInt4G128);
    RunTeacherForced(*q, absl::StrCat(name, " ", format));
    std::filesystem::remove_all(dir);
    return;
  }
  GgufWriter w;
  ASSERT_TRUE(AddModelToGguf(*m, *ParseGgufWeightType(format), name, &w).ok());
  const std::string path =
      absl::StrCat(::testing::TempDir(), "/parity-", name, "-", format, ".gguf");
  ASSERT_TRUE(w.Write(path).ok());
  absl::StatusOr<Model> q = LoadModel(path);
  ASSERT_TRUE(q.ok()) << q.status();
  ASSERT_EQ(QuantName(q->tensors.layers.at(0).w_down.quant), format);
  RunTeacherForced(*q, absl::StrCat(name, " ", format));
  std::filesystem::remove(path);
}

INSTANTIATE_TEST_SUITE_P(Models, GpuQuantGreedyParity,
                         ::testing::Values(std::tuple{"tinystories-656k", "q8_0"},
                                           std::tuple{"tinystories-656k", "q4_0"},
                                           std::tuple{"tinystories-656k", "fp8"},
                                           std::tuple{"tinystories-656k", "awq"},
                                           std::tuple{"tinystories-656k", "gptq"},
                                           std::tuple{"hd128", "q4_0"}),
                         [](const auto& info) {
                           std::string model = std::get<0>(info.param);
                           std::replace(model.begin(), model.end(), '-', '_');
                           return model + "_" + std::get<1>(info.param);
                         });

}  // namespace
}  // namespace ptxserve::cuda
