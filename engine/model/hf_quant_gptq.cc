// The update of input j after input i is quantized is U[i][j] / U[i][i] times i's error,
// with U the upper Cholesky factor of H^-1 (the paper's section 3.3 form, which replaces
// the per-column inverse updates of OBQ by one factorization). Each output row is
// independent given U, so rows are quantized one at a time, all inputs of a row in order.
#include "engine/model/hf_quant_gptq.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "engine/model/dtype.h"
#include "engine/model/quant.h"

namespace ptxserve {
namespace {

constexpr int64_t kGroup = 128;

// Lower Cholesky factor of the symmetric n x n `a` in place (a = L L^T; the upper
// triangle is left as it was). False when `a` is not positive definite.
bool CholeskyLower(std::vector<double>& a, int64_t n) {
  for (int64_t j = 0; j < n; ++j) {
    double d = a[j * n + j];
    for (int64_t k = 0; k < j; ++k) d -= a[j * n + k] * a[j * n + k];
    if (!(d > 0)) return false;
    const double ljj = std::sqrt(d);
    a[j * n + j] = ljj;
    for (int64_t i = j + 1; i < n; ++i) {
      double s = a[i * n + j];
      const double* li = a.data() + i * n;
      const double* lj = a.data() + j * n;
      for (int64_t k = 0; k < j; ++k) s -= li[k] * lj[k];
      a[i * n + j] = s / ljj;
    }
  }
  return true;
}

// U with U^T U = H^-1 (upper triangular, row-major), from H's lower factor L:
// H^-1 = L^-T L^-1, factored again.
bool InverseUpperFactor(std::vector<double> h, int64_t n, std::vector<double>* u) {
  if (!CholeskyLower(h, n)) return false;
  // inv = L^-1 (lower), column by column by forward substitution.
  std::vector<double> inv(static_cast<size_t>(n * n), 0.0);
  for (int64_t c = 0; c < n; ++c) {
    inv[c * n + c] = 1 / h[c * n + c];
    for (int64_t i = c + 1; i < n; ++i) {
      double s = 0;
      for (int64_t k = c; k < i; ++k) s += h[i * n + k] * inv[k * n + c];
      inv[i * n + c] = -s / h[i * n + i];
    }
  }
  // hinv = inv^T inv: hinv[i][j] = sum_{k >= max(i, j)} inv[k][i] inv[k][j].
  std::vector<double> hinv(static_cast<size_t>(n * n));
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t j = 0; j <= i; ++j) {
      double s = 0;
      for (int64_t k = i; k < n; ++k) s += inv[k * n + i] * inv[k * n + j];
      hinv[i * n + j] = hinv[j * n + i] = s;
    }
  }
  if (!CholeskyLower(hinv, n)) return false;
  // U = M^T for hinv = M M^T.
  u->assign(static_cast<size_t>(n * n), 0.0);
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t j = 0; j <= i; ++j) (*u)[j * n + i] = hinv[i * n + j];
  }
  return true;
}

}  // namespace

absl::StatusOr<std::vector<uint8_t>> QuantizeInt4Gptq(const float* w, int64_t out, int64_t in,
                                                      const LayerInputs& inputs, double damp) {
  if (inputs.width() != in || in % kGroup != 0) {
    return absl::InvalidArgumentError(absl::StrCat("GPTQ of a matrix with ", in,
                                                   " inputs: calibration rows are ", inputs.width(),
                                                   " wide, groups 128"));
  }
  std::vector<uint8_t> blocks;
  if (absl::Status s = QuantizeInt4Rows(w, out, in, &blocks, nullptr); !s.ok()) return s;

  std::vector<double> h = inputs.gram();
  double mean_diag = 0;
  for (int64_t i = 0; i < in; ++i) {
    if (h[i * in + i] == 0) h[i * in + i] = 1;
    mean_diag += h[i * in + i];
  }
  mean_diag /= static_cast<double>(in);
  for (int64_t i = 0; i < in; ++i) h[i * in + i] += damp * mean_diag;
  std::vector<double> u;
  if (!InverseUpperFactor(std::move(h), in, &u)) {
    return absl::InvalidArgumentError(
        absl::StrCat("GPTQ: the calibration inputs' Hessian, dampened by ", damp,
                     " of its mean diagonal, is not positive definite"));
  }

  constexpr int kBlockBytes = LayoutOf(QuantType::kInt4G128).block_bytes;
  std::vector<double> row(in);
  for (int64_t n = 0; n < out; ++n) {
    for (int64_t i = 0; i < in; ++i) row[i] = w[n * in + i];
    uint8_t* row_blocks = blocks.data() + n * (in / kGroup) * kBlockBytes;
    for (int64_t i = 0; i < in; ++i) {
      uint8_t* b = row_blocks + (i / kGroup) * kBlockBytes;
      const int64_t k = i % kGroup;
      const float s = HalfToFloat(static_cast<uint16_t>(b[0] | (b[1] << 8)));
      const int z = b[2];
      const float x = static_cast<float>(row[i]);
      const int q = s > 0 ? std::clamp(static_cast<int>(roundf(x / s)) + z, 0, 15) : z;
      uint8_t& byte = b[4 + k / 2];
      byte = static_cast<uint8_t>(k % 2 == 0 ? (byte & 0xF0) | q : (byte & 0x0F) | (q << 4));
      const double err =
          (row[i] - static_cast<double>(s * static_cast<float>(q - z))) / u[i * in + i];
      const double* ui = u.data() + i * in;
      for (int64_t j = i + 1; j < in; ++j) row[j] -= err * ui[j];
    }
  }
  return blocks;
}

}  // namespace ptxserve
