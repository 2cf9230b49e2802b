// libFuzzer target: GGUF files through everything `serve --model FILE.gguf` parses at
// load: the header, metadata and tensor infos (GgufFile), the llama config, the tokenizer
// metadata (Tokenizer::FromModelPath) and the tensor mapping (LoadModel), then encode and
// decode with whatever tokenizer loaded.
//
// Input: the file's bytes. The parsed views must lie inside the input: a tensor view
// outside it is a finding even when nothing reads it.
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>

#include "engine/model/gguf.h"
#include "engine/model/gguf_model.h"
#include "engine/model/model.h"
#include "engine/tokenizer/tokenizer.h"
#include "engine/util/log.h"
#include "fuzz/fuzz_util.h"

namespace ptxserve::fuzz {
namespace {

constexpr std::string_view kTexts[] = {
    "Once upon a time, there was a little dog.",
    "<|start_story|>Hi<|end_story|><unk> <s></s>",
    " caf\xc3\xa9 \xe4\xb8\x96\xe7\x95\x8c \xf0\x9f\x99\x82\n\t  x  ",
};

const std::string& ScratchFile() {
  static const std::string* path = [] {
    SetMinLogLevel(LogLevel::kError);  // the loader logs every model
    const std::string dir = MakeScratchDir("ptxserve-fuzz-gguf");
    std::atexit(
        [] { std::filesystem::remove_all(std::filesystem::path(ScratchFile()).parent_path()); });
    return new std::string(dir + "/model.gguf");
  }();
  return *path;
}

// Every tensor of a parsed file lies inside it.
void CheckTensorRanges(const GgufFile& f) {
  for (const GgufTensorInfo& info : f.tensors()) {
    const size_t size = f.file_size();
    Check(f.data_offset() <= size && info.offset <= size - f.data_offset() &&
              info.nbytes <= size - f.data_offset() - info.offset,
          "a tensor outside the file");
    auto t = f.GetTensor(info.name);
    if (t.ok()) Check(t->nbytes == info.nbytes, "a tensor view of another size");
  }
}

void LoadFromFile(const std::string& bytes) {
  {
    std::ofstream out(ScratchFile(), std::ios::binary | std::ios::trunc);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    Check(out.good(), "writing the scratch file");
  }
  auto model = LoadModel(ScratchFile());
  Note("LoadModel", model.status());
  auto tok = Tokenizer::FromModelPath(ScratchFile());
  Note("Tokenizer", tok.status());
  if (!tok.ok()) return;
  for (std::string_view text : kTexts) {
    auto ids = (*tok)->Encode(text);
    Note("Encode", ids.status());
    if (ids.ok()) (*tok)->Decode(*ids);
  }
}

}  // namespace
}  // namespace ptxserve::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace ptxserve;
  const std::string bytes(reinterpret_cast<const char*>(data), size);
  auto f = GgufFile::FromBytes(bytes, "input.gguf");
  fuzz::Note("GgufFile", f.status());
  if (!f.ok()) return 0;
  fuzz::CheckTensorRanges(**f);
  fuzz::Note("GgufModelConfig", GgufModelConfig(**f).status());
  fuzz::LoadFromFile(bytes);
  return 0;
}
