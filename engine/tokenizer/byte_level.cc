#include "engine/tokenizer/byte_level.h"

#include <array>

#include "engine/tokenizer/utf8.h"

namespace ptxserve::tok {
namespace {

struct Tables {
  std::array<std::string, 256> to_char;
  std::array<int, 324> to_byte;  // indexed by code point; the map's range is [0, 0x143]
};

const Tables& GetTables() {
  static const Tables* tables = [] {
    auto* t = new Tables();
    t->to_byte.fill(-1);
    int extra = 0;
    for (int b = 0; b < 256; ++b) {
      const bool printable =
          (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
      const char32_t c = printable ? static_cast<char32_t>(b) : 256 + extra++;
      AppendUtf8(c, &t->to_char[b]);
      t->to_byte[c] = b;
    }
    return t;
  }();
  return *tables;
}

}  // namespace

const std::string& ByteToChar(unsigned char b) { return GetTables().to_char[b]; }

void AppendByteLevel(std::string_view bytes, std::string* out) {
  const Tables& t = GetTables();
  for (unsigned char b : bytes) *out += t.to_char[b];
}

int CharToByte(char32_t c) {
  const Tables& t = GetTables();
  return c < t.to_byte.size() ? t.to_byte[c] : -1;
}

}  // namespace ptxserve::tok
