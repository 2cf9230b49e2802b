// Helpers for the model tests: build safetensors bytes by hand, write model directories
// into a temporary folder, and describe a tiny Llama model that every loader test mutates.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "nlohmann/json.hpp"

namespace ptxserve::test_files {

// One tensor to serialise. `bytes` is the payload; `patch` is merged (JSON merge patch)
// into its header entry after the generated dtype/shape/data_offsets, to corrupt it.
struct RawTensor {
  std::string name;
  std::string dtype = "F32";
  std::vector<int64_t> shape;
  std::string bytes;
  nlohmann::json patch = nullptr;
};

// Little-endian byte images of values.
std::string F32Bytes(const std::vector<float>& v);
std::string U16Bytes(const std::vector<uint16_t>& v);
// n floats, each distinct: seed + 0.25 * i (exact in f32 for small n).
std::vector<float> Ramp(int64_t n, float seed);

// 8-byte little-endian length + header text + data, verbatim.
std::string RawSafetensors(std::string_view header, std::string_view data);
// The header JSON for `tensors` laid out back to back in order.
nlohmann::json SafetensorsHeader(const std::vector<RawTensor>& tensors,
                                 const std::map<std::string, std::string>& metadata);
// A well-formed file: header padded with spaces so the data starts 8-aligned, then
// `extra_spaces` more (a non-multiple of 4 misaligns every tensor).
std::string BuildSafetensors(const std::vector<RawTensor>& tensors,
                             const std::map<std::string, std::string>& metadata = {},
                             int extra_spaces = 0);

// A fresh directory under the GoogleTest temp dir, removed (recursively) on destruction.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::string& path() const { return path_; }
  // Writes `content` to path()/name and returns the full path.
  std::string Write(const std::string& name, std::string_view content) const;

 private:
  std::string path_;
};

// The tiny model: vocab 16, hidden 8, intermediate 12, 2 layers, 2 heads, 1 KV head
// (head_dim 4), untied. Everything a loader test changes lives here.
struct TinyModel {
  nlohmann::json config;
  std::vector<RawTensor> tensors;
  std::map<std::string, std::string> metadata;

  // Untied, F32, every tensor a distinct Ramp. `dtype` F16/BF16 stores the same values.
  static TinyModel Make(const std::string& dtype = "F32");
  RawTensor* Find(const std::string& name);
  void Remove(const std::string& name);
  // Writes config.json and model.safetensors into `dir`.
  void WriteTo(const TempDir& dir, int extra_spaces = 0) const;
};

}  // namespace ptxserve::test_files
