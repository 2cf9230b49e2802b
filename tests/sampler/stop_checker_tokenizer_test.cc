// StopChecker over the real tokenizer of the shared test model: streamed text must equal
// the batch decode (of the continuation: Decode(prompt + generated) minus Decode(prompt)),
// truncated at the first stop string, and hold back nothing but what it must.
#include <filesystem>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "engine/stop_checker.h"
#include "engine/tokenizer/tokenizer.h"
#include "gtest/gtest.h"
#include "tests/tokenizer/test_util.h"

namespace ptxserve {
namespace {

using testing::ByteToken;
using testing::EndsInsideACharacter;
using testing::ExpectedContinuation;
using testing::kReplacementChar;
using testing::kTinyStoriesDir;

class StopCheckerTokenizerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!std::filesystem::exists(kTinyStoriesDir + "/tokenizer.json")) {
      GTEST_SKIP() << "shared test model absent: " << kTinyStoriesDir;
    }
    auto tok = Tokenizer::FromDir(kTinyStoriesDir);
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
    StopChecker sc(c, *tok_, tok_->eos_id(), {});
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
    StopChecker sc(c, *tok_, tok_->eos_id(), {});
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
  StopChecker sc(c, *tok_, tok_->eos_id(), {});
  FinishReason finish;
  int finished_at = -1;
  const std::string text = Stream(sc, ids, &finish, &finished_at);
  EXPECT_EQ(finish, FinishReason::kEos);
  EXPECT_EQ(finished_at, static_cast<int>(ids.size()) - 2);
  EXPECT_EQ(text, "The end");
}

// Streams `generated` after `prompt` with at most one stop string and checks, after every
// push, that the text so far is the continuation's (cut at the stop string) and that what
// is held back is no more than an incomplete character and a possible stop-string start.
// Returns whether the stop string stopped it.
bool ExpectContinuationStreams(const Tokenizer& tok, std::span<const int32_t> prompt,
                               std::span<const int32_t> generated, const std::string& stop) {
  StoppingCriteria c;
  c.max_new_tokens = 1000;
  if (!stop.empty()) c.stop = {stop};
  StopChecker sc(c, tok, tok.eos_id(), prompt);
  std::string out;
  for (size_t i = 0; i < generated.size(); ++i) {
    const StopChecker::Step step = sc.Push(generated[i]);
    out += step.text;
    const auto so_far = generated.first(i + 1);
    std::string want = ExpectedContinuation(tok, prompt, so_far);
    const size_t at = stop.empty() ? std::string::npos : want.find(stop);
    if (at != std::string::npos) {
      EXPECT_EQ(step.finish, FinishReason::kStop) << "push " << i;
      EXPECT_EQ(out, want.substr(0, at)) << "push " << i;
      return true;
    }
    EXPECT_EQ(step.finish, FinishReason::kNone) << "push " << i;
    if (!want.starts_with(out)) {
      ADD_FAILURE() << "push " << i << ": \"" << out << "\" is not a prefix of \"" << want << "\"";
      return false;
    }
    // Held back: the rest of the text, its incomplete last character (one U+FFFD in the
    // decode) aside, must be a proper prefix of the stop string (or empty).
    std::string held = want.substr(out.size());
    std::vector<int32_t> all(prompt.begin(), prompt.end());
    all.insert(all.end(), so_far.begin(), so_far.end());
    if (EndsInsideACharacter(tok, all, /*skip_special=*/true)) {
      if (!held.ends_with(kReplacementChar)) {
        ADD_FAILURE() << "push " << i << ": the decode does not end with U+FFFD";
        return false;
      }
      held.resize(held.size() - kReplacementChar.size());
    }
    EXPECT_TRUE(held.empty() || (held.size() < stop.size() && stop.starts_with(held)))
        << "push " << i << " holds back \"" << held << "\"";
  }
  EXPECT_EQ(out + sc.Flush(), ExpectedContinuation(tok, prompt, generated));
  return false;
}

TEST_F(StopCheckerTokenizerTest, EveryPromptSplitStreamsItsContinuation) {
  auto bytes_tok = testing::TinyStoriesWithByteTokens();
  ASSERT_NE(bytes_tok, nullptr);
  const std::vector<std::string> texts = {
      "Once upon a time, there was a little girl named Lily. She was happy.",
      "The cat and the dog played in the park.",
      "Caf\xC3\xA9 d\xC3\xA9j\xC3\xA0 vu: \u20AC5, na\xC3\xAFve.",
      "Emoji \xF0\x9F\x98\x80\xF0\x9F\x91\x8D end \xE6\x97\xA5\xE6\x9C\xAC.",
  };
  // Stop strings spanning tokens, inside one, and starting with a multi-byte character.
  const std::vector<std::string> stops = {
      "", "e was", "a time,", "d the", ". ", "\u20AC5", "\xF0\x9F\x91\x8D e", "na\xC3\xAF",
  };
  int mid_character = 0, stopped = 0;  // the cases that matter did occur
  for (const Tokenizer* tok : {tok_.get(), bytes_tok.get()}) {
    for (const std::string& text : texts) {
      auto ids = tok->Encode(text);  // BOS first
      ASSERT_TRUE(ids.ok()) << ids.status();
      const std::span<const int32_t> all = *ids;
      // Every split: prompts of only BOS, ending mid-word, mid-character (byte tokens).
      for (size_t j = 1; j < all.size(); ++j) {
        mid_character += EndsInsideACharacter(*tok, all.first(j), /*skip_special=*/true);
        for (const std::string& stop : stops) {
          SCOPED_TRACE(::testing::Message() << "\"" << text << "\" split after " << j
                                            << " ids, stop \"" << stop << "\"");
          stopped += ExpectContinuationStreams(*tok, all.first(j), all.subspan(j), stop);
          if (HasFailure()) return;
        }
      }
    }
  }
  EXPECT_GT(mid_character, 5);
  EXPECT_GT(stopped, 50);
}

TEST_F(StopCheckerTokenizerTest, ByteTokensSplitACharacterAcrossThePrompt) {
  // Ids crafted directly: text cannot make the tokenizer end a prompt mid-character.
  auto tok = testing::TinyStoriesWithByteTokens();
  ASSERT_NE(tok, nullptr);
  auto head = tok->Encode("It costs");
  auto tail = tok->Encode("and more", /*add_special_tokens=*/false);  // "▁and▁more"
  ASSERT_TRUE(head.ok() && tail.ok());
  std::vector<int32_t> prompt = *head;
  prompt.push_back(ByteToken(0xE2));  // "€" is E2 82 AC
  prompt.push_back(ByteToken(0x82));
  std::vector<int32_t> generated = {ByteToken(0xAC)};
  generated.insert(generated.end(), tail->begin(), tail->end());
  ASSERT_EQ(tok->Decode(prompt), std::string("It costs") + std::string(kReplacementChar));
  StoppingCriteria c;
  c.max_new_tokens = 1000;
  StopChecker sc(c, *tok, tok->eos_id(), prompt);
  std::string out;
  for (const int32_t id : generated) out += sc.Push(id).text;
  out += sc.Flush();
  // The whole character, then the rest: "It costs" + this is Decode(prompt + generated).
  EXPECT_EQ(out, "\xE2\x82\xAC and more");
  ExpectContinuationStreams(*tok, prompt, generated, "\xE2\x82\xAC and");
}

}  // namespace
}  // namespace ptxserve
