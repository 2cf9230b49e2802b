#include "tests/cuda/gpu_test_util.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <mutex>
#include <random>
#include <utility>

#include "absl/strings/str_cat.h"
#include "engine/cuda/emulated_driver.h"
#include "engine/model/synthetic.h"
#include "gtest/gtest.h"

namespace ptxserve::cuda::testing {

absl::StatusOr<Model> SyntheticModel(const std::string& preset, DType dtype,
                                     const std::function<void(ModelConfig&)>& tweak,
                                     const std::string& tag) {
  // Written once per process, removed when it exits.
  struct Dirs {
    std::map<std::string, std::string> by_key;
    ~Dirs() {
      std::error_code ec;
      for (const auto& [k, d] : by_key) std::filesystem::remove_all(d, ec);
    }
  };
  static std::mutex mu;
  static Dirs dirs_holder;
  std::map<std::string, std::string>& dirs = dirs_holder.by_key;
  const std::string key =
      absl::StrCat(preset, "_", std::string(DTypeName(dtype)), tag.empty() ? "" : "_", tag);
  std::lock_guard<std::mutex> l(mu);
  auto it = dirs.find(key);
  if (it == dirs.end()) {
    absl::StatusOr<SyntheticSpec> spec = SyntheticPreset(preset);
    if (!spec.ok()) return spec.status();
    if (tweak) tweak(spec->config);
    const std::string dir = (std::filesystem::path(::testing::TempDir()) /
                             absl::StrCat("ptxserve_gpu_", ::getpid(), "_", key))
                                .string();
    if (absl::Status s = WriteSyntheticModel(dir, *spec, 7, dtype); !s.ok()) return s;
    it = dirs.emplace(key, dir).first;
  }
  return LoadModel(it->second);
}

absl::StatusOr<ModelWithTokenizer> SyntheticModelWithTokenizer(const std::string& preset,
                                                               DType dtype) {
  auto m = SyntheticModel(preset, dtype);
  if (!m.ok()) return m.status();
  ModelWithTokenizer r;
  r.model = std::make_unique<Model>(*std::move(m));
  auto t = Tokenizer::FromDir(r.model->dir);
  if (!t.ok()) return t.status();
  r.tokenizer = *std::move(t);
  return r;
}

StepBatch PrefillBatch(int rows, int64_t vocab, int min_len, uint32_t seed, int32_t block_size) {
  StepBatch batch;
  for (int s = 0; s < rows; ++s) {
    const std::vector<int32_t> prompt = Prompt(min_len + s, vocab, seed + s);
    batch.query_start.push_back(static_cast<int32_t>(batch.token_ids.size()));
    for (size_t i = 0; i < prompt.size(); ++i) {
      batch.token_ids.push_back(prompt[i]);
      batch.positions.push_back(static_cast<int32_t>(i));
      batch.slot_mapping.push_back(int64_t{s} * block_size + static_cast<int64_t>(i));
    }
    batch.seq_lens.push_back(static_cast<int32_t>(prompt.size()));
    batch.block_tables.push_back(s);
    batch.logits_rows.push_back(static_cast<int32_t>(batch.token_ids.size()) - 1);
  }
  batch.query_start.push_back(static_cast<int32_t>(batch.token_ids.size()));
  batch.max_blocks_per_seq = 1;
  return batch;
}

std::string Unavailable(const std::string& kind) {
  if (kind != "cuda") return "";
  static const std::string why = [] {
    absl::StatusOr<std::unique_ptr<DriverTable>> d = LoadCudaDriver();
    if (!d.ok()) return std::string(d.status().message());
    absl::StatusOr<std::unique_ptr<Device>> dev = Device::Open(*std::move(d));
    return dev.ok() ? std::string() : std::string(dev.status().message());
  }();
  return why;
}

StepBatch TwoBlockStep(int n, int32_t len, int64_t vocab, bool decode) {
  StepBatch b;
  b.query_start.push_back(0);
  b.max_blocks_per_seq = 2;
  for (int s = 0; s < n; ++s) {
    for (int32_t p = decode ? len - 1 : 0; p < len; ++p) {
      b.token_ids.push_back(static_cast<int32_t>(3 + (s * 31 + p) % (vocab - 3)));
      b.positions.push_back(p);
      b.slot_mapping.push_back(int64_t{2 * s + p / 16} * 16 + p % 16);
    }
    b.query_start.push_back(b.num_tokens());
    b.seq_lens.push_back(len);
    b.block_tables.push_back(2 * s);
    b.block_tables.push_back(2 * s + 1);
    b.logits_rows.push_back(b.num_tokens() - 1);
  }
  return b;
}

std::vector<int32_t> Prompt(int64_t n, int64_t vocab, uint32_t seed) {
  std::vector<int32_t> p(n);
  for (int64_t i = 0; i < n; ++i) {
    p[i] = static_cast<int32_t>(3 + (seed * 7919u + i * 104729u) % (vocab - 3));
  }
  return p;
}

int32_t ArgMax(const float* v, int64_t n) {
  int32_t best = 0;
  for (int64_t i = 1; i < n; ++i) {
    if (v[i] > v[best]) best = static_cast<int32_t>(i);
  }
  return best;
}

double TensorCoreLogitsTolerance(const Model& model) {
  const DType weights = model.tensors.layers.at(0).wq.dtype;
  if (weights == DType::kF32) return 0;
  const double u = weights == DType::kF16 ? 0x1p-11 : 0x1p-8;
  return (6.0 * static_cast<double>(model.config.num_layers) + 1) * u;
}

double QuantizedLogitsTolerance(const Model& model) {
  const DType kv = model.config.torch_dtype;
  const double kv_roundoff = kv == DType::kF16 ? 0x1p-11 : kv == DType::kBF16 ? 0x1p-8 : 0.0;
  const double layers = static_cast<double>(model.config.num_layers);
  return (4.0 * layers + 1) / 254 + 2.0 * layers * kv_roundoff;
}

double RelErr(const float* a, const float* b, int64_t n) {
  double diff = 0, mag = 0;
  for (int64_t i = 0; i < n; ++i) {
    diff = std::max(diff, std::abs(static_cast<double>(a[i]) - b[i]));
    mag = std::max(mag, std::abs(static_cast<double>(b[i])));
  }
  return diff / std::max(mag, 1e-30);
}

absl::StatusOr<GenResult> Generate(Backend& backend, const std::vector<GenRequest>& requests,
                                   int chunk, uint32_t block_seed, StepFn step) {
  const int64_t vocab = backend.config().vocab_size;
  const int32_t bs = backend.kv_config().block_size;
  if (!step) {
    step = [&backend, vocab](const StepBatch& b, std::vector<float>* logits,
                             std::vector<int32_t>* ids) {
      if (absl::Status s = backend.Step(b, logits); !s.ok()) return s;
      ids->clear();
      for (size_t r = 0; r < b.logits_rows.size(); ++r) {
        ids->push_back(ArgMax(logits->data() + r * vocab, vocab));
      }
      return absl::OkStatus();
    };
  }
  std::vector<int32_t> free_blocks(backend.kv_config().num_blocks);
  for (size_t i = 0; i < free_blocks.size(); ++i) free_blocks[i] = static_cast<int32_t>(i);
  std::shuffle(free_blocks.begin(), free_blocks.end(), std::mt19937(block_seed));

  struct Seq {
    std::vector<int32_t> tokens;
    int64_t cached = 0;
    std::vector<int32_t> table;
    int32_t generated = 0;
  };
  std::vector<Seq> seqs(requests.size());
  for (size_t i = 0; i < requests.size(); ++i) seqs[i].tokens = requests[i].prompt;
  GenResult out;
  out.tokens.resize(requests.size());
  for (int32_t stepno = 0;; ++stepno) {
    StepBatch b;
    std::vector<size_t> members, sampled;
    b.query_start.push_back(0);
    bool pending = false;
    for (size_t i = 0; i < seqs.size(); ++i) {
      Seq& s = seqs[i];
      if (s.generated >= requests[i].new_tokens) continue;
      pending = true;
      if (requests[i].start_step > stepno) continue;
      const int64_t n = std::min<int64_t>(chunk, s.tokens.size() - s.cached);
      while (static_cast<int64_t>(s.table.size()) * bs < s.cached + n) {
        if (free_blocks.empty()) return absl::ResourceExhaustedError("test ran out of KV blocks");
        s.table.push_back(free_blocks.back());
        free_blocks.pop_back();
      }
      for (int64_t j = 0; j < n; ++j) {
        const int64_t p = s.cached + j;
        b.token_ids.push_back(s.tokens[p]);
        b.positions.push_back(static_cast<int32_t>(p));
        b.slot_mapping.push_back(int64_t{s.table[p / bs]} * bs + p % bs);
      }
      s.cached += n;
      if (s.cached == static_cast<int64_t>(s.tokens.size())) {
        b.logits_rows.push_back(b.num_tokens() - 1);
        sampled.push_back(i);
      }
      b.seq_lens.push_back(static_cast<int32_t>(s.cached));
      b.query_start.push_back(b.num_tokens());
      b.max_blocks_per_seq = std::max<int32_t>(b.max_blocks_per_seq, s.table.size());
      members.push_back(i);
    }
    if (!pending) break;
    if (members.empty()) continue;
    for (size_t i : members) {
      for (int32_t j = 0; j < b.max_blocks_per_seq; ++j) {
        const std::vector<int32_t>& t = seqs[i].table;
        b.block_tables.push_back(j < static_cast<int32_t>(t.size()) ? t[j] : 0);
      }
    }
    std::vector<float> logits;
    std::vector<int32_t> ids;
    if (absl::Status s = step(b, &logits, &ids); !s.ok()) return s;
    if (ids.size() != sampled.size()) {
      return absl::InternalError(absl::StrCat(ids.size(), " ids for ", sampled.size(), " rows"));
    }
    for (size_t r = 0; r < sampled.size(); ++r) {
      Seq& s = seqs[sampled[r]];
      s.tokens.push_back(ids[r]);
      ++s.generated;
      out.tokens[sampled[r]].push_back(ids[r]);
    }
    out.logits.push_back(std::move(logits));
    out.batches.push_back(std::move(b));
  }
  return out;
}

StepFn DeviceGreedy(GpuBackend& backend) {
  return [&backend](const StepBatch& b, std::vector<float>* logits, std::vector<int32_t>* ids) {
    logits->clear();
    return backend.StepSampled(b, std::vector<RowSampling>(b.logits_rows.size()), ids);
  };
}

std::string EmulatedDeviceUnderTest() {
  const char* env = std::getenv("PTXSERVE_EMULATED_DEVICE");
  return env != nullptr && *env != '\0' ? std::string(env) : std::string("small");
}

absl::StatusOr<std::unique_ptr<GpuBackend>> EmulatedBackend(const Model& model,
                                                            const KvCacheConfig& kv,
                                                            GpuBackendOptions options) {
  options.log_progress = false;
  options.emulated_device = EmulatedDeviceUnderTest();
  return CreateGpuBackend(model, kv, "emulated", std::move(options));
}

}  // namespace ptxserve::cuda::testing
