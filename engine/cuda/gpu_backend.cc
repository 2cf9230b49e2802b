// GpuBackend construction: config checks, the padded head layout, K/V pools, the
// preallocated buffers, counters, and opening a device for it.
#include "engine/cuda/gpu_backend.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "engine/cuda/emulated_driver.h"
#include "engine/cuda/gpu_backend_internal.h"
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
  // Heads padded to the kernels' 32-element granularity. Rotate-half pairs (i, i + d/2)
  // become (i, i + dp/2); interleaved pairs keep their indices.
  const int64_t d = c.head_dim;
  dp_ = PaddedHeadDim(d);
  pad_.resize(d);
  for (int64_t j = 0; j < d; ++j) {
    pad_[j] = (c.rope_style == RopeStyle::kRotateHalf && j >= d / 2) ? dp_ / 2 + (j - d / 2) : j;
  }
  if (dp_ != d && options_.log_progress) {
    PTX_LOG(INFO) << "head_dim " << d << " runs padded to " << dp_ << " on the device";
  }
  cache_ = std::make_unique<KernelCache>(device_.get(), options_.on_compile);
  if (absl::Status s = UploadWeights(model); !s.ok()) return s;
  buf_ = std::make_unique<Buffers>();
  const int64_t tokens = std::max<int32_t>(options_.max_tokens, 1);
  const int64_t seqs = std::max<int32_t>(options_.max_seqs, 1);
  const int64_t blocks_per_seq = (c.max_position_embeddings + kv_.block_size - 1) / kv_.block_size;
  const size_t meta = LayoutMeta(tokens, seqs, blocks_per_seq, seqs).total;
  if (absl::Status s = Reserve(tokens, std::min(tokens, seqs), meta); !s.ok()) return s;
  if (absl::Status s = AllocateKv(); !s.ok()) return s;
  if (absl::Status s = InitKernels(); !s.ok()) return s;
  return device_->Synchronize("backend initialisation");
}

absl::Status GpuBackend::AllocateKv() {
  const ModelConfig& c = config_;
  const size_t block_bytes =
      static_cast<size_t>(c.num_kv_heads) * kv_.block_size * dp_ * DTypeSize(kv_.dtype);
  if (kv_.num_blocks <= 0) {
    absl::StatusOr<std::pair<size_t, size_t>> mem = device_->MemoryInfo();
    if (!mem.ok()) return mem.status();
    const double budget = options_.kv_memory_fraction * static_cast<double>(mem->first);
    const double blocks = budget / static_cast<double>(2 * c.num_layers * block_bytes);
    if (blocks < 1) {
      return absl::ResourceExhaustedError(absl::StrFormat(
          "%s: %d bytes free after weights hold no KV block (%d bytes per block and layer)",
          device_->info().name, mem->first, 2 * block_bytes));
    }
    kv_.num_blocks = static_cast<int32_t>(std::min(blocks, double{1 << 30}));
  }
  const size_t pool = static_cast<size_t>(kv_.num_blocks) * block_bytes;
  for (int64_t i = 0; i < c.num_layers; ++i) {
    Weights::Layer& l = w_->layers[i];
    for (auto [buf, name] : {std::pair{&l.k_pool, "K"}, std::pair{&l.v_pool, "V"}}) {
      absl::StatusOr<DeviceBuffer> b =
          device_->Alloc(pool, absl::StrCat(name, " pool of layer ", i));
      if (!b.ok()) return b.status();
      *buf = *std::move(b);
      // Zeroed like the CPU backend's pools: padding lanes of a head must read as 0.
      if (absl::Status s = device_->Memset(buf->ptr(), 0, pool, "KV pool"); !s.ok()) return s;
    }
  }
  kv_bytes_ = 2 * c.num_layers * pool;
  if (options_.log_progress) {
    PTX_LOG(INFO) << "KV cache on " << device_->info().name << ": " << kv_.num_blocks
                  << " blocks of " << kv_.block_size << " tokens, " << (kv_bytes_ >> 20) << " MiB";
  }
  return absl::OkStatus();
}

absl::Status GpuBackend::Reserve(int64_t tokens, int64_t rows, size_t meta_bytes) {
  const ModelConfig& c = config_;
  Buffers& b = *buf_;
  auto alloc = [&](DeviceBuffer* out, int64_t bytes, const char* what) -> absl::Status {
    absl::StatusOr<DeviceBuffer> d =
        device_->Alloc(static_cast<size_t>(std::max<int64_t>(bytes, 4)), what);
    if (!d.ok()) return d.status();
    *out = *std::move(d);
    return absl::OkStatus();
  };
  if (tokens > b.tokens) {
    const int64_t t = std::max(tokens, b.tokens * 3 / 2);
    const int64_t H = c.hidden_size, I = c.intermediate_size;
    const int64_t qd = c.num_heads * dp_, kd = c.num_kv_heads * dp_;
    absl::Status s = alloc(&b.x, t * H * 4, "activations x");
    if (s.ok()) s = alloc(&b.h, t * H * 4, "activations h");
    if (s.ok()) s = alloc(&b.q, t * qd * 4, "activations q");
    if (s.ok()) s = alloc(&b.k, t * kd * 4, "activations k");
    if (s.ok()) s = alloc(&b.v, t * kd * 4, "activations v");
    if (s.ok()) s = alloc(&b.attn, t * qd * 4, "activations attn");
    // + 256: unfused, the up half is aligned up to the next 256 bytes (gpu_step.cc).
    if (s.ok()) s = alloc(&b.gate_up, t * 2 * I * 4 + 256, "activations gate_up");
    if (s.ok()) s = alloc(&b.act, t * I * 4, "activations act");
    if (!s.ok()) return s;
    b.tokens = t;
  }
  if (rows > b.rows) {
    const int64_t r = std::max(rows, b.rows * 3 / 2);
    absl::Status s = alloc(&b.hr, r * c.hidden_size * 4, "logits rows");
    if (s.ok()) s = alloc(&b.logits, r * c.vocab_size * 4, "logits");
    if (s.ok()) s = alloc(&b.penalized, r * c.vocab_size * 4, "penalised logits");
    if (s.ok()) s = alloc(&b.ids, r * 4, "sampled ids");
    if (s.ok()) s = alloc(&b.records, r * kLogprobsRecordBytes, "log-prob records");
    if (!s.ok()) return s;
    // Whichever comes back is larger: logits rows, or records (a vocabulary under 42).
    const int64_t per_row = std::max<int64_t>(c.vocab_size * 4, kLogprobsRecordBytes);
    absl::StatusOr<PinnedBuffer> p =
        device_->AllocPinned(static_cast<size_t>(r * per_row), "logits (host)");
    if (!p.ok()) return p.status();
    b.out_host = *std::move(p);
    b.rows = r;
  }
  if (meta_bytes > b.meta_bytes) {
    const size_t m = std::max(meta_bytes, b.meta_bytes * 3 / 2);
    if (absl::Status s = alloc(&b.meta, static_cast<int64_t>(m), "step metadata"); !s.ok()) {
      return s;
    }
    absl::StatusOr<PinnedBuffer> p = device_->AllocPinned(m, "step metadata (host)");
    if (!p.ok()) return p.status();
    b.meta_host = *std::move(p);
    b.meta_bytes = m;
  }
  return absl::OkStatus();
}

absl::Status GpuBackend::ReserveSplits(int64_t rows, int64_t splits) {
  const int64_t elems = rows * config_.num_heads * splits * dp_;
  Buffers& b = *buf_;
  if (elems <= b.split_elems) return absl::OkStatus();
  const int64_t e = std::max(elems, b.split_elems * 3 / 2);
  absl::StatusOr<DeviceBuffer> p = device_->Alloc(static_cast<size_t>(e) * 4, "attention partials");
  if (!p.ok()) return p.status();
  absl::StatusOr<DeviceBuffer> l =
      device_->Alloc(static_cast<size_t>(e / dp_ + 1) * 4, "attention partial lse");
  if (!l.ok()) return l.status();
  b.partial = *std::move(p);
  b.lse = *std::move(l);
  b.split_elems = e;
  return absl::OkStatus();
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
  const KernelCacheStats c = cache_->stats();
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
  k.device_weight_bytes = static_cast<int64_t>(weight_bytes_);  // both fixed at Create
  k.device_kv_bytes = static_cast<int64_t>(kv_bytes_);
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
