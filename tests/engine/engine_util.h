// Reading an engine's ResultStream in tests: every output of each request, merged.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "engine/engine.h"

namespace ptxserve::testing {

struct Collected {
  std::vector<int32_t> tokens;
  std::vector<SampleResult> logprobs;  // when the request asked for them
  std::string text;
  EngineOutput final_out;
  int messages = 0;
};

// Reads a stream until every one of `n` indices has its final output.
inline std::vector<Collected> Drain(ResultStream& stream, int n) {
  std::vector<Collected> out(n);
  int done = 0;
  std::vector<EngineOutput> batch;
  while (done < n && stream.WaitPopAll(&batch)) {
    for (auto& o : batch) {
      Collected& c = out.at(o.index);
      c.tokens.insert(c.tokens.end(), o.token_ids.begin(), o.token_ids.end());
      c.logprobs.insert(c.logprobs.end(), o.logprobs.begin(), o.logprobs.end());
      c.text += o.text;
      ++c.messages;
      if (o.final()) {
        c.final_out = std::move(o);
        ++done;
      }
    }
  }
  return out;
}

}  // namespace ptxserve::testing
