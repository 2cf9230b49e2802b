// What the HTTP transport (http_server.h) and the applications behind it (the OpenAI API)
// exchange: a parsed request, and a response that is either whole or produced piece by
// piece (server-sent events, or a JSON body that is ready only when the engine is done).
// No Beast or Asio types: applications stay testable without sockets.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace ptxserve::server::http {

struct HttpRequest {
  std::string method;  // "GET", "POST", ...
  std::string path;    // the target without the query string
  std::string authorization;
  std::string content_type;
  std::string body;
  std::string peer;  // "ip:port", for logs
};

// A body produced over time. Every call but Cancel runs on the exchange's strand, one at
// a time; Cancel may run on it too, and after Cancel returns `wake` is never called again.
class ResponseStream {
 public:
  enum class Poll {
    kPending,  // nothing yet: `wake` will be called when there is
    kChunk,    // *out holds the next piece; more follow
    kLast,     // *out holds the last piece (possibly empty)
  };
  virtual ~ResponseStream() = default;
  // Called once before the first Next. `wake` is cheap and may be called from any thread
  // (it posts a Next to the strand); it must not be called after Cancel returned.
  virtual void Start(std::function<void()> wake) = 0;
  virtual Poll Next(std::string* out) = 0;
  // The client went away or the server is stopping: stop producing (cancels the work).
  virtual void Cancel() = 0;
  // True: the pieces are sent as they come (chunked, status 200), even when the first is
  // the last. False: the body is sent whole when complete, with status() read then (so an
  // engine failure can still be a 500).
  virtual bool incremental() const = 0;
  virtual int status() const { return 200; }
  virtual std::string content_type() const = 0;
};

struct HttpResponse {
  int status = 200;
  std::string content_type = "application/json";
  std::string body;
  std::vector<std::pair<std::string, std::string>> headers;  // extra ones
  std::unique_ptr<ResponseStream> stream;                    // set: body comes from it
};

// An application: maps a request to a response. Runs on a transport thread; must not
// block (long work goes into a ResponseStream).
using HttpHandler = std::function<HttpResponse(HttpRequest&&)>;

}  // namespace ptxserve::server::http
