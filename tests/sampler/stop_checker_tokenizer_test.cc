// StopChecker over the real tokenizer of the shared test model: streamed text must equal
// the batch decode, truncated at the first stop string.
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "engine/stop_checker.h"
#include "engine/tokenizer/tokenizer.h"
#include "gtest/gtest.h"

namespace ptxserve {
namespace {

const char* const kModelDir = PTXSERVE_SHARED_MODELS "/tinystories-656k";

class StopCheckerTokenizerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!std::filesystem::exists(std::string(kModelDir) + "/tokenizer.json")) {
      GTEST_SKIP() << "shared test model absent: " << kModelDir;
    }
    auto tok = Tokenizer::FromDir(kModelDir);
    ASSERT_TRUE(tok.ok()) << tok.status();
    tok_ = *std::move(tok);
  }

  std::vector<int32_t> Encode(const std::string& text) {
    auto ids = tok_->Encode(text, /*add_special_tokens=*/false);
    EXPECT_TRUE(ids.ok()) << ids.status();
    return ids.ok() ? *ids : std::vector<int32_t>{};
  }

  // Streams ids through a checker; returns the text and the finish reason, and the index
  // of the finishing push in *finished_at.
  std::string Stream(StopChecker& sc, const std::vector<int32_t>& ids, FinishReason* finish,
                     int* finished_at = nullptr) {
    std::string out;
    *finish = FinishReason::kNone;
    for (size_t i = 0; i < ids.size() && *finish == FinishReason::kNone; ++i) {
      StopChecker::Step step = sc.Push(ids[i]);
      out += step.text;
      *finish = step.finish;
      if (finished_at != nullptr) *finished_at = static_cast<int>(i);
    }
    if (*finish == FinishReason::kNone) out += sc.Flush();
    return out;
  }

  std::unique_ptr<Tokenizer> tok_;
};

TEST_F(StopCheckerTokenizerTest, StreamEqualsBatchDecode) {
  for (const std::string text : {"Once upon a time, there was a little girl named Lily.",
                                 "caf\xC3\xA9 \xE2\x98\x95 ok", "\xF0\x9F\x98\x80 smile"}) {
    const auto ids = Encode(text);
    ASSERT_FALSE(ids.empty());
    StoppingCriteria c;
    c.max_new_tokens = 1000;
    StopChecker sc(c, *tok_, tok_->eos_id());
    FinishReason finish;
    EXPECT_EQ(Stream(sc, ids, &finish), tok_->Decode(ids)) << text;
    EXPECT_EQ(finish, FinishReason::kNone);
  }
}

TEST_F(StopCheckerTokenizerTest, StopStringTruncatesTheDecode) {
  const auto ids = Encode("Once upon a time, there was a little girl named Lily. She was happy.");
  const std::string full = tok_->Decode(ids);
  for (const std::string stop : {"Lily", "e was", "a time,", ". "}) {
    const size_t at = full.find(stop);
    ASSERT_NE(at, std::string::npos) << stop;
    StoppingCriteria c;
    c.max_new_tokens = 1000;
    c.stop = {stop};
    StopChecker sc(c, *tok_, tok_->eos_id());
    FinishReason finish;
    int finished_at = -1;
    EXPECT_EQ(Stream(sc, ids, &finish, &finished_at), full.substr(0, at)) << stop;
    EXPECT_EQ(finish, FinishReason::kStop) << stop;
    // It finished on the token that completed the stop string, not later.
    const std::vector<int32_t> upto(ids.begin(), ids.begin() + finished_at + 1);
    const std::vector<int32_t> before(ids.begin(), ids.begin() + finished_at);
    EXPECT_NE(tok_->Decode(upto).find(stop), std::string::npos) << stop;
    EXPECT_EQ(tok_->Decode(before).find(stop), std::string::npos) << stop;
  }
}

TEST_F(StopCheckerTokenizerTest, EosOfTheModelFinishes) {
  ASSERT_GE(tok_->eos_id(), 0);
  auto ids = Encode("The end");
  ids.push_back(tok_->eos_id());
  ids.push_back(ids.front());
  StoppingCriteria c;
  StopChecker sc(c, *tok_, tok_->eos_id());
  FinishReason finish;
  int finished_at = -1;
  const std::string text = Stream(sc, ids, &finish, &finished_at);
  EXPECT_EQ(finish, FinishReason::kEos);
  EXPECT_EQ(finished_at, static_cast<int>(ids.size()) - 2);
  EXPECT_EQ(text, "The end");
}

}  // namespace
}  // namespace ptxserve
