// Small synthetic linear layers for the calibrated quantizers' tests: calibration inputs
// with correlated channels, Gaussian weights, and the output error of a replacement for
// the weights summed directly.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "engine/model/hf_quant_calibration.h"

namespace ptxserve::testing {

struct SyntheticLayer {
  int64_t rows, in, out;
  std::vector<float> x;  // [rows, in]
  std::vector<float> w;  // [out, in]
};

// Inputs mixed from `factors` shared Gaussian factors plus 0.3 of noise per element (the
// channels correlated, as real activations are), channel i scaled by gain(i); weights
// Gaussian with sigma 0.05. The same seed gives the same layer.
SyntheticLayer MakeSyntheticLayer(int64_t rows, int64_t in, int64_t out, int factors,
                                  const std::function<float(int64_t channel)>& gain, unsigned seed);

// The layer's inputs as the calibration collects them.
LayerInputs InputsOf(const SyntheticLayer& l);

// sum over the rows of ||x W^T - x V^T||^2, directly, for replacement weights v [out, in].
double DirectOutputError(const SyntheticLayer& l, const std::vector<float>& v);

}  // namespace ptxserve::testing
