// Scalar encoders and decoders of the GGML block formats (layouts in quant.h). They are
// the reference the CPU GEMM's block kernels are tested against, and what the embedding
// lookup and the `quantize` command use; speed matters little here.
#include "engine/model/quant.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "absl/strings/str_format.h"
#include "engine/model/dtype.h"

namespace ptxserve {
namespace {

constexpr int kQ4KSubBlocks = 8;  // q4_k: 8 sub-blocks of 32 per super-block

uint16_t ReadU16(const uint8_t* p) {
  uint16_t v;
  std::memcpy(&v, p, 2);
  return v;
}
void WriteU16(uint8_t* p, uint16_t v) { std::memcpy(p, &v, 2); }
float ReadHalf(const uint8_t* p) { return HalfToFloat(ReadU16(p)); }

// --- decoders: one block each -------------------------------------------------------

void DequantizeQ8_0(const uint8_t* b, float* y) {
  const float d = ReadHalf(b);
  for (int i = 0; i < 32; ++i) y[i] = d * static_cast<float>(static_cast<int8_t>(b[2 + i]));
}

void DequantizeQ4_0(const uint8_t* b, float* y) {
  const float d = ReadHalf(b);
  const uint8_t* qs = b + 2;
  for (int j = 0; j < 16; ++j) {
    y[j] = d * static_cast<float>((qs[j] & 0xF) - 8);
    y[j + 16] = d * static_cast<float>((qs[j] >> 4) - 8);
  }
}

// Sub-block j's 6-bit scale and min from q4_k's 12 packed bytes: j < 4 in the low six
// bits of bytes j and j + 4; j >= 4 in the nibbles of byte j + 4, with their top two
// bits in the spare high bits of bytes j - 4 (scale) and j (min).
void Q4KScaleMin(const uint8_t* s, int j, int* sc, int* m) {
  if (j < 4) {
    *sc = s[j] & 63;
    *m = s[j + 4] & 63;
  } else {
    *sc = (s[j + 4] & 0xF) | ((s[j - 4] >> 6) << 4);
    *m = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
  }
}

void DequantizeQ4_K(const uint8_t* b, float* y) {
  const float d = ReadHalf(b), dmin = ReadHalf(b + 2);
  const uint8_t* scales = b + 4;
  const uint8_t* qs = b + 16;
  for (int j = 0; j < kQ4KSubBlocks; ++j) {
    int sc, m;
    Q4KScaleMin(scales, j, &sc, &m);
    const float scale = d * static_cast<float>(sc), min = dmin * static_cast<float>(m);
    // Sub-blocks 2i and 2i+1 share 32 bytes: low nibbles the first, high the second.
    const uint8_t* q = qs + 32 * (j / 2);
    const int shift = 4 * (j % 2);
    for (int l = 0; l < 32; ++l) {
      y[32 * j + l] = scale * static_cast<float>((q[l] >> shift) & 0xF) - min;
    }
  }
}

void DequantizeQ6_K(const uint8_t* b, float* y) {
  const uint8_t* ql = b;
  const uint8_t* qh = b + 128;
  const auto* sc = reinterpret_cast<const int8_t*>(b + 192);
  const float d = ReadHalf(b + 208);
  // Each 128-element half: 64 bytes of ql, 32 of qh, 8 scales (one per 16 elements).
  for (int half = 0; half < 2; ++half, ql += 64, qh += 32, sc += 8, y += 128) {
    for (int l = 0; l < 32; ++l) {
      const int is = l / 16;
      const int q1 = ((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32;
      const int q2 = ((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
      const int q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
      const int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
      y[l] = d * static_cast<float>(sc[is] * q1);
      y[l + 32] = d * static_cast<float>(sc[is + 2] * q2);
      y[l + 64] = d * static_cast<float>(sc[is + 4] * q3);
      y[l + 96] = d * static_cast<float>(sc[is + 6] * q4);
    }
  }
}

// fp8_e4m3 and int4_g128 (layouts in quant.h).
// The 256 E4M3 values, so widening a row is a lookup per code rather than the formula.
const std::array<float, 256>& E4M3Table() {
  static const std::array<float, 256> table = [] {
    std::array<float, 256> t;
    for (int c = 0; c < 256; ++c) t[c] = E4M3ToFloat(static_cast<uint8_t>(c));
    return t;
  }();
  return table;
}

void DequantizeFp8E4M3(const uint8_t* b, float* y) {
  const std::array<float, 256>& values = E4M3Table();
  float s;
  std::memcpy(&s, b, 4);
  for (int i = 0; i < 32; ++i) y[i] = s * values[b[4 + i]];
}

void DequantizeInt4G128(const uint8_t* b, float* y) {
  const float s = ReadHalf(b);
  const int z = b[2];
  const uint8_t* qs = b + 4;
  for (int i = 0; i < 64; ++i) {
    y[2 * i] = s * static_cast<float>((qs[i] & 0xF) - z);
    y[2 * i + 1] = s * static_cast<float>((qs[i] >> 4) - z);
  }
}

// --- encoders: one block each -------------------------------------------------------

// The f16 of a non-negative scale, rounded up when round-to-nearest went down: a scale
// never shrinks below what its block needs, so no code overflows its range.
uint16_t HalfAtLeast(float s) {
  uint16_t h = FloatToHalf(s);
  if (HalfToFloat(h) < s) ++h;
  return h;
}

void QuantizeQ8_0(const float* x, uint8_t* b) {
  float amax = 0;
  for (int i = 0; i < 32; ++i) amax = std::max(amax, std::fabs(x[i]));
  const float d = amax / 127;
  const float id = d != 0 ? 1 / d : 0;
  WriteU16(b, FloatToHalf(d));
  for (int i = 0; i < 32; ++i)
    b[2 + i] = static_cast<uint8_t>(static_cast<int8_t>(roundf(x[i] * id)));
}

void QuantizeQ4_0(const float* x, uint8_t* b) {
  // The element of largest magnitude, with its sign, maps to code 0 (value -8 d).
  float amax = 0, max = 0;
  for (int i = 0; i < 32; ++i) {
    if (std::fabs(x[i]) > amax) {
      amax = std::fabs(x[i]);
      max = x[i];
    }
  }
  const float d = max / -8;
  const float id = d != 0 ? 1 / d : 0;
  WriteU16(b, FloatToHalf(d));
  auto code = [&](float v) {
    return std::min(15, static_cast<int>(static_cast<int8_t>(v * id + 8.5f)));
  };
  for (int j = 0; j < 16; ++j) b[2 + j] = static_cast<uint8_t>(code(x[j]) | (code(x[j + 16]) << 4));
}

// Packs eight 6-bit scales and mins the way Q4KScaleMin reads them.
void PackQ4KScales(const int* sc, const int* m, uint8_t* s) {
  std::memset(s, 0, 12);
  for (int j = 0; j < 4; ++j) {
    s[j] = static_cast<uint8_t>(sc[j] | ((sc[j + 4] >> 4) << 6));
    s[j + 4] = static_cast<uint8_t>(m[j] | ((m[j + 4] >> 4) << 6));
    s[j + 8] = static_cast<uint8_t>((sc[j + 4] & 0xF) | ((m[j + 4] & 0xF) << 4));
  }
}

// Why a search: coding a q4_k sub-block over its exact [min, max] (or a q6_k group from
// its largest element) spends the code range on the extremes, so the many elements near
// the middle of a bell-shaped row get coarse steps. Both encoders instead try a few spans
// a little narrower or wider than the extremes, round the elements to codes for each, refit
// the scale (and q4_k's min) to those codes by least squares, and keep the candidate with
// the least squared error; the plain extremes stay a candidate. This is the method of
// llama.cpp's reference encoders (its make_qkx2_quants and make_qx_quants), written anew.
// q4_k weights each element's error by |x| plus the sub-block's rms, as llama.cpp does, so
// the larger elements, which move a matrix product most, are kept closer. On the padded
// TinyStories model this took q4_k's perplexity from +8.0% over f32 to +3.3% (README).
// Codes always clamp to the format's range, so an element past a narrowed span takes the
// end code. The searches run on the block scaled to [0, 1] (q4_k) or by its largest
// element (q6_k), so f32 sums neither underflow on tiny blocks nor overflow on large ones,
// and the loops vectorize.

// A candidate replaces the best so far only when better by more than rounding noise (a
// millionth of the (weighted) sum of squares), so an exact fit of the plain extremes (a
// constant or two-level block) is kept.
constexpr float kBeyondRounding = 1 + 1e-6f;

// The integer nearest v within [lo, hi], by truncating a non-negative number (no libm call).
int NearestCode(float v, int lo, int hi) {
  const float c = std::clamp(v, static_cast<float>(lo), static_cast<float>(hi));
  return static_cast<int>(c - static_cast<float>(lo) + 0.5f) + lo;
}

// A q4_k sub-block's fit: value = scale * code - min, codes in [0, 15], scale, min >= 0.
struct Q4KFit {
  float scale = 0, min = 0;
};

// The weight of each of a sub-block's 32 elements in its error: |x| plus the rms.
void Q4KWeights(const float* x, float* w) {
  float sum_sq = 0;
  for (int l = 0; l < 32; ++l) sum_sq += x[l] * x[l];
  const float rms = std::sqrt(sum_sq / 32);
  for (int l = 0; l < 32; ++l) w[l] = rms + std::fabs(x[l]);
}

// The fit of one sub-block of 32: codes from the span [lo, hi] stretched by the step
// 15 / (hi - lo) + (-1 .. +1 in tenths) / (hi - lo), each refitted; lo = min(0, lowest),
// so a sub-block with no negative element starts at 0. Worked in t = (x - lo) / (hi - lo).
Q4KFit FitQ4KSubBlock(const float* x) {
  float lo = 0, hi = x[0];
  for (int l = 0; l < 32; ++l) {
    lo = std::min(lo, x[l]);
    hi = std::max(hi, x[l]);
  }
  if (hi == lo) return {0, -lo};  // constant: every value is -min exactly
  const float span = hi - lo, inv_span = 1 / span;
  float t[32], w[32];
  Q4KWeights(x, w);
  double sum_w = 0, sum_wt = 0, sum_wt2 = 0;
  for (int l = 0; l < 32; ++l) {
    t[l] = std::min(1.0f, (x[l] - lo) * inv_span);
    w[l] *= inv_span;
    sum_w += w[l];
    sum_wt += w[l] * t[l];
    sum_wt2 += w[l] * t[l] * t[l];
  }
  // The format's offset lo + b span (the value of code 0) is -min <= 0: b <= b_max.
  const float b_max = -lo * inv_span;
  // Sums over the codes for stretch f (15 = the plain extremes), in 8 lanes so the loop
  // vectorizes, and the weighted error of a q + b expanded in them (no second pass).
  double sum_wq = 0, sum_wq2 = 0, sum_wqt = 0;
  auto code_sums = [&](float f) {
    float lane_q[8] = {}, lane_q2[8] = {}, lane_qt[8] = {};
    for (int l0 = 0; l0 < 32; l0 += 8) {
      for (int k = 0; k < 8; ++k) {
        const int l = l0 + k;
        const float q = std::min(15.0f, static_cast<float>(static_cast<int>(f * t[l] + 0.5f)));
        lane_q[k] += w[l] * q;
        lane_q2[k] += w[l] * q * q;
        lane_qt[k] += w[l] * q * t[l];
      }
    }
    sum_wq = sum_wq2 = sum_wqt = 0;
    for (int k = 0; k < 8; ++k) {
      sum_wq += lane_q[k];
      sum_wq2 += lane_q2[k];
      sum_wqt += lane_qt[k];
    }
  };
  auto error = [&](double a, double b) {
    return sum_wt2 - 2 * a * sum_wqt - 2 * b * sum_wt + a * a * sum_wq2 + 2 * a * b * sum_wq +
           b * b * sum_w;
  };
  code_sums(15);
  double best_a = 1.0 / 15, best_b = 0;
  double best_err = error(best_a, best_b);
  for (int step = -10; step <= 10; ++step) {
    code_sums(15 + 0.1f * static_cast<float>(step));
    const double det = sum_w * sum_wq2 - sum_wq * sum_wq;
    if (!(det > 0)) continue;  // all codes equal: no slope to fit
    double a = (sum_w * sum_wqt - sum_wt * sum_wq) / det;
    double b = (sum_wq2 * sum_wt - sum_wq * sum_wqt) / det;
    if (b > b_max) {  // refit the scale alone with the offset at its bound
      b = b_max;
      a = (sum_wqt - b * sum_wq) / sum_wq2;
    }
    // A fit far outside the sub-block's span (possible only for degenerate codes) could
    // overflow f16 in the super-block's d or dmin; LargestScale allows for 2 (hi - lo).
    if (!(a > 0) || a > 1 || b_max - b > 2) continue;  // min = (b_max - b) (hi - lo)
    const double err = error(a, b);
    if (err + (kBeyondRounding - 1) * sum_wt2 < best_err) {
      best_err = err;
      best_a = a;
      best_b = b;
    }
  }
  return {static_cast<float>(best_a) * span, -(lo + static_cast<float>(best_b) * span)};
}

// The code of each element of a sub-block stored with scale s and min mn, and the
// weighted squared error of the values those codes decode to.
float Q4KStoredError(const float* x, const float* w, float s, float mn, int* q) {
  const float inv = s > 0 ? 1 / s : 0;
  float err = 0;
  for (int l = 0; l < 32; ++l) {
    q[l] = NearestCode((x[l] + mn) * inv, 0, 15);
    const float e = s * static_cast<float>(q[l]) - mn - x[l];
    err += w[l] * e * e;
  }
  return err;
}

// Each sub-block's fitted scale and min are coded in 6 bits against the super-block's
// largest (d = largest scale / 63, dmin likewise, both f16 rounded up so the largest
// codes fit and a tiny block keeps a nonzero step). Of the codes just below and above
// each, the pair whose stored values leave the least weighted error is kept: rounding
// alone would zero the scale of a quiet sub-block next to one with an outlier.
void QuantizeQ4_K(const float* x, uint8_t* b) {
  Q4KFit fit[kQ4KSubBlocks];
  float max_scale = 0, max_min = 0;
  for (int j = 0; j < kQ4KSubBlocks; ++j) {
    fit[j] = FitQ4KSubBlock(x + 32 * j);
    max_scale = std::max(max_scale, fit[j].scale);
    max_min = std::max(max_min, fit[j].min);
  }
  const uint16_t dh = HalfAtLeast(max_scale / 63), dminh = HalfAtLeast(max_min / 63);
  const float d = HalfToFloat(dh), dmin = HalfToFloat(dminh);
  int sc[kQ4KSubBlocks], m[kQ4KSubBlocks], q[kQ4KSubBlocks][32];
  for (int j = 0; j < kQ4KSubBlocks; ++j) {
    float w[32];
    Q4KWeights(x + 32 * j, w);
    const int sc_below = d > 0 ? std::min(63, static_cast<int>(fit[j].scale / d)) : 0;
    const int m_below = dmin > 0 ? std::min(63, static_cast<int>(fit[j].min / dmin)) : 0;
    float best = std::numeric_limits<float>::infinity();
    for (int s = sc_below; s <= std::min(63, sc_below + 1); ++s) {
      for (int mn = m_below; mn <= std::min(63, m_below + 1); ++mn) {
        int codes[32];
        const float err = Q4KStoredError(x + 32 * j, w, d * static_cast<float>(s),
                                         dmin * static_cast<float>(mn), codes);
        if (err < best) {
          best = err;
          sc[j] = s;
          m[j] = mn;
          std::memcpy(q[j], codes, sizeof codes);
        }
      }
    }
  }
  WriteU16(b, dh);
  WriteU16(b + 2, dminh);
  PackQ4KScales(sc, m, b + 4);
  uint8_t* qs = b + 16;
  std::memset(qs, 0, 128);
  for (int j = 0; j < kQ4KSubBlocks; ++j) {
    for (int l = 0; l < 32; ++l) {
      qs[32 * (j / 2) + l] |= static_cast<uint8_t>(q[j][l] << (4 * (j % 2)));
    }
  }
}

// The signed scale of one q6_k group of 16 (value = scale * code, codes in [-32, 31]):
// codes from the largest-magnitude element, sign kept, mapped to -(32 + -0.9 .. 0.9), each
// scale refitted by plain least squares; the one leaving the least error. (llama.cpp
// weights this fit by x^2; on heavy-tailed rows that left more plain squared error than
// the min/max encoder, and on the padded TinyStories model no better perplexity.)
float FitQ6KGroup(const float* x) {
  float amax = 0, max = 0;
  for (int i = 0; i < 16; ++i) {
    if (std::fabs(x[i]) > amax) {
      amax = std::fabs(x[i]);
      max = x[i];
    }
  }
  if (amax == 0) return 0;
  float t[16];  // x / max: the largest element at 1
  for (int i = 0; i < 16; ++i) t[i] = x[i] / max;
  // With the least-squares scale sum_qt / sum_q2 the error is sum_t2 - sum_qt^2 / sum_q2:
  // the best candidate has the largest sum_qt^2 / sum_q2.
  float best_gain = -1, best_scale = -1.0f / 32;
  for (int k = 0; k <= 18; ++k) {  // the plain extremes first: a tie keeps them
    const int step = k % 2 == 0 ? k / 2 : -(k + 1) / 2;
    const float f = -(32 + 0.1f * static_cast<float>(step));
    float lane_q2[8] = {}, lane_qt[8] = {};  // 8 lanes so the loop vectorizes
    for (int i0 = 0; i0 < 16; i0 += 8) {
      for (int k = 0; k < 8; ++k) {
        // Round to nearest as a truncation of a positive number, clamped to [-32, 31].
        const float v = std::clamp(f * t[i0 + k], -32.0f, 31.0f);
        const float q = static_cast<float>(static_cast<int>(v + 32.5f) - 32);
        lane_q2[k] += q * q;
        lane_qt[k] += q * t[i0 + k];
      }
    }
    float sum_q2 = 0, sum_qt = 0;
    for (int k = 0; k < 8; ++k) {
      sum_q2 += lane_q2[k];
      sum_qt += lane_qt[k];
    }
    if (sum_q2 > 0 && sum_qt * sum_qt / sum_q2 > best_gain * kBeyondRounding) {
      best_gain = sum_qt * sum_qt / sum_q2;
      best_scale = sum_qt / sum_q2;
    }
  }
  return best_scale * max;
}

// The squared error of a q6_k group of 16 stored with scale s.
float Q6KStoredError(const float* x, float s) {
  const float inv = s != 0 ? 1 / s : 0;
  float err = 0;
  for (int i = 0; i < 16; ++i) {
    const float e = s * static_cast<float>(NearestCode(x[i] * inv, -32, 31)) - x[i];
    err += e * e;
  }
  return err;
}

// The 16 group scales are coded as int8 against d = max |scale| / 127 (f16 rounded up, as
// q4_k's d); of the two codes around each scale, the one leaving the least error is kept
// (as q4_k's). The element codes are rounded against the stored scales.
void QuantizeQ6_K(const float* x, uint8_t* b) {
  float group_scale[16], largest = 0;
  for (int g = 0; g < 16; ++g) {
    group_scale[g] = FitQ6KGroup(x + 16 * g);
    largest = std::max(largest, std::fabs(group_scale[g]));
  }
  const uint16_t dh = HalfAtLeast(largest / 127);
  const float d = HalfToFloat(dh);
  uint8_t* ql = b;
  uint8_t* qh = b + 128;
  auto* scales = reinterpret_cast<int8_t*>(b + 192);
  std::memset(b, 0, 192);
  WriteU16(b + 208, dh);
  for (int g = 0; g < 16; ++g) {
    const int below =
        d > 0 ? std::clamp(static_cast<int>(std::floor(group_scale[g] / d)), -128, 127) : 0;
    const int above = std::min(127, below + 1);
    const bool take_above = d > 0 && Q6KStoredError(x + 16 * g, d * static_cast<float>(above)) <
                                         Q6KStoredError(x + 16 * g, d * static_cast<float>(below));
    scales[g] = static_cast<int8_t>(take_above ? above : below);
  }
  for (int e = 0; e < 256; ++e) {
    // Element e: half e / 128; in it, quarter g4 of 32 and position l (DequantizeQ6_K).
    const int half = e / 128, g4 = (e % 128) / 32, l = e % 32;
    const float s = d * static_cast<float>(scales[e / 16]);
    const int q = s != 0 ? NearestCode(x[e] * (1 / s), -32, 31) + 32 : 32;
    ql[64 * half + 32 * (g4 % 2) + l] |= static_cast<uint8_t>((q & 0xF) << (4 * (g4 / 2)));
    qh[32 * half + l] |= static_cast<uint8_t>((q >> 4) << (2 * g4));
  }
}

// One row of fp8_e4m3: every block carries the row's scale max |x| / 448.
void QuantizeFp8E4M3Row(const float* x, int64_t n, uint8_t* out) {
  float amax = 0;
  for (int64_t i = 0; i < n; ++i) amax = std::max(amax, std::fabs(x[i]));
  const float s = amax / 448;
  for (int64_t i = 0; i < n; i += 32, out += 36) {
    std::memcpy(out, &s, 4);
    for (int j = 0; j < 32; ++j) out[4 + j] = s > 0 ? FloatToE4M3(x[i + j] / s) : 0;
  }
}

// The span [lo, hi] always holds 0, so a group of zeros (padding, pruned rows) stays
// exact, and s = (hi - lo) / 15 is rounded up to f16 so no code clamps by more than
// half a step. The zero is kept at 1 or more (a group with nothing below zero spans
// [-s, 14 s]): GPTQ's classic checkpoints store zero - 1 in a nibble, where 0 wraps.
void QuantizeInt4G128(const float* x, uint8_t* b) {
  const float lo = std::min(0.0f, *std::min_element(x, x + 128));
  const float hi = std::max(0.0f, *std::max_element(x, x + 128));
  uint16_t sh = HalfAtLeast((hi - lo) / 15);
  float s = HalfToFloat(sh);
  int z = s > 0 ? std::clamp(static_cast<int>(roundf(-lo / s)), 0, 15) : 1;
  if (z == 0) {
    sh = HalfAtLeast(hi / 14);
    s = HalfToFloat(sh);
    z = 1;
  }
  WriteU16(b, sh);
  b[2] = static_cast<uint8_t>(z);
  b[3] = 0;
  auto code = [&](float v) {
    return s > 0 ? std::clamp(static_cast<int>(roundf(v / s)) + z, 0, 15) : z;
  };
  for (int i = 0; i < 64; ++i) {
    b[4 + i] = static_cast<uint8_t>(code(x[2 * i]) | (code(x[2 * i + 1]) << 4));
  }
}

// The largest |scale| a block of `x` would store, to refuse what f16 cannot hold.
float LargestScale(QuantType t, const float* x, int n) {
  float amax = 0;
  for (int i = 0; i < n; ++i) amax = std::max(amax, std::fabs(x[i]));
  switch (t) {
    case QuantType::kQ8_0:
      return amax / 127;
    case QuantType::kQ4_0:
      return amax / 8;
    case QuantType::kQ6_K:
      return amax / (16 * 127);  // a refitted group scale is near max / 32, kept well within
    case QuantType::kFp8E4M3:
      return 0;  // an f32 scale
    case QuantType::kInt4G128:
      return 2 * amax / 15;
    default:  // q4_k: a fitted min is at most 2 (hi - lo) <= 4 amax, so dmin <= 4 amax / 63
      return 4 * amax / 63;
  }
}

constexpr float kHalfMax = 65504.0f;

}  // namespace

float E4M3ToFloat(uint8_t code) {
  const int e = (code >> 3) & 0xF, m = code & 7;
  float v;
  if (e == 0xF && m == 7) {
    v = std::numeric_limits<float>::quiet_NaN();
  } else if (e == 0) {
    v = std::ldexp(static_cast<float>(m), -9);
  } else {
    v = std::ldexp(static_cast<float>(8 + m), e - 10);
  }
  return (code & 0x80) != 0 ? -v : v;
}

uint8_t FloatToE4M3(float x) {
  if (std::isnan(x)) return 0x7F;
  const uint8_t sign = std::signbit(x) ? 0x80 : 0;
  const float a = std::fabs(x);
  if (a >= 448) return sign | 0x7E;
  // Below 2^-6 codes are multiples of 2^-9, and code 8 is 2^-6 itself: the rounded
  // multiple is the code.
  if (a < 0x1p-6f) return sign | static_cast<uint8_t>(std::nearbyint(std::ldexp(a, 9)));
  int e;
  const float frac = std::frexp(a, &e);  // a = frac * 2^e, frac in [0.5, 1)
  int m = static_cast<int>(std::nearbyint((frac * 2 - 1) * 8));
  --e;  // a = (1 + m / 8) * 2^e
  if (m == 8) {
    m = 0;
    ++e;
  }
  return sign | static_cast<uint8_t>(((e + 7) << 3) | m);
}

int64_t QuantRowBytes(QuantType t, int64_t n) {
  const QuantLayout& l = LayoutOf(t);
  return n / l.block_elems * l.block_bytes;
}

void DequantizeRow(QuantType t, const uint8_t* blocks, int64_t n, float* out) {
  const QuantLayout& l = LayoutOf(t);
  for (int64_t i = 0; i < n; i += l.block_elems, blocks += l.block_bytes) {
    switch (t) {
      case QuantType::kQ8_0:
        DequantizeQ8_0(blocks, out + i);
        break;
      case QuantType::kQ4_0:
        DequantizeQ4_0(blocks, out + i);
        break;
      case QuantType::kQ4_K:
        DequantizeQ4_K(blocks, out + i);
        break;
      case QuantType::kQ6_K:
        DequantizeQ6_K(blocks, out + i);
        break;
      case QuantType::kFp8E4M3:
        DequantizeFp8E4M3(blocks, out + i);
        break;
      case QuantType::kInt4G128:
        DequantizeInt4G128(blocks, out + i);
        break;
      case QuantType::kNone:
        return;
    }
  }
}

absl::Status QuantizeRow(QuantType t, const float* x, int64_t n, uint8_t* out) {
  if (t == QuantType::kNone) {
    return absl::UnimplementedError(
        absl::StrFormat("no encoder for quantization type %s", QuantName(t)));
  }
  const QuantLayout& l = LayoutOf(t);
  if (n % l.block_elems != 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s row of %d elements: not a multiple of the block size %d", l.name, n, l.block_elems));
  }
  for (int64_t i = 0; i < n; ++i) {
    if (!std::isfinite(x[i])) {
      return absl::InvalidArgumentError(
          absl::StrFormat("%s: element %d is %f, not a finite number", l.name, i, x[i]));
    }
  }
  if (t == QuantType::kFp8E4M3) {
    QuantizeFp8E4M3Row(x, n, out);
    return absl::OkStatus();
  }
  for (int64_t i = 0; i < n; i += l.block_elems, out += l.block_bytes) {
    if (LargestScale(t, x + i, l.block_elems) > kHalfMax) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "%s: the block at element %d needs a scale beyond the f16 range", l.name, i));
    }
    if (t == QuantType::kQ8_0) QuantizeQ8_0(x + i, out);
    if (t == QuantType::kQ4_0) QuantizeQ4_0(x + i, out);
    if (t == QuantType::kQ4_K) QuantizeQ4_K(x + i, out);
    if (t == QuantType::kQ6_K) QuantizeQ6_K(x + i, out);
    if (t == QuantType::kInt4G128) QuantizeInt4G128(x + i, out);
  }
  return absl::OkStatus();
}

}  // namespace ptxserve
