// GpuBackend construction from its parts (weights, K/V pools, step buffers, kernel set,
// decode graphs), its counters, and opening a device for it. The steps are gpu_step.cc.
#include "engine/cuda/gpu_backend.h"

#include <algorithm>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "engine/cuda/emulated_driver.h"
#include "engine/cuda/kernel_launch.h"
#include "engine/model/model_checks.h"
#include "engine/util/log.h"

namespace ptxserve::cuda {
namespace {

// The shape every backend needs, then the kernels' limits.
absl::Status CheckConfig(const ModelConfig& c, const ModelTensors& t, const KvCacheConfig& kv) {
  if (absl::Status s = CheckModelShape(c, t); !s.ok()) return s;
  if (c.head_dim > 256) {
    return absl::InvalidArgumentError(
        absl::StrFormat("head_dim %d: the GPU kernels take a head_dim of at most 256", c.head_dim));
  }
  if (kv.block_size <= 0 || kv.block_size > 1024) {
    return absl::InvalidArgumentError(
        absl::StrFormat("KV block_size %d: want 1..1024", kv.block_size));
  }
  return absl::OkStatus();
}

}  // namespace

GpuBackend::GpuBackend(const ModelConfig& config, const KvCacheConfig& kv,
                       std::unique_ptr<Device> device, GpuBackendOptions options)
    : config_(config), kv_(kv), options_(std::move(options)), device_(std::move(device)) {}

GpuBackend::~GpuBackend() {
  // Outstanding work (a failed step's) finishes before its buffers go.
  if (device_ != nullptr) (void)device_->Synchronize("backend teardown");
}

absl::StatusOr<std::unique_ptr<GpuBackend>> GpuBackend::Create(const Model& model,
                                                               const KvCacheConfig& kv,
                                                               std::unique_ptr<Device> device,
                                                               GpuBackendOptions options) {
  if (device == nullptr) return absl::InvalidArgumentError("GpuBackend: no device");
  if (absl::Status s = CheckConfig(model.config, model.tensors, kv); !s.ok()) return s;
  std::unique_ptr<GpuBackend> b(
      new GpuBackend(model.config, kv, std::move(device), std::move(options)));
  if (absl::Status s = b->Init(model); !s.ok()) return s;
  return b;
}

absl::Status GpuBackend::Init(const Model& model) {
  const ModelConfig& c = config_;
  const DeviceInfo& info = device_->info();
  if (info.cc_major < 8) {
    return absl::FailedPreconditionError(absl::StrCat(info.name, " has compute capability ",
                                                      info.cc_major, ".", info.cc_minor,
                                                      "; the generated kernels need 8.0 or newer"));
  }
  heads_ = PadHeads(c);
  if (heads_.padded != heads_.dim && options_.log_progress) {
    PTX_LOG(INFO) << "head_dim " << heads_.dim << " runs padded to " << heads_.padded
                  << " on the device";
  }
  kernel_cache_ = std::make_unique<KernelCache>(device_.get(), options_.on_compile);
  absl::StatusOr<DeviceWeights> weights =
      UploadWeights(model, heads_, *device_, options_.log_progress);
  if (!weights.ok()) return weights.status();
  weights_ = *std::move(weights);
  buffers_ = std::make_unique<StepBuffers>(device_.get(), config_, heads_.padded);
  const int64_t tokens = std::max<int32_t>(options_.max_tokens, 1);
  const int64_t seqs = std::max<int32_t>(options_.max_seqs, 1);
  const int64_t blocks_per_seq = (c.max_position_embeddings + kv_.block_size - 1) / kv_.block_size;
  const size_t meta = LayoutMeta(tokens, seqs, blocks_per_seq, seqs).total;
  if (absl::Status s = buffers_->Reserve(tokens, std::min(tokens, seqs), meta); !s.ok()) return s;
  absl::StatusOr<KvPools> pools = AllocateKvPools(c, heads_.padded, options_.kv_memory_fraction,
                                                  &kv_, *device_, options_.log_progress);
  if (!pools.ok()) return pools.status();
  kv_pools_ = *std::move(pools);
  if (absl::Status s = InitKernels(); !s.ok()) return s;
  if (options_.cuda_graphs) {
    DecodeGraphOptions g;
    g.max_batch = options_.cuda_graph_max_batch;
    g.limit = options_.cuda_graph_limit;
    // Without warm-up a key's first run also compiles its kernels, which a capture cannot.
    g.eager_runs = std::max(options_.cuda_graph_eager_runs, options_.warmup ? 0 : 1);
    g.fixed_partition = options_.attention_partition;
    graphs_ = std::make_unique<DecodeGraphs>(device_.get(), kernel_cache_.get(), g, kv_.block_size);
  }
  return device_->Synchronize("backend initialisation");
}

absl::Status GpuBackend::InitKernels() {
  const DeviceInfo& info = device_->info();
  absl::StatusOr<ptx::Target> target =
      KernelTarget(info.cc_major, info.cc_minor, options_.ptx_version);
  if (!target.ok()) return target.status();
  absl::StatusOr<KernelSet> set =
      BuildKernelSet(config_, weights_.types, kv_, *target, info.num_sms);
  if (!set.ok()) return set.status();
  kernels_ = std::make_unique<KernelSet>(*std::move(set));
  if (!options_.warmup) return absl::OkStatus();
  // The emulated device compiles on one thread: its JIT is this process.
  const int threads = static_cast<int>(
      std::clamp<unsigned>(std::thread::hardware_concurrency(), 1, info.emulated ? 1 : 4));
  return CompileKernelSet(*kernels_, *kernel_cache_, threads, options_.log_progress);
}

bool GpuBackend::CanSampleOnDevice(const SamplingParams& p) const {
  // The sampling kernel and SequenceSampler implement the same canonical algorithm
  // (kernels/sampling.h), greedy or not, and the logprobs kernel ComputeLogprobs' rules.
  // Penalties too: the penalties kernel applies ApplyPenalties' float operations to the
  // history the engine sends (RowSampling::penalties). The sampling kernel's integer
  // weights need a vocabulary below 2^24; a record holds kLogprobsTop entries.
  return p.logprobs >= 0 && p.logprobs <= kLogprobsTop && config_.vocab_size < (int64_t{1} << 24);
}

KernelStats GpuBackend::kernel_stats() const {
  KernelStats k;
  const KernelCacheStats c = kernel_cache_->stats();
  k.launches = c.launches;
  k.cache_hits = c.hits;
  k.cache_misses = c.misses;
  const TransferStats t = device_->transfers();
  k.h2d_bytes = t.h2d_bytes;
  k.d2h_bytes = t.d2h_bytes;
  k.h2d_transfers = t.h2d_count;
  k.d2h_transfers = t.d2h_count;
  const GraphStats g = graph_stats();
  k.graph_captures = g.captures;
  k.graph_replays = g.replays;
  k.graphs_live = g.live;
  k.device_weight_bytes = static_cast<int64_t>(weights_.bytes);  // both fixed at Create
  k.device_kv_bytes = static_cast<int64_t>(kv_pools_.bytes);
  return k;
}

absl::StatusOr<std::unique_ptr<GpuBackend>> CreateGpuBackend(const Model& model,
                                                             const KvCacheConfig& kv,
                                                             absl::string_view kind,
                                                             GpuBackendOptions options) {
  absl::StatusOr<std::unique_ptr<DriverTable>> driver;
  if (kind == "cuda") {
    driver = LoadCudaDriver();
  } else if (kind == "emulated") {
    absl::StatusOr<EmulatedDeviceOptions> profile = EmulatedDeviceProfile(options.emulated_device);
    if (!profile.ok()) return profile.status();
    driver = LoadEmulatedDriver(*profile);
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat("GPU backend kind \"", kind, "\": want cuda or emulated"));
  }
  if (!driver.ok()) return driver.status();
  absl::StatusOr<std::unique_ptr<Device>> device = Device::Open(*std::move(driver));
  if (!device.ok()) return device.status();
  if (options.log_progress) {
    const DeviceInfo& i = (*device)->info();
    PTX_LOG(INFO) << "device " << i.ordinal << ": " << i.name << " (sm_" << i.cc_major << i.cc_minor
                  << ", " << i.num_sms << " SMs, " << (i.total_memory >> 20) << " MiB, driver "
                  << i.driver << " " << i.driver_version << ")";
  }
  return GpuBackend::Create(model, kv, *std::move(device), std::move(options));
}

}  // namespace ptxserve::cuda
