#include "server/http/http_server.h"

#include <array>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/asio/strand.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl.hpp>
#include <chrono>
#include <exception>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "engine/util/log.h"

namespace ptxserve::server::http {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace bhttp = boost::beast::http;
using tcp = net::ip::tcp;
using error_code = boost::system::error_code;

namespace {

constexpr size_t kHeaderLimit = 16 << 10;

std::chrono::steady_clock::duration ToChrono(absl::Duration d) {
  return std::chrono::nanoseconds(absl::ToInt64Nanoseconds(d));
}

const char* Reason(int status) {
  return bhttp::obsolete_reason(static_cast<bhttp::status>(status)).data();
}

std::string JsonError(int status, std::string_view message) {
  // A transport-level refusal (before any application saw the request), in the shape of
  // OpenAI's error object so SDKs show the message.
  std::string escaped;
  for (char c : message) {
    if (c == '"' || c == '\\') escaped += '\\';
    if (static_cast<unsigned char>(c) >= 0x20) escaped += c;
  }
  return absl::StrFormat(R"({"error":{"message":"%s","type":"%s","param":null,"code":%d}})",
                         escaped, status == 413 ? "invalid_request_error" : "BadRequestError",
                         status);
}

}  // namespace

// What every connection reaches: the handler, limits, and the live connections (so that
// Stop can cancel their streams).
struct HttpServer::Shared {
  Shared(HttpServerConfig c, HttpHandler h)
      : config(std::move(c)), handler(std::move(h)), acceptor(ioc) {}

  class Connection {
   public:
    virtual ~Connection() = default;
    // Cancels the running stream, if any, and closes the socket. Called only when no
    // thread runs the io_context.
    virtual void Abort() = 0;
  };

  void Register(const std::shared_ptr<Connection>& c) {
    std::lock_guard<std::mutex> lock(mu);
    connections.remove_if([](const std::weak_ptr<Connection>& w) { return w.expired(); });
    connections.push_back(c);
  }

  HttpServerConfig config;
  HttpHandler handler;
  std::atomic<int> active{0};  // exchanges in progress
  net::io_context ioc;
  tcp::acceptor acceptor;
  std::optional<net::ssl::context> tls;
  std::mutex mu;
  std::list<std::weak_ptr<Connection>> connections;
};

namespace {

using Shared = HttpServer::Shared;

// One connection. `Stream` is beast::tcp_stream or beast::ssl_stream<beast::tcp_stream>.
// Everything runs on the connection's strand (the stream's executor).
template <typename Stream>
class Session final : public Shared::Connection,
                      public std::enable_shared_from_this<Session<Stream>> {
 public:
  template <typename... Args>
  Session(std::shared_ptr<Shared> shared, Args&&... args)
      : shared_(std::move(shared)), stream_(std::forward<Args>(args)...) {}

  ~Session() override {
    if (body_) EndExchange();
  }

  void Run() {
    if constexpr (kTls) {
      Lowest().expires_after(ToChrono(shared_->config.idle_timeout));
      stream_.async_handshake(net::ssl::stream_base::server,
                              [self = this->shared_from_this()](error_code ec) {
                                if (ec) return self->Close();
                                self->ReadHead();
                              });
    } else {
      ReadHead();
    }
  }

  void Abort() override {
    closed_ = true;
    if (body_) EndExchange();
    error_code ignored;
    Lowest().socket().close(ignored);
  }

 private:
  static constexpr bool kTls = !std::is_same_v<Stream, beast::tcp_stream>;

  beast::tcp_stream& Lowest() { return beast::get_lowest_layer(stream_); }

  void ReadHead() {
    parser_.emplace();
    parser_->header_limit(kHeaderLimit);
    parser_->body_limit(static_cast<uint64_t>(shared_->config.max_body_bytes));
    Lowest().expires_after(ToChrono(shared_->config.idle_timeout));
    bhttp::async_read_header(
        stream_, buffer_, *parser_,
        [self = this->shared_from_this()](error_code ec, size_t) { self->OnHead(ec); });
  }

  void OnHead(error_code ec) {
    if (ec) return OnReadError(ec);
    // curl and others wait for "100 Continue" before sending a large body.
    if (parser_->get()[bhttp::field::expect] == "100-continue") {
      continue_ = "HTTP/1.1 100 Continue\r\n\r\n";
      net::async_write(stream_, net::buffer(continue_),
                       [self = this->shared_from_this()](error_code ec, size_t) {
                         if (ec) return self->Close();
                         self->ReadBody();
                       });
      return;
    }
    ReadBody();
  }

  void ReadBody() {
    bhttp::async_read(stream_, buffer_, *parser_,
                      [self = this->shared_from_this()](error_code ec, size_t) {
                        if (ec) return self->OnReadError(ec);
                        self->OnRequest();
                      });
  }

  void OnReadError(error_code ec) {
    if (ec == bhttp::error::body_limit) {
      return WriteError(
          413, absl::StrCat("the request body is larger than the limit of ",
                            shared_->config.max_body_bytes, " bytes (--max-request-bytes)"));
    }
    if (ec == bhttp::error::header_limit) {
      return WriteError(431, "the request headers are too large");
    }
    if (ec.category() == bhttp::make_error_code(bhttp::error::end_of_stream).category() &&
        ec != bhttp::error::end_of_stream && ec != bhttp::error::partial_message) {
      return WriteError(400, absl::StrCat("malformed HTTP request: ", ec.message()));
    }
    Close();
  }

  // Refuses what the transport could not read, then closes: the connection's framing can
  // no longer be trusted.
  void WriteError(int status, std::string_view message) {
    keep_alive_ = false;
    WriteWhole(status, "application/json", JsonError(status, message), {});
  }

  void OnRequest() {
    auto& msg = parser_->get();
    HttpRequest req;
    req.method = std::string(msg.method_string());
    std::string_view target(msg.target().data(), msg.target().size());
    req.path = std::string(target.substr(0, target.find('?')));
    req.authorization = std::string(msg[bhttp::field::authorization]);
    req.content_type = std::string(msg[bhttp::field::content_type]);
    req.body = std::move(msg.body());
    error_code ec;
    const tcp::endpoint peer = Lowest().socket().remote_endpoint(ec);
    if (!ec) req.peer = absl::StrCat(peer.address().to_string(), ":", peer.port());
    keep_alive_ = msg.keep_alive();
    parser_.reset();

    HttpResponse resp;
    try {
      resp = shared_->handler(std::move(req));
    } catch (const std::exception& e) {
      PTX_LOG(ERROR) << "http handler threw: " << e.what();
      resp = HttpResponse{};
      resp.status = 500;
      resp.body = JsonError(500, "internal error");
    }
    if (!resp.stream) {
      return WriteWhole(resp.status, resp.content_type, std::move(resp.body), resp.headers);
    }
    body_ = std::move(resp.stream);
    shared_->active.fetch_add(1);
    head_sent_ = false;
    Lowest().expires_never();
    WatchForHangUp();
    std::weak_ptr<Session> weak = this->shared_from_this();
    auto executor = stream_.get_executor();
    body_->Start([weak, executor] {
      net::post(executor, [weak] {
        if (auto self = weak.lock()) self->Pump();
      });
    });
    Pump();
  }

  void WriteWhole(int status, const std::string& content_type, std::string body,
                  const std::vector<std::pair<std::string, std::string>>& headers) {
    auto res = std::make_shared<bhttp::response<bhttp::string_body>>(
        static_cast<bhttp::status>(status), 11);
    res->set(bhttp::field::server, "ptxserve");
    res->set(bhttp::field::content_type, content_type);
    for (const auto& [k, v] : headers) res->set(k, v);
    res->keep_alive(keep_alive_);
    res->body() = std::move(body);
    res->prepare_payload();
    Lowest().expires_after(ToChrono(shared_->config.write_timeout));
    bhttp::async_write(stream_, *res,
                       [self = this->shared_from_this(), res](error_code ec, size_t) {
                         self->OnResponseWritten(ec);
                       });
  }

  void OnResponseWritten(error_code ec) {
    if (body_) EndExchange();
    if (ec || !keep_alive_) return Close();
    if (read_pending_) {
      // The hang-up watch is still posted: it becomes this connection's next read.
      next_after_watch_ = true;
      Lowest().expires_after(ToChrono(shared_->config.idle_timeout));
      return;
    }
    ReadHead();
  }

  // Keeps a read posted while a stream runs: end of file or an error means the client is
  // gone. Bytes that arrive are the next request, kept in the buffer.
  void WatchForHangUp() {
    read_pending_ = true;
    stream_.async_read_some(
        buffer_.prepare(4096),
        [self = this->shared_from_this()](error_code ec, size_t n) { self->OnWatchRead(ec, n); });
  }

  void OnWatchRead(error_code ec, size_t n) {
    read_pending_ = false;
    if (closed_) {
      if (ec) return CloseSocket();
      if constexpr (!kTls) Linger();
      return;
    }
    if (ec) {
      // The client hung up (or broke the connection): nothing more to say to it.
      if (body_) EndExchange();
      closed_ = true;
      return CloseSocket();
    }
    buffer_.commit(n);
    // The client sent its next request already: it is read once this exchange ends. The
    // hang-up watch stops here (a client that pipelines is still listening).
    if (next_after_watch_) {
      next_after_watch_ = false;
      return ReadHead();
    }
  }

  void Pump() {
    if (!body_ || writing_ || closed_) return;
    std::string piece;
    const ResponseStream::Poll poll = body_->Next(&piece);
    if (poll == ResponseStream::Poll::kPending) return;
    const bool last = poll == ResponseStream::Poll::kLast;
    if (!head_sent_ && last && !body_->incremental()) {
      // Complete: an ordinary response with a length, and the stream's status.
      return WriteWhole(body_->status(), body_->content_type(), std::move(piece), {});
    }
    out_.clear();
    if (!head_sent_) {
      head_sent_ = true;
      out_ = absl::StrCat("HTTP/1.1 ", body_->status(), " ", Reason(body_->status()),
                          "\r\nServer: ptxserve\r\nContent-Type: ", body_->content_type(),
                          "\r\nCache-Control: no-cache\r\nTransfer-Encoding: chunked\r\n",
                          keep_alive_ ? "" : "Connection: close\r\n", "\r\n");
    }
    if (!piece.empty()) absl::StrAppendFormat(&out_, "%x\r\n%s\r\n", piece.size(), piece);
    if (last) out_ += "0\r\n\r\n";
    writing_ = true;
    Lowest().expires_after(ToChrono(shared_->config.write_timeout));
    net::async_write(stream_, net::buffer(out_),
                     [self = this->shared_from_this(), last](error_code ec, size_t) {
                       self->writing_ = false;
                       self->Lowest().expires_never();
                       if (ec) {
                         if (self->body_) self->body_->Cancel();
                         return self->Close();
                       }
                       if (last) return self->OnResponseWritten(ec);
                       self->Pump();
                     });
  }

  void EndExchange() {
    body_->Cancel();
    body_.reset();
    shared_->active.fetch_sub(1);
  }

  // Ends the connection from our side. The client may still be sending (a body we
  // refused with 413): keep reading and dropping it for a moment after our last byte, so
  // that the kernel does not answer it with a reset that destroys the response in flight.
  void Close() {
    if (closed_) return;
    closed_ = true;
    if (body_) EndExchange();
    if constexpr (kTls) {
      Lowest().expires_after(std::chrono::seconds(2));
      stream_.async_shutdown(
          [self = this->shared_from_this()](error_code) { self->CloseSocket(); });
    } else {
      error_code ignored;
      Lowest().socket().shutdown(tcp::socket::shutdown_send, ignored);
      if (!read_pending_) Linger();
    }
  }

  void Linger() {
    read_pending_ = true;
    Lowest().expires_after(std::chrono::seconds(2));
    Lowest().async_read_some(net::buffer(scratch_),
                             [self = this->shared_from_this()](error_code ec, size_t) {
                               self->read_pending_ = false;
                               if (ec) return self->CloseSocket();
                               self->Linger();
                             });
  }

  void CloseSocket() {
    error_code ignored;
    Lowest().socket().close(ignored);
  }

  std::shared_ptr<Shared> shared_;
  Stream stream_;
  beast::flat_buffer buffer_;
  std::optional<bhttp::request_parser<bhttp::string_body>> parser_;
  std::unique_ptr<ResponseStream> body_;
  std::string out_;
  std::string continue_;
  std::array<char, 4096> scratch_;
  bool keep_alive_ = true;
  bool head_sent_ = false;
  bool writing_ = false;
  bool read_pending_ = false;
  bool next_after_watch_ = false;
  bool closed_ = false;
};

void Accept(const std::shared_ptr<Shared>& shared) {
  shared->acceptor.async_accept(
      net::make_strand(shared->ioc), [shared](error_code ec, tcp::socket socket) {
        if (ec == net::error::operation_aborted || !shared->acceptor.is_open()) return;
        if (!ec) {
          socket.set_option(tcp::no_delay(true), ec);
          std::shared_ptr<Shared::Connection> session;
          if (shared->tls) {
            auto s = std::make_shared<Session<beast::ssl_stream<beast::tcp_stream>>>(
                shared, std::move(socket), *shared->tls);
            session = s;
            s->Run();
          } else {
            auto s = std::make_shared<Session<beast::tcp_stream>>(shared, std::move(socket));
            session = s;
            s->Run();
          }
          shared->Register(session);
        }
        Accept(shared);
      });
}

absl::Status SetUpTls(const HttpServerConfig& c, std::optional<net::ssl::context>* out) {
  if (c.tls_cert_pem.empty() && c.tls_key_pem.empty()) return absl::OkStatus();
  if (c.tls_cert_pem.empty() || c.tls_key_pem.empty()) {
    return absl::InvalidArgumentError("TLS needs both --tls_cert and --tls_key");
  }
  out->emplace(net::ssl::context::tls_server);
  net::ssl::context& ctx = **out;
  error_code ec;
  ctx.set_options(net::ssl::context::default_workarounds | net::ssl::context::no_sslv2 |
                      net::ssl::context::no_sslv3 | net::ssl::context::no_tlsv1 |
                      net::ssl::context::no_tlsv1_1,
                  ec);
  ctx.use_certificate_chain(net::buffer(c.tls_cert_pem), ec);
  if (ec) return absl::InvalidArgumentError(absl::StrCat("--tls_cert: ", ec.message()));
  ctx.use_private_key(net::buffer(c.tls_key_pem), net::ssl::context::pem, ec);
  if (ec) return absl::InvalidArgumentError(absl::StrCat("--tls_key: ", ec.message()));
  if (SSL_CTX_check_private_key(ctx.native_handle()) != 1) {
    return absl::InvalidArgumentError("--tls_key is not the private key of --tls_cert");
  }
  if (!c.tls_client_ca_pem.empty()) {
    ctx.add_certificate_authority(net::buffer(c.tls_client_ca_pem), ec);
    if (ec) return absl::InvalidArgumentError(absl::StrCat("--tls_client_ca: ", ec.message()));
    ctx.set_verify_mode(net::ssl::verify_peer | net::ssl::verify_fail_if_no_peer_cert);
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status CheckTlsFiles(const HttpServerConfig& config) {
  std::optional<net::ssl::context> tls;
  return SetUpTls(config, &tls);
}

HttpServer::HttpServer(HttpServerConfig config, HttpHandler handler) : config_(config) {
  shared_ = std::make_shared<Shared>(std::move(config), std::move(handler));
}

HttpServer::~HttpServer() { Stop(absl::ZeroDuration()); }

int HttpServer::active_exchanges() const { return shared_->active.load(); }

absl::Status HttpServer::Start() {
  if (absl::Status st = SetUpTls(config_, &shared_->tls); !st.ok()) return st;
  const std::string where = absl::StrCat(config_.host, ":", config_.port);
  error_code ec;
  tcp::resolver resolver(shared_->ioc);
  auto endpoints = resolver.resolve(config_.host, std::to_string(config_.port),
                                    tcp::resolver::passive | tcp::resolver::numeric_service, ec);
  if (ec || endpoints.empty()) {
    return absl::UnavailableError(absl::StrCat("HTTP: cannot resolve ", where, ": ", ec.message()));
  }
  const tcp::endpoint endpoint = endpoints.begin()->endpoint();
  tcp::acceptor& a = shared_->acceptor;
  a.open(endpoint.protocol(), ec);
  if (!ec) a.set_option(net::socket_base::reuse_address(true), ec);
  if (!ec) a.bind(endpoint, ec);
  if (!ec) a.listen(net::socket_base::max_listen_connections, ec);
  if (ec) {
    return absl::UnavailableError(
        absl::StrCat("HTTP: cannot listen on ", where, ": ", ec.message()));
  }
  port_ = a.local_endpoint().port();
  Accept(shared_);
  for (int i = 0; i < std::max(1, config_.threads); ++i) {
    threads_.emplace_back([s = shared_] { s->ioc.run(); });
  }
  return absl::OkStatus();
}

void HttpServer::Stop(absl::Duration grace) {
  if (stopped_) return;
  stopped_ = true;
  if (threads_.empty()) return;
  net::post(shared_->ioc, [s = shared_] {
    error_code ignored;
    s->acceptor.close(ignored);
  });
  const absl::Time deadline = absl::Now() + grace;
  while (shared_->active.load() > 0 && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(5));
  }
  shared_->ioc.stop();
  for (std::thread& t : threads_) t.join();
  threads_.clear();
  // No thread runs the io_context now: cancel what still streams (so its producer stops
  // waking us) and close every socket; then run the aborted operations' handlers, which
  // release the connections (they hold the shared state, which holds the io_context).
  {
    std::list<std::shared_ptr<Shared::Connection>> live;
    {
      std::lock_guard<std::mutex> lock(shared_->mu);
      for (auto& w : shared_->connections) {
        if (auto c = w.lock()) live.push_back(std::move(c));
      }
    }
    for (auto& c : live) c->Abort();
  }
  shared_->ioc.restart();
  shared_->ioc.run_for(std::chrono::seconds(1));
}

}  // namespace ptxserve::server::http
