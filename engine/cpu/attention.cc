// Paged KV cache writes and paged GQA attention (layout in ops.h and DESIGN.md).
//
// PagedAttention is blocked and one-pass, like FlashAttention-2 on a CPU. A work item
// is a tile of one sequence's query rows times the query heads of one GQA group (about
// kTileVectors query vectors), run against the sequence's K/V in tiles of kKvTile rows:
// each K/V tile is read (and widened to f32) once per item and serves every vector of
// it from L1; the scores of a tile never leave a small buffer, and an online softmax
// (running max and sum per vector, in log2 units so exp is exp2) rescales the output
// accumulated so far when the max moves.
//
// Determinism: every score, probability and output element is computed by the same
// sequence of f32 operations whatever else shares its item, and a K/V tile that is
// wholly past a vector's position changes nothing (its probabilities are exactly 0 and
// the rescale factor exactly 1). So a row's output depends only on its own query, its
// position and the cache: a prefill row equals, bit for bit, the same row run alone as
// a decode step, and thread count and batch composition change nothing.
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "engine/cpu/ops.h"
#include "engine/cpu/simd.h"
#include "engine/util/thread_pool.h"

namespace ptxserve::cpu {
namespace {

constexpr int64_t kKvTile = 16;       // K/V rows per tile: two 8-lane score vectors
constexpr int64_t kTileVectors = 32;  // query vectors (rows x heads of a group) per item
constexpr float kLog2e = 1.4426950408889634f;

int64_t RoundUp(int64_t x, int64_t m) { return (x + m - 1) / m * m; }

// One layer's K or V pool and its geometry.
struct Pool {
  const char* base;
  DType dtype;
  int64_t num_kv_heads, block_size, head_dim;
};

// The rows of a tile of query rows: [begin, end) of the batch, all of one sequence.
struct QueryTile {
  int32_t seq, begin, end;
};

// Per-thread buffers of one work item. Rows are `width` floats (head_dim rounded up to 8)
// with zeros past head_dim, so the kernels below need no tail handling.
struct Scratch {
  std::vector<float> q;       // [vectors][width] queries times scale * log2(e)
  std::vector<float> k, v;    // [kKvTile][width] a K/V tile widened or padded to f32
  std::vector<float> zero;    // [width] stands in for the missing row of an odd tile
  std::vector<float> s;       // [vectors][kKvTile] scores, then probabilities
  std::vector<float> o;       // [vectors][width] output not yet divided by the sum
  std::vector<float> max;     // [vectors] running max of the scores (log2 units)
  std::vector<float> sum;     // [vectors] running sum of exp2(score - max)
  std::vector<float> alpha;   // [vectors] this tile's rescale factor for o
  std::vector<int32_t> last;  // [vectors] the last position the vector attends to
};

// Writes n elements of a pool row (dtype) as f32 to dst, then zeros up to width.
// Widening f16 (F16C) and bf16 (a shift) is exact.
void WidenRow(DType dtype, const void* src, int64_t n, int64_t width, float* dst) {
  int64_t i = 0;
  if (dtype == DType::kF32) {
    std::copy_n(static_cast<const float*>(src), n, dst);
    i = n;
  } else {
    const auto* h = static_cast<const uint16_t*>(src);
    for (; i + 8 <= n; i += 8) {
      const __m128i x = _mm_loadu_si128(reinterpret_cast<const __m128i*>(h + i));
      _mm256_storeu_ps(dst + i, dtype == DType::kF16 ? _mm256_cvtph_ps(x)
                                                     : _mm256_castsi256_ps(_mm256_slli_epi32(
                                                           _mm256_cvtepu16_epi32(x), 16)));
    }
    for (; i < n; ++i) dst[i] = dtype == DType::kF16 ? HalfToFloat(h[i]) : BF16ToFloat(h[i]);
  }
  std::fill(dst + n, dst + width, 0.0f);
}

// Points rows[i] (i < n) at position j0 + i of kv head kvh as `width` f32s: the pool row
// itself when the pool is f32 and needs no padding, else a widened copy in buf. An odd
// n gets rows[n] = zero, for the score kernel's pairs of rows.
void TileRows(const Pool& pool, const int32_t* table, int64_t kvh, int64_t j0, int64_t n,
              int64_t width, float* buf, const float* zero, const float** rows) {
  const bool direct = pool.dtype == DType::kF32 && width == pool.head_dim;
  const size_t esize = DTypeSize(pool.dtype);
  for (int64_t i = 0; i < n; ++i) {
    const int64_t j = j0 + i;
    const int64_t elem =
        ((int64_t{table[j / pool.block_size]} * pool.num_kv_heads + kvh) * pool.block_size +
         j % pool.block_size) *
        pool.head_dim;
    const char* src = pool.base + elem * static_cast<int64_t>(esize);
    if (direct) {
      rows[i] = reinterpret_cast<const float*>(src);
    } else {
      WidenRow(pool.dtype, src, pool.head_dim, width, buf + i * width);
      rows[i] = buf + i * width;
    }
  }
  if (n % 2 != 0) rows[n] = zero;
}

// s[i * kKvTile + c] = q[i] . k_c for 4 query vectors (rows of q, `width` apart) and the
// rows k0, k1 (c = 0, 1). Each dot product sums in one fixed order (8 lanes over the
// width, then Hsum4's tree), whatever the other vectors are.
void Scores4x2(const float* q, int64_t width, const float* k0, const float* k1, float* s) {
  __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
  __m256 b0 = a0, b1 = a0, b2 = a0, b3 = a0;
  for (int64_t d = 0; d < width; d += 8) {
    const __m256 x = _mm256_loadu_ps(k0 + d), y = _mm256_loadu_ps(k1 + d);
    __m256 qv = _mm256_loadu_ps(q + d);
    a0 = _mm256_fmadd_ps(qv, x, a0);
    b0 = _mm256_fmadd_ps(qv, y, b0);
    qv = _mm256_loadu_ps(q + width + d);
    a1 = _mm256_fmadd_ps(qv, x, a1);
    b1 = _mm256_fmadd_ps(qv, y, b1);
    qv = _mm256_loadu_ps(q + 2 * width + d);
    a2 = _mm256_fmadd_ps(qv, x, a2);
    b2 = _mm256_fmadd_ps(qv, y, b2);
    qv = _mm256_loadu_ps(q + 3 * width + d);
    a3 = _mm256_fmadd_ps(qv, x, a3);
    b3 = _mm256_fmadd_ps(qv, y, b3);
  }
  const __m128 lo = simd::Hsum4(a0, a1, a2, a3), hi = simd::Hsum4(b0, b1, b2, b3);
  const __m128 v01 = _mm_unpacklo_ps(lo, hi), v23 = _mm_unpackhi_ps(lo, hi);
  _mm_storel_pi(reinterpret_cast<__m64*>(s), v01);
  _mm_storeh_pi(reinterpret_cast<__m64*>(s + kKvTile), v01);
  _mm_storel_pi(reinterpret_cast<__m64*>(s + 2 * kKvTile), v23);
  _mm_storeh_pi(reinterpret_cast<__m64*>(s + 3 * kKvTile), v23);
}

// Folds one tile's scores s[0, valid) of a vector into its running max and sum, turns
// s[0, kKvTile) into probabilities (0 past valid) and returns the factor the vector's
// accumulated output must be multiplied by. valid == 0 leaves max and sum as they are.
float OnlineSoftmax(float* s, int64_t valid, float* max, float* sum) {
  const __m256 zero = _mm256_setzero_ps();
  if (valid == 0) {
    _mm256_storeu_ps(s, zero);
    _mm256_storeu_ps(s + 8, zero);
    return 1.0f;
  }
  const __m256 ninf = _mm256_set1_ps(-std::numeric_limits<float>::infinity());
  const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  const __m256i n = _mm256_set1_epi32(static_cast<int32_t>(valid));
  const __m256 in0 = _mm256_castsi256_ps(_mm256_cmpgt_epi32(n, lane));
  const __m256 in1 =
      _mm256_castsi256_ps(_mm256_cmpgt_epi32(n, _mm256_add_epi32(lane, _mm256_set1_epi32(8))));
  const __m256 s0 = _mm256_blendv_ps(ninf, _mm256_loadu_ps(s), in0);
  const __m256 s1 = _mm256_blendv_ps(ninf, _mm256_loadu_ps(s + 8), in1);
  const float new_max = std::max(*max, simd::Hmax(_mm256_max_ps(s0, s1)));
  const __m256 m = _mm256_set1_ps(new_max);
  const __m256 p0 = simd::Exp2NonPositive(_mm256_sub_ps(s0, m));
  const __m256 p1 = simd::Exp2NonPositive(_mm256_sub_ps(s1, m));
  _mm256_storeu_ps(s, p0);
  _mm256_storeu_ps(s + 8, p1);
  const float alpha = _mm256_cvtss_f32(simd::Exp2NonPositive(_mm256_set1_ps(*max - new_max)));
  *sum = *sum * alpha + simd::Hsum(_mm256_add_ps(p0, p1));
  *max = new_max;
  return alpha;
}

// o_r[d, d + 8W) = alpha_r * o_r + sum_{j < n} p_r[j] * v[j] for the two vectors r = 0, 1,
// in registers across the whole tile. The loops over W carry `#pragma GCC unroll`: rolled
// (GCC's -O2 default) x and y lived on the stack, a store and a reload around every FMA,
// and this loop took ~55% of a 512-token prefill's attention time.
template <int W>
void AccumulatePv(const float* p0, const float* p1, float alpha0, float alpha1,
                  const float* const* v, int64_t n, int64_t d, float* o0, float* o1) {
  __m256 x[W], y[W];
#pragma GCC unroll 4
  for (int w = 0; w < W; ++w) {
    x[w] = _mm256_mul_ps(_mm256_loadu_ps(o0 + d + 8 * w), _mm256_set1_ps(alpha0));
    y[w] = _mm256_mul_ps(_mm256_loadu_ps(o1 + d + 8 * w), _mm256_set1_ps(alpha1));
  }
  for (int64_t j = 0; j < n; ++j) {
    const __m256 a = _mm256_broadcast_ss(p0 + j), b = _mm256_broadcast_ss(p1 + j);
#pragma GCC unroll 4
    for (int w = 0; w < W; ++w) {
      const __m256 vv = _mm256_loadu_ps(v[j] + d + 8 * w);
      x[w] = _mm256_fmadd_ps(a, vv, x[w]);
      y[w] = _mm256_fmadd_ps(b, vv, y[w]);
    }
  }
#pragma GCC unroll 4
  for (int w = 0; w < W; ++w) {
    _mm256_storeu_ps(o0 + d + 8 * w, x[w]);
    _mm256_storeu_ps(o1 + d + 8 * w, y[w]);
  }
}

// The arguments of one PagedAttention call that every work item shares.
struct Problem {
  const float* q;
  const int32_t* positions;
  const int32_t* block_tables;
  int32_t max_blocks_per_seq;
  int64_t num_heads, group, head_dim;
  Pool k, v;
  float scale;
  float* out;
};

// Attention of the query vectors of `tile` x the heads of kv head kvh's group.
void RunItem(const Problem& p, const QueryTile& tile, int64_t kvh, Scratch& sc) {
  const int64_t hd = p.head_dim, width = RoundUp(hd, 8);
  const int64_t vectors = (tile.end - tile.begin) * p.group;
  const int64_t padded = RoundUp(vectors, 4);  // the score kernel takes 4 at a time
  sc.q.assign(padded * width, 0.0f);
  sc.o.assign(padded * width, 0.0f);
  sc.k.resize(kKvTile * width);
  sc.v.resize(kKvTile * width);
  sc.zero.assign(width, 0.0f);
  sc.s.resize(padded * kKvTile);
  sc.max.assign(padded, -std::numeric_limits<float>::infinity());
  sc.sum.assign(padded, 0.0f);
  sc.alpha.resize(padded);
  sc.last.resize(padded);

  const float q_scale = p.scale * kLog2e;
  int32_t last = 0;
  for (int64_t m = 0; m < vectors; ++m) {
    const int64_t t = tile.begin + m / p.group;
    const float* src = p.q + (t * p.num_heads + kvh * p.group + m % p.group) * hd;
    for (int64_t d = 0; d < hd; ++d) sc.q[m * width + d] = src[d] * q_scale;
    sc.last[m] = p.positions[t];
    last = std::max(last, p.positions[t]);
  }
  // Padding vectors have zero queries: finite scores, results never written.
  std::fill(sc.last.begin() + vectors, sc.last.end(), last);

  const int32_t* table = p.block_tables + int64_t{tile.seq} * p.max_blocks_per_seq;
  const float* k_rows[kKvTile + 1];
  const float* v_rows[kKvTile + 1];
  for (int64_t j0 = 0; j0 <= last; j0 += kKvTile) {
    const int64_t n = std::min(kKvTile, last + 1 - j0);
    TileRows(p.k, table, kvh, j0, n, width, sc.k.data(), sc.zero.data(), k_rows);
    for (int64_t m = 0; m < padded; m += 4) {
      for (int64_t j = 0; j < n; j += 2) {
        Scores4x2(sc.q.data() + m * width, width, k_rows[j], k_rows[j + 1],
                  sc.s.data() + m * kKvTile + j);
      }
    }
    for (int64_t m = 0; m < padded; ++m) {
      const int64_t valid = std::clamp<int64_t>(sc.last[m] - j0 + 1, 0, n);
      sc.alpha[m] = OnlineSoftmax(sc.s.data() + m * kKvTile, valid, &sc.max[m], &sc.sum[m]);
    }
    TileRows(p.v, table, kvh, j0, n, width, sc.v.data(), sc.zero.data(), v_rows);
    for (int64_t m = 0; m < vectors; m += 2) {
      const float* s0 = sc.s.data() + m * kKvTile;
      float* o0 = sc.o.data() + m * width;
      for (int64_t d = 0; d < width; d += 32) {
        auto run = [&]<int W>() {
          AccumulatePv<W>(s0, s0 + kKvTile, sc.alpha[m], sc.alpha[m + 1], v_rows, n, d, o0,
                          o0 + width);
        };
        switch (std::min<int64_t>(4, (width - d) / 8)) {
          case 1:
            run.template operator()<1>();
            break;
          case 2:
            run.template operator()<2>();
            break;
          case 3:
            run.template operator()<3>();
            break;
          default:
            run.template operator()<4>();
            break;
        }
      }
    }
  }
  for (int64_t m = 0; m < vectors; ++m) {
    const int64_t t = tile.begin + m / p.group;
    float* dst = p.out + (t * p.num_heads + kvh * p.group + m % p.group) * hd;
    const float inv = 1.0f / sc.sum[m];
    for (int64_t d = 0; d < hd; ++d) dst[d] = sc.o[m * width + d] * inv;
  }
}

}  // namespace

void KvScatter(const float* k, const float* v, const int64_t* slot_mapping, int64_t tokens,
               int64_t num_kv_heads, int64_t head_dim, int64_t block_size, DType dtype,
               void* k_pool, void* v_pool) {
  const size_t esize = DTypeSize(dtype);
  for (int64_t t = 0; t < tokens; ++t) {
    const int64_t block = slot_mapping[t] / block_size;
    const int64_t offset = slot_mapping[t] % block_size;
    for (int64_t h = 0; h < num_kv_heads; ++h) {
      const int64_t src = (t * num_kv_heads + h) * head_dim;
      const int64_t dst = ((block * num_kv_heads + h) * block_size + offset) * head_dim;
      ConvertFromFloat(dtype, k + src, head_dim, static_cast<char*>(k_pool) + dst * esize);
      ConvertFromFloat(dtype, v + src, head_dim, static_cast<char*>(v_pool) + dst * esize);
    }
  }
}

void PagedAttention(const float* q, const int32_t* positions, const int32_t* query_start,
                    const int32_t* seq_lens, const int32_t* block_tables,
                    int32_t max_blocks_per_seq, int32_t num_seqs, int64_t num_heads,
                    int64_t num_kv_heads, int64_t head_dim, int64_t block_size, DType dtype,
                    const void* k_pool, const void* v_pool, float scale, float* out) {
  (void)seq_lens;  // each row's causal limit is its own position (<= seq_lens[s] - 1)
  const int64_t group = num_heads / num_kv_heads;
  const Problem p{q,
                  positions,
                  block_tables,
                  max_blocks_per_seq,
                  num_heads,
                  group,
                  head_dim,
                  {static_cast<const char*>(k_pool), dtype, num_kv_heads, block_size, head_dim},
                  {static_cast<const char*>(v_pool), dtype, num_kv_heads, block_size, head_dim},
                  scale,
                  out};
  const int32_t rows_per_tile = static_cast<int32_t>(std::max<int64_t>(1, kTileVectors / group));
  std::vector<QueryTile> tiles;
  int64_t work = 0;  // multiply-adds, to keep tiny batches on the calling thread
  for (int32_t s = 0; s < num_seqs; ++s) {
    for (int32_t t = query_start[s]; t < query_start[s + 1]; t += rows_per_tile) {
      tiles.push_back({s, t, std::min(t + rows_per_tile, query_start[s + 1])});
    }
    for (int32_t t = query_start[s]; t < query_start[s + 1]; ++t) {
      work += (positions[t] + 1) * num_heads * head_dim;
    }
  }
  const int64_t items = static_cast<int64_t>(tiles.size()) * num_kv_heads;
  auto run = [&](int64_t item_begin, int64_t item_end) {
    thread_local Scratch scratch;
    for (int64_t i = item_begin; i < item_end; ++i) {
      // Zig-zag order pairs a prefill's early (short-context) tiles with its late ones,
      // so contiguous chunks of items get similar amounts of work.
      const int64_t item = (i % 2 == 0) ? i / 2 : items - 1 - i / 2;
      RunItem(p, tiles[item / num_kv_heads], item % num_kv_heads, scratch);
    }
  };
  if (work < (1 << 15)) {
    run(0, items);
  } else {
    ThreadPool::Default().ParallelFor(items, run);
  }
}

}  // namespace ptxserve::cpu
