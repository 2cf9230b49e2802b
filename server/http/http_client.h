// A small blocking HTTP/1.1 client over a POSIX socket, for the tools that drive the HTTP
// front (`ptxserve bench --api http`) and its tests: keep-alive, chunked bodies read piece
// by piece (server-sent events), and a hang-up in the middle of a stream. Loopback and
// plain HTTP only: real clients (curl, the OpenAI SDKs) cover TLS.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <cstdlib>
#include <map>
#include <string>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace ptxserve::server::http {

struct HttpReply {
  int status = 0;                              // 0: the connection failed or closed early
  std::map<std::string, std::string> headers;  // lower-case names
  std::string body;                            // de-chunked
};

class HttpConnection {
 public:
  // Connects to 127.0.0.1:port; reads time out after `timeout_seconds`.
  explicit HttpConnection(int port, int timeout_seconds = 60) {
    fd_ = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<uint16_t>(port));
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    timeval tv{timeout_seconds, 0};
    setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    if (connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) Close();
  }
  ~HttpConnection() { Close(); }
  HttpConnection(const HttpConnection&) = delete;
  HttpConnection& operator=(const HttpConnection&) = delete;

  bool ok() const { return fd_ >= 0; }
  void Close() {
    if (fd_ >= 0) close(fd_);
    fd_ = -1;
  }

  bool Send(const std::string& method, const std::string& path, const std::string& body = "",
            const std::string& extra_headers = "") {
    std::string req =
        absl::StrCat(method, " ", path, " HTTP/1.1\r\nHost: localhost\r\n", extra_headers,
                     "Content-Length: ", body.size(), "\r\n\r\n", body);
    return SendRaw(req);
  }
  bool SendRaw(const std::string& bytes) {
    size_t off = 0;
    while (off < bytes.size()) {
      const ssize_t n = send(fd_, bytes.data() + off, bytes.size() - off, MSG_NOSIGNAL);
      if (n <= 0) return false;
      off += static_cast<size_t>(n);
    }
    return true;
  }

  // Reads a response's head. Returns false when the connection closed first.
  bool ReadHead(HttpReply* reply) {
    size_t end;
    while ((end = buf_.find("\r\n\r\n")) == std::string::npos) {
      if (!Fill()) return false;
    }
    const std::string head = buf_.substr(0, end);
    buf_.erase(0, end + 4);
    size_t line_end = head.find("\r\n");
    const std::string status_line = head.substr(0, line_end);
    if (status_line.size() < 12 || !absl::SimpleAtoi(status_line.substr(9, 3), &reply->status)) {
      return false;
    }
    while (line_end != std::string::npos) {
      const size_t next = head.find("\r\n", line_end + 2);
      const std::string line = head.substr(line_end + 2, next - line_end - 2);
      const size_t colon = line.find(':');
      if (colon != std::string::npos) {
        reply->headers[absl::AsciiStrToLower(line.substr(0, colon))] =
            std::string(absl::StripAsciiWhitespace(line.substr(colon + 1)));
      }
      line_end = next;
    }
    return true;
  }

  // Reads the next piece of a chunked body into *piece; false at the end or on error.
  bool ReadChunk(std::string* piece) {
    size_t eol;
    while ((eol = buf_.find("\r\n")) == std::string::npos) {
      if (!Fill()) return false;
    }
    const size_t size = std::strtoul(buf_.substr(0, eol).c_str(), nullptr, 16);
    while (buf_.size() < eol + 2 + size + 2) {
      if (!Fill()) return false;
    }
    *piece = buf_.substr(eol + 2, size);
    buf_.erase(0, eol + 2 + size + 2);
    return size > 0;
  }

  // A whole response (Content-Length or chunked).
  HttpReply ReadResponse() {
    HttpReply r;
    if (!ReadHead(&r)) return HttpReply{};
    if (r.headers["transfer-encoding"] == "chunked") {
      std::string piece;
      while (ReadChunk(&piece)) r.body += piece;
      return r;
    }
    size_t length = 0;
    absl::SimpleAtoi(r.headers["content-length"], &length);
    while (buf_.size() < length) {
      if (!Fill()) return HttpReply{};
    }
    r.body = buf_.substr(0, length);
    buf_.erase(0, length);
    return r;
  }

 private:
  bool Fill() {
    char tmp[4096];
    const ssize_t n = recv(fd_, tmp, sizeof(tmp), 0);
    if (n <= 0) return false;
    buf_.append(tmp, static_cast<size_t>(n));
    return true;
  }

  int fd_ = -1;
  std::string buf_;
};

// One request on a new connection.
inline HttpReply HttpCall(int port, const std::string& method, const std::string& path,
                          const std::string& body = "", const std::string& headers = "") {
  HttpConnection c(port);
  if (!c.ok() || !c.Send(method, path, body, headers)) return HttpReply{};
  return c.ReadResponse();
}

}  // namespace ptxserve::server::http
