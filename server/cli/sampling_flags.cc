#include "server/cli/sampling_flags.h"

#include "absl/flags/flag.h"

ABSL_FLAG(std::string, prompt, "", "the prompt text");
ABSL_FLAG(int32_t, max_tokens, 128, "the most new tokens to generate");
ABSL_FLAG(double, temperature, 1.0, "sampling temperature; 0 = greedy");
ABSL_FLAG(int32_t, top_k, 0, "keep the K most likely tokens; 0 = off");
ABSL_FLAG(double, top_p, 1.0, "nucleus sampling: keep the smallest set with this mass, in (0, 1]");
ABSL_FLAG(double, min_p, 0.0, "drop tokens below min_p x the most likely token's probability");
ABSL_FLAG(bool, ignore_eos, false, "keep generating past the end-of-sequence token");
