#include "engine/stop_matcher.h"

#include <algorithm>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tests/sampler/stop_reference.h"

namespace ptxserve {
namespace {

constexpr size_t kNoMatch = StopMatcher::kNoMatch;

TEST(StopMatcherTest, NoStopStrings) {
  EXPECT_TRUE(StopMatcher(std::vector<std::string>{}).empty());
  EXPECT_TRUE(StopMatcher(std::vector<std::string>{""}).empty());
  StopMatcher m(std::vector<std::string>{"", "a"});
  EXPECT_FALSE(m.empty());
  EXPECT_EQ(m.Feed("xa"), 1u);
}

TEST(StopMatcherTest, MatchAcrossPieces) {
  StopMatcher m(std::vector<std::string>{"abc"});
  EXPECT_EQ(m.Feed("xa"), kNoMatch);
  EXPECT_EQ(m.PartialLength(), 1u);
  EXPECT_EQ(m.Feed("b"), kNoMatch);
  EXPECT_EQ(m.PartialLength(), 2u);
  EXPECT_EQ(m.Feed("cde"), 5u);  // "abc" began 5 bytes before the end of "xabcde"
}

TEST(StopMatcherTest, BrokenPartialMatchFallsBackToItsLongestSuffix) {
  StopMatcher m(std::vector<std::string>{"aab"});
  EXPECT_EQ(m.Feed("aaa"), kNoMatch);
  EXPECT_EQ(m.PartialLength(), 2u);
  EXPECT_EQ(m.Feed("b"), 3u);
}

TEST(StopMatcherTest, OverlappingStopStringsEarliestStartWins) {
  // "bc" ends first, "abcd" starts first: the earliest start is the one reported.
  StopMatcher m(std::vector<std::string>{"bc", "abcd"});
  EXPECT_EQ(m.Feed("xabcd"), 4u);
  // Only "bc" has ended when the piece does.
  StopMatcher m2(std::vector<std::string>{"bc", "abcd"});
  EXPECT_EQ(m2.Feed("xabc"), 2u);
  EXPECT_EQ(m2.PartialLength(), 3u);  // "abc", still a prefix of "abcd"
}

TEST(StopMatcherTest, StopStringThatIsAPrefixOfAnother) {
  StopMatcher m(std::vector<std::string>{"abc", "ab"});
  EXPECT_EQ(m.Feed("a"), kNoMatch);
  EXPECT_EQ(m.Feed("b"), 2u);
  StopMatcher longer_first(std::vector<std::string>{"ab", "abc"});
  EXPECT_EQ(longer_first.Feed("zabc"), 3u);  // both start at 'a'
}

TEST(StopMatcherTest, StopStringThatIsASuffixOfAnother) {
  StopMatcher m(std::vector<std::string>{"xbc", "bc"});
  EXPECT_EQ(m.Feed("abc"), 2u);
  StopMatcher both(std::vector<std::string>{"xbc", "bc"});
  EXPECT_EQ(both.Feed("xb"), kNoMatch);
  EXPECT_EQ(both.Feed("c"), 3u);  // "xbc" and "bc" end together; "xbc" starts first
}

TEST(StopMatcherTest, MultiByteUtf8SplitAcrossPieces) {
  const std::string euro = "\xE2\x82\xAC", yen = "\xC2\xA5";
  StopMatcher m(std::vector<std::string>{euro + "1", yen});
  EXPECT_EQ(m.Feed("a\xE2"), kNoMatch);
  EXPECT_EQ(m.PartialLength(), 1u);
  EXPECT_EQ(m.Feed("\x82\xAC"), kNoMatch);
  EXPECT_EQ(m.PartialLength(), 3u);
  EXPECT_EQ(m.Feed("2" + yen), 2u);
  // Bytes above 0x7F are bytes like the others (a signed char must not turn them negative).
  StopMatcher high(
      std::vector<std::string>{"\xFF"
                               "a",
                               "a\xFF", "\x80"});
  EXPECT_EQ(high.Feed("a"), kNoMatch);
  EXPECT_EQ(high.Feed("\xFF"), 2u);
}

TEST(StopMatcherTest, DuplicatesAndResets) {
  StopMatcher m(std::vector<std::string>{"ab", "ab"});
  EXPECT_EQ(m.Feed("a"), kNoMatch);
  m.Reset();
  EXPECT_EQ(m.PartialLength(), 0u);
  EXPECT_EQ(m.Feed("b"), kNoMatch);  // the "a" before the reset is forgotten
  EXPECT_EQ(m.Feed("ab"), 2u);
}

TEST(StopMatcherTest, AgreesWithFindOverTheWholeText) {
  // Small alphabets make matches, overlaps and broken partial matches frequent; the pool
  // has a NUL and bytes above 0x7F.
  const std::string pool = std::string("abcd\x00\x80\xC3\xFF", 8);
  std::mt19937 rng(12345);
  auto uniform = [&](size_t lo, size_t hi) {
    return std::uniform_int_distribution<size_t>(lo, hi)(rng);
  };
  for (int trial = 0; trial < 3000; ++trial) {
    std::string alphabet = pool;
    std::shuffle(alphabet.begin(), alphabet.end(), rng);
    alphabet.resize(uniform(1, 4));
    auto random_string = [&](size_t len) {
      std::string s(len, ' ');
      for (char& c : s) c = alphabet[uniform(0, alphabet.size() - 1)];
      return s;
    };
    std::vector<std::string> stops(uniform(1, 6));
    for (std::string& s : stops) s = random_string(uniform(1, 7));
    StopMatcher m(stops);
    std::string text;
    const size_t pieces = uniform(1, 12);
    for (size_t p = 0; p < pieces; ++p) {
      const std::string piece = random_string(uniform(0, 5));
      const size_t begin = text.size();
      text += piece;
      // Matches that end inside the piece, the earliest start of those.
      const size_t at = EarliestStopString(stops, text, begin);
      ASSERT_EQ(m.Feed(piece), at == std::string::npos ? kNoMatch : text.size() - at)
          << "trial " << trial << " piece " << p;
      ASSERT_EQ(m.PartialLength(), LongestStopPrefixTail(stops, text))
          << "trial " << trial << " piece " << p;
    }
  }
}

}  // namespace
}  // namespace ptxserve
