// Index arithmetic only: which nibble of which word holds element (n, i), both ways.
#include "engine/model/hf_quant_layout.h"

#include <cstring>

#include "engine/model/quant.h"

namespace ptxserve {
namespace {

constexpr int64_t kGroup = 128;
constexpr int kBlockBytes = LayoutOf(QuantType::kInt4G128).block_bytes;

uint32_t Word(const uint8_t* p, int64_t index) {
  uint32_t w;
  std::memcpy(&w, p + 4 * index, 4);
  return w;
}
int Nibble(uint32_t word, int pos) { return static_cast<int>((word >> (4 * pos)) & 0xF); }

// Word index and nibble position of weight (n, i) in qweight.
void QweightAt(Int4Packing p, int64_t out, int64_t n, int64_t i, int64_t* word, int* pos) {
  if (p == Int4Packing::kAwq) {
    *word = i * (out / 8) + n / 8;
    *pos = kAwqNibbleOf[n % 8];
  } else {
    *word = (i / 8) * out + n;
    *pos = static_cast<int>(i % 8);
  }
}
// The same for the zero of output n in group g.
void QzeroAt(Int4Packing p, int64_t out, int64_t g, int64_t n, int64_t* word, int* pos) {
  *word = g * (out / 8) + n / 8;
  *pos = p == Int4Packing::kAwq ? kAwqNibbleOf[n % 8] : static_cast<int>(n % 8);
}

}  // namespace

std::vector<int64_t> QweightShape(Int4Packing p, int64_t in, int64_t out) {
  return p == Int4Packing::kAwq ? std::vector<int64_t>{in, out / 8}
                                : std::vector<int64_t>{in / 8, out};
}
std::vector<int64_t> QzerosShape(int64_t in, int64_t out) { return {in / kGroup, out / 8}; }
std::vector<int64_t> ScalesShape(int64_t in, int64_t out) { return {in / kGroup, out}; }

void Int4ToBlocks(Int4Packing p, const uint8_t* qweight, const uint8_t* qzeros,
                  const uint8_t* scales, int64_t in, int64_t out, bool zero_minus_one,
                  uint8_t* blocks) {
  const int zero_offset = p == Int4Packing::kGptq && zero_minus_one ? 1 : 0;
  const int64_t groups = in / kGroup;
  for (int64_t n = 0; n < out; ++n) {
    for (int64_t g = 0; g < groups; ++g) {
      uint8_t* b = blocks + (n * groups + g) * kBlockBytes;
      std::memcpy(b, scales + 2 * (g * out + n), 2);
      int64_t word;
      int pos;
      QzeroAt(p, out, g, n, &word, &pos);
      b[2] = static_cast<uint8_t>(Nibble(Word(qzeros, word), pos) + zero_offset);
      b[3] = 0;
      std::memset(b + 4, 0, 64);
      for (int64_t k = 0; k < kGroup; ++k) {
        QweightAt(p, out, n, g * kGroup + k, &word, &pos);
        b[4 + k / 2] |= static_cast<uint8_t>(Nibble(Word(qweight, word), pos) << (4 * (k % 2)));
      }
    }
  }
}

PackedInt4 BlocksToInt4(Int4Packing p, const uint8_t* blocks, int64_t in, int64_t out,
                        bool zero_minus_one) {
  const int zero_offset = p == Int4Packing::kGptq && zero_minus_one ? 1 : 0;
  const int64_t groups = in / kGroup;
  PackedInt4 r;
  r.qweight.assign(in * out / 8, 0);
  r.qzeros.assign(groups * out / 8, 0);
  r.scales.resize(groups * out);
  auto put = [](std::vector<int32_t>& words, int64_t word, int pos, int v) {
    words[word] = static_cast<int32_t>(static_cast<uint32_t>(words[word]) |
                                       (static_cast<uint32_t>(v & 0xF) << (4 * pos)));
  };
  for (int64_t n = 0; n < out; ++n) {
    for (int64_t g = 0; g < groups; ++g) {
      const uint8_t* b = blocks + (n * groups + g) * kBlockBytes;
      std::memcpy(&r.scales[g * out + n], b, 2);
      int64_t word;
      int pos;
      QzeroAt(p, out, g, n, &word, &pos);
      put(r.qzeros, word, pos, b[2] - zero_offset);
      for (int64_t k = 0; k < kGroup; ++k) {
        QweightAt(p, out, n, g * kGroup + k, &word, &pos);
        put(r.qweight, word, pos, (b[4 + k / 2] >> (4 * (k % 2))) & 0xF);
      }
    }
  }
  return r;
}

}  // namespace ptxserve
