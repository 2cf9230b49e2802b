// `ptxserve serve`: the gRPC decode server with Prometheus metrics.
#include <pthread.h>
#include <signal.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>

#include "absl/flags/declare.h"
#include "absl/flags/flag.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "engine/util/log.h"
#include "server/cli/cli_util.h"
#include "server/cli/common_flags.h"
#include "server/cli/subcommands.h"
#include "server/server.h"

ABSL_FLAG(std::string, host, "127.0.0.1", "serve: address to listen on (gRPC and metrics)");
ABSL_FLAG(int32_t, port, 50051, "serve: gRPC port; 0 = any free port (printed)");
ABSL_FLAG(std::string, metrics_host, "",
          "serve: address of the metrics port (e.g. an internal interface); empty = --host");
ABSL_FLAG(int32_t, metrics_port, 9464,
          "serve: Prometheus /metrics port; 0 = any free port (printed); -1 = none");
ABSL_FLAG(int32_t, http_port, 8000,
          "serve: OpenAI-compatible HTTP API port (/v1/completions, /v1/chat/completions, ...); "
          "0 = any free port (printed); -1 = none");
ABSL_FLAG(int32_t, http_threads, 2,
          "serve: threads serving every HTTP connection (all socket I/O is asynchronous)");
ABSL_FLAG(std::string, chat_template, "",
          "serve: Jinja chat template file for chat requests, instead of the model's "
          "tokenizer_config.json chat_template");
ABSL_FLAG(int32_t, max_batch_size, 64, "serve: most sequences decoded together per step");
ABSL_FLAG(int32_t, max_batch_tokens, 2048,
          "serve: most token rows per step (decodes plus prefill chunks)");
ABSL_FLAG(std::string, kv_memory, "",
          "serve: KV cache size in bytes (suffix K, M or G) instead of --kv_blocks; both "
          "unset: --kv_memory_fraction of the GPU's free memory, or on the CPU room for "
          "--max_batch_size full contexts within 1 GiB");
ABSL_FLAG(double, kv_memory_fraction, 0.9,
          "serve: on a GPU without --kv_blocks or --kv_memory, the fraction of the memory free "
          "after weights and activations that the KV cache takes, in (0, 1]");
ABSL_FLAG(int32_t, prefill_chunk, 512, "serve: prompt tokens of one sequence per step");
ABSL_FLAG(bool, prefix_caching, true,
          "serve: keep the KV cache of full blocks after their requests end and start prompts "
          "that begin with the same tokens from it (automatic prefix caching); false "
          "recomputes every prompt");
ABSL_FLAG(int32_t, max_queued, 1024,
          "serve: waiting requests beyond which new calls get RESOURCE_EXHAUSTED");
ABSL_FLAG(double, drain_timeout, 30,
          "serve: seconds running streams may take to finish after SIGTERM/SIGINT");
ABSL_FLAG(std::string, tls_cert, "",
          "serve: PEM certificate chain, enables TLS (client: certificate for mutual TLS)");
ABSL_FLAG(std::string, tls_key, "", "serve: PEM private key of --tls_cert");
ABSL_FLAG(std::string, tls_client_ca, "",
          "serve: PEM CA bundle; clients must present a certificate it signed (mutual TLS)");
ABSL_FLAG(std::string, api_key_file, "",
          "file holding the API key: the server requires 'authorization: Bearer <key>', the "
          "client sends it");
ABSL_FLAG(int32_t, default_max_tokens, 256,
          "serve: max_new_tokens of requests that do not set it (clipped to the context)");
ABSL_FLAG(int32_t, max_batch_prompts, 256, "serve: most prompts in one GenerateBatch call");
ABSL_FLAG(int64_t, max_request_bytes, 4 << 20,
          "serve: largest request message accepted (INVALID_ARGUMENT beyond)");
ABSL_FLAG(double, stall_timeout, 30,
          "serve: seconds without engine progress, with work queued, before health says "
          "NOT_SERVING");
ABSL_FLAG(int32_t, writer_threads, 2, "serve: threads writing token streams");
ABSL_FLAG(std::string, reflection, "auto",
          "serve: gRPC server reflection: on, off, or auto (on unless --api-key-file is set: "
          "reflection answers without a key)");
ABSL_FLAG(bool, log_requests, true,
          "serve: one log line per finished request (id, api, peer, tokens, queue time, TTFT, "
          "finish) at level info");

namespace ptxserve::cli {

namespace {

absl::StatusOr<int64_t> ParseBytes(std::string s) {
  int64_t mult = 1;
  if (!s.empty()) {
    switch (s.back()) {
      case 'K':
      case 'k':
        mult = int64_t{1} << 10;
        break;
      case 'M':
      case 'm':
        mult = int64_t{1} << 20;
        break;
      case 'G':
      case 'g':
        mult = int64_t{1} << 30;
        break;
      default:
        break;
    }
    if (mult != 1) s.pop_back();
  }
  int64_t v = 0;
  if (!absl::SimpleAtoi(s, &v) || v <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--kv_memory: '", s, "' is not a positive byte count"));
  }
  return v * mult;
}

int Fail(const absl::Status& st) {
  std::fprintf(stderr, "serve: %s\n", st.ToString().c_str());
  return 1;
}

// Flags whose values cannot work, refused before anything binds or loads (an out-of-range
// port would otherwise be truncated, a NaN timeout would never fire).
absl::Status CheckRanges() {
  struct IntRange {
    const char* name;
    int64_t value, lo, hi;
  };
  const IntRange ints[] = {
      {"port", absl::GetFlag(FLAGS_port), 0, 65535},
      {"metrics_port", absl::GetFlag(FLAGS_metrics_port), -1, 65535},
      {"http_port", absl::GetFlag(FLAGS_http_port), -1, 65535},
      {"http_threads", absl::GetFlag(FLAGS_http_threads), 1, 256},
      {"writer_threads", absl::GetFlag(FLAGS_writer_threads), 1, 256},
      {"kv_blocks", absl::GetFlag(FLAGS_kv_blocks), 0, int64_t{1} << 30},
      {"block_size", absl::GetFlag(FLAGS_block_size), 1, 4096},
      {"max_request_bytes", absl::GetFlag(FLAGS_max_request_bytes), 1, int64_t{1} << 30},
  };
  for (const IntRange& r : ints) {
    if (r.value < r.lo || r.value > r.hi) {
      return absl::InvalidArgumentError(
          absl::StrCat("--", r.name, "=", r.value, ": want ", r.lo, " to ", r.hi));
    }
  }
  for (auto [name, value] : {std::pair{"drain_timeout", absl::GetFlag(FLAGS_drain_timeout)},
                             {"stall_timeout", absl::GetFlag(FLAGS_stall_timeout)}}) {
    if (!std::isfinite(value) || value < 0 || value > 86400) {
      return absl::InvalidArgumentError(
          absl::StrCat("--", name, "=", value, ": want seconds in [0, 86400]"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

int RunServe(int argc, char** argv) {
  SetSubcommandFlags({"server/cli/serve.cc", "model", "model_cache_dir", "kv_blocks", "block_size",
                      "backend", "emulated_device", "cuda_graphs"});
  ParseSubcommandFlags(
      argc, argv,
      "ptxserve serve [--model DIR|FILE.gguf] [--host 127.0.0.1] [--port 50051] [--http-port 8000] "
      "[--metrics-port 9464] "
      "[--backend cpu|cuda|emulated|auto] [--emulated-device small|a100|h100] [--max-batch-size N] "
      "[--max-batch-tokens N] [--kv-blocks "
      "N | "
      "--kv-memory BYTES] [--block-size 16] [--prefill-chunk N] [--prefix-caching=true|false] "
      "[--max-queued N] "
      "[--drain-timeout S] [--tls-cert F --tls-key F [--tls-client-ca F]] [--api-key-file F]\n"
      "Serves ptxserve.v1.DecodeService, grpc.health.v1.Health, server reflection (see "
      "--reflection), /metrics and the "
      "OpenAI-compatible HTTP API; "
      "without --model, the synthetic default model.");
  // Debian's Abseil is built with Mutex deadlock detection on, which costs a graph
  // lookup per lock on every hot path (engine, streams); a server has no use for it.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  // Signals go to one waiting thread, not to whichever thread gRPC happens to run:
  // block them before any thread starts.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  absl::Notification stop;
  std::thread([&signals, &stop] {
    int sig = 0;
    sigwait(&signals, &sig);
    PTX_LOG(INFO) << "signal " << sig << ": draining (again to exit at once)";
    stop.Notify();
    sigwait(&signals, &sig);
    std::fprintf(stderr, "serve: second signal, exiting without draining\n");
    std::_Exit(1);
  }).detach();

  if (absl::Status st = CheckRanges(); !st.ok()) return Fail(st);
  server::ServerConfig sc;
  sc.host = absl::GetFlag(FLAGS_host);
  sc.port = absl::GetFlag(FLAGS_port);
  sc.metrics_port = absl::GetFlag(FLAGS_metrics_port);
  sc.metrics_host = absl::GetFlag(FLAGS_metrics_host);
  sc.http_port = absl::GetFlag(FLAGS_http_port);
  sc.http_threads = absl::GetFlag(FLAGS_http_threads);
  sc.max_request_bytes = absl::GetFlag(FLAGS_max_request_bytes);
  sc.backend = absl::GetFlag(FLAGS_backend);
  sc.writer_threads = absl::GetFlag(FLAGS_writer_threads);
  sc.stall_timeout = absl::Seconds(absl::GetFlag(FLAGS_stall_timeout));
  if (!absl::GetFlag(FLAGS_tls_cert).empty() || !absl::GetFlag(FLAGS_tls_key).empty()) {
    auto cert = ReadFileToString(absl::GetFlag(FLAGS_tls_cert));
    if (!cert.ok()) return Fail(cert.status());
    auto key = ReadFileToString(absl::GetFlag(FLAGS_tls_key));
    if (!key.ok()) return Fail(key.status());
    sc.tls.cert_pem = *cert;
    sc.tls.key_pem = *key;
    if (!absl::GetFlag(FLAGS_tls_client_ca).empty()) {
      auto ca = ReadFileToString(absl::GetFlag(FLAGS_tls_client_ca));
      if (!ca.ok()) return Fail(ca.status());
      sc.tls.client_ca_pem = *ca;
    }
  }
  if (!absl::GetFlag(FLAGS_api_key_file).empty()) {
    auto key = ReadApiKey(absl::GetFlag(FLAGS_api_key_file));
    if (!key.ok()) return Fail(key.status());
    sc.api_key = *key;
  }
  const std::string reflection = absl::GetFlag(FLAGS_reflection);
  if (reflection != "auto" && reflection != "on" && reflection != "off") {
    return Fail(absl::InvalidArgumentError(
        absl::StrCat("--reflection=", reflection, ": want on, off or auto")));
  }
  sc.reflection = reflection == "on" || (reflection == "auto" && sc.api_key.empty());
  sc.log_requests = absl::GetFlag(FLAGS_log_requests);

  server::ModelOptions mo;
  mo.backend = sc.backend;
  mo.emulated_device = absl::GetFlag(FLAGS_emulated_device);
  mo.kv_blocks = absl::GetFlag(FLAGS_kv_blocks);
  mo.block_size = absl::GetFlag(FLAGS_block_size);
  mo.chat_template_path = absl::GetFlag(FLAGS_chat_template);
  if (!absl::GetFlag(FLAGS_kv_memory).empty()) {
    if (mo.kv_blocks > 0) {
      return Fail(absl::InvalidArgumentError("give --kv_blocks or --kv_memory, not both"));
    }
    auto bytes = ParseBytes(absl::GetFlag(FLAGS_kv_memory));
    if (!bytes.ok()) return Fail(bytes.status());
    mo.kv_memory_bytes = *bytes;
  }
  mo.kv_memory_fraction = absl::GetFlag(FLAGS_kv_memory_fraction);
  mo.cuda_graphs = absl::GetFlag(FLAGS_cuda_graphs);
  if (!(mo.kv_memory_fraction > 0 && mo.kv_memory_fraction <= 1)) {
    return Fail(absl::InvalidArgumentError(absl::StrCat(
        "--kv_memory_fraction=", mo.kv_memory_fraction, ": want a fraction in (0, 1]")));
  }
  mo.engine.max_batch_size = absl::GetFlag(FLAGS_max_batch_size);
  mo.engine.max_batch_tokens = absl::GetFlag(FLAGS_max_batch_tokens);
  mo.engine.prefill_chunk = absl::GetFlag(FLAGS_prefill_chunk);
  mo.engine.prefix_caching = absl::GetFlag(FLAGS_prefix_caching);
  mo.engine.max_queued = absl::GetFlag(FLAGS_max_queued);
  mo.default_max_new_tokens = absl::GetFlag(FLAGS_default_max_tokens);
  mo.max_batch_prompts = absl::GetFlag(FLAGS_max_batch_prompts);
  if (mo.engine.max_batch_size < 1 || mo.engine.max_batch_tokens < 1 ||
      mo.engine.prefill_chunk < 1 || mo.engine.max_queued < 1 || mo.max_batch_prompts < 1 ||
      mo.default_max_new_tokens < 1) {
    return Fail(absl::InvalidArgumentError(
        "--max_batch_size, --max_batch_tokens, --prefill_chunk, --max_batch_prompts, "
        "--default_max_tokens and --max_queued must be >= 1"));
  }
  if (mo.engine.prefill_chunk > mo.engine.max_batch_tokens) {
    return Fail(absl::InvalidArgumentError(
        absl::StrCat("--prefill_chunk (", mo.engine.prefill_chunk,
                     ") must not exceed --max_batch_tokens (", mo.engine.max_batch_tokens, ")")));
  }
  if (absl::Status st = server::CheckBackendOptions(mo); !st.ok()) return Fail(st);

  server::Server srv(sc);
  if (auto st = srv.Start(); !st.ok()) return Fail(st);
  std::printf("ptxserve: listening on %s:%d (gRPC)\n", sc.host.c_str(), srv.port());
  if (srv.http_port() >= 0) {
    std::printf("ptxserve: OpenAI API on %s://%s:%d/v1\n",
                sc.tls.cert_pem.empty() ? "http" : "https", sc.host.c_str(), srv.http_port());
  }
  if (srv.metrics_port() >= 0) {
    std::printf("ptxserve: metrics on http://%s:%d/metrics\n",
                (sc.metrics_host.empty() ? sc.host : sc.metrics_host).c_str(), srv.metrics_port());
  }
  std::fflush(stdout);

  auto dir = ResolveModelDir();
  if (!dir.ok()) return Fail(dir.status());
  mo.model_dir = *dir;
  PTX_LOG(INFO) << "loading " << mo.model_dir;
  mo.on_kernel_compile = [&srv](double s) { srv.metrics().ObserveKernelCompile(s); };
  auto model = server::LoadServedModel(mo, &srv.metrics());
  if (!model.ok()) {
    srv.Shutdown(absl::ZeroDuration());
    return Fail(model.status());
  }
  const v1::ModelInfo info = (*model)->info;
  srv.SetModel(*std::move(model));
  std::printf("ptxserve: ready: model %s (%s, %s) on %s, KV cache %lld tokens in blocks of %d\n",
              info.name().c_str(), info.architecture().c_str(), info.dtype().c_str(),
              info.backend().c_str(), static_cast<long long>(info.kv_capacity_tokens()),
              info.kv_block_size());
  std::fflush(stdout);

  stop.WaitForNotification();
  srv.Shutdown(absl::Seconds(absl::GetFlag(FLAGS_drain_timeout)));
  std::printf("ptxserve: stopped\n");
  std::fflush(stdout);
  return 0;
}

}  // namespace ptxserve::cli
