#include "engine/util/huge_page_buffer.h"

#include <cstdint>
#include <fstream>
#include <sstream>
#include <string>
#include <utility>

#include "gtest/gtest.h"

namespace ptxserve {
namespace {

constexpr size_t kHugePage = size_t{2} << 20;

// The VmFlags line of the /proc/self/smaps mapping that holds `p` ("" when none does).
std::string VmFlagsOf(const void* p) {
  std::ifstream smaps("/proc/self/smaps");
  const auto addr = reinterpret_cast<uintptr_t>(p);
  bool inside = false;
  for (std::string line; std::getline(smaps, line);) {
    uintptr_t lo = 0, hi = 0;
    char dash = 0;
    std::istringstream range(line);
    if (range >> std::hex >> lo >> dash >> hi && dash == '-') {
      inside = addr >= lo && addr < hi;
    } else if (inside && line.rfind("VmFlags:", 0) == 0) {
      return line;
    }
  }
  return "";
}

TEST(HugePageBufferTest, LargeBuffersStartOnAHugePageAndAreAdvised) {
  const size_t bytes = 3 * kHugePage + 12345;  // not a whole number of pages
  HugePageBuffer b(bytes);
  ASSERT_NE(b.data(), nullptr);
  EXPECT_EQ(b.size(), bytes);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(b.data()) % kHugePage, 0u);
  for (size_t i = 0; i < bytes; i += 4096) EXPECT_EQ(b.data()[i], 0) << i;
  EXPECT_EQ(b.data()[bytes - 1], 0);
  b.data()[bytes - 1] = 7;  // the last byte is writable
  // MADV_HUGEPAGE shows as "hg"; whether huge pages are then given depends on the
  // system's setting and free memory, so only the advice is checked.
  const std::string flags = VmFlagsOf(b.data());
  ASSERT_FALSE(flags.empty()) << "no smaps entry for the buffer";
  EXPECT_NE(flags.find(" hg"), std::string::npos) << flags;
}

TEST(HugePageBufferTest, SmallBuffersAreOrdinaryMemory) {
  HugePageBuffer b(100);
  ASSERT_NE(b.data(), nullptr);
  EXPECT_EQ(b.size(), 100u);
  EXPECT_EQ(b.data()[99], 0);
  EXPECT_EQ(VmFlagsOf(b.data()).find(" hg"), std::string::npos);
  HugePageBuffer empty(0);
  EXPECT_EQ(empty.data(), nullptr);
  EXPECT_EQ(empty.size(), 0u);
}

TEST(HugePageBufferTest, MovesHandOverTheMemory) {
  HugePageBuffer a(kHugePage);
  a.data()[0] = 42;
  uint8_t* const p = a.data();
  HugePageBuffer b(std::move(a));
  EXPECT_EQ(a.data(), nullptr);
  EXPECT_EQ(a.size(), 0u);
  EXPECT_EQ(b.data(), p);
  HugePageBuffer c(10);
  c = std::move(b);  // c's own memory is unmapped, b's taken
  EXPECT_EQ(c.data(), p);
  EXPECT_EQ(c.data()[0], 42);
  EXPECT_EQ(c.size(), kHugePage);
}

}  // namespace
}  // namespace ptxserve
