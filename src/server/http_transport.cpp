#include "server/http_transport.h"

#include <fmt/core.h>
#include <malloc.h>
#include <spdlog/spdlog.h>
#include <sys/resource.h>
#include <sys/socket.h>

#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <cerrno>
#include <chrono>
#include <deque>
#include <mutex>
#include <optional>
#include <thread>
#include <unordered_map>

namespace graft {
namespace {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = net::ip::tcp;

std::chrono::milliseconds Ms(double seconds) { return std::chrono::milliseconds(static_cast<int64_t>(seconds * 1e3)); }

const char* Reason(int status) {
  switch (status) {
    case 100: return "Continue";
    case 200: return "OK";
    case 204: return "No Content";
    case 400: return "Bad Request";
    case 401: return "Unauthorized";
    case 403: return "Forbidden";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 408: return "Request Timeout";
    case 413: return "Payload Too Large";
    case 415: return "Unsupported Media Type";
    case 422: return "Unprocessable Entity";
    case 429: return "Too Many Requests";
    case 431: return "Request Header Fields Too Large";
    case 499: return "Client Closed Request";
    case 500: return "Internal Server Error";
    case 503: return "Service Unavailable";
    case 504: return "Gateway Timeout";
    default: return "Status";
  }
}

bool IEquals(std::string_view a, std::string_view b) { return beast::iequals(a, b); }

// The head of an answer: status line, the handler's headers, then the framing the transport owns.
std::string Head(int status, const std::string& content_type, const HttpHeaders& headers, const std::string& framing,
                 bool close) {
  std::string h = fmt::format("HTTP/1.1 {} {}\r\n", status, Reason(status));
  for (const auto& [k, v] : headers) {
    if (IEquals(k, "Connection") || IEquals(k, "Content-Length") || IEquals(k, "Transfer-Encoding")) continue;
    h += k + ": " + v + "\r\n";
  }
  if (!content_type.empty()) h += "Content-Type: " + content_type + "\r\n";
  h += framing;
  if (close) h += "Connection: close\r\n";
  h += "\r\n";
  return h;
}

}  // namespace

const std::string* HttpRequest::Header(std::string_view name) const {
  for (const auto& [k, v] : headers) {
    if (IEquals(k, name)) return &v;
  }
  return nullptr;
}

class Session;

struct HttpTransport::Impl {
  HttpLimits limits;
  HttpHandler handler;
  HttpErrorBody error_body;
  std::atomic<int> connections{0}, answers_open{0}, serving{0};
  std::atomic<bool> stopped{false};
  std::atomic<bool> trim_pending{false};
  std::mutex mu;
  std::unordered_map<Session*, std::weak_ptr<Session>> sessions;
  net::io_context ioc;
  tcp::acceptor acceptor{ioc};
  net::thread_pool handlers;
  std::optional<net::executor_work_guard<net::io_context::executor_type>> work;

  explicit Impl(HttpLimits l) : limits(l), handlers(static_cast<size_t>(std::max(1, l.handler_threads))) {}
  void Accept(std::shared_ptr<Impl> self);
};

// One connection: reads a request, hands it on, writes its answer, then the next request.
// Everything but the constructor runs on the connection's strand.
class Session : public std::enable_shared_from_this<Session> {
 public:
  Session(tcp::socket s, std::shared_ptr<HttpTransport::Impl> impl)
      : stream_(std::move(s)), impl_(std::move(impl)), deadline_(stream_.get_executor()) {}
  ~Session() {
    impl_->connections.fetch_sub(1);
    if (counted_) impl_->answers_open.fetch_sub(1);
    std::lock_guard<std::mutex> l(impl_->mu);
    impl_->sessions.erase(this);
  }
  void Start() { net::dispatch(stream_.get_executor(), [self = shared_from_this()] { self->NextRequest(); }); }
  template <class F>
  void Post(F&& f) {
    if (impl_->stopped.load()) return;  // after Stop: nothing runs any more
    net::post(stream_.get_executor(), std::forward<F>(f));
  }
  void Close() {
    if (closed_) return;
    closed_ = true;
    deadline_.cancel();
    beast::error_code ec;
    stream_.socket().shutdown(tcp::socket::shutdown_both, ec);
    stream_.close();
  }

  // The exchange's calls, on the strand; `serial` names the request they answer.
  void DoReply(uint64_t serial, int status, std::string content_type, std::string body, HttpHeaders headers) {
    if (!Current(serial) || head_sent_) return;
    head_sent_ = true;
    if (WantsClose(headers)) keep_alive_ = false;
    Queue(Head(status, content_type, headers, fmt::format("Content-Length: {}\r\n", body.size()), !keep_alive_) + body);
    Ended();
  }
  void DoStart(uint64_t serial, int status, std::string content_type, HttpHeaders headers) {
    if (!Current(serial) || head_sent_) return;
    head_sent_ = true;
    streaming_ = true;
    if (WantsClose(headers)) keep_alive_ = false;
    chunked_ = version_ >= 11;
    if (!chunked_) keep_alive_ = false;  // HTTP/1.0: the close ends the body
    Queue(Head(status, content_type, headers, chunked_ ? "Transfer-Encoding: chunked\r\n" : "", !keep_alive_));
  }
  void DoWrite(uint64_t serial, std::string piece) {
    if (!Current(serial) || !streaming_ || ended_ || piece.empty()) return;
    if (unsent_ + piece.size() > impl_->limits.max_unsent_bytes) {
      spdlog::warn("http: a client read too slowly ({} bytes unsent); dropping it", unsent_);
      return HangUp();
    }
    Queue(chunked_ ? fmt::format("{:x}\r\n", piece.size()) + piece + "\r\n" : std::move(piece));
  }
  void DoEnd(uint64_t serial) {
    if (!Current(serial) || !streaming_ || ended_) return;
    if (chunked_) Queue("0\r\n\r\n");
    Ended();
  }
  void DoOnHangUp(uint64_t serial, std::function<void()> fn) {
    if (serial != serial_) return;
    if (hung_up_) return fn();
    if (!ended_) on_hangup_ = std::move(fn);
  }

 private:
  const HttpLimits& L() const { return impl_->limits; }
  bool Current(uint64_t serial) const { return serial == serial_ && !closed_ && !hung_up_ && !ended_; }
  static bool WantsClose(const HttpHeaders& h) {
    for (const auto& [k, v] : h) {
      if (IEquals(k, "Connection") && IEquals(v, "close")) return true;
    }
    return false;
  }

  void NextRequest() {
    if (closed_) return;
    parser_.emplace();
    parser_->header_limit(static_cast<uint32_t>(L().max_header_bytes));
    parser_->body_limit(L().max_body_bytes);
    head_sent_ = streaming_ = chunked_ = ended_ = false;
    if (buf_.size() > 0) return ReadHead();
    stream_.expires_after(Ms(L().idle_timeout_s));
    stream_.async_read_some(buf_.prepare(4096), [self = shared_from_this()](beast::error_code ec, size_t n) {
      if (ec) return self->Close();  // idle past the keep-alive time, or the client closed
      self->buf_.commit(n);
      self->ReadHead();
    });
  }

  // The head's and the body's total deadlines: on expiry the read is cancelled and answered 408
  // (tcp_stream's own timeouts close the socket, which leaves no way to say why).
  void Arm(double seconds) {
    stream_.expires_never();
    timed_out_ = false;
    deadline_.expires_after(Ms(seconds));
    deadline_.async_wait([self = shared_from_this()](beast::error_code ec) {
      if (ec) return;  // disarmed
      self->timed_out_ = true;
      beast::error_code ignored;
      self->stream_.socket().cancel(ignored);
    });
  }
  void Disarm() { deadline_.cancel(); }

  void ReadHead() {
    Arm(L().header_timeout_s);
    http::async_read_header(stream_, buf_, *parser_, [self = shared_from_this()](beast::error_code ec, size_t) {
      self->Disarm();
      self->OnHead(ec);
    });
  }

  void OnHead(beast::error_code ec) {
    if (ec) return ReadFailed(ec, "head");
    auto& h = parser_->get();
    const auto fields = std::distance(h.begin(), h.end());
    if (fields > L().max_header_fields) {
      return Fail(431, fmt::format("the request has {} header fields; the limit is {}", fields, L().max_header_fields));
    }
    version_ = static_cast<int>(h.version());
    if (parser_->is_done()) return Dispatch();
    auto body = [self = shared_from_this()] {
      self->Arm(self->L().body_timeout_s);
      http::async_read(self->stream_, self->buf_, *self->parser_, [self](beast::error_code ec, size_t) {
        self->Disarm();
        ec ? self->ReadFailed(ec, "body") : self->Dispatch();
      });
    };
    if (version_ >= 11 && IEquals(h[http::field::expect], "100-continue")) {
      auto cont = std::make_shared<std::string>("HTTP/1.1 100 Continue\r\n\r\n");
      return net::async_write(stream_, net::buffer(*cont), [self = shared_from_this(), cont, body](beast::error_code e, size_t) {
        if (e) return self->Close();
        body();
      });
    }
    body();
  }

  void ReadFailed(beast::error_code ec, const char* part) {
    if (timed_out_ || ec == beast::error::timeout) {
      const double limit = std::string(part) == "head" ? L().header_timeout_s : L().body_timeout_s;
      return Fail(408, fmt::format("the request {} did not arrive within {:g} s", part, limit));
    }
    if (ec == http::error::header_limit) {
      return Fail(431, fmt::format("the request head is larger than {} bytes", L().max_header_bytes));
    }
    if (ec == http::error::body_limit) {
      return Fail(413, fmt::format("the request body is larger than the server's limit ({} bytes)", L().max_body_bytes));
    }
    if (ec.category() == http::make_error_code(http::error::bad_method).category() &&
        ec != http::error::end_of_stream && ec != http::error::partial_message) {
      return Fail(400, fmt::format("malformed HTTP request ({})", ec.message()));
    }
    Close();  // the client closed or reset the connection
  }

  // The transport's own error: the answer, then the connection closes.
  void Fail(int status, const std::string& message) {
    keep_alive_ = false;
    linger_ = true;  // the client may still be sending: read it out so it gets to read the answer
    const std::string body = impl_->error_body(status, message);
    Queue(Head(status, "application/json", {}, fmt::format("Content-Length: {}\r\n", body.size()), true) + body);
    Ended();
  }

  void Dispatch() {
    stream_.expires_never();
    auto msg = parser_->release();
    auto req = std::make_shared<HttpRequest>();
    req->method = std::string(msg.method_string());
    req->target = std::string(msg.target());
    req->path = req->target.substr(0, req->target.find('?'));
    req->version = static_cast<int>(msg.version());
    for (const auto& f : msg) req->headers.emplace_back(std::string(f.name_string()), std::string(f.value()));
    req->body = std::move(msg.body());
    big_ = req->body.size() >= kBigBody;
    keep_alive_ = msg.keep_alive();
    ++serial_;
    counted_ = true;
    impl_->answers_open.fetch_add(1);
    if (buf_.size() == 0) Watch();  // with a pipelined request waiting, the client is there
    auto ex = MakeExchange();
    net::post(impl_->handlers, [impl = impl_, req, ex] {
      try {
        impl->handler(*req, ex);
      } catch (const std::exception& e) {  // handlers do not throw; if one does, the client still gets an answer
        spdlog::error("http: a handler threw: {}", e.what());
        ex->Reply(500, "application/json", impl->error_body(500, "internal error"));
      }
    });
  }
  std::shared_ptr<HttpExchange> MakeExchange();

  // Hang-up detection while a request is answered: readable with nothing to read is a close.
  void Watch() {
    watching_ = true;
    stream_.socket().async_wait(tcp::socket::wait_read, [self = shared_from_this()](beast::error_code ec) {
      self->OnReadable(ec);
    });
  }
  void OnReadable(beast::error_code ec) {
    watching_ = false;
    if (resume_) {  // the answer ended and the watch was cancelled: on to the next request
      resume_ = false;
      return NextRequest();
    }
    if (ec || closed_ || ended_) return;
    char c;
    const ssize_t n = ::recv(stream_.socket().native_handle(), &c, 1, MSG_PEEK | MSG_DONTWAIT);
    if (n == 0) return HangUp();
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return Watch();
    if (n < 0) return HangUp();
    // n > 0: the client sent its next request already; it is there.
  }

  void HangUp() {
    if (hung_up_ || closed_) return;
    hung_up_ = true;
    if (on_hangup_) {
      auto f = std::move(on_hangup_);
      on_hangup_ = nullptr;
      f();
    }
    Close();
  }

  void Queue(std::string bytes) {
    if (closed_) return;
    unsent_ += bytes.size();
    out_.push_back(std::move(bytes));
    if (!writing_) WriteNext();
  }
  void WriteNext() {
    if (out_.empty()) {
      writing_ = false;
      if (ended_) AfterAnswer();
      return;
    }
    writing_ = true;
    sending_.clear();
    while (!out_.empty()) {  // what piled up goes out in one write
      sending_ += out_.front();
      out_.pop_front();
    }
    stream_.expires_after(Ms(L().write_timeout_s));
    net::async_write(stream_, net::buffer(sending_), [self = shared_from_this()](beast::error_code ec, size_t n) {
      self->unsent_ -= std::min(self->unsent_, n);
      self->stream_.expires_never();  // a stream idle between pieces is not a slow reader
      if (ec) {
        self->writing_ = false;
        self->HangUp();
        return self->Close();
      }
      self->WriteNext();
    });
  }
  void Ended() {
    ended_ = true;
    on_hangup_ = nullptr;
    if (!writing_ && out_.empty()) AfterAnswer();
  }
  // The answer is written in full: the next request, or the end of the connection.
  void AfterAnswer() {
    stream_.expires_never();
    if (big_) {  // a big body's memory goes back to the system, not only to malloc's free lists
      big_ = false;
      if (!impl_->trim_pending.exchange(true)) {
        net::post(impl_->handlers, [impl = impl_] {
          impl->trim_pending = false;
          ::malloc_trim(0);
        });
      }
    }
    if (counted_) {
      counted_ = false;
      impl_->answers_open.fetch_sub(1);
    }
    if (!keep_alive_) {
      beast::error_code ec;
      stream_.socket().shutdown(tcp::socket::shutdown_send, ec);
      if (linger_) return Linger(0);
      return Close();
    }
    if (watching_) {  // NextRequest runs from the watch's completion
      resume_ = true;
      beast::error_code ec;
      stream_.socket().cancel(ec);
      return;
    }
    NextRequest();
  }

  // A lingering close: what the client still sends is read and dropped (up to 64 MiB, within
  // 5 s), so closing does not reset the connection before the client has read the answer.
  void Linger(size_t read) {
    if (read == 0) stream_.expires_after(std::chrono::seconds(5));
    if (read > (64u << 20)) return Close();
    buf_.consume(buf_.size());
    stream_.async_read_some(buf_.prepare(65536), [self = shared_from_this(), read](beast::error_code ec, size_t n) {
      if (ec) return self->Close();
      self->buf_.commit(n);
      self->Linger(read + n);
    });
  }

  friend class Exchange;
  beast::tcp_stream stream_;
  std::shared_ptr<HttpTransport::Impl> impl_;
  beast::flat_buffer buf_;
  std::optional<http::request_parser<http::string_body>> parser_;
  uint64_t serial_ = 0;
  int version_ = 11;
  bool keep_alive_ = true, head_sent_ = false, streaming_ = false, chunked_ = false, ended_ = false;
  bool closed_ = false, writing_ = false, watching_ = false, resume_ = false, counted_ = false, linger_ = false;
  bool big_ = false;
  // From this body size on, a request ends with a malloc_trim: what its parsing and tokenization
  // took (several times its body, much of it in the handler threads' arenas, which glibc does not
  // shrink by itself) goes back to the system. 1 MiB let a burst of 32 bodies just under it keep
  // ~18 MB for good on a 2-core machine.
  static constexpr size_t kBigBody = 256u << 10;
  bool hung_up_ = false;
  net::steady_timer deadline_;
  bool timed_out_ = false;
  std::function<void()> on_hangup_;
  std::deque<std::string> out_;
  std::string sending_;
  size_t unsent_ = 0;
};

class Exchange : public HttpExchange {
 public:
  Exchange(std::shared_ptr<Session> s, uint64_t serial) : s_(std::move(s)), serial_(serial) {}
  void Reply(int status, std::string content_type, std::string body, HttpHeaders headers) override {
    s_->Post([s = s_, n = serial_, status, ct = std::move(content_type), b = std::move(body),
              h = std::move(headers)]() mutable { s->DoReply(n, status, std::move(ct), std::move(b), std::move(h)); });
  }
  void StartStream(int status, std::string content_type, HttpHeaders headers) override {
    s_->Post([s = s_, n = serial_, status, ct = std::move(content_type), h = std::move(headers)]() mutable {
      s->DoStart(n, status, std::move(ct), std::move(h));
    });
  }
  void Write(std::string piece) override {
    s_->Post([s = s_, n = serial_, p = std::move(piece)]() mutable { s->DoWrite(n, std::move(p)); });
  }
  void End() override {
    s_->Post([s = s_, n = serial_] { s->DoEnd(n); });
  }
  void Run(std::function<void()> fn) override { s_->Post(std::move(fn)); }
  void OnHangUp(std::function<void()> fn) override {
    s_->Post([s = s_, n = serial_, f = std::move(fn)]() mutable { s->DoOnHangUp(n, std::move(f)); });
  }

 private:
  std::shared_ptr<Session> s_;
  uint64_t serial_;
};

std::shared_ptr<HttpExchange> Session::MakeExchange() { return std::make_shared<Exchange>(shared_from_this(), serial_); }

void HttpTransport::Impl::Accept(std::shared_ptr<Impl> self) {
  acceptor.async_accept(net::make_strand(ioc), [self](beast::error_code ec, tcp::socket socket) {
    if (ec == net::error::operation_aborted || !self->acceptor.is_open()) return;
    if (ec) {  // out of file descriptors, say: try again shortly rather than spin
      spdlog::warn("http: accept failed ({}); retrying", ec.message());
      auto timer = std::make_shared<net::steady_timer>(self->ioc, std::chrono::milliseconds(50));
      timer->async_wait([self, timer](beast::error_code) { self->Accept(self); });
      return;
    }
    if (self->connections.load() >= self->limits.max_connections) {
      // Past the limit: a short 503 and the close, without a session.
      const std::string body = self->error_body(503, fmt::format("the server holds its limit of {} connections; try again",
                                                                 self->limits.max_connections));
      const std::string out = Head(503, "application/json", {{"Retry-After", "1"}},
                                   fmt::format("Content-Length: {}\r\n", body.size()), true) + body;
      [[maybe_unused]] const ssize_t n = ::send(socket.native_handle(), out.data(), out.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
      beast::error_code ignored;
      socket.close(ignored);
    } else {
      self->connections.fetch_add(1);
      beast::error_code ignored;
      socket.set_option(tcp::no_delay(true), ignored);
      auto s = std::make_shared<Session>(std::move(socket), self);
      {
        std::lock_guard<std::mutex> l(self->mu);
        self->sessions.emplace(s.get(), s);
      }
      s->Start();
    }
    self->Accept(self);
  });
}

HttpTransport::HttpTransport(HttpLimits limits, HttpHandler handler, HttpErrorBody error_body)
    : impl_(std::make_shared<Impl>(limits)) {
  impl_->handler = std::move(handler);
  impl_->error_body = std::move(error_body);
}

HttpTransport::~HttpTransport() {
  Stop(0);
  // Work queued when the loop stopped holds connections (and through them this transport's
  // state): run it out here, where no thread serves any more, so both are freed.
  if (impl_->serving.load() == 0) {
    impl_->ioc.restart();
    impl_->ioc.poll();
  }
}

Status HttpTransport::Bind(const std::string& host, int port) {
  // Blocks of 1 MiB and more (request bodies, their parsed copies) are mapped and unmapped
  // alone: glibc's moving threshold would otherwise keep bursts of them on the heap for good.
  ::mallopt(M_MMAP_THRESHOLD, 1 << 20);
  // Every connection is a file descriptor: take what the hard limit allows.
  rlimit rl{};
  if (::getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
    rl.rlim_cur = rl.rlim_max;
    (void)::setrlimit(RLIMIT_NOFILE, &rl);
  }
  beast::error_code ec;
  tcp::resolver resolver(impl_->ioc);
  auto endpoints = resolver.resolve(host, std::to_string(port), tcp::resolver::passive, ec);
  if (ec) return IoError(fmt::format("cannot listen on {}:{}: the address does not resolve ({})", host, port, ec.message()));
  std::string why = "the address has no usable endpoint";
  for (const auto& e : endpoints) {
    auto& a = impl_->acceptor;
    beast::error_code err;
    a.open(e.endpoint().protocol(), err);
    // SO_REUSEADDR alone: a restart binds over connections in TIME_WAIT, a busy port fails.
    if (!err) a.set_option(net::socket_base::reuse_address(true), err);
    if (!err) a.bind(e.endpoint(), err);
    if (!err) a.listen(1024, err);
    if (!err) {
      port_ = a.local_endpoint().port();
      impl_->work.emplace(impl_->ioc.get_executor());
      impl_->Accept(impl_);
      return Status::Ok();
    }
    why = err == net::error::address_in_use ? "the port is in use (another server is listening there?)" : err.message();
    beast::error_code ignored;
    a.close(ignored);
  }
  return IoError(fmt::format("cannot listen on {}:{}: {}", host, port, why));
}

void HttpTransport::Serve() {
  std::vector<std::thread> more;
  impl_->serving.fetch_add(1);
  for (int i = 1; i < impl_->limits.io_threads; ++i) more.emplace_back([impl = impl_] { impl->ioc.run(); });
  impl_->ioc.run();
  for (auto& t : more) t.join();
  impl_->serving.fetch_sub(1);
}

void HttpTransport::StopAccepting() {
  net::post(impl_->ioc, [impl = impl_] {
    beast::error_code ignored;
    impl->acceptor.close(ignored);
  });
}

void HttpTransport::Stop(int flush_ms) {
  if (!impl_->work) return;
  StopAccepting();
  const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(flush_ms);
  while (impl_->answers_open.load() > 0 && std::chrono::steady_clock::now() < until) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  // Close every connection (their pending operations complete and let go of them), then stop.
  std::vector<std::shared_ptr<Session>> open;
  {
    std::lock_guard<std::mutex> l(impl_->mu);
    for (auto& [p, w] : impl_->sessions) {
      if (auto s = w.lock()) open.push_back(std::move(s));
    }
  }
  for (auto& s : open) s->Post([s] { s->Close(); });
  open.clear();
  impl_->work.reset();
  const auto settle = std::chrono::steady_clock::now() + std::chrono::milliseconds(200);
  while (!impl_->ioc.stopped() && std::chrono::steady_clock::now() < settle) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  impl_->stopped = true;
  impl_->ioc.stop();
  impl_->handlers.join();
}

int HttpTransport::answers_open() const { return impl_->answers_open.load(); }

}  // namespace graft
