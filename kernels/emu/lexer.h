// Tokenizer for PTX text: identifiers (incl. %regs and $labels), dot-words (.reg, .f32,
// .L1::no_allocate), numbers (decimal, 0x hex, 0f/0d float bit patterns, decimal floats),
// strings and punctuation. Comments (// and /* */) are dropped; every token keeps its line.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace ptxserve::emu {

enum class Tok : uint8_t { kIdent, kDot, kInt, kFloat, kString, kPunct, kEnd };

struct Token {
  Tok kind = Tok::kEnd;
  std::string_view text;  // kDot: without the leading '.'; kPunct: one character
  int32_t line = 0;
  uint64_t ival = 0;  // kInt: value (two's complement of the literal)
  // kFloat: the value's bits; f32_bits true for a 0f literal (32-bit pattern in fbits),
  // otherwise fbits is a double's pattern (0d literal or decimal float).
  uint64_t fbits = 0;
  bool f32_bits = false;
};

// Splits `text` into tokens ending with one kEnd token. Errors name the line.
absl::StatusOr<std::vector<Token>> Lex(std::string_view text);

}  // namespace ptxserve::emu
