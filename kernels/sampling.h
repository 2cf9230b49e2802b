// Token sampling over a batch of logit rows: greedy, or temperature -> top-k -> top-p ->
// min-p -> a draw with one host-supplied uniform per row. One CTA per row.
//
// Contract (device pointers, row-major): SamplingArgs, in .param order.
//
// THE CANONICAL SAMPLING ALGORITHM. The host sampler (engine/sampler.h) implements the
// same rules bit for bit, so a row's token never depends on where it was drawn. Every
// floating-point step is one IEEE operation rounded to nearest (no approximate
// functions, no flushing of subnormals, no contraction of a multiply and an add), and
// every sum is an integer sum, which no summation order can change.
//   1. Greedy when T == 0 or top_k == 1: the lowest id i with l_i == max (NaN never wins;
//      a row of NaN only gives 0). Otherwise m = max of the non-NaN l_i and
//      inv_t = 1 / T (f32); greedy as well when m is not finite or inv_t is +inf.
//   2. Weight w_i = Exp((l_i - m) * inv_t) (f32: a sub, then a mul), where Exp is Cephes'
//      expf for x <= 0: under = !(x >= -87); x = min(max(x, -87), 0);
//      t = fma(x, log2(e), 1.5 * 2^23); n = t - 1.5 * 2^23; ni = bits(t) - bits(1.5 * 2^23);
//      r = fma(-n, 0.693359375, x); r = fma(-n, -2.12194440e-4, r);
//      p = P0, then p = fma(p, r, Pj) for j = 1..5, with P0..P5 the f32 nearest to
//      1.9875691500e-4, 1.3981999507e-3, 8.3334519073e-3, 4.1665795894e-2,
//      1.6666665459e-1, 5.0000001201e-1;
//      e = fma(p, r * r, r + 1); Exp = under ? 0 : e * float_from_bits((ni + 127) << 23).
//      NaN logits give x NaN, so weight 0; the best token has weight exactly 1.
//   3. Integer weight q_i = floor(w_i * 2^40) (u64; w_i * 2^40 is exact in f32).
//   4. Rank key_i = (ord(l_i) << 32) | (0xffffffff - i): ord maps the float's bits to an
//      unsigned order (-0 as +0, NaN as -inf), so a larger key ranks first and equal
//      logits rank by lower id. Keys are distinct. The kept set is {key_i >= tau}:
//      tau = 0 (all); top-k (0 < k < vocab): tau = the k-th largest key;
//      top-p (p < 1): with S(t) = sum of q_i over key_i >= max(t, tau) and
//      need = (f64)p * (f64)S(tau), tau becomes the largest t with (f64)S(t) >= need,
//      i.e. the shortest best-first prefix of the top-k survivors whose mass reaches p.
//   5. min-p: a kept id also needs w_i >= min_p (f32 compare; the best has w = 1).
//   6. Draw: K = sum of q_i over kept ids (>= 2^40: the best is kept);
//      target = min(trunc(u * (f64)K), K - 1); the token is the smallest kept id i at
//      which the running sum of q over kept ids, in ascending id order, exceeds target.
// Ids whose q_i is 0 (w_i < 2^-40, -inf, NaN) can never be drawn.
//
// On the device, tau is found by radix select over the 64-bit keys (8 passes of 8-bit
// digits, exact u64 histograms in shared memory), and the draw by per-thread id ranges
// with u64 prefix sums. The f32 arithmetic is emitted as fma.rn only (a + b as
// fma(a, 1, b), a * b as fma(a, b, -0)), which ptxas never contracts or reorders.
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kernels/common.h"
#include "kernels/config_fields.h"
#include "kernels/kernel_params.h"
#include "kernels/ptx/types.h"

namespace ptxserve::kernels {

inline constexpr char kSamplingEntry[] = "sampling";

struct SamplingConfig : KernelConfig<SamplingConfig, kSamplingEntry> {
  int threads = 256;  // per CTA: 32..1024, a multiple of 32
  ptx::Target target;
  static constexpr auto kFields = std::make_tuple(ThreadsField(&SamplingConfig::threads));
};

struct SamplingArgs {
  // f32 [num_rows][vocab]
  DevicePtr logits;
  // f32 [num_rows]: 0 = greedy
  DevicePtr temperature;
  // s32 [num_rows]: 0 (or >= vocab) = off; 1 = greedy
  DevicePtr top_k;
  // f32 [num_rows]: 1 = off, else in (0, 1)
  DevicePtr top_p;
  // f32 [num_rows]: 0 = off, else in (0, 1]
  DevicePtr min_p;
  // f64 [num_rows] in [0, 1): the row's random draw
  DevicePtr uniform;
  // s32 [num_rows]: the sampled token id
  DevicePtr out;
  // < 2^24, so that the integer weights below fit in u64
  uint32_t vocab = 0;
  uint32_t num_rows = 0;
  PTXSERVE_PARAMS(SamplingArgs, logits, temperature, top_k, top_p, min_p, uniform, out, vocab,
                  num_rows);
};

absl::StatusOr<std::string> GenerateSampling(const SamplingConfig& cfg);
inline constexpr auto SamplingLaunch = &RowLaunchFor<SamplingConfig>;

}  // namespace ptxserve::kernels
