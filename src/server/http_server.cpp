#include "server/http_server.h"

#include <fmt/core.h>
#include <httplib.h>
#include <spdlog/spdlog.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <random>
#include <thread>

#include "server/responses.h"
#include "util/json_depth.h"
#include "util/version.h"

namespace graft {
namespace {

using ojson = nlohmann::ordered_json;
using Clock = std::chrono::steady_clock;

// Events from the engine thread to one HTTP handler, each tagged with its choice's index.
struct Channel {
  std::mutex mu;
  std::condition_variable cv;
  std::deque<std::pair<int, GenEvent>> events;
  void Push(int choice, const GenEvent& e) {
    {
      std::lock_guard<std::mutex> l(mu);
      events.emplace_back(choice, e);
    }
    cv.notify_one();
  }
  // Waits up to `timeout` for an event.
  bool Pop(int* choice, GenEvent* e, std::chrono::milliseconds timeout) {
    std::unique_lock<std::mutex> l(mu);
    if (!cv.wait_for(l, timeout, [&] { return !events.empty(); })) return false;
    *choice = events.front().first;
    *e = std::move(events.front().second);
    events.pop_front();
    return true;
  }
};

ApiError FromStatus(const Status& s) {
  switch (s.code()) {
    case StatusCode::kInvalidArgument: return {400, s.message(), "invalid_request_error", ""};
    case StatusCode::kNotFound: return {404, s.message(), "not_found_error", ""};
    case StatusCode::kResourceExhausted: return {429, s.message(), "rate_limit_error", ""};
    case StatusCode::kUnavailable: return {503, s.message(), "service_unavailable", ""};
    case StatusCode::kDeadlineExceeded: return {504, s.message(), "timeout_error", ""};
    default: return {500, s.message(), "internal_error", ""};
  }
}

void Reply(httplib::Response& res, int status, const ojson& body) {
  res.status = status;
  res.set_content(body.dump(-1, ' ', false, ojson::error_handler_t::replace), "application/json");
}

// A 429 says when to try again (the queue drains in about a step or a request).
void ReplyError(httplib::Response& res, const ApiError& e) {
  if (e.status == 429) res.set_header("Retry-After", "1");
  Reply(res, e.status, e.Json());
}

std::string NewId(const char* prefix) {
  static std::atomic<uint64_t> counter{0};
  static const uint64_t salt = std::random_device{}();
  return fmt::format("{}{:012x}{:08x}", prefix, salt & 0xffffffffffffull, counter.fetch_add(1) & 0xffffffffu);
}

std::optional<ApiError> ParseBody(const httplib::Request& req, nlohmann::json* body) {
  // Before parsing: the walks of a parsed body (dump, the template's values) recurse a level
  // at a time, and one request nested 100,000 deep would overflow this thread's stack.
  if (Status depth = CheckJsonDepth(req.body, "the request body"); !depth.ok()) {
    return ApiError{400, depth.message(), "invalid_request_error", ""};
  }
  try {
    *body = nlohmann::json::parse(req.body);
  } catch (const nlohmann::json::exception& e) {
    return ApiError{400, fmt::format("the request body is not valid JSON: {}", e.what()), "invalid_request_error", ""};
  }
  return std::nullopt;
}

// Counts a request in flight for as long as it lives (a stream: until its provider is released).
class InFlight {
 public:
  explicit InFlight(std::atomic<int>& n) : n_(n) { n_.fetch_add(1); }
  ~InFlight() { n_.fetch_sub(1); }
  InFlight(const InFlight&) = delete;
  InFlight& operator=(const InFlight&) = delete;

 private:
  std::atomic<int>& n_;
};

// What a finished generation reports in its log line.
struct Finished {
  int prompt_tokens = 0, completion_tokens = 0;
  RequestTimes times;  // the first choice's
  std::string finish;
};

// A value in a logfmt line: bare, or JSON-quoted when it holds a space, a quote or '='.
std::string Logfmt(const std::string& v) {
  if (!v.empty() && v.find_first_of(" \"=\t\n") == std::string::npos) return v;
  return nlohmann::json(v).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

// One line a finished request (logfmt: key=value), for operators and log shippers.
void LogRequest(const std::string& id, const std::string& endpoint, const std::string& model, int status, double seconds,
                const Finished* f) {
  std::string line = fmt::format("request id={} endpoint={} model={} status={}", Logfmt(id), endpoint,
                                 Logfmt(model.empty() ? "-" : model), status);
  if (f) {
    line += fmt::format(" prompt_tokens={} completion_tokens={} queue_ms={:.1f} prefill_ms={:.1f} decode_ms={:.1f}",
                        f->prompt_tokens, f->completion_tokens, f->times.queue * 1e3, f->times.prefill * 1e3,
                        f->times.decode * 1e3);
    if (!f->finish.empty()) line += " finish=" + Logfmt(f->finish);
  }
  line += fmt::format(" total_ms={:.1f}", seconds * 1e3);
  spdlog::info("{}", line);
}

std::string Sse(const ojson& j) { return "data: " + j.dump(-1, ' ', false, ojson::error_handler_t::replace) + "\n\n"; }

}  // namespace

HttpServer::HttpServer(Engine& engine, const Tokenizer& tok, const ChatTemplate& tmpl, ServedModels models,
                       std::set<int32_t> stop_tokens, ServerConfig cfg)
    : engine_(engine), tok_(tok), tmpl_(tmpl), models_(std::move(models)), stop_tokens_(std::move(stop_tokens)),
      cfg_(std::move(cfg)), metrics_(models_.base_name), svr_(std::make_unique<httplib::Server>()) {
  const int threads = cfg_.http_threads;
  svr_->new_task_queue = [threads] { return new httplib::ThreadPool(static_cast<size_t>(threads)); };
  svr_->set_payload_max_length(cfg_.max_body_bytes);
  svr_->set_read_timeout(30, 0);
  svr_->set_write_timeout(30, 0);
  svr_->set_keep_alive_max_count(1000);
  // cpp-httplib's default sets SO_REUSEPORT too, with which a second server on a busy port binds
  // and the kernel splits the connections between the two. SO_REUSEADDR alone still allows a
  // restart over connections in TIME_WAIT, and a busy port fails Bind().
  svr_->set_socket_options([](socket_t sock) {
    int yes = 1;
    ::setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
  });
  Routes();
}

HttpServer::~HttpServer() { Stop(); }

namespace {

// cpp-httplib 0.11 listens with a backlog of 5, compiled into Debian's shared library, so a
// burst of connections overflows the accept queue and some are reset. Find the listening
// socket on `port` and listen again with a real backlog (Linux updates it in place).
void RaiseListenBacklog(int port, int backlog) {
  for (int fd = 3; fd < 4096; ++fd) {
    int listening = 0;
    socklen_t len = sizeof listening;
    if (::getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &listening, &len) != 0 || !listening) continue;
    sockaddr_storage addr{};
    socklen_t alen = sizeof addr;
    if (::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &alen) != 0) continue;
    int p = -1;
    if (addr.ss_family == AF_INET) p = ntohs(reinterpret_cast<sockaddr_in*>(&addr)->sin_port);
    if (addr.ss_family == AF_INET6) p = ntohs(reinterpret_cast<sockaddr_in6*>(&addr)->sin6_port);
    if (p == port) ::listen(fd, backlog);
  }
}

// Why binding host:port fails, from a bind of our own (cpp-httplib keeps errno to itself): "the
// port is in use (another server?)" for EADDRINUSE, else the system's message.
std::string WhyBindFails(const std::string& host, int port) {
  addrinfo hints{}, *res = nullptr;
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  if (int e = ::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &res); e != 0) {
    return fmt::format("the address does not resolve ({})", ::gai_strerror(e));
  }
  std::string why = "the address cannot be bound";
  for (addrinfo* a = res; a; a = a->ai_next) {
    const int fd = ::socket(a->ai_family, a->ai_socktype, a->ai_protocol);
    if (fd < 0) continue;
    int yes = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
    const int rc = ::bind(fd, a->ai_addr, a->ai_addrlen), err = errno;
    ::close(fd);
    if (rc == 0) continue;
    why = err == EADDRINUSE ? "the port is in use (another server is listening there?)" : std::string(std::strerror(err));
    break;
  }
  ::freeaddrinfo(res);
  return why;
}

}  // namespace

Status HttpServer::Bind() {
  if (cfg_.port == 0) {
    port_ = svr_->bind_to_any_port(cfg_.host);
    if (port_ <= 0) return IoError("cannot bind any port on " + cfg_.host);
  } else {
    if (!svr_->bind_to_port(cfg_.host, cfg_.port)) {
      return IoError(fmt::format("cannot listen on {}:{}: {}", cfg_.host, cfg_.port, WhyBindFails(cfg_.host, cfg_.port)));
    }
    port_ = cfg_.port;
  }
  RaiseListenBacklog(port_, 1024);
  return Status::Ok();
}

void HttpServer::Serve() { svr_->listen_after_bind(); }

void HttpServer::Stop() {
  if (svr_) svr_->stop();
}

void HttpServer::Refuse(httplib::Response& res, const ApiError& e, const std::string& endpoint, const std::string& model,
                        double seconds) {
  ReplyError(res, e);
  metrics_.Observe(endpoint, model, e.status, seconds);
  LogRequest("-", endpoint, model, e.status, seconds, nullptr);
}

std::chrono::steady_clock::time_point HttpServer::Deadline(std::chrono::steady_clock::time_point arrived) const {
  if (cfg_.request_timeout_s <= 0) return {};
  return arrived + std::chrono::milliseconds(static_cast<int64_t>(cfg_.request_timeout_s * 1e3));
}

int HttpServer::Shutdown(std::chrono::milliseconds grace) {
  draining_ = true;
  const auto deadline = Clock::now() + grace;
  while (in_flight_.load() > 0 && Clock::now() < deadline) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  const int cut = in_flight_.load();
  engine_.Stop();  // whatever still runs ends with an error event
  const auto flush = Clock::now() + std::chrono::seconds(5);
  while (in_flight_.load() > 0 && Clock::now() < flush) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  Stop();
  return cut;
}

void HttpServer::Routes() {
  auto& s = *svr_;
  s.set_error_handler([](const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty()) return;
    if (res.status == 413) {
      ReplyError(res, {413, "the request body is larger than the server's limit", "invalid_request_error", ""});
    } else if (res.status == 404) {
      ReplyError(res, {404, fmt::format("no route {} {}", req.method, req.path), "not_found_error", ""});
    } else {
      ReplyError(res, {res.status, fmt::format("HTTP {}", res.status), "invalid_request_error", ""});
    }
  });

  s.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
    auto header = [&](const char* name) -> const std::string* {
      auto it = req.headers.find(name);
      return it == req.headers.end() ? nullptr : &it->second;
    };
    const RequestHead head{req.method,
                           req.path,
                           header("Host"),
                           header("Authorization"),
                           header("Content-Type"),
                           header("Origin"),
                           header("Access-Control-Request-Method"),
                           header("Access-Control-Request-Headers")};
    auto refuse = [&](const ApiError& e) {
      if (e.status == 405) res.set_header("Allow", RouteMethods(req.path));
      if (e.status == 401) res.set_header("WWW-Authenticate", "Bearer");
      ReplyError(res, e);
      return httplib::Server::HandlerResponse::Handled;
    };
    CorsAnswer cors;
    // The Host check first (a preflight too: DNS rebinding), then CORS, then the rest.
    if (auto e = CheckHost(cfg_.access, cfg_.host, head.host)) return refuse(*e);
    if (auto e = Cors(cfg_.access, head, &cors)) return refuse(*e);
    for (const auto& [k, v] : cors.headers) res.set_header(k.c_str(), v);
    if (cors.preflight) {
      res.status = cors.status;
      return httplib::Server::HandlerResponse::Handled;
    }
    if (auto e = CheckAccess(cfg_.access, cfg_.host, head)) return refuse(*e);
    if (draining_ && req.method == "POST") {
      res.set_header("Connection", "close");
      return refuse({503, "the server is shutting down", "service_unavailable", ""});
    }
    return httplib::Server::HandlerResponse::Unhandled;
  });

  s.Get("/health", [this](const httplib::Request&, httplib::Response& res) {
    const EngineStats st = engine_.Stats();
    Reply(res, draining_ ? 503 : 200,
          {{"status", draining_ ? "draining" : "ok"}, {"waiting", st.waiting}, {"running", st.running}});
  });

  s.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
    std::map<int32_t, std::string> slot_names;
    for (const auto& [name, a] : models_.adapters) {
      slot_names[a.slots.lora] = name;
      if (a.slots.exact >= 0) slot_names[a.slots.exact] = name;
    }
    res.set_content(metrics_.Render(engine_.Stats(), slot_names, static_cast<int>(models_.adapters.size())),
                    "text/plain; version=0.0.4");
  });

  // The base and every adapter as OpenAI model objects (GET /v1/models lists them, GET
  // /v1/models/{id} answers one).
  auto model_objects = [this]() {
    const int64_t created = std::time(nullptr);
    ojson data = ojson::array();
    data.push_back({{"id", models_.base_name}, {"object", "model"}, {"created", created}, {"owned_by", "graft"},
                    {"root", models_.base_name}, {"parent", nullptr}, {"max_model_len", models_.context}});
    for (const auto& [name, a] : models_.adapters) {
      ojson modes = ojson::array(), memory = ojson::object();
      modes.push_back("lora");
      memory["lora"] = a.lora_bytes;
      if (a.slots.exact >= 0) {
        modes.push_back("exact");
        memory["exact"] = a.lora_bytes + a.exact_bytes;  // factors + residuals
      }
      data.push_back({{"id", name}, {"object", "model"}, {"created", created}, {"owned_by", "graft"},
                      {"root", name}, {"parent", models_.base_name}, {"max_model_len", models_.context},
                      {"modes", modes}, {"default_mode", a.slots.default_exact && a.slots.exact >= 0 ? "exact" : "lora"},
                      {"memory_bytes", memory},
                      {"shared_exact_scratch_bytes", a.slots.exact >= 0 ? models_.exact_scratch_bytes : 0},
                      {"shared_exact_base_copy_bytes", a.slots.exact >= 0 ? models_.exact_base_bytes : 0}});
    }
    return data;
  };
  s.Get("/v1/models", [model_objects](const httplib::Request&, httplib::Response& res) {
    Reply(res, 200, {{"object", "list"}, {"data", model_objects()}});
  });
  s.Get(R"(/v1/models/(.+))", [model_objects](const httplib::Request& req, httplib::Response& res) {
    const std::string id = req.matches[1];
    for (const auto& m : model_objects()) {
      if (m["id"] == id) return Reply(res, 200, m);
    }
    ReplyError(res, {404, fmt::format("The model '{}' does not exist; GET /v1/models lists the base and every adapter",
                                      id.substr(0, 200)),
                     "not_found_error", "model"});
  });
  s.Get("/version", [](const httplib::Request&, httplib::Response& res) { Reply(res, 200, {{"version", kGraftVersion}}); });

  auto generation = [this](bool chat) {
    return [this, chat](const httplib::Request& req, httplib::Response& res) {
      const auto t0 = Clock::now();
      auto flight = std::make_shared<InFlight>(in_flight_);
      const std::string endpoint = chat ? "/v1/chat/completions" : "/v1/completions";
      nlohmann::json body;
      auto api = std::make_shared<GenerationApiRequest>();
      std::optional<ApiError> err = ParseBody(req, &body);
      if (!err) err = ParseGenerationRequest(body, chat, models_, tok_, tmpl_, stop_tokens_, api.get(), &req.body);
      if (err) return Refuse(res, *err, endpoint, api->model, std::chrono::duration<double>(Clock::now() - t0).count());
      // Every choice into the engine, its events tagged with its index on one channel; they share
      // one cancellation flag (a hang-up or a failed submit stops them all).
      auto ch = std::make_shared<Channel>();
      auto cancelled = api->gen.cancelled;
      const int count = static_cast<int>(api->choices.size());
      for (int i = 0; i < count; ++i) {
        GenerationRequest& g = api->choices[static_cast<size_t>(i)];
        g.on_event = [ch, i](const GenEvent& e) { ch->Push(i, e); };
        g.deadline = Deadline(t0);
        const Status st = engine_.Submit(g);
        if (!st.ok()) {
          cancelled->store(true);
          return Refuse(res, FromStatus(st), endpoint, api->model, std::chrono::duration<double>(Clock::now() - t0).count());
        }
      }
      const std::string id = NewId(chat ? "chatcmpl-" : "cmpl-");
      auto summary = std::make_shared<Finished>();
      const int64_t created = std::time(nullptr);
      // Usage: each prompt's tokens once (its n choices share it, as vLLM counts), every choice's output.
      auto prompt_tokens = std::make_shared<int>(0), completion_tokens = std::make_shared<int>(0);
      if (!api->stream) {
        std::vector<std::string> texts(static_cast<size_t>(count));
        if (api->echo) texts = api->echo_texts;  // completions' echo: the prompt first
        std::vector<ChoiceResult> results(static_cast<size_t>(count));
        std::optional<Status> failed;
        for (int done = 0; done < count && !failed;) {
          int i = 0;
          GenEvent e;
          if (!ch->Pop(&i, &e, std::chrono::milliseconds(200))) continue;
          ChoiceResult& r = results[static_cast<size_t>(i)];
          if (e.kind == GenEvent::Kind::kDelta) {
            texts[static_cast<size_t>(i)] += e.text;
            r.logprobs.insert(r.logprobs.end(), e.prompt_logprobs.begin(), e.prompt_logprobs.end());
            r.logprobs.insert(r.logprobs.end(), e.logprobs.begin(), e.logprobs.end());
          } else if (e.kind == GenEvent::Kind::kDone) {
            metrics_.ObserveGeneration(api->model, e.times, e.prompt_tokens, e.completion_tokens, e.finish_reason);
            if (i == 0) summary->times = e.times, summary->finish = e.finish_reason;
            r.finish_reason = e.finish_reason;
            if (i % api->n == 0) *prompt_tokens += e.prompt_tokens;
            *completion_tokens += e.completion_tokens;
            ++done;
          } else {
            failed = e.error;
          }
        }
        if (failed) {
          cancelled->store(true);
          ReplyError(res, FromStatus(*failed));
        } else {
          for (int i = 0; i < count; ++i) {
            ChoiceResult& r = results[static_cast<size_t>(i)];
            if (api->chat) {
              ChatOutputParser parser(api->output);
              r.out = parser.Feed(texts[static_cast<size_t>(i)]);
              r.out.Append(parser.Finish());
            } else {
              r.out.content = std::move(texts[static_cast<size_t>(i)]);
            }
          }
          Reply(res, 200, CompletionJson(*api, id, created, results, *prompt_tokens, *completion_tokens));
        }
        const double secs = std::chrono::duration<double>(Clock::now() - t0).count();
        metrics_.Observe(endpoint, api->model, res.status, secs);
        summary->prompt_tokens = *prompt_tokens;
        summary->completion_tokens = *completion_tokens;
        LogRequest(id, endpoint, api->model, res.status, secs, summary.get());
        return;
      }
      res.set_header("Cache-Control", "no-cache");
      struct Streamed {
        ChatOutputParser parser;
        int calls = 0;        // tool calls streamed so far
        bool echoed = false;  // completions' echo: the prompt's text went out
      };
      auto streams = std::make_shared<std::vector<Streamed>>();
      for (int i = 0; i < count; ++i) streams->push_back({ChatOutputParser(api->output), 0, !api->echo});
      auto sent_role = std::make_shared<bool>(false);
      auto finished = std::make_shared<bool>(false);
      auto remaining = std::make_shared<int>(count);
      res.set_chunked_content_provider(
          "text/event-stream",
          [this, api, ch, id, created, sent_role, finished, streams, remaining, prompt_tokens, completion_tokens,
           summary](size_t, httplib::DataSink& sink) {
            if (*finished) {
              sink.done();
              return true;
            }
            if (!sink.is_writable()) return false;
            std::string out;
            if (api->chat && !*sent_role) {
              const std::string role = "assistant";
              for (int i = 0; i < static_cast<int>(streams->size()); ++i) {
                out += Sse(ChunkJson(*api, id, created, i, &role, ChatOutput{}, 0, nullptr, nullptr));
              }
              *sent_role = true;
            }
            int i = 0;
            GenEvent e;
            if (ch->Pop(&i, &e, std::chrono::milliseconds(100))) {
              Streamed& st = (*streams)[static_cast<size_t>(i)];
              // A chat delta goes through the choice's output parser, which may hold text back (a
              // tag not yet complete); the logprobs go with whatever the delta released.
              auto piece = [&](ChatOutput o, const std::vector<TokenLogprob>* lps) {
                if (o.empty() && !(api->logprobs && lps && !lps->empty())) return;
                out += Sse(ChunkJson(*api, id, created, i, nullptr, o, st.calls, lps, nullptr));
                st.calls += static_cast<int>(o.tool_calls.size());
              };
              if (!st.echoed) {  // the prompt first, with its logprobs when they are asked for
                ChatOutput o;
                o.content = api->echo_texts[static_cast<size_t>(i)];
                out += Sse(ChunkJson(*api, id, created, i, nullptr, o, 0, &e.prompt_logprobs, nullptr));
                st.echoed = true;
                e.prompt_logprobs.clear();
              }
              if (e.kind == GenEvent::Kind::kDelta && e.text.empty() && e.logprobs.empty()) {
                // the prompt's logprobs alone: sent with the echo above
              } else if (e.kind == GenEvent::Kind::kDelta) {
                if (api->chat) {
                  piece(st.parser.Feed(e.text), &e.logprobs);
                } else {
                  ChatOutput o;
                  o.content = e.text;
                  out += Sse(ChunkJson(*api, id, created, i, nullptr, o, 0, &e.logprobs, nullptr));
                }
              } else if (e.kind == GenEvent::Kind::kDone) {
                metrics_.ObserveGeneration(api->model, e.times, e.prompt_tokens, e.completion_tokens, e.finish_reason);
                if (i == 0) summary->times = e.times, summary->finish = e.finish_reason;
                if (api->chat) piece(st.parser.Finish(), nullptr);
                const std::string finish = st.calls > 0 ? "tool_calls" : e.finish_reason;
                out += Sse(ChunkJson(*api, id, created, i, nullptr, ChatOutput{}, 0, nullptr, &finish));
                if (i % api->n == 0) *prompt_tokens += e.prompt_tokens;
                *completion_tokens += e.completion_tokens;
                if (--*remaining == 0) {
                  if (api->include_usage) {
                    ojson u = ChunkJson(*api, id, created, 0, nullptr, ChatOutput{}, 0, nullptr, nullptr);
                    u["choices"] = ojson::array();
                    u["usage"] = {{"prompt_tokens", *prompt_tokens}, {"completion_tokens", *completion_tokens},
                                  {"total_tokens", *prompt_tokens + *completion_tokens}};
                    out += Sse(u);
                  }
                  out += "data: [DONE]\n\n";
                  *finished = true;
                }
              } else {
                api->gen.cancelled->store(true);  // the other choices stop too
                summary->finish = "error";
                out += Sse(FromStatus(e.error).Json());
                out += "data: [DONE]\n\n";
                *finished = true;
              }
            }
            if (!out.empty() && !sink.write(out.data(), out.size())) return false;
            return true;
          },
          [this, cancelled, api, endpoint, t0, id, summary, prompt_tokens, completion_tokens, flight](bool success) {
            if (!success) cancelled->store(true);  // the client hung up: stop generating
            const double secs = std::chrono::duration<double>(Clock::now() - t0).count();
            metrics_.Observe(endpoint, api->model, success ? 200 : 499, secs);
            summary->prompt_tokens = *prompt_tokens;
            summary->completion_tokens = *completion_tokens;
            LogRequest(id, endpoint, api->model, success ? 200 : 499, secs, summary.get());
          });
    };
  };
  s.Post("/v1/chat/completions", generation(true));
  s.Post("/v1/completions", generation(false));

  // OpenAI's Responses API: the chat completion the request means (server/responses.h), one choice.
  s.Post("/v1/responses", [this](const httplib::Request& req, httplib::Response& res) {
    const auto t0 = Clock::now();
    auto flight = std::make_shared<InFlight>(in_flight_);
    const std::string endpoint = "/v1/responses";
    auto api = std::make_shared<GenerationApiRequest>();
    std::string chat_raw;
    bool stream = false;
    ResponseHead head;
    std::optional<ApiError> err;
    if (Status depth = CheckJsonDepth(req.body, "the request body"); !depth.ok()) {
      err = ApiError{400, depth.message(), "invalid_request_error", ""};
    }
    if (!err) err = ResponsesToChat(req.body, &chat_raw, &stream, &head.metadata);
    if (!err) {
      const nlohmann::json body = nlohmann::json::parse(chat_raw);
      err = ParseGenerationRequest(body, /*chat=*/true, models_, tok_, tmpl_, stop_tokens_, api.get(), &chat_raw);
    }
    if (!err && api->choices.size() != 1) err = ApiError{400, "/v1/responses makes one answer", "invalid_request_error", ""};
    if (err) return Refuse(res, *err, endpoint, api->model, std::chrono::duration<double>(Clock::now() - t0).count());
    auto ch = std::make_shared<Channel>();
    GenerationRequest& g = api->choices[0];
    g.on_event = [ch](const GenEvent& e) { ch->Push(0, e); };
    g.deadline = Deadline(t0);
    if (const Status st = engine_.Submit(g); !st.ok()) {
      return Refuse(res, FromStatus(st), endpoint, api->model, std::chrono::duration<double>(Clock::now() - t0).count());
    }
    head.id = NewId("resp_");
    auto summary = std::make_shared<Finished>();
    head.item_id = NewId("msg_");
    head.created = std::time(nullptr);
    head.model = api->model;
    if (!stream) {
      std::string text;
      GenEvent done;
      std::optional<Status> failed;
      for (bool finished = false; !finished;) {
        int i = 0;
        GenEvent e;
        if (!ch->Pop(&i, &e, std::chrono::milliseconds(200))) continue;
        if (e.kind == GenEvent::Kind::kDelta) text += e.text;
        else if (e.kind == GenEvent::Kind::kDone) done = std::move(e), finished = true;
        else failed = e.error, finished = true;
      }
      if (failed) {
        ReplyError(res, FromStatus(*failed));
      } else {
        metrics_.ObserveGeneration(api->model, done.times, done.prompt_tokens, done.completion_tokens, done.finish_reason);
        ChatOutputParser parser(api->output);
        ChatOutput out = parser.Feed(text);
        out.Append(parser.Finish());
        const std::string status = done.finish_reason == "length" ? "incomplete" : "completed";
        Reply(res, 200, ResponseJson(head, status, &out, done.prompt_tokens, done.completion_tokens));
        *summary = {done.prompt_tokens, done.completion_tokens, done.times, done.finish_reason};
      }
      const double secs = std::chrono::duration<double>(Clock::now() - t0).count();
      metrics_.Observe(endpoint, api->model, res.status, secs);
      LogRequest(head.id, endpoint, api->model, res.status, secs, summary.get());
      return;
    }
    res.set_header("Cache-Control", "no-cache");
    struct State {
      explicit State(ChatOutputOptions o) : parser(std::move(o)) {}
      ChatOutputParser parser;
      ChatOutput all;  // everything released so far
      int sequence = 0;
      bool started = false, finished = false;
    };
    auto st = std::make_shared<State>(api->output);
    res.set_chunked_content_provider(
        "text/event-stream",
        [this, api, ch, head, st, summary](size_t, httplib::DataSink& sink) {
          if (st->finished) {
            sink.done();
            return true;
          }
          if (!sink.is_writable()) return false;
          std::string out;
          const ojson at = {{"item_id", head.item_id}, {"output_index", 0}, {"content_index", 0}};
          if (!st->started) {
            const ojson r = ResponseJson(head, "in_progress", nullptr, 0, 0);
            out += ResponseEvent("response.created", {{"response", r}}, &st->sequence);
            out += ResponseEvent("response.in_progress", {{"response", r}}, &st->sequence);
            out += ResponseEvent("response.output_item.added",
                                 {{"output_index", 0},
                                  {"item", {{"type", "message"}, {"id", head.item_id}, {"status", "in_progress"},
                                            {"role", "assistant"}, {"content", ojson::array()}}}},
                                 &st->sequence);
            ojson part = at;
            part["part"] = {{"type", "output_text"}, {"text", ""}, {"annotations", ojson::array()}};
            out += ResponseEvent("response.content_part.added", part, &st->sequence);
            st->started = true;
          }
          auto release = [&](ChatOutput o) {
            if (!o.content.empty()) {
              ojson d = at;
              d["delta"] = o.content;
              out += ResponseEvent("response.output_text.delta", d, &st->sequence);
            }
            st->all.Append(std::move(o));
          };
          int i = 0;
          GenEvent e;
          if (ch->Pop(&i, &e, std::chrono::milliseconds(100))) {
            if (e.kind == GenEvent::Kind::kDelta) {
              release(st->parser.Feed(e.text));
            } else if (e.kind == GenEvent::Kind::kDone) {
              metrics_.ObserveGeneration(api->model, e.times, e.prompt_tokens, e.completion_tokens, e.finish_reason);
              *summary = {e.prompt_tokens, e.completion_tokens, e.times, e.finish_reason};
              release(st->parser.Finish());
              const std::string status = e.finish_reason == "length" ? "incomplete" : "completed";
              const ojson r = ResponseJson(head, status, &st->all, e.prompt_tokens, e.completion_tokens);
              const ojson& message = r["output"].back();
              ojson text_done = at;
              text_done["text"] = st->all.content;
              out += ResponseEvent("response.output_text.done", text_done, &st->sequence);
              ojson part_done = at;
              part_done["part"] = message["content"][0];
              out += ResponseEvent("response.content_part.done", part_done, &st->sequence);
              out += ResponseEvent("response.output_item.done", {{"output_index", 0}, {"item", message}}, &st->sequence);
              out += ResponseEvent(status == "completed" ? "response.completed" : "response.incomplete", {{"response", r}},
                                   &st->sequence);
              st->finished = true;
            } else {
              summary->finish = "error";
              ojson r = ResponseJson(head, "failed", nullptr, 0, 0);
              r["error"] = {{"code", "server_error"}, {"message", e.error.message()}};
              out += ResponseEvent("response.failed", {{"response", r}}, &st->sequence);
              st->finished = true;
            }
          }
          if (!out.empty() && !sink.write(out.data(), out.size())) return false;
          return true;
        },
        [this, api, endpoint, t0, head, summary, flight](bool success) {
          if (!success) api->gen.cancelled->store(true);  // the client hung up: stop generating
          const double secs = std::chrono::duration<double>(Clock::now() - t0).count();
          metrics_.Observe(endpoint, api->model, success ? 200 : 499, secs);
          LogRequest(head.id, endpoint, api->model, success ? 200 : 499, secs, summary.get());
        });
  });

  // vLLM's token counting endpoints (no engine involved). Metrics label a served model's name
  // only (the base when the body names none or an unknown one).
  auto served_name = [this](const nlohmann::json& body) {
    int32_t slot = 0;
    std::string name = models_.base_name;
    if (body.is_object()) (void)models_.Resolve(body, &slot, &name);
    return name;
  };
  s.Post("/tokenize", [this, served_name](const httplib::Request& req, httplib::Response& res) {
    const auto t0 = Clock::now();
    nlohmann::json body;
    std::vector<int32_t> ids;
    std::optional<ApiError> err = ParseBody(req, &body);
    if (!err) err = ParseTokenizeRequest(body, models_, tok_, tmpl_, &ids);
    if (err) ReplyError(res, *err);
    else Reply(res, 200, {{"count", ids.size()}, {"max_model_len", models_.context}, {"tokens", ids}, {"token_strs", nullptr}});
    metrics_.Observe("/tokenize", served_name(body), err ? err->status : 200,
                     std::chrono::duration<double>(Clock::now() - t0).count());
  });
  s.Post("/detokenize", [this, served_name](const httplib::Request& req, httplib::Response& res) {
    const auto t0 = Clock::now();
    nlohmann::json body;
    std::string text;
    std::optional<ApiError> err = ParseBody(req, &body);
    if (!err) err = ParseDetokenizeRequest(body, models_, tok_, &text);
    if (err) ReplyError(res, *err);
    else Reply(res, 200, {{"prompt", text}});
    metrics_.Observe("/detokenize", served_name(body), err ? err->status : 200,
                     std::chrono::duration<double>(Clock::now() - t0).count());
  });

  s.Post("/v1/decisions", [this](const httplib::Request& req, httplib::Response& res) {
    const auto t0 = Clock::now();
    const InFlight flight(in_flight_);
    nlohmann::json body;
    std::string model = models_.base_name;
    auto finish = [&](int status) {
      const double secs = std::chrono::duration<double>(Clock::now() - t0).count();
      metrics_.Observe("/v1/decisions", model, status, secs);
      LogRequest("-", "/v1/decisions", model, status, secs, nullptr);
    };
    if (auto err = ParseBody(req, &body)) {
      ReplyError(res, *err);
      return finish(err->status);
    }
    if (!body.is_object()) {
      ReplyError(res, {400, "the request body must be a JSON object", "invalid_request_error", ""});
      return finish(400);
    }
    int32_t slot = 0;
    std::string mode;
    if (auto err = models_.Resolve(body, &slot, &model, &mode)) {
      ReplyError(res, *err);
      return finish(err->status);
    }
    auto r = ParseDecisionRequest(body, cfg_.decision_limits);
    if (!r.ok()) {
      ReplyError(res, {400, r.status().message(), "invalid_request_error", ""});
      return finish(res.status);
    }
    auto result = engine_.Decide(r.value(), slot);
    if (!result.ok()) {
      ApiError e = FromStatus(result.status());
      ReplyError(res, e);
      return finish(e.status);
    }
    result->id = NewId("dec-");
    result->model = model;
    result->mode = mode;
    Reply(res, 200, DecisionResultJson(result.value()));
    finish(200);
  });
}

}  // namespace graft
