#include "tests/model/synthetic_layer.h"

#include <random>

namespace ptxserve::testing {

SyntheticLayer MakeSyntheticLayer(int64_t rows, int64_t in, int64_t out, int factors,
                                  const std::function<float(int64_t channel)>& gain,
                                  unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal;
  SyntheticLayer l{rows, in, out, std::vector<float>(rows * in), std::vector<float>(out * in)};
  std::vector<float> mix(factors * in);
  for (float& m : mix) m = normal(rng);
  std::vector<float> f(factors);
  for (int64_t t = 0; t < rows; ++t) {
    for (float& v : f) v = normal(rng);
    for (int64_t i = 0; i < in; ++i) {
      float v = 0.3f * normal(rng);
      for (int k = 0; k < factors; ++k) v += f[k] * mix[k * in + i];
      l.x[t * in + i] = gain(i) * v;
    }
  }
  for (float& v : l.w) v = 0.05f * normal(rng);
  return l;
}

LayerInputs InputsOf(const SyntheticLayer& l) {
  LayerInputs in(l.in);
  in.Add(l.x.data(), l.rows, l.in);
  return in;
}

double DirectOutputError(const SyntheticLayer& l, const std::vector<float>& v) {
  double total = 0;
  for (int64_t t = 0; t < l.rows; ++t) {
    for (int64_t n = 0; n < l.out; ++n) {
      double d = 0;
      for (int64_t i = 0; i < l.in; ++i) {
        d += static_cast<double>(l.x[t * l.in + i]) * (l.w[n * l.in + i] - v[n * l.in + i]);
      }
      total += d * d;
    }
  }
  return total;
}

}  // namespace ptxserve::testing
