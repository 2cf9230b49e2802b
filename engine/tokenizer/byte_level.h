// GPT-2's reversible byte <-> printable-character map used by ByteLevel pre-tokenizers
// and decoders: bytes that are printable Latin-1 map to themselves, the other 68 to
// U+0100 + n in byte order.
#pragma once

#include <string>
#include <string_view>

namespace ptxserve::tok {

// The UTF-8 text of the character standing for byte b.
const std::string& ByteToChar(unsigned char b);
// Appends the mapped characters of every byte of `bytes`.
void AppendByteLevel(std::string_view bytes, std::string* out);
// The byte code point c stands for, or -1 when c is not in the map.
int CharToByte(char32_t c);

}  // namespace ptxserve::tok
