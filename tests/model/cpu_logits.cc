#include "tests/model/cpu_logits.h"

#include <algorithm>
#include <cmath>

#include "engine/cpu/cpu_backend.h"
#include "engine/kv_block_manager.h"
#include "engine/model/dtype.h"
#include "engine/model/quant.h"
#include "gtest/gtest.h"
#include "tests/cpu/test_model.h"

namespace ptxserve::test_files {

std::vector<std::vector<float>> GreedyLogits(const Model& model, std::vector<int32_t> tokens,
                                             int steps) {
  auto backend = CpuBackend::Create(model, {64, 16, DType::kF32});
  EXPECT_TRUE(backend.ok()) << backend.status();
  if (!backend.ok()) return {};
  KvBlockManager blocks(64, 16);
  std::vector<int32_t> table;
  std::vector<std::vector<float>> out;
  int64_t cached = 0;
  for (int step = 0; step <= steps; ++step) {
    const int64_t total = static_cast<int64_t>(tokens.size());
    EXPECT_TRUE(blocks.EnsureCapacity(&table, total).ok());
    StepBatch b;
    for (int64_t p = cached; p < total; ++p) {
      b.token_ids.push_back(tokens[p]);
      b.positions.push_back(static_cast<int32_t>(p));
      b.slot_mapping.push_back(int64_t{table[p / 16]} * 16 + p % 16);
    }
    b.query_start = {0, b.num_tokens()};
    b.seq_lens = {static_cast<int32_t>(total)};
    b.block_tables = table;
    b.max_blocks_per_seq = static_cast<int32_t>(table.size());
    b.logits_rows = {b.num_tokens() - 1};
    std::vector<float> logits;
    const absl::Status s = (*backend)->Step(b, &logits);
    EXPECT_TRUE(s.ok()) << s;
    if (!s.ok()) return out;
    cached = total;
    tokens.push_back(
        static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin()));
    out.push_back(std::move(logits));
  }
  return out;
}

std::vector<double> RelativeLogitDiffs(const std::vector<std::vector<float>>& got,
                                       const std::vector<std::vector<float>>& want) {
  EXPECT_EQ(got.size(), want.size());
  std::vector<double> out;
  for (size_t s = 0; s < std::min(got.size(), want.size()); ++s) {
    double diff = 0, mag = 0;
    for (size_t i = 0; i < want[s].size(); ++i) {
      diff = std::max(diff, std::abs(static_cast<double>(got[s][i]) - want[s][i]));
      mag = std::max(mag, std::abs(static_cast<double>(want[s][i])));
    }
    out.push_back(diff / mag);
  }
  return out;
}

}  // namespace ptxserve::test_files
