// ptxserve: one executable, one subcommand per job.
#include <cstdio>
#include <cstring>
#include <string>

int main(int argc, char** argv) {
  if (argc < 2 || std::strcmp(argv[1], "--help") == 0) {
    std::fprintf(stderr, "usage: ptxserve <generate|make-model> [flags]\n");
    return argc < 2 ? 2 : 0;
  }
  std::fprintf(stderr, "ptxserve: unknown subcommand '%s'\n", argv[1]);
  return 2;
}
