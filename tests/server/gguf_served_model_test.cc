// A GGUF file as the served model: its tokenizer and chat template come from its metadata
// and the model is named by the file's stem.
#include <filesystem>
#include <string>

#include "engine/model/gguf_export.h"
#include "engine/model/gguf_writer.h"
#include "engine/model/model.h"
#include "engine/tokenizer/gguf_vocab.h"
#include "gtest/gtest.h"
#include "server/decode_service.h"
#include "server/server.h"
#include "tests/server/test_server.h"

namespace ptxserve {
namespace {

TEST(GgufServedModelTest, ServesTheFileWithItsTokenizerAndChatTemplate) {
  const std::string dir = std::string(PTXSERVE_SHARED_MODELS) + "/tinystories-656k";
  if (!std::filesystem::exists(dir + "/model.safetensors")) GTEST_SKIP() << "no " << dir;
  auto model = LoadModel(dir);
  ASSERT_TRUE(model.ok()) << model.status();
  GgufWriter w;
  ASSERT_TRUE(AddModelToGguf(*model, *ParseGgufWeightType("q8_0"), "tiny", &w).ok());
  ASSERT_TRUE(tok::AddTokenizerToGguf(dir, &w).ok());
  w.Set("tokenizer.chat_template",
        GgufValue::String("{% for m in messages %}<{{ m['role'] }}>{{ m['content'] }}"
                          "{% endfor %}"));
  const std::string path = ::testing::TempDir() + "/story-teller.gguf";
  ASSERT_TRUE(w.Write(path).ok());

  server::ModelOptions mo = testing::TestServer::DefaultModelOptions();
  mo.model_dir = path;
  mo.backend = "cpu";
  auto served = server::LoadServedModel(mo, nullptr);
  std::filesystem::remove(path);
  ASSERT_TRUE(served.ok()) << served.status();
  const server::ServedModel& m = **served;
  EXPECT_EQ(m.info.name(), "story-teller");
  EXPECT_EQ(m.info.weight_format(), "q8_0");  // blocks as stored, on the CPU backend
  EXPECT_EQ(m.tokenizer->bos_id(), 1);
  ASSERT_TRUE(m.render_chat);
  auto text = m.render_chat(nlohmann::ordered_json::parse(R"([{"role":"user","content":"Hi"}])"),
                            true, nlohmann::ordered_json::object());
  ASSERT_TRUE(text.ok()) << text.status();
  EXPECT_EQ(*text, "<user>Hi");
}

// A file that loads but could not serve one request is refused naming the GGUF key, not
// a config.json it does not have.
TEST(GgufServedModelTest, AContextTooShortToServeIsRefusedNamingTheGgufKey) {
  const std::string dir = std::string(PTXSERVE_SHARED_MODELS) + "/tinystories-656k";
  if (!std::filesystem::exists(dir + "/model.safetensors")) GTEST_SKIP() << "no " << dir;
  auto model = LoadModel(dir);
  ASSERT_TRUE(model.ok()) << model.status();
  GgufWriter w;
  ASSERT_TRUE(AddModelToGguf(*model, *ParseGgufWeightType("f32"), "tiny", &w).ok());
  ASSERT_TRUE(tok::AddTokenizerToGguf(dir, &w).ok());
  w.Set("llama.context_length", GgufValue::U32(1));
  const std::string path = ::testing::TempDir() + "/one-token.gguf";
  ASSERT_TRUE(w.Write(path).ok());

  server::ModelOptions mo = testing::TestServer::DefaultModelOptions();
  mo.model_dir = path;
  mo.backend = "cpu";
  auto served = server::LoadServedModel(mo, nullptr);
  std::filesystem::remove(path);
  ASSERT_FALSE(served.ok());
  EXPECT_NE(served.status().message().find("GGUF llama.context_length = 1"), std::string::npos)
      << served.status();
}

}  // namespace
}  // namespace ptxserve
