// 60 greedy tokens of f16 and bf16 models on the emulated GPU against the CPU backend, with
// the GEMM forms the backend picks, tensor cores among them (kernels/gemm.h), and flash
// attention for the steps with prefill chunks (kernels/flash_attention.h).
//
// Both backends run the same steps (the CPU's tokens feed both: teacher forcing), so every
// step compares logits over the same context. Prompts come in chunks of up to 40 rows next
// to decoding sequences: steps mix prefill chunks with decode rows, and contexts reach 100.
//
// Tolerance: testing::TensorCoreLogitsTolerance, (6 L + 1) u of the largest logit for L
// layers and the weights' unit roundoff u (derived in gpu_test_util.h). A step may pick a
// different token only where the CPU's best two logits lie within twice its absolute size
// (a near-tie: every one is printed). The largest error seen is printed beside it.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "engine/cpu/cpu_backend.h"
#include "engine/cuda/emulated_driver.h"
#include "engine/cuda/gpu_backend.h"
#include "gtest/gtest.h"
#include "kernels/flash_attention.h"
#include "kernels/gemm.h"
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

struct Outcome {
  int steps = 0, rows = 0, near_ties = 0;
  double worst_error = 0;  // largest |gpu - cpu| / max |cpu| over the rows
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
  int64_t tensor_core_launches = 0, flash_launches = 0;
  EXPECT_TRUE(gpu.ok()) << gpu.status();
  if (!cpu.ok() || !gpu.ok()) return o;

  const int64_t vocab = model.config.vocab_size;
  const double tolerance = testing::TensorCoreLogitsTolerance(model);
  std::vector<float> gpu_logits;
  auto step = [&](const StepBatch& b, std::vector<float>* logits, std::vector<int32_t>* ids) {
    if (absl::Status s = (*cpu)->Step(b, logits); !s.ok()) return s;
    if (absl::Status s = (*gpu)->Step(b, &gpu_logits); !s.ok()) return s;
    for (const emu::KernelCounters& c : TakeEmulatedKernelCounters()) {
      if (c.kernel == kernels::kGemmEntry && c.tensor_flops > 0) ++tensor_core_launches;
      if (c.kernel == kernels::kFlashAttentionEntry && c.tensor_flops > 0) ++flash_launches;
    }
    ++o.steps;
    ids->clear();
    for (size_t r = 0; r < b.logits_rows.size(); ++r) {
      const float* want = logits->data() + r * vocab;
      const float* got = gpu_logits.data() + r * vocab;
      const double error = testing::RelErr(got, want, vocab);
      o.worst_error = std::max(o.worst_error, error);
      EXPECT_LE(error, tolerance) << name << " step " << o.steps << " row " << r;
      const TopTwo cpu_top = BestTwo(want, vocab);
      const int32_t gpu_top = testing::ArgMax(got, vocab);
      if (gpu_top != cpu_top.first) {
        double magnitude = 0;
        for (int64_t i = 0; i < vocab; ++i)
          magnitude = std::max<double>(magnitude, std::abs(want[i]));
        const double allowed = 2 * tolerance * magnitude;
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
  std::printf(
      "[ parity ] %s: %d steps, %d rows, worst logit error %.2e of the largest logit "
      "(tolerance %.2e), %d near-ties, %lld tensor-core GEMM launches, %lld flash attention "
      "launches\n",
      name.c_str(), o.steps, o.rows, o.worst_error, tolerance, o.near_ties,
      static_cast<long long>(tensor_core_launches), static_cast<long long>(flash_launches));
  SetEmulatedKernelCounters(false);
  EXPECT_GT(tensor_core_launches, 0) << name << ": no step ran the tensor-core GEMM";
  // The prefill chunks (and the decode rows beside them) ran on tensor cores too.
  EXPECT_GT(flash_launches, 0) << name << ": no step ran flash attention";
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

}  // namespace
}  // namespace ptxserve::cuda
