// Test doubles for engine tests: a backend whose logits are a pure function of the
// tokens a row can see through the paged KV cache (so wrong slots, block tables or
// positions change the output), and a one-character-per-token tokenizer.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "engine/backend.h"
#include "engine/tokenizer/tokenizer.h"

namespace ptxserve::testing {

// Token ids: 0 = BOS, 1 = EOS (both special), k >= 2 -> the letter 'a' + (k - 2) % 26.
class FakeTokenizer : public Tokenizer {
 public:
  explicit FakeTokenizer(int32_t vocab = 64) : vocab_(vocab) {}
  absl::StatusOr<std::vector<int32_t>> Encode(std::string_view text,
                                              bool add_special_tokens) const override {
    std::vector<int32_t> ids;
    if (add_special_tokens) ids.push_back(0);
    for (char c : text) {
      if (c < 'a' || c > 'z') return absl::InvalidArgumentError("fake tokenizer: a-z only");
      ids.push_back(2 + (c - 'a'));
    }
    return ids;
  }
  std::string Decode(std::span<const int32_t> ids, bool skip_special) const override {
    std::string s;
    for (int32_t id : ids) s += TokenBytes(id, skip_special);
    return s;
  }
  std::string TokenBytes(int32_t id, bool skip_special) const override {
    if (id < 0 || id >= vocab_) return "";
    if (id < 2) return skip_special ? "" : (id == 0 ? "<s>" : "</s>");
    return std::string(1, static_cast<char>('a' + (id - 2) % 26));
  }
  bool StripsLeadingSpace() const override { return false; }
  int32_t vocab_size() const override { return vocab_; }
  int32_t bos_id() const override { return 0; }
  int32_t eos_id() const override { return 1; }
  bool IsSpecial(int32_t id) const override { return id == 0 || id == 1; }
  std::string IdToToken(int32_t id) const override { return TokenBytes(id, false); }
  int32_t TokenToId(std::string_view) const override { return -1; }

 private:
  int32_t vocab_;
};

// The KV "rows" are the token ids themselves; a row's logits hash everything it sees.
class FakeBackend : public Backend {
 public:
  FakeBackend(int32_t vocab, int32_t context, KvCacheConfig kv) : kv_(kv) {
    config_.architecture = "FakeForCausalLM";
    config_.model_type = "fake";
    config_.vocab_size = vocab;
    config_.max_position_embeddings = context;
    config_.eos_token_id = 1;
    pool_.assign(static_cast<size_t>(kv.num_blocks) * kv.block_size, -1);
  }

  absl::Status Step(const StepBatch& b, std::vector<float>* logits) override {
    {
      absl::MutexLock lock(&mu_);
      ++steps_started_;
      cv_.SignalAll();
      while (blocked_ || (block_from_ > 0 && steps_started_ >= block_from_)) cv_.Wait(&mu_);
      if (fail_next_ > 0) {
        --fail_next_;
        return absl::InternalError("injected failure");
      }
      max_seqs_seen_ = std::max(max_seqs_seen_, b.num_seqs());
      max_tokens_seen_ = std::max(max_tokens_seen_, b.num_tokens());
    }
    if (auto st = Check(b); !st.ok()) return st;
    const int32_t bs = kv_.block_size;
    for (int32_t t = 0; t < b.num_tokens(); ++t) pool_[b.slot_mapping[t]] = b.token_ids[t];
    const int64_t vocab = config_.vocab_size;
    logits->assign(b.logits_rows.size() * vocab, 0.0f);
    for (size_t r = 0; r < b.logits_rows.size(); ++r) {
      const int32_t row = b.logits_rows[r];
      int32_t s = 0;
      while (b.query_start[s + 1] <= row) ++s;
      uint64_t h = 0x12345;
      for (int32_t p = 0; p <= b.positions[row]; ++p) {
        const int32_t block = b.block_tables[s * b.max_blocks_per_seq + p / bs];
        const int32_t tok = pool_[static_cast<size_t>(block) * bs + p % bs];
        if (tok < 0) return absl::InternalError(absl::StrCat("unwritten KV slot at pos ", p));
        h = Mix(h ^ static_cast<uint64_t>(tok) ^ (static_cast<uint64_t>(p) << 32));
      }
      for (int64_t v = 0; v < vocab; ++v) {
        const uint64_t x = Mix(h + static_cast<uint64_t>(v));
        (*logits)[r * vocab + v] = static_cast<float>(x >> 40) / static_cast<float>(1 << 24) * 4;
      }
      // Make EOS unlikely so that sequences run to max_new_tokens unless a test wants it.
      if (vocab > 1) (*logits)[r * vocab + 1] = eos_logit_;
    }
    return absl::OkStatus();
  }

  const ModelConfig& config() const override { return config_; }
  const KvCacheConfig& kv_config() const override { return kv_; }
  std::string name() const override { return "fake"; }

  // Test controls (any thread).
  void Block() {
    absl::MutexLock lock(&mu_);
    blocked_ = true;
  }
  void Unblock() {
    absl::MutexLock lock(&mu_);
    blocked_ = false;
    block_from_ = 0;
    cv_.SignalAll();
  }
  // Step number n (1 = the warm-up) and every later one wait inside Step until Unblock:
  // a deterministic point to freeze the engine at, however fast the steps run.
  void BlockFromStep(int64_t n) {
    absl::MutexLock lock(&mu_);
    block_from_ = n;
  }
  void FailNext(int n) {
    absl::MutexLock lock(&mu_);
    fail_next_ = n;
  }
  // Waits until at least n steps have started.
  void AwaitStepsStarted(int64_t n) {
    absl::MutexLock lock(&mu_);
    while (steps_started_ < n) cv_.Wait(&mu_);
  }
  int64_t steps_started() {
    absl::MutexLock lock(&mu_);
    return steps_started_;
  }
  int32_t max_seqs_seen() {
    absl::MutexLock lock(&mu_);
    return max_seqs_seen_;
  }
  int32_t max_tokens_seen() {
    absl::MutexLock lock(&mu_);
    return max_tokens_seen_;
  }
  float eos_logit_ = -100.0f;  // set before starting the engine

 private:
  static uint64_t Mix(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
  }
  absl::Status Check(const StepBatch& b) const {
    const int32_t n = b.num_seqs();
    if (static_cast<int32_t>(b.query_start.size()) != n + 1 || b.query_start[0] != 0 ||
        b.query_start[n] != b.num_tokens()) {
      return absl::InternalError("bad query_start");
    }
    if (b.positions.size() != b.token_ids.size() || b.slot_mapping.size() != b.token_ids.size() ||
        b.block_tables.size() != static_cast<size_t>(n) * b.max_blocks_per_seq) {
      return absl::InternalError("inconsistent sizes");
    }
    const int32_t bs = kv_.block_size;
    for (int32_t s = 0; s < n; ++s) {
      for (int32_t t = b.query_start[s]; t < b.query_start[s + 1]; ++t) {
        const int32_t p = b.positions[t];
        if (p != b.seq_lens[s] - (b.query_start[s + 1] - t)) return absl::InternalError("pos");
        const int32_t block = b.block_tables[s * b.max_blocks_per_seq + p / bs];
        if (b.slot_mapping[t] != static_cast<int64_t>(block) * bs + p % bs) {
          return absl::InternalError("slot does not match the block table");
        }
        if (p >= config_.max_position_embeddings) return absl::InternalError("past context");
      }
    }
    return absl::OkStatus();
  }

  ModelConfig config_;
  KvCacheConfig kv_;
  std::vector<int32_t> pool_;
  absl::Mutex mu_;
  absl::CondVar cv_;
  bool blocked_ ABSL_GUARDED_BY(mu_) = false;
  int64_t block_from_ ABSL_GUARDED_BY(mu_) = 0;
  int fail_next_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t steps_started_ ABSL_GUARDED_BY(mu_) = 0;
  int32_t max_seqs_seen_ ABSL_GUARDED_BY(mu_) = 0;
  int32_t max_tokens_seen_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace ptxserve::testing
