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

// sum a[k] b[k]: four partial sums, so the multiply-adds overlap.
double Dot(const double* a, const double* b, int64_t n) {
  double s[4] = {0, 0, 0, 0};
  int64_t k = 0;
  for (; k + 4 <= n; k += 4) {
    for (int j = 0; j < 4; ++j) s[j] += a[k + j] * b[k + j];
  }
  for (; k < n; ++k) s[0] += a[k] * b[k];
  return (s[0] + s[1]) + (s[2] + s[3]);
}

// Lower Cholesky factor of the symmetric n x n `a` in place (a = L L^T; the upper
// triangle is left as it was). False when `a` is not positive definite.
bool CholeskyLower(std::vector<double>& a, int64_t n) {
  for (int64_t j = 0; j < n; ++j) {
    const double* lj = a.data() + j * n;
    const double d = a[j * n + j] - Dot(lj, lj, j);
    if (!(d > 0)) return false;
    const double ljj = std::sqrt(d);
    a[j * n + j] = ljj;
    for (int64_t i = j + 1; i < n; ++i) {
      a[i * n + j] = (a[i * n + j] - Dot(a.data() + i * n, lj, j)) / ljj;
    }
  }
  return true;
}

// U with U^T U = H^-1 (upper triangular, row-major). With J the order reversal and
// J H J = M M^T (M lower), H = N N^T for the upper N = J M J, so H^-1 = N^-T N^-1 and
// U = N^-1 = J M^-1 J: one factorization and one triangular inverse, where inverting H
// and factoring it again would take twice the work.
bool InverseUpperFactor(const std::vector<double>& h, int64_t n, std::vector<double>* u) {
  std::vector<double> m(static_cast<size_t>(n * n));
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t j = 0; j < n; ++j) m[i * n + j] = h[(n - 1 - i) * n + (n - 1 - j)];
  }
  if (!CholeskyLower(m, n)) return false;
  u->assign(static_cast<size_t>(n * n), 0.0);
  // Column c of M^-1 by forward substitution, held contiguous in x (x[i] for i >= c).
  std::vector<double> x(n);
  for (int64_t c = 0; c < n; ++c) {
    x[c] = 1 / m[c * n + c];
    for (int64_t i = c + 1; i < n; ++i) {
      x[i] = -Dot(m.data() + i * n + c, x.data() + c, i - c) / m[i * n + i];
    }
    // (M^-1)[i][c] is U[n-1-i][n-1-c].
    for (int64_t i = c; i < n; ++i) (*u)[(n - 1 - i) * n + (n - 1 - c)] = x[i];
  }
  return true;
}

}  // namespace

absl::StatusOr<GptqFeedback> GptqFeedback::For(const LayerInputs& inputs, double damp) {
  const int64_t in = inputs.width();
  std::vector<double> h = inputs.gram();
  double mean_diag = 0;
  for (int64_t i = 0; i < in; ++i) {
    if (h[i * in + i] == 0) h[i * in + i] = 1;
    mean_diag += h[i * in + i];
  }
  mean_diag /= static_cast<double>(in);
  for (int64_t i = 0; i < in; ++i) h[i * in + i] += damp * mean_diag;
  std::vector<double> u;
  if (!InverseUpperFactor(h, in, &u)) {
    return absl::InvalidArgumentError(
        absl::StrCat("GPTQ: the calibration inputs' Hessian, dampened by ", damp,
                     " of its mean diagonal, is not positive definite"));
  }
  return GptqFeedback(in, std::move(u));
}

void GptqFeedback::QuantizeRow(
    std::vector<double>& row,
    absl::FunctionRef<double(int64_t i, const std::vector<double>& row)> quantize) const {
  const int64_t in = width_;
  for (int64_t i = 0; i < in; ++i) {
    const double q = quantize(i, row);
    const double err = (row[i] - q) / u_[i * in + i];
    row[i] = q;
    const double* ui = u_.data() + i * in;
    for (int64_t j = i + 1; j < in; ++j) row[j] -= err * ui[j];
  }
}

absl::StatusOr<std::vector<uint8_t>> QuantizeInt4Gptq(const float* w, int64_t out, int64_t in,
                                                      const LayerInputs& inputs, double damp) {
  if (inputs.width() != in || in % kGroup != 0) {
    return absl::InvalidArgumentError(absl::StrCat("GPTQ of a matrix with ", in,
                                                   " inputs: calibration rows are ", inputs.width(),
                                                   " wide, groups 128"));
  }
  std::vector<uint8_t> blocks;
  if (absl::Status s = QuantizeInt4Rows(w, out, in, &blocks, nullptr); !s.ok()) return s;
  auto feedback = GptqFeedback::For(inputs, damp);
  if (!feedback.ok()) return feedback.status();

  constexpr int kBlockBytes = LayoutOf(QuantType::kInt4G128).block_bytes;
  std::vector<double> row(in);
  for (int64_t n = 0; n < out; ++n) {
    for (int64_t i = 0; i < in; ++i) row[i] = w[n * in + i];
    uint8_t* row_blocks = blocks.data() + n * (in / kGroup) * kBlockBytes;
    feedback->QuantizeRow(row, [&](int64_t i, const std::vector<double>& fed) {
      uint8_t* b = row_blocks + (i / kGroup) * kBlockBytes;
      const int64_t k = i % kGroup;
      const float s = HalfToFloat(static_cast<uint16_t>(b[0] | (b[1] << 8)));
      const int z = b[2];
      const float x = static_cast<float>(fed[i]);
      const int q = s > 0 ? std::clamp(static_cast<int>(roundf(x / s)) + z, 0, 15) : z;
      uint8_t& byte = b[4 + k / 2];
      byte = static_cast<uint8_t>(k % 2 == 0 ? (byte & 0xF0) | q : (byte & 0x0F) | (q << 4));
      return static_cast<double>(s * static_cast<float>(q - z));
    });
  }
  return blocks;
}

}  // namespace ptxserve
