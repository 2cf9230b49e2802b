#include "server/server.h"

#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/grpcpp.h>
#include <grpcpp/impl/server_builder_option.h>
#include <grpcpp/impl/server_builder_plugin.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <map>
#include <thread>

#include "absl/strings/str_cat.h"
#include "engine/backend_factory.h"
#include "engine/chat/chat_template.h"
#include "engine/kv_sizing.h"
#include "engine/model/gguf.h"
#include "engine/model/model.h"
#include "engine/util/file.h"
#include "engine/util/log.h"
#include "server/http/metrics_route.h"
#include "server/version.h"

namespace ptxserve::server {

namespace {

// Drops the reflection service, which InitProtoReflectionServerBuilderPlugin adds to every
// ServerBuilder of the process, from a server that must not serve it.
class ReflectionOption final : public grpc::ServerBuilderOption {
 public:
  explicit ReflectionOption(bool enabled) : enabled_(enabled) {}
  void UpdateArguments(grpc::ChannelArguments* /*args*/) override {}
  void UpdatePlugins(std::vector<std::unique_ptr<grpc::ServerBuilderPlugin>>* plugins) override {
    if (enabled_) return;
    std::erase_if(*plugins, [](const auto& p) { return p->name() == "proto_server_reflection"; });
  }

 private:
  const bool enabled_;
};

// A model and tokenizer that load but could not serve a single request are refused here,
// naming the field as the model's source spells it (config.json's, or the GGUF key).
absl::Status CheckServable(const std::string& model_path, const ModelConfig& mc,
                           const Tokenizer& tok) {
  const bool gguf = IsGgufPath(model_path);
  const char* context_field =
      gguf ? "GGUF llama.context_length" : "config.json: max_position_embeddings";
  const char* vocab_field = gguf ? "the GGUF vocabulary size (llama.vocab_size or "
                                   "tokenizer.ggml.tokens)"
                                 : "config.json vocab_size";
  if (mc.max_position_embeddings < 2) {
    return absl::InvalidArgumentError(absl::StrCat(
        context_field, " = ", mc.max_position_embeddings,
        ": a model needs a context of at least 2 tokens (a prompt and one new token)"));
  }
  if (tok.vocab_size() > mc.vocab_size) {
    return absl::InvalidArgumentError(
        absl::StrCat("the tokenizer has ", tok.vocab_size(), " ids, more than ", vocab_field, " = ",
                     mc.vocab_size, ": prompts could hold ids the model has no embedding for"));
  }
  for (auto [name, id] : {std::pair{"bos", tok.bos_id()}, {"eos", tok.eos_id()}}) {
    if (id >= mc.vocab_size) {
      return absl::InvalidArgumentError(absl::StrCat("the tokenizer's ", name, " token id ", id,
                                                     " is outside ", vocab_field, " = ",
                                                     mc.vocab_size));
    }
  }
  return absl::OkStatus();
}

// The chat template stored with the model: a GGUF's tokenizer.chat_template, else the
// directory's tokenizer_config.json chat_template; nullopt when it has none. Sets *origin
// to the file it came from.
absl::StatusOr<std::optional<std::string>> ModelChatTemplate(const std::string& model,
                                                             std::string* origin) {
  *origin = model;
  if (IsGgufPath(model)) {
    auto file = GgufFile::Open(model);
    if (!file.ok()) return file.status();
    if ((*file)->Find("tokenizer.chat_template") == nullptr) return std::nullopt;
    auto text = (*file)->GetString("tokenizer.chat_template");
    if (!text.ok()) return text.status();
    return *std::move(text);
  }
  *origin = (std::filesystem::path(model) / "tokenizer_config.json").string();
  auto text = ReadFileToString(*origin);
  if (!text.ok()) return std::nullopt;
  const auto config = nlohmann::json::parse(*text, nullptr, false);
  return ChatTemplateFromTokenizerConfig(config);
}

// The model's chat template (--chat-template, else the model's own), compiled
// now so that a template the interpreter cannot run stops the start with its line and
// construct. Empty when the model has none.
absl::StatusOr<ChatRenderer> LoadChatRenderer(const ModelOptions& o, const Tokenizer& tok) {
  std::string source, origin;
  if (!o.chat_template_path.empty()) {
    auto text = ReadFileToString(o.chat_template_path);
    if (!text.ok())
      return absl::InvalidArgumentError(absl::StrCat("--chat_template: ", text.status().message()));
    source = *std::move(text);
    origin = o.chat_template_path;
  } else {
    auto found = ModelChatTemplate(o.model_dir, &origin);
    if (!found.ok()) return found.status();
    if (!found->has_value()) return ChatRenderer();
    source = **found;
  }
  auto compiled = ChatTemplate::Compile(source, origin);
  if (!compiled.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(compiled.status().message(),
                     " (give a template ptxserve can render with --chat-template FILE)"));
  }
  std::map<std::string, std::string> special;
  if (tok.bos_id() >= 0) special["bos_token"] = tok.IdToToken(tok.bos_id());
  if (tok.eos_id() >= 0) special["eos_token"] = tok.IdToToken(tok.eos_id());
  return ChatRenderer([t = *std::move(compiled), special](const nlohmann::ordered_json& messages,
                                                          bool add_generation_prompt,
                                                          const nlohmann::ordered_json& extra) {
    nlohmann::ordered_json ctx = ChatTemplateContext(messages, add_generation_prompt, special);
    for (const auto& [k, v] : extra.items()) ctx[k] = v;
    return t.Render(ctx);
  });
}

}  // namespace

absl::Status CheckBackendOptions(const ModelOptions& o) {
  if (absl::Status s = CheckBackendKind(o.backend); !s.ok()) return s;
  return CheckEmulatedDeviceFlag(o.backend, o.emulated_device);
}

absl::StatusOr<std::shared_ptr<ServedModel>> LoadServedModel(const ModelOptions& o,
                                                             EngineObserver* observer) {
  if (absl::Status s = CheckBackendKind(o.backend); !s.ok()) return s;
  if (o.block_size <= 0) {
    return absl::InvalidArgumentError(absl::StrCat("--block_size must be > 0, got ", o.block_size));
  }
  auto model = LoadModel(o.model_dir);
  if (!model.ok()) return model.status();
  auto tokenizer = Tokenizer::FromModelPath(o.model_dir);
  if (!tokenizer.ok()) return tokenizer.status();
  const ModelConfig& mc = model->config;
  if (absl::Status st = CheckServable(o.model_dir, mc, **tokenizer); !st.ok()) return st;

  KvCacheConfig kv;
  kv.block_size = o.block_size;
  const int64_t block_bytes = KvBlockBytes(mc, kv);
  int64_t blocks = o.kv_blocks;
  if (blocks <= 0 && o.kv_memory_bytes > 0) {
    blocks = o.kv_memory_bytes / block_bytes;
    if (blocks < 1) {
      return absl::InvalidArgumentError(absl::StrCat("--kv_memory=", o.kv_memory_bytes,
                                                     " holds no block of ", block_bytes, " bytes"));
    }
  }
  // blocks <= 0: sized by CreateBackend (host memory: room for max_batch_size full
  // contexts within 1 GiB; a GPU: kv_memory_fraction of its free memory).
  if (blocks > (int64_t{1} << 30)) return absl::InvalidArgumentError("too many KV blocks");
  kv.num_blocks = static_cast<int32_t>(std::max<int64_t>(blocks, 0));

  BackendOptions backend_options;
  backend_options.max_seqs = o.engine.max_batch_size;
  backend_options.max_tokens = o.engine.max_batch_tokens;
  backend_options.kv_memory_fraction = o.kv_memory_fraction;
  backend_options.cuda_graphs = o.cuda_graphs;
  backend_options.emulated_device = o.emulated_device;
  if (o.on_kernel_compile) {
    backend_options.on_compile = [f = o.on_kernel_compile](absl::string_view, double s) { f(s); };
  }
  std::string note;
  absl::StatusOr<std::unique_ptr<Backend>> backend = absl::InternalError("");
  try {
    backend = CreateBackend(o.backend, *model, kv, std::move(backend_options), &note);
  } catch (const std::bad_alloc&) {
    // A KV cache larger than the host can give (--kv-blocks / --kv-memory) is a refusal
    // with the sizes, never an abort.
    return absl::ResourceExhaustedError(
        absl::StrCat("cannot allocate the KV cache: ", kv.num_blocks, " blocks of ", block_bytes,
                     " bytes (", static_cast<double>(kv.num_blocks) * block_bytes / (1 << 30),
                     " GiB); lower --kv-blocks or --kv-memory"));
  }
  if (!backend.ok()) return backend.status();

  std::unique_ptr<Backend> b = *std::move(backend);
  // Kernel statistics are asked of the backend itself, not of a wrap_backend decorator,
  // which need not forward them. The engine owns the backend from here on.
  const Backend* device = b.get();
  if (o.wrap_backend) b = o.wrap_backend(std::move(b));
  auto render_chat = LoadChatRenderer(o, **tokenizer);
  if (!render_chat.ok()) return render_chat.status();
  auto served = std::make_shared<ServedModel>();
  served->render_chat = *std::move(render_chat);
  served->tokenizer = *std::move(tokenizer);
  served->kernel_stats = [device] { return device->kernel_stats(); };
  served->created_unix_seconds = absl::ToUnixSeconds(absl::Now());
  served->engine = std::make_unique<Engine>(std::move(b), *served->tokenizer, o.engine, observer);
  if (auto st = served->engine->Start(); !st.ok()) return st;

  RequestLimits& l = served->limits;
  l.vocab_size = mc.vocab_size;
  l.context_length = mc.max_position_embeddings;
  l.kv_capacity_tokens = served->engine->kv_capacity_tokens();
  l.default_max_new_tokens = o.default_max_new_tokens;
  l.max_batch_prompts = o.max_batch_prompts;

  v1::ModelInfo& info = served->info;
  std::string name = o.model_name;
  if (name.empty()) {
    const std::filesystem::path path = std::filesystem::path(o.model_dir).lexically_normal();
    name = IsGgufPath(o.model_dir) ? path.stem().string() : path.filename().string();
    if (name.empty()) name = std::filesystem::path(o.model_dir).parent_path().filename().string();
  }
  info.set_name(name);
  info.set_architecture(mc.architecture);
  info.set_vocab_size(static_cast<int32_t>(mc.vocab_size));
  info.set_context_length(static_cast<int32_t>(mc.max_position_embeddings));
  info.set_dtype(std::string(DTypeName(mc.torch_dtype)));
  info.set_backend(served->engine->backend_name());
  info.set_kv_capacity_tokens(l.kv_capacity_tokens);
  info.set_kv_block_size(kv.block_size);
  info.set_max_batch_size(o.engine.max_batch_size);
  info.set_max_batch_prompts(o.max_batch_prompts);
  info.set_bos_token_id(served->tokenizer->bos_id());
  info.set_eos_token_id(served->tokenizer->eos_id());
  info.set_server_version(kVersion);
  info.set_prefix_caching(o.engine.prefix_caching);
  info.set_weight_format(model->WeightFormat());
  return served;
}

Server::Server(ServerConfig config) : config_(std::move(config)) {
  metrics_ = std::make_unique<ServerMetrics>(kVersion, config_.backend);
  dispatcher_ = std::make_unique<Dispatcher>(config_.writer_threads);
  health_ = std::make_unique<HealthService>();
  request_log_ = std::make_unique<RequestLog>(config_.log_requests);
  service_ = std::make_unique<DecodeServiceImpl>(metrics_.get(), dispatcher_.get(),
                                                 request_log_.get(), config_.api_key);
  openai_ = std::make_unique<http::OpenAiService>(
      metrics_.get(), request_log_.get(), config_.api_key,
      http::OpenAiService::Hooks{[this] { return service_->model(); },
                                 [this] { return health_->serving(); }});
  metrics_->SetStatsSource([this]() -> std::optional<EngineStats> {
    std::shared_ptr<ServedModel> m = service_->model();
    if (!m) return std::nullopt;
    EngineStats s = m->engine->Stats();
    if (m->kernel_stats) s.kernels = m->kernel_stats();
    return s;
  });
}

Server::~Server() { Shutdown(absl::ZeroDuration()); }

absl::Status Server::Start() {
  http::HttpServerConfig hc;
  hc.host = config_.host;
  hc.port = config_.http_port;
  hc.threads = config_.http_threads;
  hc.tls_cert_pem = config_.tls.cert_pem;
  hc.tls_key_pem = config_.tls.key_pem;
  hc.tls_client_ca_pem = config_.tls.client_ca_pem;
  hc.max_body_bytes = config_.max_request_bytes;
  if (absl::Status st = http::CheckTlsFiles(hc); !st.ok()) return st;
  std::shared_ptr<grpc::ServerCredentials> creds;
  if (!config_.tls.cert_pem.empty()) {
    grpc::SslServerCredentialsOptions opts(
        config_.tls.client_ca_pem.empty()
            ? GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE
            : GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY);
    opts.pem_key_cert_pairs.push_back({config_.tls.key_pem, config_.tls.cert_pem});
    opts.pem_root_certs = config_.tls.client_ca_pem;
    creds = grpc::SslServerCredentials(opts);
  } else {
    creds = grpc::InsecureServerCredentials();
  }
  // The plugin is process-wide once initialized; ours decides per server whether it
  // adds the reflection service.
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  builder.SetOption(std::make_unique<ReflectionOption>(config_.reflection));
  builder.AddListeningPort(absl::StrCat(config_.host, ":", config_.port), creds, &port_);
  // Without this gRPC binds with SO_REUSEPORT: a second server on a port in use would
  // start, say ready, and share the port with the first.
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  builder.RegisterService(service_.get());
  builder.RegisterCallbackGenericService(service_.get());
  builder.RegisterService(health_.get());
  builder.SetMaxReceiveMessageSize(static_cast<int>(config_.max_request_bytes));
  // Pings find clients that vanished without closing their connection (a dead host, a
  // cut network), so their streams are cancelled instead of generating for nobody.
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIME_MS, 30000);
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, 10000);
  grpc_ = builder.BuildAndStart();
  if (!grpc_ || port_ == 0) {
    grpc_.reset();
    return absl::UnavailableError(absl::StrCat(
        "cannot listen on ", config_.host, ":", config_.port,
        " (gRPC): the address is in use or not an address of this host (--host, --port)"));
  }
  if (config_.metrics_port >= 0) {
    http::HttpServerConfig mc;
    mc.host = config_.metrics_host.empty() ? config_.host : config_.metrics_host;
    mc.port = config_.metrics_port;
    mc.threads = 1;            // asynchronous: slow or silent clients hold no thread
    mc.max_body_bytes = 4096;  // scrapes have no body
    mc.idle_timeout = absl::Seconds(10);
    mc.write_timeout = absl::Seconds(10);
    metrics_http_ =
        std::make_unique<http::HttpServer>(mc, http::MetricsOnlyHandler(metrics_.get()));
    if (absl::Status st = metrics_http_->Start(); !st.ok()) return st;
    metrics_port_ = metrics_http_->port();
  }
  if (config_.http_port >= 0) {
    http_ = std::make_unique<http::HttpServer>(
        hc, [svc = openai_.get()](http::HttpRequest&& req) { return svc->Handle(std::move(req)); });
    if (absl::Status st = http_->Start(); !st.ok()) return st;
    http_port_ = http_->port();
  }
  watchdog_ = std::thread([this] { Watchdog(); });
  return absl::OkStatus();
}

void Server::SetModel(std::shared_ptr<ServedModel> model) {
  metrics_->SetServedModel(model->info.backend(), model->info.name(), model->info.weight_format());
  service_->SetModel(std::move(model));
  // The watchdog decides SERVING from the engine's state; do it now rather than at its
  // next tick so that callers can rely on it when SetModel returns.
  std::shared_ptr<ServedModel> m = service_->model();
  const EngineStats s = m->engine->Stats();
  SetServing(s.started && !s.failed);
}

void Server::SetServing(bool serving) {
  health_->SetServing(serving);
  metrics_->SetServing(serving);
}

void Server::Watchdog() {
  bool stalled_logged = false;
  while (!stop_watchdog_.WaitForNotificationWithTimeout(config_.watchdog_period)) {
    std::shared_ptr<ServedModel> m = service_->model();
    if (!m) continue;
    const EngineStats s = m->engine->Stats();
    const bool stalled = s.stalled_seconds > absl::ToDoubleSeconds(config_.stall_timeout);
    if (stalled && !stalled_logged) {
      PTX_LOG(ERROR) << "the engine made no progress for " << s.stalled_seconds
                     << " s with work queued: health NOT_SERVING";
    }
    stalled_logged = stalled;
    SetServing(s.started && !s.failed && !stalled);
  }
}

void Server::Shutdown(absl::Duration drain_timeout) {
  if (shut_down_) return;
  shut_down_ = true;
  // Stop the watchdog first: it must not turn health back to SERVING.
  stop_watchdog_.Notify();
  if (watchdog_.joinable()) watchdog_.join();
  SetServing(false);
  service_->StartDraining();
  openai_->StartDraining();
  std::shared_ptr<ServedModel> m = service_->model();
  if (m) {
    m->engine->StopAccepting();
    const absl::Time deadline = absl::Now() + drain_timeout;
    while (m->engine->num_live() > 0 && absl::Now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    if (m->engine->num_live() > 0) {
      PTX_LOG(WARNING) << "drain timeout: cancelling " << m->engine->num_live() << " live requests";
      m->engine->CancelAll(absl::UnavailableError(
          "the server is shutting down: the request was cancelled at the drain timeout"));
    }
  }
  health_->Shutdown();
  // Streams have their final outputs by now; give their last writes a moment, then cut.
  if (http_) http_->Stop(absl::Seconds(5));
  if (grpc_) {
    // Streams have their final outputs by now; give their writes a moment, then cut.
    grpc_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(5));
    grpc_->Wait();
  }
  if (m) m->engine->Stop();
  if (metrics_http_) metrics_http_->Stop(absl::ZeroDuration());
}

}  // namespace ptxserve::server
