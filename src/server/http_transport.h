// HttpTransport: the HTTP/1.1 wire (docs/design.md §4), event-driven on Boost.Asio with
// Boost.Beast's parser. It reads requests, enforces the limits below, hands each whole request
// to the handler and writes what the handler answers; it knows nothing of the API.
//
// A connection holds no thread: a few I/O threads serve every socket, so thousands of open
// server-sent-event streams and slow clients cost memory, not threads. The handler runs on a
// small pool of handler threads and must not block on the engine: it answers through its
// HttpExchange, from any thread, whenever the answer is ready.
//
// Limits, each answered with an error body from `error_body` and the connection closed:
//   - the whole request head within header_timeout_s of its first byte (408), at most
//     max_header_bytes (431) and max_header_fields fields (431);
//   - the whole body within body_timeout_s (408), at most max_body_bytes, chunked or not (413);
//   - malformed HTTP (400);
//   - past max_connections open connections a new one is answered 503 and closed.
// An idle keep-alive connection closes after idle_timeout_s. Pipelined requests are answered
// one at a time, in order. `Expect: 100-continue` is answered before the body is read. A
// client that reads nothing for write_timeout_s, or lets more than max_unsent_bytes of a
// stream pile up, is dropped (its exchange sees a hang-up).
//
// Hang-ups: while a request is answered, the transport watches its socket; when the client
// closes or resets it before the answer ended, the exchange's OnHangUp callback runs once — so
// a non-streamed request is cancelled as promptly as a stream. (A client that sent its next
// pipelined request is not watched: it is still there.)
#pragma once

#include <atomic>
#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "util/status.h"

namespace graft {

struct HttpLimits {
  size_t max_body_bytes = 8u << 20;
  size_t max_header_bytes = 64u << 10;
  int max_header_fields = 128;
  double header_timeout_s = 10;
  double body_timeout_s = 60;
  double idle_timeout_s = 60;
  double write_timeout_s = 60;
  size_t max_unsent_bytes = 16u << 20;
  int max_connections = 16384;
  int io_threads = 2;
  int handler_threads = 8;
};

using HttpHeaders = std::vector<std::pair<std::string, std::string>>;

struct HttpRequest {
  std::string method;
  std::string target;  // as sent: path and query
  std::string path;    // without the query
  int version = 11;    // 10 or 11
  HttpHeaders headers;
  std::string body;
  // The first header of that name (case-insensitive), or null.
  const std::string* Header(std::string_view name) const;
};

// One request's answer. Every method may be called from any thread; what they write goes out
// in call order. After a hang-up, or once the answer ended, writes are ignored.
class HttpExchange {
 public:
  virtual ~HttpExchange() = default;
  // The whole answer (Content-Length framed).
  virtual void Reply(int status, std::string content_type, std::string body, HttpHeaders headers = {}) = 0;
  // A streamed answer: the head now (chunked for HTTP/1.1), then Write pieces, then End.
  virtual void StartStream(int status, std::string content_type, HttpHeaders headers = {}) = 0;
  virtual void Write(std::string piece) = 0;
  virtual void End() = 0;
  // Runs fn after everything Run before it, one at a time (a stream's formatting state needs no lock).
  virtual void Run(std::function<void()> fn) = 0;
  // fn runs once, through Run, if the client goes away before the answer ended (at once when it
  // already has). Set it before handing work on.
  virtual void OnHangUp(std::function<void()> fn) = 0;
};

using HttpHandler = std::function<void(const HttpRequest&, std::shared_ptr<HttpExchange>)>;
// The body of the transport's own errors (status, message) and its content type.
using HttpErrorBody = std::function<std::string(int status, const std::string& message)>;

class HttpTransport {
 public:
  HttpTransport(HttpLimits limits, HttpHandler handler, HttpErrorBody error_body);
  ~HttpTransport();
  HttpTransport(const HttpTransport&) = delete;
  HttpTransport& operator=(const HttpTransport&) = delete;

  // Listens on host:port (0: any free port; SO_REUSEADDR only, so a busy port is an error
  // naming it). Raises the open-file limit to its hard maximum for the connections.
  Status Bind(const std::string& host, int port);
  int port() const { return port_; }
  // Serves until Stop (blocking).
  void Serve();
  // Stops accepting; open connections carry on.
  void StopAccepting();
  // Waits up to `flush_ms` for answers being written to go out, then stops everything.
  void Stop(int flush_ms = 2000);
  // Answers begun but not yet written in full.
  int answers_open() const;

  struct Impl;

 private:
  std::shared_ptr<Impl> impl_;
  int port_ = 0;
};

}  // namespace graft
