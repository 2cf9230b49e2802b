// y = x * w^T for block-quantized w (engine/model/quant.h), tiled like gemm.cc: each
// thread takes a range of weight rows, a tile's NR rows are far apart in that range
// (separate sequential streams), and every weight block a tile reads serves all MR rows
// of x in registers, MBlock rows of x per pass over the range.
//
// Three kernels (ChooseBlockKernel picks per format and batch size, from the
// measurements of bench/quant_gemm_bench.cc):
//  - widening (q8_0, q4_0, fp8_e4m3, int4_g128): each 8 codes become f32 weights d * q in
//    registers (exact: a scale times a small integer or an E4M3 value, rounded once as
//    DequantizeRow does) and go through gemm.cc's FMA chain in its order, so the result
//    is the f32 GEMM's over the dequantized matrix, bit for bit;
//  - widened rows (every format): kWidenRows rows at a time are dequantized into an f32
//    buffer that gemm.cc's own kernel runs over for all rows of x: also bit for bit, and
//    the widening is paid once per weight row, not once per MR rows of x;
//  - integer (q8_0, q4_0; q4_k and q6_k in gemm_quant_k.cc): x is first rounded to 8-bit codes with
//  an f32 scale per block
//    of 32, then each block pair is one 32-wide integer dot product (vpmaddubsw, vpmaddwd
//    to 8 int32 lanes, summed to one int32 per output by a vphaddd tree over 4 outputs),
//    converted once and added into the output's f32 accumulator as float(sum) * (d_w * d_x)
//    + acc, block after block. Fewest instructions per weight; x's rounding moves a result
//    by the bound in ops.h. On CPUs with AVX512-VNNI gemm_quant_vnni.cc's kernel computes
//    the same int32 sums with vpdpbusd and the same f32 steps in the same order, so it gives
//    the same results bit for bit.
#include <immintrin.h>

#include <algorithm>
#include <cstring>
#include <functional>
#include <vector>

#include "engine/cpu/gemm_quant_k.h"
#include "engine/cpu/gemm_tiles.h"
#include "engine/cpu/isa.h"
#include "engine/cpu/ops.h"
#include "engine/cpu/simd.h"
#include "engine/util/thread_pool.h"

namespace ptxserve::cpu {
namespace {

constexpr int64_t kWidenRows = 16;  // rows widened into the f32 buffer at a time

inline float Scale(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return _cvtsh_ss(h);
}

// The two formats as the kernels see them: Widen gives elements 8s..8s+7 of a block as
// f32 weights (d already broadcast); Load and Dot give the integer kernel a block's
// codes and their dot product with 32 codes of x, as 8 int32 lanes (lane l: elements
// 4l..4l+3); kOffset is the c of x's corrections (QuantizedRows) that Dot needs.
struct Q8_0 {
  static constexpr int kBytes = 34;
  static constexpr int kElems = 32;
  static constexpr QuantType kType = QuantType::kQ8_0;
  static constexpr int kOffset = 0;
  static float BlockScale(const uint8_t* b) { return Scale(b); }
  static __m256 Widen(const uint8_t* b, int s, __m256 d) {
    const __m128i q = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(b + 2 + 8 * s));
    return _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q)));
  }
  // The integer kernel's view of a block: |q| and q (for the sign it gives x).
  struct Codes {
    __m256i abs, q;
  };
  static Codes Load(const uint8_t* b) {
    const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + 2));
    return {_mm256_sign_epi8(q, q), q};
  }
  // 8 int32 lanes summing to q . xq (vpmaddubsw takes unsigned times signed bytes).
  static __m256i Dot(const Codes& w, __m256i xq, const int32_t* /*corrections*/) {
    const __m256i pairs = _mm256_maddubs_epi16(w.abs, _mm256_sign_epi8(xq, w.q));
    return _mm256_madd_epi16(pairs, _mm256_set1_epi16(1));
  }
};
struct Q4_0 {
  static constexpr int kBytes = 18;
  static constexpr int kElems = 32;
  static constexpr QuantType kType = QuantType::kQ4_0;
  static constexpr int kOffset = 8;
  static float BlockScale(const uint8_t* b) { return Scale(b); }
  // Elements 0..15 are the low nibbles of the 16 bytes, 16..31 the high ones.
  static __m256 Widen(const uint8_t* b, int s, __m256 d) {
    const __m128i q = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(b + 2 + 8 * (s & 1)));
    __m256i v = _mm256_cvtepu8_epi32(q);
    v = s < 2 ? _mm256_and_si256(v, _mm256_set1_epi32(0xF)) : _mm256_srli_epi32(v, 4);
    v = _mm256_sub_epi32(v, _mm256_set1_epi32(8));
    return _mm256_mul_ps(d, _mm256_cvtepi32_ps(v));
  }
  // The integer kernel's view of a block: the nibbles as unsigned bytes 0..15.
  struct Codes {
    __m256i nibbles;
  };
  static Codes Load(const uint8_t* b) {
    const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b + 2));
    const __m256i both = _mm256_set_m128i(_mm_srli_epi16(q, 4), q);
    return {_mm256_and_si256(both, _mm256_set1_epi8(0xF))};
  }
  // (nibble - 8) . xq as nibble . xq - 8 sum(xq): the nibbles go into vpmaddubsw's
  // unsigned operand as they are, and x's block carries -8 sum(xq) lane by lane.
  static __m256i Dot(const Codes& w, __m256i xq, const int32_t* corrections) {
    const __m256i dot =
        _mm256_madd_epi16(_mm256_maddubs_epi16(w.nibbles, xq), _mm256_set1_epi16(1));
    return _mm256_add_epi32(dot, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(corrections)));
  }
};

// The Hugging Face formats (widening only): fp8_e4m3 (f32 scale, 32 E4M3 codes) and
// int4_g128 (f16 scale, zero, 64 bytes of nibbles for 128 elements).
struct Fp8E4M3 {
  static constexpr int kBytes = 36;
  static constexpr int kElems = 32;
  static float BlockScale(const uint8_t* b) {
    float s;
    std::memcpy(&s, b, 4);
    return s;
  }
  // A code's magnitude bits eeee.mmm placed at f32's exponent and mantissa and scaled by
  // 2^(127 - 7) is its value, normals and subnormals alike (f32 subnormals, which this
  // project never flushes), so every code widens exactly; S.1111.111 becomes NaN.
  static __m256 Widen(const uint8_t* b, int s, __m256 d) {
    const __m256i c =
        _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(b + 4 + 8 * s)));
    const __m256i mag = _mm256_and_si256(c, _mm256_set1_epi32(0x7F));
    const __m256i sign = _mm256_slli_epi32(_mm256_and_si256(c, _mm256_set1_epi32(0x80)), 24);
    const __m256 bits = _mm256_castsi256_ps(_mm256_or_si256(_mm256_slli_epi32(mag, 20), sign));
    const __m256 v = _mm256_mul_ps(bits, _mm256_set1_ps(0x1p120f));
    const __m256 nan = _mm256_castsi256_ps(_mm256_cmpeq_epi32(mag, _mm256_set1_epi32(0x7F)));
    return _mm256_mul_ps(d, _mm256_blendv_ps(v, _mm256_set1_ps(__builtin_nanf("")), nan));
  }
};
struct Int4G128 {
  static constexpr int kBytes = 68;
  static constexpr int kElems = 128;
  static float BlockScale(const uint8_t* b) { return Scale(b); }
  // Elements 8s..8s+7 are the eight nibbles of bytes 4s..4s+3 read as one little-endian
  // word, lowest nibble first.
  static __m256 Widen(const uint8_t* b, int s, __m256 d) {
    int32_t word;
    std::memcpy(&word, b + 4 + 4 * s, 4);
    __m256i v =
        _mm256_srlv_epi32(_mm256_set1_epi32(word), _mm256_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28));
    v = _mm256_sub_epi32(_mm256_and_si256(v, _mm256_set1_epi32(0xF)), _mm256_set1_epi32(b[2]));
    return _mm256_mul_ps(d, _mm256_cvtepi32_ps(v));
  }
};

// x rounded to 8 bits (QuantizedX's layout, gemm_tiles.h), and for the AVX2 kernel's Dot
// each block's corrections at corrections + (m * blocks + b) * 8: the 8 int32 lanes
// -c * (q[4l] + ... + q[4l + 3]), c being what Dot adds to the weight codes to make them
// unsigned (F::kOffset: 8 for q4_0's nibbles, 0 for q8_0, which needs none). For the
// AVX512-VNNI kernel the codes are stored plus 128 (its unsigned operand) and there are
// no corrections.
struct QuantizedRows {
  std::vector<int8_t> codes;
  std::vector<float> scales;
  std::vector<int32_t> corrections;
};

// x (M rows of K) rounded to 8 bits per block of 32: for the AVX2 kernel (vnni false)
// with corrections for c = offset, for the AVX512-VNNI kernel as codes plus 128.
void QuantizeActivations(const float* x, int64_t M, int64_t K, int offset, bool vnni,
                         QuantizedRows* out) {
  const int64_t blocks = M * K / 32;
  out->codes.resize(blocks * 32);
  out->scales.resize(blocks);
  out->corrections.resize(vnni ? 0 : blocks * 8);
  const __m256 sign = _mm256_set1_ps(-0.0f);
  for (int64_t b = 0; b < blocks; ++b) {
    const float* xb = x + b * 32;
    __m256 v[4], amax = _mm256_setzero_ps();
    for (int s = 0; s < 4; ++s) {
      v[s] = _mm256_loadu_ps(xb + 8 * s);
      amax = _mm256_max_ps(amax, _mm256_andnot_ps(sign, v[s]));
    }
    const __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(amax), _mm256_extractf128_ps(amax, 1));
    const __m128 m2 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
    const float m = _mm_cvtss_f32(_mm_max_ss(m2, _mm_movehdup_ps(m2)));
    const float d = m / 127;
    const __m256 id = _mm256_set1_ps(d != 0 ? 1 / d : 0);
    __m256i q[4];
    for (int s = 0; s < 4; ++s) q[s] = _mm256_cvtps_epi32(_mm256_mul_ps(v[s], id));
    // Packing works within 128-bit lanes; the permute puts the 32 codes back in order.
    const __m256i q16 =
        _mm256_packs_epi16(_mm256_packs_epi32(q[0], q[1]), _mm256_packs_epi32(q[2], q[3]));
    const __m256i ordered =
        _mm256_permutevar8x32_epi32(q16, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
    out->scales[b] = d;
    __m256i* codes = reinterpret_cast<__m256i*>(out->codes.data() + b * 32);
    if (vnni) {  // + 128: a flip of the top bit
      _mm256_storeu_si256(codes, _mm256_xor_si256(ordered, _mm256_set1_epi8(-128)));
      continue;
    }
    _mm256_storeu_si256(codes, ordered);
    // c * (q[4l] + q[4l + 1]) fits vpmaddubsw's int16 pairs for c <= 128 (|q| <= 127).
    const __m256i corrections = _mm256_madd_epi16(
        _mm256_maddubs_epi16(_mm256_set1_epi8(static_cast<char>(offset)), ordered),
        _mm256_set1_epi16(-1));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out->corrections.data() + b * 8), corrections);
  }
}

// Writes the MR x NR sums (lanes of acc) plus bias to y, as gemm.cc's kernel does.
template <int MR, int NR>
inline void StoreTile(__m256 (&acc)[MR][4], const float* bias, int64_t col_step, int64_t ldy,
                      float* y) {
#pragma GCC unroll 4
  for (int i = 0; i < MR; ++i) {
    alignas(16) float sums[4];
    _mm_store_ps(sums, simd::Hsum4(acc[i][0], acc[i][1], acc[i][2], acc[i][3]));
#pragma GCC unroll 4
    for (int j = 0; j < NR; ++j) {
      y[i * ldy + j * col_step] = bias != nullptr ? sums[j] + bias[j * col_step] : sums[j];
    }
  }
}

// The int32 lanes of four outputs' products summed, output j's sum in lane j.
inline __m128i HsumInt4(__m256i a, __m256i b, __m256i c, __m256i d) {
  const __m256i t = _mm256_hadd_epi32(_mm256_hadd_epi32(a, b), _mm256_hadd_epi32(c, d));
  return _mm_add_epi32(_mm256_castsi256_si128(t), _mm256_extracti128_si256(t, 1));
}

// The arguments every tile kernel takes: x (f32 rows K apart, or their codes), the
// tile's first weight row, the distance between its rows, and where its outputs go.
struct TileArgs {
  const float* x;
  const int8_t* x_codes;         // integer kernel: row i's block b at x_codes + (i*blocks+b)*32
  const float* x_scales;         // integer kernel: row i's block b at x_scales[i*blocks+b]
  const int32_t* x_corrections;  // integer kernel: as x_codes, 8 per block
  const uint8_t* w;              // the tile's first weight row
  int64_t row_bytes;             // bytes per weight row
  int64_t col_step;              // weight rows (and output columns) between the tile's rows
  int64_t K;
  const float* bias;  // bias of the first row, or nullptr
  int64_t ldy;
  float* y;
};

// Loops over MR/NR carry `#pragma GCC unroll`, as in gemm.cc: rolled, the accumulators
// would live on the stack.
template <int MR, int NR, class F>
struct WideningKernel {
  static void Run(const TileArgs& a);
};
template <int MR, int NR, class F>
void WideningKernel<MR, NR, F>::Run(const TileArgs& a) {
  const uint8_t* wr[NR];
#pragma GCC unroll 4
  for (int j = 0; j < NR; ++j) wr[j] = a.w + j * a.col_step * a.row_bytes;
  __m256 acc[MR][4];
#pragma GCC unroll 4
  for (int i = 0; i < MR; ++i) {
#pragma GCC unroll 4
    for (int j = 0; j < 4; ++j) acc[i][j] = _mm256_setzero_ps();
  }
  for (int64_t blk = 0; blk < a.K / F::kElems; ++blk) {
    const float* xb = a.x + blk * F::kElems;
    __m256 d[NR];
#pragma GCC unroll 4
    for (int j = 0; j < NR; ++j) d[j] = _mm256_set1_ps(F::BlockScale(wr[j] + blk * F::kBytes));
#pragma GCC unroll 4
    for (int s = 0; s < F::kElems / 8; ++s) {
      __m256 xv[MR];
#pragma GCC unroll 4
      for (int i = 0; i < MR; ++i) xv[i] = _mm256_loadu_ps(xb + i * a.K + 8 * s);
#pragma GCC unroll 4
      for (int j = 0; j < NR; ++j) {
        const __m256 wv = F::Widen(wr[j] + blk * F::kBytes, s, d[j]);
#pragma GCC unroll 4
        for (int i = 0; i < MR; ++i) acc[i][j] = _mm256_fmadd_ps(xv[i], wv, acc[i][j]);
      }
    }
  }
  StoreTile<MR, NR>(acc, a.bias, a.col_step, a.ldy, a.y);
}

template <int MR, int NR, class F>
struct IntegerKernel {
  static void Run(const TileArgs& a);
};
template <int MR, int NR, class F>
void IntegerKernel<MR, NR, F>::Run(const TileArgs& a) {
  const int64_t blocks = a.K / 32;
  const uint8_t* wr[NR];
#pragma GCC unroll 4
  for (int j = 0; j < NR; ++j) wr[j] = a.w + j * a.col_step * a.row_bytes;
  __m128 acc[MR];  // lane j: output j's sum so far
#pragma GCC unroll 4
  for (int i = 0; i < MR; ++i) acc[i] = _mm_setzero_ps();
  for (int64_t blk = 0; blk < blocks; ++blk) {
    typename F::Codes wq[NR];
    alignas(16) float dw[4] = {0, 0, 0, 0};
#pragma GCC unroll 4
    for (int j = 0; j < NR; ++j) {
      const uint8_t* wb = wr[j] + blk * F::kBytes;
      wq[j] = F::Load(wb);
      dw[j] = Scale(wb);
    }
    const __m128 scales = _mm_load_ps(dw);
#pragma GCC unroll 4
    for (int i = 0; i < MR; ++i) {
      const int64_t xb = i * blocks + blk;
      const __m256i xq = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a.x_codes + xb * 32));
      __m256i dot[4] = {_mm256_setzero_si256(), _mm256_setzero_si256(), _mm256_setzero_si256(),
                        _mm256_setzero_si256()};
#pragma GCC unroll 4
      for (int j = 0; j < NR; ++j) dot[j] = F::Dot(wq[j], xq, a.x_corrections + xb * 8);
      const __m128i sums = HsumInt4(dot[0], dot[1], dot[2], dot[3]);
      acc[i] = _mm_fmadd_ps(_mm_cvtepi32_ps(sums), _mm_mul_ps(scales, _mm_set1_ps(a.x_scales[xb])),
                            acc[i]);
    }
  }
#pragma GCC unroll 4
  for (int i = 0; i < MR; ++i) {
    alignas(16) float sums[4];
    _mm_store_ps(sums, acc[i]);
#pragma GCC unroll 4
    for (int j = 0; j < NR; ++j) {
      a.y[i * a.ldy + j * a.col_step] =
          a.bias != nullptr ? sums[j] + a.bias[j * a.col_step] : sums[j];
    }
  }
}

// One GEMM's operands, shared by the threads.
struct Problem {
  const float* x;
  const QuantizedRows* xq;  // set when the integer kernel runs
  const uint8_t* w;
  int64_t row_bytes;
  const float* bias;
  int64_t M, N, K;
  float* y;
};

// Weight rows [n_begin, n_end) against all M rows of x with the tile kernels `Kernel`.
template <template <int, int, class> class Kernel, class F>
void BlockPanel(const Problem& p, int64_t n_begin, int64_t n_end) {
  const int64_t blocks = p.K / 32;
  ForEachTile(p.M, n_begin, n_end, kNR, kMR, kMBlock,
              [&](int64_t n, int nr, int64_t col_step, int64_t m0, int mr) {
                const TileArgs a{p.x + m0 * p.K,
                                 p.xq ? p.xq->codes.data() + m0 * blocks * 32 : nullptr,
                                 p.xq ? p.xq->scales.data() + m0 * blocks : nullptr,
                                 p.xq ? p.xq->corrections.data() + m0 * blocks * 8 : nullptr,
                                 p.w + n * p.row_bytes,
                                 p.row_bytes,
                                 col_step,
                                 p.K,
                                 p.bias ? p.bias + n : nullptr,
                                 p.N,
                                 p.y + m0 * p.N + n};
                PickTile(mr, nr, []<int MR, int NR>() { return Kernel<MR, NR, F>::Run; })(a);
              });
}

// Weight rows [n_begin, n_end), kWidenRows at a time dequantized into a buffer that
// gemm.cc's f32 kernel then runs over for all M rows of x.
void WidenedRowsPanel(const Problem& p, QuantType t, int64_t n_begin, int64_t n_end) {
  thread_local std::vector<float> rows;
  rows.resize(kWidenRows * p.K);
  for (int64_t n0 = n_begin; n0 < n_end; n0 += kWidenRows) {
    const int64_t nr = std::min(kWidenRows, n_end - n0);
    for (int64_t r = 0; r < nr; ++r) {
      DequantizeRow(t, p.w + (n0 + r) * p.row_bytes, p.K, rows.data() + r * p.K);
    }
    GemmF32Serial(p.x, rows.data(), p.bias ? p.bias + n0 : nullptr, p.M, nr, p.K, p.N, p.y + n0);
  }
}

void RunPanels(const Problem& p, const std::function<void(int64_t, int64_t)>& panel) {
  if (p.M * p.N * p.K < kSerialWork) {
    panel(0, p.N);
  } else {
    ThreadPool::Default().ParallelFor(p.N, panel);
  }
}

template <class F>
void GemmBlocks(const Problem& problem, bool integer) {
  if (!integer) {
    RunPanels(problem, [&](int64_t b, int64_t e) { BlockPanel<WideningKernel, F>(problem, b, e); });
    return;
  }
  const bool vnni = GemmIsa() >= Isa::kAvx512Vnni;
  thread_local QuantizedRows xq;
  QuantizeActivations(problem.x, problem.M, problem.K, F::kOffset, vnni, &xq);
  Problem p = problem;
  p.xq = &xq;
  if (vnni) {
    const QuantizedX x{reinterpret_cast<const uint8_t*>(xq.codes.data()), xq.scales.data(),
                       p.K / 32};
    RunPanels(p, [&](int64_t b, int64_t e) {
      IntegerPanelAvx512Vnni(F::kType, x, p.w, p.row_bytes, p.bias, p.M, p.N, b, e, p.y);
    });
    return;
  }
  RunPanels(p, [&](int64_t b, int64_t e) { BlockPanel<IntegerKernel, F>(p, b, e); });
}

}  // namespace

// On this project's 2-core x86-64-v3 VM (bench/quant_gemm_bench.cc, Llama-3.2-1B shapes,
// weights from memory): the integer kernel was fastest for q4_0 at 1, 8, 64 and 512 rows
// and for q8_0 at 1, 8 and 64; at 512 rows q8_0 ran faster as widened rows (exact). The
// widening-in-registers kernel never won: it widens each block once per MR rows of x.
// With AVX512-VNNI (gemm_quant_vnni.cc; 8192 x 2048, a heavily loaded moment) the integer
// kernel ran q8_0 at 512 rows at 61.7 GFLOP/s against 46.4 as widened rows (and 33.4 on
// AVX2 alone), so there it is chosen at every batch size.
constexpr int64_t kQ8_0IntegerRows = 64;
// fp8_e4m3 and int4_g128 (no integer kernel; 2048 x 2048, same VM, a loaded moment): widening
// in registers took 1.45 / 0.90 ms at 1 row against 3.7 / 4.8 ms as widened rows (whose
// scalar decode dominates a single row), 5.6 / 3.5 ms against 5.6 / 7.0 at 8 rows, and lost
// at 64 rows (41 / 30 ms against 17 / 18).
constexpr int64_t kHfWideningRows = 8;

BlockKernel ChooseBlockKernel(QuantType t, int64_t M) {
  if (t == QuantType::kQ4_0 || t == QuantType::kQ4_K || t == QuantType::kQ6_K) {
    return BlockKernel::kInteger;  // q4_k/q6_k: gemm_quant_k.cc
  }
  if (t == QuantType::kQ8_0 && (M <= kQ8_0IntegerRows || GemmIsa() >= Isa::kAvx512Vnni)) {
    return BlockKernel::kInteger;
  }
  if ((t == QuantType::kFp8E4M3 || t == QuantType::kInt4G128) && M <= kHfWideningRows) {
    return BlockKernel::kWidening;
  }
  return BlockKernel::kWidenedRows;
}

void GemmQuantized(const float* x, WeightMatrix w, const float* bias, int64_t M, int64_t N,
                   int64_t K, float* y, BlockKernel kernel) {
  if (M <= 0 || N <= 0) return;
  if (kernel == BlockKernel::kChosen) kernel = ChooseBlockKernel(w.quant, M);
  const Problem p{
      x, nullptr, static_cast<const uint8_t*>(w.data), QuantRowBytes(w.quant, K), bias, M, N, K, y};
  const bool integer = kernel == BlockKernel::kInteger;
  if (kernel != BlockKernel::kWidenedRows && w.quant == QuantType::kQ8_0) {
    GemmBlocks<Q8_0>(p, integer);
  } else if (kernel != BlockKernel::kWidenedRows && w.quant == QuantType::kQ4_0) {
    GemmBlocks<Q4_0>(p, integer);
  } else if (integer && (w.quant == QuantType::kQ4_K || w.quant == QuantType::kQ6_K)) {
    thread_local QuantizedRows xq;
    QuantizeActivations(x, M, K, 0, /*vnni=*/false, &xq);
    GemmKQuantInteger(w.quant, xq.codes.data(), xq.scales.data(), p.w, bias, M, N, K, y);
  } else if (kernel != BlockKernel::kWidenedRows && w.quant == QuantType::kFp8E4M3) {
    RunPanels(p, [&](int64_t b, int64_t e) { BlockPanel<WideningKernel, Fp8E4M3>(p, b, e); });
  } else if (kernel != BlockKernel::kWidenedRows && w.quant == QuantType::kInt4G128) {
    RunPanels(p, [&](int64_t b, int64_t e) { BlockPanel<WideningKernel, Int4G128>(p, b, e); });
  } else {
    RunPanels(p, [&](int64_t b, int64_t e) { WidenedRowsPanel(p, w.quant, b, e); });
  }
}

}  // namespace ptxserve::cpu
