// What hf_quant_model_test.cc and hf_quant_calibrated_model_test.cc share: the shared TinyStories
// model they quantize (the tests skip without it), the prompt its logits are compared on, and
// the fixture that writes its quantized checkpoint.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "engine/model/hf_quant_export.h"
#include "engine/model/model.h"
#include "gtest/gtest.h"
#include "tests/model/test_files.h"

namespace ptxserve {

inline const std::string kTinyStories = std::string(PTXSERVE_SHARED_MODELS) + "/tinystories-656k";
inline const std::vector<int32_t> kPrompt = {1, 80, 147, 201, 282, 57};  // <bos> Once upon a time

class HfQuantModelTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!std::filesystem::exists(kTinyStories + "/model.safetensors")) {
      GTEST_SKIP() << "shared test model absent: " << kTinyStories;
    }
  }
  // TinyStories quantized by `method` into dir_.
  std::string Quantize(HfQuantization::Method method) {
    auto model = LoadModel(kTinyStories);
    EXPECT_TRUE(model.ok()) << model.status();
    const absl::Status s = WriteHfQuantized(*model, method, dir_.path());
    EXPECT_TRUE(s.ok()) << s;
    return dir_.path();
  }
  test_files::TempDir dir_;
};

}  // namespace ptxserve
