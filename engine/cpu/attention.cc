// Paged KV cache writes and paged GQA attention (layout in ops.h and DESIGN.md).
//
// One work item is (token row, kv head): the query heads of a GQA group are scored
// together so each K/V row is read once per item. Softmax is two-pass in f32 (scores
// kept for the whole context), which is exact enough for a reference and simple.
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "engine/cpu/ops.h"
#include "engine/cpu/simd.h"
#include "engine/util/thread_pool.h"

namespace ptxserve::cpu {
namespace {

// Returns row `src` (n elements of dtype) as f32: the pointer itself for f32 pools,
// else converted into buf. F16C conversion is exact, like HalfToFloat.
const float* RowAsFloat(DType dtype, const void* src, int64_t n, float* buf) {
  if (dtype == DType::kF32) return static_cast<const float*>(src);
  const auto* h = static_cast<const uint16_t*>(src);
  if (dtype == DType::kF16) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
      _mm256_storeu_ps(buf + i,
                       _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(h + i))));
    }
    for (; i < n; ++i) buf[i] = HalfToFloat(h[i]);
  } else {
    for (int64_t i = 0; i < n; ++i) buf[i] = BF16ToFloat(h[i]);
  }
  return buf;
}

struct Scratch {
  std::vector<float> scores;   // [group][context]
  std::vector<float> acc;      // [group][head_dim]
  std::vector<float> row;      // one converted K or V row
  std::vector<float> inv_sum;  // [group]
};

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
  const int64_t tokens = query_start[num_seqs];
  std::vector<int32_t> seq_of(tokens);
  for (int32_t s = 0; s < num_seqs; ++s) {
    for (int32_t t = query_start[s]; t < query_start[s + 1]; ++t) seq_of[t] = s;
  }
  const int64_t group = num_heads / num_kv_heads;
  const size_t esize = DTypeSize(dtype);
  const int64_t head_stride = block_size * head_dim;  // elements per (block, kv head)

  const int64_t items = tokens * num_kv_heads;
  int64_t work = 0;  // multiply-adds, to keep tiny batches on the calling thread
  for (int64_t t = 0; t < tokens; ++t) work += (positions[t] + 1) * num_heads * head_dim;

  auto run = [&](int64_t item_begin, int64_t item_end) {
    thread_local Scratch scratch;
    for (int64_t i = item_begin; i < item_end; ++i) {
      // Zig-zag order pairs short-context rows with long ones, so contiguous chunks
      // of a prefill get similar amounts of work.
      const int64_t item = (i % 2 == 0) ? i / 2 : items - 1 - i / 2;
      const int64_t t = item / num_kv_heads;
      const int64_t kvh = item % num_kv_heads;
      const int32_t* table = block_tables + static_cast<int64_t>(seq_of[t]) * max_blocks_per_seq;
      const int64_t context = static_cast<int64_t>(positions[t]) + 1;
      const float* qg = q + (t * num_heads + kvh * group) * head_dim;
      float* og = out + (t * num_heads + kvh * group) * head_dim;
      scratch.scores.resize(group * context);
      scratch.acc.assign(group * head_dim, 0.0f);
      scratch.row.resize(head_dim);
      float* scores = scratch.scores.data();

      auto row_ptr = [&](const void* pool, int64_t j) {
        const int64_t block = table[j / block_size];
        const int64_t elem =
            (block * num_kv_heads + kvh) * head_stride + (j % block_size) * head_dim;
        return RowAsFloat(dtype, static_cast<const char*>(pool) + elem * esize, head_dim,
                          scratch.row.data());
      };

      for (int64_t j = 0; j < context; ++j) {
        const float* kr = row_ptr(k_pool, j);
        for (int64_t g = 0; g < group; ++g) {
          scores[g * context + j] = simd::Dot(qg + g * head_dim, kr, head_dim) * scale;
        }
      }
      scratch.inv_sum.resize(group);
      float* inv_sum = scratch.inv_sum.data();
      for (int64_t g = 0; g < group; ++g) {
        float* sg = scores + g * context;
        const float mx = *std::max_element(sg, sg + context);
        float sum = 0.0f;
        for (int64_t j = 0; j < context; ++j) {
          sg[j] = std::exp(sg[j] - mx);
          sum += sg[j];
        }
        inv_sum[g] = 1.0f / sum;
      }
      for (int64_t j = 0; j < context; ++j) {
        const float* vr = row_ptr(v_pool, j);
        for (int64_t g = 0; g < group; ++g) {
          simd::Axpy(scores[g * context + j], vr, scratch.acc.data() + g * head_dim, head_dim);
        }
      }
      for (int64_t g = 0; g < group; ++g) {
        for (int64_t d = 0; d < head_dim; ++d) {
          og[g * head_dim + d] = scratch.acc[g * head_dim + d] * inv_sum[g];
        }
      }
    }
  };
  if (work < (1 << 15)) {
    run(0, items);
  } else {
    ThreadPool::Default().ParallelFor(items, run);
  }
}

}  // namespace ptxserve::cpu
