// HttpTransport on its own (no model): the limits, deadlines, pipelining, 100-continue, the
// connection cap, hang-up detection and streams, through raw sockets.
#include "server/http_transport.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <string>
#include <thread>

namespace graft {
namespace {

using Clock = std::chrono::steady_clock;

class Transport : public ::testing::Test {
 protected:
  void Start(HttpLimits limits) {
    t_ = std::make_unique<HttpTransport>(
        limits, [this](const HttpRequest& r, std::shared_ptr<HttpExchange> ex) { Handle(r, std::move(ex)); },
        [](int status, const std::string& m) { return "{\"status\": " + std::to_string(status) + ", \"m\": \"" + m + "\"}"; });
    ASSERT_TRUE(t_->Bind("127.0.0.1", 0).ok());
    thread_ = std::thread([this] { t_->Serve(); });
  }
  void TearDown() override {
    if (t_) t_->Stop(200);
    if (thread_.joinable()) thread_.join();
  }
  // /echo answers the body; /hold answers nothing until the client hangs up (counted);
  // /stream writes three pieces from another thread.
  void Handle(const HttpRequest& r, std::shared_ptr<HttpExchange> ex) {
    if (r.path == "/echo") return ex->Reply(200, "text/plain", r.method + " " + r.target + " " + r.body);
    if (r.path == "/hold") {
      ex->OnHangUp([this] { hung_up_.fetch_add(1); });
      return;
    }
    if (r.path == "/stream") {
      ex->StartStream(200, "text/event-stream");
      std::thread([ex] {
        for (int i = 0; i < 3; ++i) {
          ex->Write("piece " + std::to_string(i) + "\n");
          std::this_thread::sleep_for(std::chrono::milliseconds(10));
        }
        ex->End();
      }).detach();
      return;
    }
    ex->Reply(404, "text/plain", "no");
  }
  int Connect() {
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<uint16_t>(t_->port()));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    EXPECT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
    return fd;
  }
  static void Send(int fd, const std::string& s) {
    size_t off = 0;
    while (off < s.size()) {
      const ssize_t n = ::send(fd, s.data() + off, s.size() - off, MSG_NOSIGNAL);
      if (n <= 0) return;  // the server may close early (a refused body)
      off += static_cast<size_t>(n);
    }
  }
  // Everything the server sends until it closes (or `timeout`).
  static std::string ReadAll(int fd, std::chrono::milliseconds timeout = std::chrono::milliseconds(5000)) {
    std::string out;
    const auto until = Clock::now() + timeout;
    char buf[65536];
    while (Clock::now() < until) {
      pollfd p{fd, POLLIN, 0};
      if (::poll(&p, 1, 50) <= 0) continue;
      const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
      if (n <= 0) break;
      out.append(buf, static_cast<size_t>(n));
    }
    return out;
  }
  std::string Exchange(const std::string& request) {
    const int fd = Connect();
    Send(fd, request);
    std::string out = ReadAll(fd);
    ::close(fd);
    return out;
  }
  std::unique_ptr<HttpTransport> t_;
  std::thread thread_;
  std::atomic<int> hung_up_{0};
};

TEST_F(Transport, AnswersAndKeepsTheConnectionForPipelinedRequestsInOrder) {
  Start({});
  const std::string out = Exchange(
      "GET /echo?a=1 HTTP/1.1\r\nHost: x\r\n\r\n"
      "POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello"
      "GET /echo?last HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
  const size_t a = out.find("GET /echo?a=1 "), b = out.find("POST /echo hello"), c = out.find("GET /echo?last ");
  ASSERT_NE(a, std::string::npos) << out;
  ASSERT_NE(b, std::string::npos) << out;
  ASSERT_NE(c, std::string::npos) << out;
  EXPECT_LT(a, b);
  EXPECT_LT(b, c);
  EXPECT_NE(out.find("Connection: close"), std::string::npos);
}

TEST_F(Transport, ChunkedBodiesAreReadAndLimited) {
  HttpLimits l;
  l.max_body_bytes = 1000;
  Start(l);
  EXPECT_NE(Exchange("POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
                     "3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n")
                .find("POST /echo abcde"),
            std::string::npos);
  std::string big = "POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n";
  for (int i = 0; i < 20; ++i) big += "64\r\n" + std::string(100, 'a') + "\r\n";
  big += "0\r\n\r\n";
  const std::string out = Exchange(big);
  EXPECT_EQ(out.rfind("HTTP/1.1 413", 0), 0u) << out;
  EXPECT_NE(out.find("larger than the server's limit (1000 bytes)"), std::string::npos) << out;
  EXPECT_EQ(Exchange("POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 5000\r\n\r\n").rfind("HTTP/1.1 413", 0), 0u);
}

TEST_F(Transport, HeaderFieldsAreCappedInCountAndSize) {
  HttpLimits l;
  l.max_header_fields = 20;
  l.max_header_bytes = 4096;
  Start(l);
  std::string many = "GET /echo HTTP/1.1\r\nHost: x\r\n";
  for (int i = 0; i < 30; ++i) many += "X-" + std::to_string(i) + ": v\r\n";
  std::string out = Exchange(many + "\r\n");
  EXPECT_EQ(out.rfind("HTTP/1.1 431", 0), 0u) << out;
  EXPECT_NE(out.find("31 header fields; the limit is 20"), std::string::npos) << out;
  out = Exchange("GET /echo HTTP/1.1\r\nHost: x\r\nX-Big: " + std::string(8000, 'a') + "\r\n\r\n");
  EXPECT_EQ(out.rfind("HTTP/1.1 431", 0), 0u) << out;
  out = Exchange("GET /echo HTTP/1.1\r\nHost: x\r\nContent-Length: nope\r\n\r\n");
  EXPECT_EQ(out.rfind("HTTP/1.1 400", 0), 0u) << out;
}

// The head's deadline is total: a byte every 200 ms does not extend it.
TEST_F(Transport, ASlowHeadGets408AtItsTotalDeadline) {
  HttpLimits l;
  l.header_timeout_s = 0.6;
  Start(l);
  const int fd = Connect();
  const auto t0 = Clock::now();
  Send(fd, "GET /echo HTTP/1.1\r\n");
  std::string out;
  for (int i = 0; i < 20 && out.empty(); ++i) {
    Send(fd, "X");
    out = ReadAll(fd, std::chrono::milliseconds(200));
  }
  const double secs = std::chrono::duration<double>(Clock::now() - t0).count();
  ::close(fd);
  EXPECT_EQ(out.rfind("HTTP/1.1 408", 0), 0u) << out;
  EXPECT_LT(secs, 1.5);
}

TEST_F(Transport, ExpectContinueIsAnsweredBeforeTheBody) {
  Start({});
  const int fd = Connect();
  Send(fd, "POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\nExpect: 100-continue\r\n\r\n");
  const std::string first = ReadAll(fd, std::chrono::milliseconds(300));
  EXPECT_EQ(first, "HTTP/1.1 100 Continue\r\n\r\n");
  Send(fd, "ok");
  EXPECT_NE(ReadAll(fd, std::chrono::milliseconds(300)).find("POST /echo ok"), std::string::npos);
  ::close(fd);
}

TEST_F(Transport, PastMaxConnectionsANewOneGets503) {
  HttpLimits l;
  l.max_connections = 2;
  Start(l);
  const int a = Connect(), b = Connect();
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  const std::string out = Exchange("GET /echo HTTP/1.1\r\nHost: x\r\n\r\n");
  EXPECT_EQ(out.rfind("HTTP/1.1 503", 0), 0u) << out;
  EXPECT_NE(out.find("limit of 2 connections"), std::string::npos) << out;
  ::close(a);
  ::close(b);
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_NE(Exchange("GET /echo HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").find("200 OK"), std::string::npos);
}

// A request answered later (not streamed) learns of its client's hang-up at once.
TEST_F(Transport, AHangUpReachesARequestNotYetAnswered) {
  Start({});
  const int fd = Connect();
  Send(fd, "GET /hold HTTP/1.1\r\nHost: x\r\n\r\n");
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_EQ(hung_up_.load(), 0);
  ::close(fd);
  for (int i = 0; i < 100 && hung_up_.load() == 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_EQ(hung_up_.load(), 1);
  EXPECT_EQ(t_->answers_open(), 0);
}

TEST_F(Transport, StreamsAreChunkedForHttp11AndCloseDelimitedFor10) {
  Start({});
  std::string out = Exchange("GET /stream HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
  EXPECT_NE(out.find("Transfer-Encoding: chunked"), std::string::npos) << out;
  EXPECT_NE(out.find("8\r\npiece 0\n\r\n8\r\npiece 1\n\r\n8\r\npiece 2\n\r\n0\r\n\r\n"), std::string::npos) << out;
  out = Exchange("GET /stream HTTP/1.0\r\n\r\n");
  EXPECT_EQ(out.find("Transfer-Encoding"), std::string::npos) << out;
  EXPECT_NE(out.find("\r\n\r\npiece 0\npiece 1\npiece 2\n"), std::string::npos) << out;
}

TEST_F(Transport, ABusyPortIsAnErrorNamingIt) {
  Start({});
  HttpTransport second({}, [](const HttpRequest&, std::shared_ptr<HttpExchange>) {},
                       [](int, const std::string&) { return std::string(); });
  const Status s = second.Bind("127.0.0.1", t_->port());
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("the port is in use"), std::string::npos) << s.message();
}

}  // namespace
}  // namespace graft
