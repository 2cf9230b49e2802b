// TLS and mutual TLS, with certificates made by the openssl command at test time.
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "server/client.h"
#include "tests/server/test_server.h"

namespace ptxserve {
namespace {

std::string Read(const std::string& path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

class TlsTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (std::system("openssl version > /dev/null 2>&1") != 0) return;
    dir_ = new std::string(std::filesystem::temp_directory_path() /
                           absl::StrCat("ptxserve-tls-", ::getpid()));
    std::filesystem::create_directories(*dir_);
    const std::string d = *dir_;
    std::ofstream(d + "/san.ext") << "subjectAltName=DNS:localhost,IP:127.0.0.1\n";
    const std::string key = "-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes";
    const std::string cmds[] = {
        absl::StrCat("openssl req -x509 ", key, " -keyout ", d, "/ca.key -out ", d,
                     "/ca.pem -days 2 -subj /CN=ptxserve-test-ca"),
        absl::StrCat("openssl req ", key, " -keyout ", d, "/server.key -out ", d,
                     "/server.csr -subj /CN=localhost"),
        absl::StrCat("openssl x509 -req -in ", d, "/server.csr -CA ", d, "/ca.pem -CAkey ", d,
                     "/ca.key -CAcreateserial -out ", d, "/server.pem -days 2 -extfile ", d,
                     "/san.ext"),
        absl::StrCat("openssl req ", key, " -keyout ", d, "/client.key -out ", d,
                     "/client.csr -subj /CN=ptxserve-test-client"),
        absl::StrCat("openssl x509 -req -in ", d, "/client.csr -CA ", d, "/ca.pem -CAkey ", d,
                     "/ca.key -CAcreateserial -out ", d, "/client.pem -days 2"),
    };
    for (const auto& c : cmds) {
      if (std::system((c + " > /dev/null 2>&1").c_str()) != 0) {
        ADD_FAILURE() << "failed: " << c;
        return;
      }
    }
    ok_ = true;
  }
  static void TearDownTestSuite() {
    if (dir_) std::filesystem::remove_all(*dir_);
    delete dir_;
    dir_ = nullptr;
  }
  void SetUp() override {
    if (!ok_) GTEST_SKIP() << "the openssl command is not available to make test certificates";
  }
  static std::string File(const char* name) { return Read(*dir_ + "/" + name); }
  static std::string Path(const char* name) { return *dir_ + "/" + name; }

  // curl's HTTP status for a streamed completion over HTTPS ("000": no connection).
  static std::string Curl(int port, const std::string& extra) {
    const std::string cmd = absl::StrCat(
        "curl -sS -N -o /dev/null -w '%{http_code}' --max-time 20 --cacert ", Path("ca.pem"), " ",
        extra, " -d '{\"prompt\": [5], \"max_tokens\": 3, \"stream\": true}' ",
        "https://localhost:", port, "/v1/completions 2>/dev/null");
    FILE* p = popen(cmd.c_str(), "r");
    std::string out;
    char buf[64];
    for (size_t n; p && (n = fread(buf, 1, sizeof(buf), p)) > 0;) out.append(buf, n);
    if (p) pclose(p);
    return out;
  }

  static grpc::Status Call(const server::ClientOptions& o) {
    server::DecodeClient c(o);
    v1::GenerateRequest req;
    req.mutable_token_ids()->add_ids(5);
    req.mutable_stopping()->set_max_new_tokens(3);
    int tokens = 0;
    grpc::Status st = c.Generate(
        req,
        [&](const v1::GenerateResponse& m) {
          tokens += m.token_ids_size();
          return true;
        },
        absl::Seconds(20));
    if (st.ok() && tokens != 3) return grpc::Status(grpc::StatusCode::INTERNAL, "tokens");
    return st;
  }

  static inline std::string* dir_ = nullptr;
  static inline bool ok_ = false;
};

TEST_F(TlsTest, ServerTls) {
  server::ServerConfig cfg;
  cfg.tls.cert_pem = File("server.pem");
  cfg.tls.key_pem = File("server.key");
  auto t = testing::TestServer::Start(cfg);
  ASSERT_NE(t, nullptr);
  ASSERT_TRUE(t->Load().ok());
  server::ClientOptions o;
  o.target = t->target;
  o.tls = true;
  o.tls_ca_pem = File("ca.pem");
  grpc::Status st = Call(o);
  EXPECT_TRUE(st.ok()) << st.error_message();
  server::ClientOptions plain;
  plain.target = t->target;
  EXPECT_FALSE(Call(plain).ok()) << "plaintext must not reach a TLS server";
}

TEST_F(TlsTest, MutualTlsNeedsAClientCertificate) {
  server::ServerConfig cfg;
  cfg.tls.cert_pem = File("server.pem");
  cfg.tls.key_pem = File("server.key");
  cfg.tls.client_ca_pem = File("ca.pem");
  auto t = testing::TestServer::Start(cfg);
  ASSERT_NE(t, nullptr);
  ASSERT_TRUE(t->Load().ok());
  server::ClientOptions o;
  o.target = t->target;
  o.tls = true;
  o.tls_ca_pem = File("ca.pem");
  EXPECT_FALSE(Call(o).ok()) << "no client certificate";
  o.tls_cert_pem = File("client.pem");
  o.tls_key_pem = File("client.key");
  grpc::Status st = Call(o);
  EXPECT_TRUE(st.ok()) << st.error_message();
}

TEST_F(TlsTest, HttpApiUsesTheSameTlsAndClientCertificates) {
  if (std::system("curl --version > /dev/null 2>&1") != 0) GTEST_SKIP() << "no curl";
  server::ServerConfig cfg;
  cfg.tls.cert_pem = File("server.pem");
  cfg.tls.key_pem = File("server.key");
  auto t = testing::TestServer::Start(cfg);
  ASSERT_NE(t, nullptr);
  ASSERT_TRUE(t->Load().ok());
  const int port = t->server->http_port();
  EXPECT_EQ(Curl(port, ""), "200");

  cfg.tls.client_ca_pem = File("ca.pem");
  auto mutual = testing::TestServer::Start(cfg);
  ASSERT_NE(mutual, nullptr);
  ASSERT_TRUE(mutual->Load().ok());
  const int mport = mutual->server->http_port();
  EXPECT_EQ(Curl(mport, ""), "000") << "no client certificate";
  EXPECT_EQ(Curl(mport, absl::StrCat("--cert ", Path("client.pem"), " --key ", Path("client.key"))),
            "200");
}

}  // namespace
}  // namespace ptxserve
