// ptxserve: one executable, one subcommand per job (see server/cli/).
#include <cstdio>
#include <string_view>

#include "server/cli/subcommands.h"
#include "server/version.h"

namespace {

struct Subcommand {
  std::string_view name;
  int (*run)(int argc, char** argv);
  std::string_view help;
};

constexpr Subcommand kSubcommands[] = {
    {"generate", ptxserve::cli::RunGenerate, "stream one prompt's completion on any backend"},
    {"make-model", ptxserve::cli::RunMakeModel, "write a deterministic synthetic Llama model"},
    {"quantize", ptxserve::cli::RunQuantize, "write a GGUF (llama.cpp's format) from a model"},
    {"perplexity", ptxserve::cli::RunPerplexity, "a model's perplexity on a text file"},
    {"ptx", ptxserve::cli::RunPtx, "write the generated PTX of one kernel or of all"},
    {"serve", ptxserve::cli::RunServe, "run the gRPC decode server (metrics on /metrics)"},
    {"client", ptxserve::cli::RunClient, "talk to a server: generate, batch, health, info"},
    {"bench", ptxserve::cli::RunBench, "load-test a server: throughput, TTFT, inter-token"},
    {"emulate", ptxserve::cli::RunEmulate,
     "run one PTX kernel on the emulator, print its counters"},
};

int Usage(FILE* out) {
  std::fprintf(out, "usage: ptxserve <subcommand> [flags]   (ptxserve <subcommand> --help)\n\n");
  for (const auto& s : kSubcommands) {
    std::fprintf(out, "  %-12.*s %.*s\n", static_cast<int>(s.name.size()), s.name.data(),
                 static_cast<int>(s.help.size()), s.help.data());
  }
  return out == stdout ? 0 : 2;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) return Usage(stderr);
  const std::string_view cmd = argv[1];
  if (cmd == "--help" || cmd == "-h" || cmd == "help") return Usage(stdout);
  if (cmd == "--version" || cmd == "version") {
    std::printf("ptxserve %s\n", ptxserve::server::kVersion);
    return 0;
  }
  for (const auto& s : kSubcommands) {
    if (s.name == cmd) return s.run(argc - 1, argv + 1);
  }
  std::fprintf(stderr, "ptxserve: unknown subcommand '%s'\n\n", argv[1]);
  return Usage(stderr);
}
