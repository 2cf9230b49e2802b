// gemm_quant.cc's integer kernel (q8_0 and q4_0 weights against x rounded to 8 bits per
// block of 32) for CPUs with AVX512-VNNI, chosen at run time (engine/cpu/isa.h).
//
// Both ISA kernels round alike: for each output and weight block, the block's 32 products
// are summed exactly in int32 (s), and the output's one f32 accumulator takes
//   acc = float(s) * (d_w * d_x) + acc
// (one FMA, d_w * d_x rounded first; float(s) exact, |s| <= 32 * 128 * 127 < 2^24), block
// after block, then y = acc + bias. So the results equal the AVX2 kernel's bit for bit,
// however each kernel arranges its integer lanes.
//
// vpdpbusd adds the four products of unsigned bytes (first operand) and signed bytes
// (second) in each int32 lane to that lane. x's codes are stored offset by 128
// (QuantizedX: x + 128 in 0..255), the weights' are signed (q8_0's codes; q4_0's nibbles
// minus 8), and a block's sum starts from -128 times the weights' codes summed, so
//   (x + 128) . w - 128 sum(w) = x . w
// exactly.
//
// Prefill (PackedPanel, 4 rows of x or more): the lanes are outputs. Each weight block of
// 16 rows is repacked once per pass over x (PackedBlock: register g's lane l holds elements
// 4g..4g+3 of one row, with the rows' scales and corrections in the same lanes), and each
// x row's block is then 8 vpdpbusd of its 4-byte groups broadcast against those registers,
// one int32 -> f32 conversion, one multiply and one FMA for 16 outputs. The f32 work per
// block and output that bounded the kernel before (8 lanes converted and scaled per output)
// is gone; the vpdpbusd count per product is the same.
//
// Decode (Tile, under 4 rows): a 512-bit register holds two weight rows' 8-lane sums side by
// side, with x's 32 codes broadcast to both halves, and the lanes of 4 outputs are summed
// per block by a shuffle-add tree. There the offset goes on the weights (q4_0's nibbles as
// stored, q8_0's codes + 128) and x's correction on x, which costs less than repacking a
// tile's weights for one row.
//
// Compiled for AVX512-VNNI between PTXSERVE_TARGET_BEGIN and _END (isa_target.h); no
// intrinsics in lambdas below, which Clang's pragma does not reach.
#include <immintrin.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>
#include <utility>
#include <vector>

#include "engine/cpu/gemm_tiles.h"
#include "engine/cpu/isa_target.h"

PTXSERVE_TARGET_BEGIN("avx512f,avx512vl,avx512vnni")

namespace ptxserve::cpu {
namespace {

// ---- Decode: two weight rows per register, lanes summed per block ----

constexpr int kNR = 4;  // weight rows (streams) per decode tile, as in gemm_quant.cc
// x rows from which PackedPanel runs: its packing (per 16 rows' block: 16 loads, the
// transposes, a gather) is paid once per pass over x, so it needs a few rows to spread over;
// q4_0 8192 x 2048 at 8 rows packed took the CPU time the old 8-row tile did
// (quant_gemm_bench). Under this, Tile runs (4 was the old kernel's switch between putting
// the offset on x and on the weights; rows 4-7 are not measured apart).
constexpr int kMinRowsToPack = 4;
constexpr int kMR = kMinRowsToPack - 1;  // x rows per decode tile
constexpr int64_t kMBlock = 48;          // x rows whose decode tiles reuse the same weight rows

// The two formats' blocks: for Tile two rows' blocks a and b per register, a's 32 in the low
// half, in the element order of x's codes, as vpdpbusd's unsigned operand (LoadOffset: the
// codes plus kOffset); for PackedPanel 16 rows' blocks repacked (Pack).
struct PackedBlock;
struct Q8_0 {
  static constexpr int kBytes = 34;
  static constexpr int kOffset = 128;
  static __m512i LoadOffset(const uint8_t* a, const uint8_t* b) {
    const __m512i v = _mm512_inserti64x4(
        _mm512_castsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(a + 2))),
        _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + 2)), 1);
    return _mm512_xor_si512(v, _mm512_set1_epi8(static_cast<char>(0x80)));
  }
  static void Pack(const uint8_t* const (&rows)[16], __m512i lane_offsets, int64_t at,
                   PackedBlock* out);
};
struct Q4_0 {
  static constexpr int kBytes = 18;
  static constexpr int kOffset = 8;
  // Elements 0..15 are the low nibbles of a block's 16 bytes, 16..31 the high ones: the
  // 16 bytes go to 128-bit lanes [a a b b], the odd lanes shift right by 4, and the mask
  // keeps one nibble per byte (the bits a 64-bit shift brings in from the next byte go):
  // the codes plus 8.
  static __m512i LoadOffset(const uint8_t* a, const uint8_t* b) {
    __m512i v = _mm512_broadcast_i32x4(_mm_loadu_si128(reinterpret_cast<const __m128i*>(a + 2)));
    v = _mm512_mask_broadcast_i32x4(v, 0xFF00,
                                    _mm_loadu_si128(reinterpret_cast<const __m128i*>(b + 2)));
    v = _mm512_srlv_epi64(v, _mm512_setr_epi64(0, 0, 4, 4, 0, 0, 4, 4));
    return _mm512_and_si512(v, _mm512_set1_epi8(0x0F));
  }
  static void Pack(const uint8_t* const (&rows)[16], __m512i lane_offsets, int64_t at,
                   PackedBlock* out);
};

// The f16 scales of four weight rows' blocks as f32, row j's in lane 5j (where SumLanes
// leaves output j's sum; each 128-bit lane holds all four). Built in registers: four
// scalar stores read back as one vector missed store forwarding and stalled the tile.
int F16Bits(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return h;
}
__m512 ScaleQuad(const uint8_t* const (&w)[4]) {
  __m128i h = _mm_setzero_si128();
  h = _mm_insert_epi16(h, F16Bits(w[0]), 0);
  h = _mm_insert_epi16(h, F16Bits(w[1]), 1);
  h = _mm_insert_epi16(h, F16Bits(w[2]), 2);
  h = _mm_insert_epi16(h, F16Bits(w[3]), 3);
  return _mm512_broadcast_f32x4(_mm_cvtph_ps(h));
}

// a holds outputs 0 and 1 (8 lanes each), b outputs 2 and 3: each output's 8 lanes summed,
// output j's sum in lanes 4j..4j+3 (the 128-bit lane j).
__m512i SumLanes(__m512i a, __m512i b) {
  __m512i s = _mm512_add_epi32(_mm512_shuffle_i32x4(a, b, _MM_SHUFFLE(2, 0, 2, 0)),
                               _mm512_shuffle_i32x4(a, b, _MM_SHUFFLE(3, 1, 3, 1)));
  s = _mm512_add_epi32(s, _mm512_shuffle_epi32(s, _MM_PERM_BADC));
  return _mm512_add_epi32(s, _mm512_shuffle_epi32(s, _MM_PERM_CDAB));
}

// What a tile needs: x's rows from its first, the tile's first weight row, the distance
// between its rows (weight rows and output columns), and where its outputs go.
struct TileArgs {
  QuantizedX x;
  const uint8_t* w;
  int64_t row_bytes;
  int64_t col_step;
  const float* bias;  // bias of the first row, or nullptr
  int64_t ldy;
  float* y;
};

// y[i * ldy + j * col_step] for i < MR, j < NR. Register p of a row's products holds weight
// rows 2p and 2p + 1 (with NR odd, the last row twice). x's signed codes against the
// weights' plus kOffset, so each x row and block carries -kOffset times its codes summed.
// Loops over MR/kPairs carry `#pragma GCC unroll` so the accumulators stay in registers.
template <int MR, int NR, class F>
void Tile(const TileArgs& a) {
  constexpr int kPairs = 2;
  const uint8_t* wr[2 * kPairs];
#pragma GCC unroll 4
  for (int j = 0; j < 2 * kPairs; ++j) wr[j] = a.w + std::min(j, NR - 1) * a.col_step * a.row_bytes;
  __m512 acc[MR];
#pragma GCC unroll 4
  for (int i = 0; i < MR; ++i) acc[i] = _mm512_setzero_ps();
  const int64_t blocks = a.x.blocks;
  const __m512i offset = _mm512_set1_epi8(static_cast<char>(F::kOffset));
  const __m512i flip = _mm512_set1_epi8(static_cast<char>(0x80));
  const __m512i zero = _mm512_setzero_si512();
  for (int64_t blk = 0; blk < blocks; ++blk) {
    const uint8_t* wb[4];
#pragma GCC unroll 4
    for (int j = 0; j < 4; ++j) wb[j] = wr[j] + blk * F::kBytes;
    __m512i wq[kPairs];
#pragma GCC unroll 2
    for (int p = 0; p < kPairs; ++p) wq[p] = F::LoadOffset(wb[2 * p], wb[2 * p + 1]);
    const __m512 dw = ScaleQuad(wb);
#pragma GCC unroll 4
    for (int i = 0; i < MR; ++i) {
      const int64_t xb = i * blocks + blk;
      const __m512i xu = _mm512_broadcast_i64x4(
          _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a.x.codes + xb * 32)));
      const __m512i xs = _mm512_xor_si512(xu, flip);  // x's signed codes
      const __m512i x_correction = _mm512_sub_epi32(zero, _mm512_dpbusd_epi32(zero, offset, xs));
      const __m512i sums = SumLanes(_mm512_dpbusd_epi32(x_correction, wq[0], xs),
                                    _mm512_dpbusd_epi32(x_correction, wq[1], xs));
      acc[i] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sums),
                               _mm512_mul_ps(dw, _mm512_set1_ps(a.x.scales[xb])), acc[i]);
    }
  }
#pragma GCC unroll 4
  for (int i = 0; i < MR; ++i) {
    alignas(64) float sums[16];
    _mm512_store_ps(sums, acc[i]);
#pragma GCC unroll 4
    for (int j = 0; j < NR; ++j) {
      a.y[i * a.ldy + j * a.col_step] =
          a.bias != nullptr ? sums[5 * j] + a.bias[j * a.col_step] : sums[5 * j];
    }
  }
}

using TileFn = void (*)(const TileArgs&);

// Tile<mr, nr> at [(mr - 1) * kNR + nr - 1].
template <class F, int... I>
constexpr std::array<TileFn, sizeof...(I)> TileTable(std::integer_sequence<int, I...>) {
  return {&Tile<I / kNR + 1, I % kNR + 1, F>...};
}

template <class F>
void Panel(const QuantizedX& x, const uint8_t* w, int64_t row_bytes, const float* bias, int64_t M,
           int64_t ldy, int64_t n_begin, int64_t n_end, float* y) {
  static constexpr auto kTiles = TileTable<F>(std::make_integer_sequence<int, kMR * kNR>());
  ForEachTile(M, n_begin, n_end, kNR, kMR, kMBlock,
              [&](int64_t n, int nr, int64_t col_step, int64_t m0, int mr) {
                const int64_t b0 = m0 * x.blocks;
                const TileArgs a{{x.codes + b0 * 32, x.scales + b0, x.blocks},
                                 w + n * row_bytes,
                                 row_bytes,
                                 col_step,
                                 bias != nullptr ? bias + n : nullptr,
                                 ldy,
                                 y + m0 * ldy + n};
                kTiles[(mr - 1) * kNR + nr - 1](a);
              });
}

// ---- Prefill: lanes are outputs ----

constexpr int kLanes = 16;    // weight rows per packed tile, one per int32 lane
constexpr int kPackedMR = 8;  // x rows per packed tile: 8 accumulators, 8 weight registers
// x codes per pass over the weight rows (each pass repacks them): all of x up to this size,
// read from L2/L3 once per 16 weight rows.
constexpr int64_t kPassXBytes = int64_t{2} << 20;
constexpr int kPrefetchBlocks = 8;  // how far ahead PackedPanel prefetches the weight rows

// The 4 x 4 transposes of a tile's rows: lane l holds row LaneRow(l) (its own inverse).
constexpr int LaneRow(int l) { return 4 * (l % 4) + l / 4; }

// A weight block of 16 rows, repacked: codes[g] lane l holds elements 4g..4g+3 of row
// LaneRow(l) as signed bytes; scales and correction (-128 times the row's codes summed) in
// the same lanes.
struct PackedBlock {
  __m512i codes[8];
  __m512 scales;
  __m512i correction;
};

__m128i Load16(const uint8_t* p) { return _mm_loadu_si128(reinterpret_cast<const __m128i*>(p)); }

// 16 bytes at offset `at` of rows 4k..4k+3, a 128-bit lane each.
__m512i LoadRows4(const uint8_t* const (&rows)[16], int k, int64_t at) {
  __m512i v = _mm512_castsi128_si512(Load16(rows[4 * k] + at));
  v = _mm512_inserti32x4(v, Load16(rows[4 * k + 1] + at), 1);
  v = _mm512_inserti32x4(v, Load16(rows[4 * k + 2] + at), 2);
  return _mm512_inserti32x4(v, Load16(rows[4 * k + 3] + at), 3);
}

// a[k] with rows 4k..4k+3 per 128-bit lane (LoadRows4) to g[d]: each row's dword d, at the
// lanes LaneRow gives.
void Transpose(const __m512i (&a)[4], __m512i* g) {
  const __m512i t0 = _mm512_unpacklo_epi32(a[0], a[1]);
  const __m512i t1 = _mm512_unpackhi_epi32(a[0], a[1]);
  const __m512i t2 = _mm512_unpacklo_epi32(a[2], a[3]);
  const __m512i t3 = _mm512_unpackhi_epi32(a[2], a[3]);
  g[0] = _mm512_unpacklo_epi64(t0, t2);
  g[1] = _mm512_unpackhi_epi64(t0, t2);
  g[2] = _mm512_unpacklo_epi64(t1, t3);
  g[3] = _mm512_unpackhi_epi64(t1, t3);
}

// The scales (f16 at a block's start) and the correction of a block whose codes are packed.
// lane_offsets: lane l's row from rows[0], in bytes. The scales come by one gather: 16 scalar
// stores read back as a vector missed store forwarding and stalled the packing. The
// correction's 8 products run as two chains of 4.
void PackScalesAndCorrection(const uint8_t* const (&rows)[16], __m512i lane_offsets, int64_t at,
                             PackedBlock* out) {
  const __m512i words = _mm512_i32gather_epi32(lane_offsets, rows[0] + at, 1);
  out->scales = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(words));
  const __m512i ones = _mm512_set1_epi8(static_cast<char>(0x80));
  __m512i even = _mm512_setzero_si512(), odd = _mm512_setzero_si512();
  for (int g = 0; g < 8; g += 2) {
    even = _mm512_dpbusd_epi32(even, ones, out->codes[g]);
    odd = _mm512_dpbusd_epi32(odd, ones, out->codes[g + 1]);
  }
  out->correction = _mm512_sub_epi32(_mm512_setzero_si512(), _mm512_add_epi32(even, odd));
}

void Q8_0::Pack(const uint8_t* const (&rows)[16], __m512i lane_offsets, int64_t at,
                PackedBlock* out) {
  for (int half = 0; half < 2; ++half) {
    const __m512i a[4] = {
        LoadRows4(rows, 0, at + 2 + 16 * half), LoadRows4(rows, 1, at + 2 + 16 * half),
        LoadRows4(rows, 2, at + 2 + 16 * half), LoadRows4(rows, 3, at + 2 + 16 * half)};
    Transpose(a, out->codes + 4 * half);
  }
  PackScalesAndCorrection(rows, lane_offsets, at, out);
}

// Dword d of a q4_0 block holds elements 4d..4d+3 in its low nibbles and 16 + 4d.. in its
// high ones; 8 comes off each nibble n without AVX512-BW's byte subtraction: n + 0x78 stays
// within its byte (at most 0x87), and flipping its top bit then makes it n - 8 mod 256.
void Q4_0::Pack(const uint8_t* const (&rows)[16], __m512i lane_offsets, int64_t at,
                PackedBlock* out) {
  const __m512i a[4] = {LoadRows4(rows, 0, at + 2), LoadRows4(rows, 1, at + 2),
                        LoadRows4(rows, 2, at + 2), LoadRows4(rows, 3, at + 2)};
  __m512i g[4];
  Transpose(a, g);
  const __m512i mask = _mm512_set1_epi8(0x0F);
  const __m512i bias = _mm512_set1_epi8(0x78);
  const __m512i flip = _mm512_set1_epi8(static_cast<char>(0x80));
  for (int d = 0; d < 4; ++d) {
    const __m512i lo = _mm512_and_si512(g[d], mask);
    const __m512i hi = _mm512_and_si512(_mm512_srli_epi32(g[d], 4), mask);
    out->codes[d] = _mm512_xor_si512(_mm512_add_epi32(lo, bias), flip);
    out->codes[4 + d] = _mm512_xor_si512(_mm512_add_epi32(hi, bias), flip);
  }
  PackScalesAndCorrection(rows, lane_offsets, at, out);
}

// y[i * ldy + n] for i < MR and the tile's nr rows n (lane LaneRow(n)) against its packed
// blocks. Loops over MR carry `#pragma GCC unroll` so the accumulators stay in registers.
template <int MR>
void PackedTile(const PackedBlock* w, const QuantizedX& x, const float* bias, int nr, int64_t ldy,
                float* y) {
  __m512 acc[MR];
#pragma GCC unroll 8
  for (int i = 0; i < MR; ++i) acc[i] = _mm512_setzero_ps();
  const int64_t blocks = x.blocks;
  for (int64_t blk = 0; blk < blocks; ++blk) {
    const PackedBlock& b = w[blk];
    __m512i codes[8];
#pragma GCC unroll 8
    for (int g = 0; g < 8; ++g) codes[g] = _mm512_load_si512(&b.codes[g]);
#pragma GCC unroll 8
    for (int i = 0; i < MR; ++i) {
      const uint8_t* xc = x.codes + (i * blocks + blk) * 32;
      __m512i sum = b.correction;
#pragma GCC unroll 8
      for (int g = 0; g < 8; ++g) {
        int32_t group;
        std::memcpy(&group, xc + 4 * g, 4);
        sum = _mm512_dpbusd_epi32(sum, _mm512_set1_epi32(group), codes[g]);
      }
      acc[i] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sum),
                               _mm512_mul_ps(b.scales, _mm512_set1_ps(x.scales[i * blocks + blk])),
                               acc[i]);
    }
  }
  const __m512i order =
      _mm512_setr_epi32(LaneRow(0), LaneRow(1), LaneRow(2), LaneRow(3), LaneRow(4), LaneRow(5),
                        LaneRow(6), LaneRow(7), LaneRow(8), LaneRow(9), LaneRow(10), LaneRow(11),
                        LaneRow(12), LaneRow(13), LaneRow(14), LaneRow(15));
  const __mmask16 keep = static_cast<__mmask16>((1u << nr) - 1);
#pragma GCC unroll 8
  for (int i = 0; i < MR; ++i) {
    __m512 v = _mm512_permutexvar_ps(order, acc[i]);
    if (bias != nullptr) v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(keep, bias));
    _mm512_mask_storeu_ps(y + i * ldy, keep, v);
  }
}

using PackedTileFn = void (*)(const PackedBlock*, const QuantizedX&, const float*, int, int64_t,
                              float*);

template <int... I>
constexpr std::array<PackedTileFn, sizeof...(I)> PackedTileTable(std::integer_sequence<int, I...>) {
  return {&PackedTile<I + 1>...};
}

// Weight rows [n_begin, n_end) 16 at a time, each 16 repacked once per pass over x's rows.
template <class F>
void PackedPanel(const QuantizedX& x, const uint8_t* w, int64_t row_bytes, const float* bias,
                 int64_t M, int64_t ldy, int64_t n_begin, int64_t n_end, float* y) {
  static constexpr auto kTiles = PackedTileTable(std::make_integer_sequence<int, kPackedMR>());
  // A byte buffer aligned by hand: std::vector<PackedBlock> came back 32-byte aligned here.
  thread_local std::vector<uint8_t> storage;
  storage.resize(x.blocks * sizeof(PackedBlock) + alignof(PackedBlock));
  PackedBlock* packed = reinterpret_cast<PackedBlock*>(
      (reinterpret_cast<uintptr_t>(storage.data()) + alignof(PackedBlock) - 1) &
      ~uintptr_t{alignof(PackedBlock) - 1});
  const int64_t pass_rows =
      std::max<int64_t>(kPackedMR, kPassXBytes / (32 * x.blocks) / kPackedMR * kPackedMR);
  for (int64_t m_begin = 0; m_begin < M; m_begin += pass_rows) {
    const int64_t m_end = std::min(M, m_begin + pass_rows);
    for (int64_t n = n_begin; n < n_end; n += kLanes) {
      const int nr = static_cast<int>(std::min<int64_t>(kLanes, n_end - n));
      const uint8_t* rows[kLanes];
      alignas(64) int32_t offsets[kLanes];
      for (int r = 0; r < kLanes; ++r) {
        rows[r] = w + (n + std::min(r, nr - 1)) * row_bytes;
        offsets[r] = static_cast<int32_t>(std::min(LaneRow(r), nr - 1) * row_bytes);
      }
      const __m512i lane_offsets = _mm512_load_si512(offsets);
      for (int64_t blk = 0; blk < x.blocks; ++blk) {
        // 16 rows read a block at a time: prefetched kPrefetchBlocks ahead, which the
        // hardware's stream prefetchers, tracking fewer streams, did not cover.
        for (int r = 0; r < kLanes; ++r) {
          _mm_prefetch(reinterpret_cast<const char*>(rows[r] + (blk + kPrefetchBlocks) * F::kBytes),
                       _MM_HINT_T0);
        }
        F::Pack(rows, lane_offsets, blk * F::kBytes, &packed[blk]);
      }
      for (int64_t m0 = m_begin; m0 < m_end; m0 += kPackedMR) {
        const int mr = static_cast<int>(std::min<int64_t>(kPackedMR, m_end - m0));
        const QuantizedX xm{x.codes + m0 * x.blocks * 32, x.scales + m0 * x.blocks, x.blocks};
        kTiles[mr - 1](packed, xm, bias != nullptr ? bias + n : nullptr, nr, ldy, y + m0 * ldy + n);
      }
    }
  }
}

template <class F>
void AnyPanel(const QuantizedX& x, const uint8_t* w, int64_t row_bytes, const float* bias,
              int64_t M, int64_t ldy, int64_t n_begin, int64_t n_end, float* y) {
  if (M >= kMinRowsToPack) {
    PackedPanel<F>(x, w, row_bytes, bias, M, ldy, n_begin, n_end, y);
  } else {
    Panel<F>(x, w, row_bytes, bias, M, ldy, n_begin, n_end, y);
  }
}

}  // namespace

void IntegerPanelAvx512Vnni(QuantType t, const QuantizedX& x, const uint8_t* w, int64_t row_bytes,
                            const float* bias, int64_t M, int64_t ldy, int64_t n_begin,
                            int64_t n_end, float* y) {
  if (t == QuantType::kQ8_0) {
    AnyPanel<Q8_0>(x, w, row_bytes, bias, M, ldy, n_begin, n_end, y);
  } else {
    AnyPanel<Q4_0>(x, w, row_bytes, bias, M, ldy, n_begin, n_end, y);
  }
}

}  // namespace ptxserve::cpu

PTXSERVE_TARGET_END()
