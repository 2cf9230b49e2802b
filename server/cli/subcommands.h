// One function per `ptxserve` subcommand. Each receives argv with the subcommand name
// in argv[0] and parses its own flags (Abseil flags are process-wide, so flags used by
// several subcommands are defined once in common_flags.cc).
#pragma once

namespace ptxserve::cli {

int RunGenerate(int argc, char** argv);
int RunMakeModel(int argc, char** argv);
int RunQuantize(int argc, char** argv);
int RunPerplexity(int argc, char** argv);
int RunPtx(int argc, char** argv);
int RunServe(int argc, char** argv);
int RunClient(int argc, char** argv);
int RunBench(int argc, char** argv);
int RunEmulate(int argc, char** argv);

}  // namespace ptxserve::cli
