#include "engine/stop_checker.h"

#include <algorithm>
#include <cstdint>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "gtest/gtest.h"
#include "tests/sampler/stop_reference.h"

namespace ptxserve {
namespace {

// A test double for the Tokenizer interface: id -> fixed bytes. Id 0 is the special EOS.
class BytesTokenizer : public Tokenizer {
 public:
  explicit BytesTokenizer(std::vector<std::string> pieces) : pieces_(std::move(pieces)) {}

  absl::StatusOr<std::vector<int32_t>> Encode(std::string_view, bool) const override {
    return absl::UnimplementedError("BytesTokenizer::Encode");
  }
  std::string Decode(std::span<const int32_t> ids, bool skip_special) const override {
    std::string out;
    for (int32_t id : ids) out += TokenBytes(id, skip_special);
    return out;
  }
  std::string TokenBytes(int32_t id, bool skip_special) const override {
    if (id < 0 || id >= vocab_size()) return "";
    if (IsSpecial(id) && skip_special) return "";
    return pieces_[id];
  }
  bool StripsLeadingSpace() const override { return false; }
  int32_t vocab_size() const override { return static_cast<int32_t>(pieces_.size()); }
  int32_t bos_id() const override { return -1; }
  int32_t eos_id() const override { return 0; }
  bool IsSpecial(int32_t id) const override { return id == 0; }
  std::string IdToToken(int32_t id) const override { return TokenBytes(id, false); }
  int32_t TokenToId(std::string_view token) const override {
    for (size_t i = 0; i < pieces_.size(); ++i) {
      if (pieces_[i] == token) return static_cast<int32_t>(i);
    }
    return -1;
  }

 private:
  std::vector<std::string> pieces_;
};

enum Id : int32_t {
  kEos = 0,
  kA,
  kB,
  kC,
  kD,
  kSpace,
  kEuroHead,  // first two bytes of U+20AC
  kEuroTail,  // its last byte
  kHello,
  kAB,
  kX,
  kSmile1,  // U+1F600 over three tokens: F0 9F | 98 | 80
  kSmile2,
  kSmile3,
  kABC,
};

const BytesTokenizer& Tok() {
  static const BytesTokenizer* tok =
      new BytesTokenizer({"</s>", "a", "b", "c", "d", " ", "\xE2\x82", "\xAC", "hello", "ab", "x",
                          "\xF0\x9F", "\x98", "\x80", "abc"});
  return *tok;
}

StoppingCriteria Criteria(std::vector<std::string> stop = {}, int32_t max_new_tokens = 100) {
  StoppingCriteria c;
  c.stop = std::move(stop);
  c.max_new_tokens = max_new_tokens;
  return c;
}

struct Output {
  std::vector<std::string> texts;  // per push
  std::string text;                // concatenated
  FinishReason finish = FinishReason::kNone;
  int finished_at = -1;  // index of the push that finished
};

// The checkers below stream texts of their own (an empty prompt) unless a test gives one;
// Tok() strips no leading space, so only a prompt's incomplete character could matter.
Output PushAll(StopChecker& sc, const std::vector<int32_t>& ids) {
  Output r;
  for (size_t i = 0; i < ids.size(); ++i) {
    StopChecker::Step step = sc.Push(ids[i]);
    r.texts.push_back(step.text);
    r.text += step.text;
    if (step.finish != FinishReason::kNone && r.finished_at < 0) {
      r.finish = step.finish;
      r.finished_at = static_cast<int>(i);
    }
  }
  return r;
}

TEST(StopCheckerTest, StreamsTextImmediatelyWithoutStopStrings) {
  StopChecker sc(Criteria(), Tok(), kEos, {});
  const Output r = PushAll(sc, {kHello, kSpace, kX});
  EXPECT_EQ(r.texts, (std::vector<std::string>{"hello", " ", "x"}));
  EXPECT_EQ(r.finish, FinishReason::kNone);
  EXPECT_EQ(sc.num_generated(), 3);
}

TEST(StopCheckerTest, MultiByteCharacterSplitAcrossTokens) {
  StopChecker sc(Criteria(), Tok(), kEos, {});
  const Output r = PushAll(sc, {kA, kEuroHead, kEuroTail, kSmile1, kSmile2, kSmile3, kB});
  EXPECT_EQ(r.texts,
            (std::vector<std::string>{"a", "", "\xE2\x82\xAC", "", "", "\xF0\x9F\x98\x80", "b"}));
}

TEST(StopCheckerTest, StopStringSplitAcrossThreeTokens) {
  StopChecker sc(Criteria({"abc"}), Tok(), kEos, {});
  const Output r = PushAll(sc, {kX, kA, kB, kC, kD});
  EXPECT_EQ(r.texts, (std::vector<std::string>{"x", "", "", "", ""}));
  EXPECT_EQ(r.finish, FinishReason::kStop);
  EXPECT_EQ(r.finished_at, 3);
  EXPECT_EQ(sc.finish(), FinishReason::kStop);
}

TEST(StopCheckerTest, StopStringAtTheVeryStart) {
  StopChecker sc(Criteria({"abc"}), Tok(), kEos, {});
  const Output r = PushAll(sc, {kAB, kC});
  EXPECT_EQ(r.text, "");
  EXPECT_EQ(r.finish, FinishReason::kStop);
  EXPECT_EQ(r.finished_at, 1);
}

TEST(StopCheckerTest, StopStringInsideOneToken) {
  StopChecker sc(Criteria({"ll"}), Tok(), kEos, {});
  const Output r = PushAll(sc, {kX, kHello});
  EXPECT_EQ(r.text, "xhe");
  EXPECT_EQ(r.finish, FinishReason::kStop);
}

TEST(StopCheckerTest, PartialMatchIsReleasedWhenItBreaks) {
  StopChecker sc(Criteria({"abc"}), Tok(), kEos, {});
  const Output r = PushAll(sc, {kAB, kD, kX});
  EXPECT_EQ(r.texts, (std::vector<std::string>{"", "abd", "x"}));
  EXPECT_EQ(r.finish, FinishReason::kNone);
}

TEST(StopCheckerTest, OverlappingPartialMatches) {
  // "a" + "ab" + "c" = "aabc": the first "a" is released once "aab" shows that no stop
  // string starts there; the match starts at the second "a".
  StopChecker sc(Criteria({"abc"}), Tok(), kEos, {});
  const Output r = PushAll(sc, {kA, kAB, kC});
  EXPECT_EQ(r.texts, (std::vector<std::string>{"", "a", ""}));
  EXPECT_EQ(r.finish, FinishReason::kStop);

  StopChecker sc2(Criteria({"abc"}), Tok(), kEos, {});
  const Output r2 = PushAll(sc2, {kAB, kAB, kD});  // "abab" then "ababd"
  EXPECT_EQ(r2.texts, (std::vector<std::string>{"", "ab", "abd"}));
  EXPECT_EQ(r2.finish, FinishReason::kNone);
}

TEST(StopCheckerTest, EarliestOfSeveralStopStringsWins) {
  StopChecker sc(Criteria({"bc", "xab"}), Tok(), kEos, {});
  const Output r = PushAll(sc, {kX, kABC});  // "xabc": "xab" at 0, "bc" at 2
  EXPECT_EQ(r.text, "");
  EXPECT_EQ(r.finish, FinishReason::kStop);
}

TEST(StopCheckerTest, MultiByteStopString) {
  StopChecker sc(Criteria({"\xE2\x82\xAC"}), Tok(), kEos, {});
  const Output r = PushAll(sc, {kA, kEuroHead, kEuroTail, kB});
  EXPECT_EQ(r.text, "a");
  EXPECT_EQ(r.finish, FinishReason::kStop);
  EXPECT_EQ(r.finished_at, 2);
}

TEST(StopCheckerTest, EosFinishesAndFlushesHeldText) {
  StopChecker sc(Criteria({"abc"}), Tok(), kEos, {});
  const Output r = PushAll(sc, {kX, kAB, kEos});
  EXPECT_EQ(r.texts, (std::vector<std::string>{"x", "", "ab"}));
  EXPECT_EQ(r.finish, FinishReason::kEos);
  // Pushing after the end changes nothing.
  const StopChecker::Step after = sc.Push(kA);
  EXPECT_EQ(after.text, "");
  EXPECT_EQ(after.finish, FinishReason::kEos);
  EXPECT_EQ(sc.num_generated(), 3);
}

TEST(StopCheckerTest, EosWithIncompleteCharacterEmitsReplacement) {
  StopChecker sc(Criteria(), Tok(), kEos, {});
  const Output r = PushAll(sc, {kA, kEuroHead, kEos});
  EXPECT_EQ(r.text, "a\xEF\xBF\xBD");
  EXPECT_EQ(r.finish, FinishReason::kEos);
}

TEST(StopCheckerTest, IgnoreEosKeepsGoing) {
  StoppingCriteria c = Criteria();
  c.ignore_eos = true;
  StopChecker sc(c, Tok(), kEos, {});
  const Output r = PushAll(sc, {kA, kEos, kB});
  EXPECT_EQ(r.text, "ab");  // the special token's text is skipped
  EXPECT_EQ(r.finish, FinishReason::kNone);
}

TEST(StopCheckerTest, NoEosIdMeansNoEosStop) {
  StopChecker sc(Criteria(), Tok(), /*eos_id=*/-1, {});
  const Output r = PushAll(sc, {kA, kEos, kB});
  EXPECT_EQ(r.finish, FinishReason::kNone);
}

TEST(StopCheckerTest, StopTokenIdsFinishWithoutEmittingTheToken) {
  StoppingCriteria c = Criteria({"abc"});
  c.stop_token_ids = {kD};
  c.ignore_eos = true;
  StopChecker sc(c, Tok(), kEos, {});
  const Output r = PushAll(sc, {kX, kA, kD, kB});
  EXPECT_EQ(r.texts, (std::vector<std::string>{"x", "", "a", ""}));
  EXPECT_EQ(r.finish, FinishReason::kStop);
  EXPECT_EQ(r.finished_at, 2);
}

TEST(StopCheckerTest, MaxNewTokensFinishesWithLengthAndFlushes) {
  StopChecker sc(Criteria({"abc"}, 3), Tok(), kEos, {});
  const Output r = PushAll(sc, {kX, kA, kB, kC});
  EXPECT_EQ(r.texts, (std::vector<std::string>{"x", "", "ab", ""}));
  EXPECT_EQ(r.finish, FinishReason::kLength);
  EXPECT_EQ(r.finished_at, 2);
  EXPECT_EQ(sc.num_generated(), 3);
}

TEST(StopCheckerTest, StopStringOnTheLastAllowedTokenIsStop) {
  StopChecker sc(Criteria({"ab"}, 2), Tok(), kEos, {});
  const Output r = PushAll(sc, {kA, kB});
  EXPECT_EQ(r.text, "");
  EXPECT_EQ(r.finish, FinishReason::kStop);
}

TEST(StopCheckerTest, MaxNewTokensZeroStartsFinished) {
  StopChecker sc(Criteria({}, 0), Tok(), kEos, {});
  EXPECT_TRUE(sc.finished());
  EXPECT_EQ(sc.finish(), FinishReason::kLength);
  const Output r = PushAll(sc, {kA});
  EXPECT_EQ(r.text, "");
  EXPECT_EQ(sc.num_generated(), 0);
}

TEST(StopCheckerTest, FlushReleasesHeldTextForCancellation) {
  StopChecker sc(Criteria({"abc"}), Tok(), kEos, {});
  const Output r = PushAll(sc, {kX, kAB, kEuroHead});
  EXPECT_EQ(r.text, "x");
  // "ab" held as a stop prefix; the euro head is still an incomplete character.
  EXPECT_EQ(sc.Flush(), "ab\xEF\xBF\xBD");
  EXPECT_EQ(sc.Flush(), "");
}

TEST(StopCheckerTest, StopStringsMatchTheContinuationOnly) {
  // "ab" is the prompt's text: "c" completes no stop string.
  const std::vector<int32_t> prompt = {kA, kB};
  StopChecker sc(Criteria({"abc"}), Tok(), kEos, prompt);
  const Output r = PushAll(sc, {kC, kA});
  EXPECT_EQ(r.texts, (std::vector<std::string>{"c", ""}));  // "a" may start "abc"
  EXPECT_EQ(r.finish, FinishReason::kNone);
}

TEST(StopCheckerTest, ACharacterSplitAcrossThePromptIsTheContinuations) {
  // The prompt ends with the first two bytes of U+20AC: the continuation's first token
  // completes it, so the stream starts with the whole character and a stop string can
  // begin with it.
  const std::vector<int32_t> prompt = {kX, kEuroHead};
  const std::string euro = "\xE2\x82\xAC";
  StopChecker sc(Criteria({euro + "a"}), Tok(), kEos, prompt);
  const Output r = PushAll(sc, {kEuroTail, kB});
  EXPECT_EQ(r.texts, (std::vector<std::string>{"", euro + "b"}));
  StopChecker stops(Criteria({euro + "a"}), Tok(), kEos, prompt);
  const Output s = PushAll(stops, {kEuroTail, kA});
  EXPECT_EQ(s.text, "");
  EXPECT_EQ(s.finish, FinishReason::kStop);
  EXPECT_EQ(s.finished_at, 1);
}

TEST(StopCheckerTest, ManyStopTokenIdsInAnyOrder) {
  StoppingCriteria c = Criteria({"abc"});
  c.stop_token_ids = {kX, kHello, kD, kSmile3, kD, kSpace};
  StopChecker sc(c, Tok(), kEos, {});
  const Output r = PushAll(sc, {kA, kB, kC, kSpace});
  EXPECT_EQ(r.finish, FinishReason::kStop);
  EXPECT_EQ(r.finished_at, 2);  // "abc"
  StopChecker ids(c, Tok(), kEos, {});
  const Output s = PushAll(ids, {kA, kB, kSmile3});
  EXPECT_EQ(s.text, "ab");
  EXPECT_EQ(s.finish, FinishReason::kStop);
  EXPECT_EQ(s.finished_at, 2);
}

// Random tokens over a few symbols (one of them two bytes), random stop strings: after
// every push, what was emitted is the text up to the earliest stop string once one
// occurs, and before that the text less its longest tail that is a prefix of one.
TEST(StopCheckerTest, AgreesWithFindOverTheWholeText) {
  const std::vector<std::string> symbols = {"a", "b", "c", "\xC3\xA9"};
  std::mt19937 rng(2024);
  auto uniform = [&](size_t lo, size_t hi) {
    return std::uniform_int_distribution<size_t>(lo, hi)(rng);
  };
  for (int trial = 0; trial < 2000; ++trial) {
    std::vector<std::string> alphabet = symbols;
    std::shuffle(alphabet.begin(), alphabet.end(), rng);
    alphabet.resize(uniform(1, alphabet.size()));
    auto random_text = [&](size_t min_symbols, size_t max_symbols) {
      std::string s;
      for (size_t n = uniform(min_symbols, max_symbols); n > 0; --n) {
        s += alphabet[uniform(0, alphabet.size() - 1)];
      }
      return s;
    };
    std::vector<std::string> pieces = {"</s>"};
    for (int i = 0; i < 6; ++i) pieces.push_back(random_text(0, 3));
    const BytesTokenizer tok(pieces);
    std::vector<std::string> stops(uniform(1, 5));
    for (std::string& s : stops) s = random_text(1, 5);
    StopChecker sc(Criteria(stops, 1000), tok, kEos, {});
    std::string text, emitted;
    for (size_t n = uniform(1, 15); n > 0; --n) {
      const auto id = static_cast<int32_t>(uniform(1, pieces.size() - 1));
      const StopChecker::Step step = sc.Push(id);
      text += pieces[id];
      emitted += step.text;
      if (const size_t at = EarliestStopString(stops, text); at != std::string::npos) {
        ASSERT_EQ(step.finish, FinishReason::kStop) << "trial " << trial;
        ASSERT_EQ(emitted, text.substr(0, at)) << "trial " << trial;
        break;
      }
      ASSERT_EQ(step.finish, FinishReason::kNone) << "trial " << trial;
      ASSERT_EQ(emitted, text.substr(0, text.size() - LongestStopPrefixTail(stops, text)))
          << "trial " << trial;
    }
  }
}

TEST(StopCheckerTest, NamesAreStable) {
  EXPECT_EQ(FinishReasonName(FinishReason::kLength), "length");
  EXPECT_EQ(FinishReasonName(FinishReason::kStop), "stop");
  EXPECT_EQ(FinishReasonName(FinishReason::kEos), "eos");
  EXPECT_EQ(FinishReasonName(FinishReason::kCancelled), "cancelled");
  EXPECT_EQ(FinishReasonName(FinishReason::kError), "error");
}

}  // namespace
}  // namespace ptxserve
