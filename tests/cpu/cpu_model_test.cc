// The CPU backend on the shared trained model: greedy decoding through the paged
// cache agrees with the f64 reference model's full-recompute greedy decoding.
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "engine/cpu/cpu_backend.h"
#include "engine/kv_block_manager.h"
#include "engine/model/model.h"
#include "gtest/gtest.h"
#include "tests/reference/reference_model.h"

namespace ptxserve {
namespace {

TEST(CpuModelTest, TinyStoriesGreedyMatchesReference) {
  const std::string dir = std::string(PTXSERVE_SHARED_MODELS) + "/tinystories-656k";
  if (!std::filesystem::exists(dir + "/model.safetensors")) {
    GTEST_SKIP() << "shared model absent: " << dir;
  }
  auto model = LoadModel(dir);
  if (!model.ok() && (absl::IsUnimplemented(model.status()) || absl::IsNotFound(model.status()))) {
    GTEST_SKIP() << "LoadModel unavailable: " << model.status();
  }
  ASSERT_TRUE(model.ok()) << model.status();
  auto ref = reference::ReferenceModel::Create(*model);
  ASSERT_TRUE(ref.ok()) << ref.status();
  auto backend = CpuBackend::Create(*model, {64, 16, DType::kF32});
  ASSERT_TRUE(backend.ok()) << backend.status();

  const std::vector<int32_t> prompt = {1, 80, 147, 201, 282, 57};  // <bos> Once upon a time
  const int kSteps = 60;
  const int64_t V = model->config.vocab_size;
  KvBlockManager blocks(64, 16);
  std::vector<int32_t> table;
  std::vector<int32_t> tokens = prompt;
  std::vector<int32_t> generated;
  std::vector<float> logits;
  int64_t cached = 0;
  for (int step = 0; step < kSteps; ++step) {
    const int64_t total = static_cast<int64_t>(tokens.size());
    ASSERT_TRUE(blocks.EnsureCapacity(&table, total).ok());
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
    ASSERT_TRUE((*backend)->Step(b, &logits).ok());
    cached = total;
    ASSERT_EQ(static_cast<int64_t>(logits.size()), V);
    if (step == 0) {  // the prompt's last-row logits against the f64 model
      const std::vector<double> want = ref->ForwardLast(prompt);
      double diff = 0, mag = 0;
      for (int64_t i = 0; i < V; ++i) {
        diff = std::max(diff, std::abs(logits[i] - want[i]));
        mag = std::max(mag, std::abs(want[i]));
      }
      EXPECT_LT(diff / mag, 1e-4);
    }
    generated.push_back(
        static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin()));
    tokens.push_back(generated.back());
  }
  EXPECT_EQ(generated, ref->GreedyGenerate(prompt, kSteps));
}

// The backend copies every matrix out of the model (onto huge pages) and releases the
// file's pages as it goes, so a file-mapped model still loads in about its file size and
// the backend outlives the Model.
TEST(CpuModelTest, WeightsAreCopiesThatOutliveTheModel) {
  const std::string dir = std::string(PTXSERVE_SHARED_MODELS) + "/tinystories-656k";
  if (!std::filesystem::exists(dir + "/model.safetensors")) {
    GTEST_SKIP() << "shared model absent: " << dir;
  }
  auto model = LoadModel(dir);
  ASSERT_TRUE(model.ok()) << model.status();
  ASSERT_TRUE(model->storage_holds_tensors);
  ASSERT_EQ(model->file_mappings.size(), 1u);
  auto kept = CpuBackend::Create(*model, {64, 16, DType::kF32});
  ASSERT_TRUE(kept.ok()) << kept.status();
  // f32 checkpoint: the copies are the stored bytes, nothing widened or dropped.
  EXPECT_EQ((*kept)->weight_bytes(), model->WeightBytes());

  // A second backend outlives its model: its logits equal the first's.
  std::unique_ptr<CpuBackend> orphan;
  {
    auto again = LoadModel(dir);
    ASSERT_TRUE(again.ok()) << again.status();
    auto b = CpuBackend::Create(*again, {64, 16, DType::kF32});
    ASSERT_TRUE(b.ok()) << b.status();
    orphan = *std::move(b);
  }
  const std::vector<int32_t> prompt = {1, 80, 147, 201, 282, 57};
  std::vector<float> a, b;
  for (auto [backend, out] : {std::pair{kept->get(), &a}, std::pair{orphan.get(), &b}}) {
    KvBlockManager blocks(64, 16);
    std::vector<int32_t> table;
    const int64_t n = static_cast<int64_t>(prompt.size());
    ASSERT_TRUE(blocks.EnsureCapacity(&table, n).ok());
    StepBatch batch;
    for (int64_t p = 0; p < n; ++p) {
      batch.token_ids.push_back(prompt[p]);
      batch.positions.push_back(static_cast<int32_t>(p));
      batch.slot_mapping.push_back(int64_t{table[p / 16]} * 16 + p % 16);
    }
    batch.query_start = {0, batch.num_tokens()};
    batch.seq_lens = {static_cast<int32_t>(n)};
    batch.block_tables = table;
    batch.max_blocks_per_seq = static_cast<int32_t>(table.size());
    batch.logits_rows = {batch.num_tokens() - 1};
    ASSERT_TRUE(backend->Step(batch, out).ok());
  }
  EXPECT_EQ(a, b);
}

}  // namespace
}  // namespace ptxserve
