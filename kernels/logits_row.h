// What the kernels that scan one logits row per CTA (logprobs, sampling) share: the CTA's
// view of its row and the strided loop over it.
#pragma once

#include <functional>

#include "kernels/common.h"

namespace ptxserve::kernels::gen {

struct LogitsRow {
  KernelBuilder& kb;
  Reg row_base;  // u64 address of the row's logits
  Reg vocab;
  Reg tid, lane, warp;
  int threads;
  int warps;
};

// logit[i] of the row (f32).
Reg LoadLogit(const LogitsRow& c, Reg i);
// for (i = tid; i < vocab; i += threads) body(i, logit[i]); labels strided, strided_end.
void ForStrided(const LogitsRow& c, const std::function<void(Reg i, Reg l)>& body);

}  // namespace ptxserve::kernels::gen
