// `ptxserve client`: generate (streaming text), batch, health, info against a server.
#include "server/client.h"

#include <cstdio>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "server/cli/cli_util.h"
#include "server/cli/client_flags.h"
#include "server/cli/common_flags.h"
#include "server/cli/sampling_flags.h"
#include "server/cli/subcommands.h"
#include "server/status_util.h"

ABSL_FLAG(std::vector<std::string>, stop, {}, "client: stop strings (comma-separated)");
ABSL_FLAG(double, repetition_penalty, 1.0, "client: repetition penalty (> 0; 1 = off)");
ABSL_FLAG(double, presence_penalty, 0.0, "client: presence penalty");
ABSL_FLAG(double, frequency_penalty, 0.0, "client: frequency penalty");
ABSL_FLAG(int32_t, logprobs, 0, "client: print the top-N log-probs of each token");
ABSL_FLAG(int32_t, priority, 0, "client: scheduling priority (higher first)");
ABSL_FLAG(std::string, request_id, "", "client: the request id (seeds the sampler)");
ABSL_FLAG(std::string, service, "", "client health: the service to check (\"\" = server)");

namespace ptxserve::cli {
namespace {

constexpr const char* kUsage =
    "ptxserve client generate --target HOST:PORT --prompt TEXT [--max-tokens N] "
    "[--temperature T] [--top-k K] [--top-p P] [--min-p P] [--seed S] [--stop A,B] "
    "[--logprobs N] [--timeout S]\n"
    "ptxserve client batch --target HOST:PORT [sampling flags] PROMPT...\n"
    "ptxserve client health --target HOST:PORT [--service NAME]   (exit 0 only when SERVING)\n"
    "ptxserve client info --target HOST:PORT\n"
    "TLS: --tls-ca F [--tls-cert F --tls-key F]; API key: --api-key-file F";

// Whether --seed was on the command line (this Abseil cannot tell a default from an
// explicit value).
bool seed_given = false;

v1::GenerateRequest BaseRequest() {
  v1::GenerateRequest req;
  req.set_request_id(absl::GetFlag(FLAGS_request_id));
  v1::SamplingParams* s = req.mutable_sampling();
  s->set_temperature(static_cast<float>(absl::GetFlag(FLAGS_temperature)));
  s->set_top_k(absl::GetFlag(FLAGS_top_k));
  s->set_top_p(static_cast<float>(absl::GetFlag(FLAGS_top_p)));
  s->set_min_p(static_cast<float>(absl::GetFlag(FLAGS_min_p)));
  s->set_repetition_penalty(static_cast<float>(absl::GetFlag(FLAGS_repetition_penalty)));
  s->set_presence_penalty(static_cast<float>(absl::GetFlag(FLAGS_presence_penalty)));
  s->set_frequency_penalty(static_cast<float>(absl::GetFlag(FLAGS_frequency_penalty)));
  // Without --seed the server derives one from the request id.
  if (seed_given) {
    s->set_seed(absl::GetFlag(FLAGS_seed));
  }
  v1::StoppingCriteria* st = req.mutable_stopping();
  st->set_max_new_tokens(absl::GetFlag(FLAGS_max_tokens));
  for (const auto& stop : absl::GetFlag(FLAGS_stop)) st->add_stop(stop);
  st->set_ignore_eos(absl::GetFlag(FLAGS_ignore_eos));
  req.set_priority(absl::GetFlag(FLAGS_priority));
  req.set_logprobs(absl::GetFlag(FLAGS_logprobs));
  return req;
}

int Report(const grpc::Status& st) {
  if (st.ok()) return 0;
  std::fprintf(stderr, "client: %s: %s\n", server::GrpcCodeName(st.error_code()),
               st.error_message().c_str());
  return 1;
}

void PrintSummary(const v1::GenerateResponse& r, int index) {
  const std::string who = index < 0 ? "" : absl::StrCat("[", index, "] ");
  std::fprintf(stderr,
               "%sfinish: %s, prompt tokens: %d, generated: %d, queue %.1f ms, TTFT %.1f ms, total "
               "%.1f ms%s%s\n",
               who.c_str(), v1::FinishReason_Name(r.finish_reason()).c_str(),
               r.usage().prompt_tokens(), r.usage().generated_tokens(),
               r.timing().queue_seconds() * 1e3, r.timing().time_to_first_token_seconds() * 1e3,
               r.timing().total_seconds() * 1e3,
               r.error_message().empty() ? "" : ", error: ", r.error_message().c_str());
}

int Generate(server::DecodeClient& client) {
  const std::string prompt = absl::GetFlag(FLAGS_prompt);
  if (prompt.empty()) {
    std::fprintf(stderr, "client generate: --prompt is required\n");
    return 2;
  }
  v1::GenerateRequest req = BaseRequest();
  req.set_text(prompt);
  std::fputs(prompt.c_str(), stdout);
  std::fflush(stdout);
  v1::GenerateResponse last;
  grpc::Status st = client.Generate(
      req,
      [&](const v1::GenerateResponse& r) {
        std::fwrite(r.text().data(), 1, r.text().size(), stdout);
        std::fflush(stdout);
        for (const auto& lp : r.logprobs()) {
          std::string alts;
          for (const auto& t : lp.top())
            absl::StrAppend(&alts, " ", t.token_id(), ":", t.logprob());
          std::fprintf(stderr, "\n  token %d logprob %.4f top:%s", lp.chosen().token_id(),
                       lp.chosen().logprob(), alts.c_str());
        }
        if (r.finish_reason() != v1::FINISH_REASON_UNSPECIFIED) last = r;
        return true;
      },
      ClientTimeout());
  std::fputc('\n', stdout);
  if (last.finish_reason() != v1::FINISH_REASON_UNSPECIFIED) PrintSummary(last, -1);
  return Report(st);
}

int Batch(server::DecodeClient& client, const std::vector<std::string>& prompts) {
  if (prompts.empty()) {
    std::fprintf(stderr, "client batch: give the prompts as arguments\n");
    return 2;
  }
  v1::GenerateBatchRequest req;
  for (size_t i = 0; i < prompts.size(); ++i) {
    v1::GenerateRequest* r = req.add_requests();
    *r = BaseRequest();
    if (!r->request_id().empty()) r->set_request_id(absl::StrCat(r->request_id(), "-", i));
    r->set_text(prompts[i]);
  }
  std::vector<std::string> texts(prompts.size());
  std::vector<v1::GenerateResponse> finals(prompts.size());
  grpc::Status st = client.GenerateBatch(
      req,
      [&](const v1::GenerateBatchResponse& r) {
        if (r.index() < 0 || r.index() >= static_cast<int>(texts.size())) return true;
        texts[r.index()] += r.response().text();
        if (r.response().finish_reason() != v1::FINISH_REASON_UNSPECIFIED) {
          finals[r.index()] = r.response();
        }
        return true;
      },
      ClientTimeout());
  for (size_t i = 0; i < prompts.size(); ++i) {
    std::printf("[%zu] %s%s\n", i, prompts[i].c_str(), texts[i].c_str());
    if (finals[i].finish_reason() != v1::FINISH_REASON_UNSPECIFIED) {
      PrintSummary(finals[i], static_cast<int>(i));
    }
  }
  return Report(st);
}

int Health(server::DecodeClient& client) {
  grpc::health::v1::HealthCheckResponse::ServingStatus status;
  grpc::Status st = client.Check(absl::GetFlag(FLAGS_service), &status, ClientTimeout(5));
  if (!st.ok()) return Report(st);
  std::printf("%s\n", grpc::health::v1::HealthCheckResponse::ServingStatus_Name(status).c_str());
  return status == grpc::health::v1::HealthCheckResponse::SERVING ? 0 : 1;
}

int Info(server::DecodeClient& client) {
  v1::ModelInfo info;
  grpc::Status st = client.GetModelInfo(&info, ClientTimeout(10));
  if (!st.ok()) return Report(st);
  std::printf("%s", info.DebugString().c_str());
  return 0;
}

}  // namespace

int RunClient(int argc, char** argv) {
  SetSubcommandFlags({"server/cli/client.cc", "server/cli/client_flags.cc",
                      "server/cli/sampling_flags.cc", "seed", "api_key_file", "tls_cert",
                      "tls_key"});
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--") break;
    if (a == "--seed" || a.rfind("--seed=", 0) == 0) seed_given = true;
  }
  std::vector<char*> args = ParseSubcommandFlags(argc, argv, kUsage);
  if (args.size() < 2) {
    std::fprintf(stderr, "usage: %s\n", kUsage);
    return 2;
  }
  auto options = ClientOptionsFromFlags();
  if (!options.ok()) {
    std::fprintf(stderr, "client: %s\n", options.status().ToString().c_str());
    return 2;
  }
  server::DecodeClient client(*options);
  const std::string action = args[1];
  if (action == "generate") return Generate(client);
  if (action == "batch")
    return Batch(client, std::vector<std::string>(args.begin() + 2, args.end()));
  if (action == "health") return Health(client);
  if (action == "info") return Info(client);
  std::fprintf(stderr, "client: unknown action '%s'\nusage: %s\n", action.c_str(), kUsage);
  return 2;
}

}  // namespace ptxserve::cli
