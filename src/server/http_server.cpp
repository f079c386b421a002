#include "server/http_server.h"

#include <fmt/core.h>
#include <spdlog/spdlog.h>

#include <atomic>
#include <chrono>
#include <optional>
#include <random>
#include <thread>

#include "server/responses.h"
#include "util/json_depth.h"
#include "util/seconds.h"
#include "util/version.h"

namespace graft {
namespace {

using ojson = nlohmann::ordered_json;
using Clock = std::chrono::steady_clock;


ApiError FromStatus(const Status& s) {
  switch (s.code()) {
    case StatusCode::kInvalidArgument: return {400, s.message(), "invalid_request_error", ""};
    case StatusCode::kNotFound: return {404, s.message(), "not_found_error", ""};
    case StatusCode::kResourceExhausted: return {429, s.message(), "rate_limit_error", ""};
    case StatusCode::kUnavailable: return {503, s.message(), "service_unavailable", ""};
    case StatusCode::kDeadlineExceeded: return {504, s.message(), "timeout_error", ""};
    case StatusCode::kCancelled: return {499, s.message(), "cancelled", ""};
    default: return {500, s.message(), "internal_error", ""};
  }
}

std::string Dump(const ojson& j) { return j.dump(-1, ' ', false, ojson::error_handler_t::replace); }

void Reply(HttpExchange& ex, int status, const ojson& body, HttpHeaders headers = {}) {
  ex.Reply(status, "application/json", Dump(body), std::move(headers));
}

// A 429 says when to try again (the queue drains in about a step or a request).
void ReplyError(HttpExchange& ex, const ApiError& e, HttpHeaders headers = {}) {
  if (e.status == 429) headers.emplace_back("Retry-After", "1");
  Reply(ex, e.status, e.Json(), std::move(headers));
}

std::string NewId(const char* prefix) {
  static std::atomic<uint64_t> counter{0};
  static const uint64_t salt = std::random_device{}();
  return fmt::format("{}{:012x}{:08x}", prefix, salt & 0xffffffffffffull, counter.fetch_add(1) & 0xffffffffu);
}

// A path's %XX escapes decoded (a model id may hold a '/', sent as %2F).
std::string PercentDecoded(const std::string& s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '%' && i + 2 < s.size() && std::isxdigit(static_cast<unsigned char>(s[i + 1])) &&
        std::isxdigit(static_cast<unsigned char>(s[i + 2]))) {
      out += static_cast<char>(std::stoi(s.substr(i + 1, 2), nullptr, 16));
      i += 2;
    } else {
      out += s[i];
    }
  }
  return out;
}

// Counts a request in flight until it is answered in full (or its client is gone).
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

std::string Sse(const ojson& j) { return "data: " + Dump(j) + "\n\n"; }

// An exchange whose every answer carries some headers more (CORS's).
class WithHeaders : public HttpExchange {
 public:
  WithHeaders(std::shared_ptr<HttpExchange> inner, HttpHeaders extra) : inner_(std::move(inner)), extra_(std::move(extra)) {}
  void Reply(int status, std::string content_type, std::string body, HttpHeaders headers) override {
    headers.insert(headers.end(), extra_.begin(), extra_.end());
    inner_->Reply(status, std::move(content_type), std::move(body), std::move(headers));
  }
  void StartStream(int status, std::string content_type, HttpHeaders headers) override {
    headers.insert(headers.end(), extra_.begin(), extra_.end());
    inner_->StartStream(status, std::move(content_type), std::move(headers));
  }
  void Write(std::string piece) override { inner_->Write(std::move(piece)); }
  void End() override { inner_->End(); }
  void Run(std::function<void()> fn) override { inner_->Run(std::move(fn)); }
  void OnHangUp(std::function<void()> fn) override { inner_->OnHangUp(std::move(fn)); }

 private:
  std::shared_ptr<HttpExchange> inner_;
  HttpHeaders extra_;
};

// A request between its arrival and its answer: counted in flight until Finish, which records
// its status once (the metric, the log line). Touched only inside its exchange's Run.
struct Call {
  Call(std::atomic<int>& in_flight, std::string endpoint_) : endpoint(std::move(endpoint_)) { flight.emplace(in_flight); }
  std::string endpoint, id = "-";
  Clock::time_point t0 = Clock::now();
  std::optional<InFlight> flight;
  bool finished = false;  // answered, failed or hung up: later events are dropped
  Finished summary;
  void Finish(Metrics& m, const std::string& model, int status, bool generated) {
    finished = true;
    const double secs = SecondsSince(t0);
    m.Observe(endpoint, model, status, secs);
    LogRequest(id, endpoint, model, status, secs, generated ? &summary : nullptr);
    flight.reset();
  }
};

// One generation request (chat or completions) between its submission and its answer.
struct GenerationCall : Call {
  using Call::Call;
  std::shared_ptr<GenerationApiRequest> api;
  int64_t created = 0;
  int count = 0;          // choices
  int remaining = 0;      // choices not yet done
  int prompt_tokens = 0, completion_tokens = 0, cached_tokens = 0;
  void Finish(Metrics& m, int status) {
    summary.prompt_tokens = prompt_tokens;
    summary.completion_tokens = completion_tokens;
    Call::Finish(m, api->model, status, true);
  }
  // Not streamed: the choices' text and results so far.
  std::vector<std::string> texts;
  std::vector<ChoiceResult> results;
  // Streamed: each choice's output parser, tool calls sent so far, whether its echo went out.
  struct Streamed {
    ChatOutputParser parser;
    int calls = 0;
    bool echoed = false;
  };
  std::vector<Streamed> streams;
};

}  // namespace

HttpServer::HttpServer(Engine& engine, const Tokenizer& tok, const ChatTemplate& tmpl, ServedModels models,
                       std::set<int32_t> stop_tokens, ServerConfig cfg, AdapterRegistry* runtime)
    : engine_(engine), tok_(tok), tmpl_(tmpl), models_(std::make_shared<const ServedModels>(std::move(models))),
      runtime_(runtime), stop_tokens_(std::move(stop_tokens)), cfg_(std::move(cfg)), metrics_(models_->base_name) {
  admin_ = std::thread([this] {
    std::unique_lock<std::mutex> l(admin_mu_);
    while (true) {
      admin_cv_.wait(l, [&] { return admin_stop_ || !admin_jobs_.empty(); });
      if (admin_jobs_.empty()) return;  // stopping, nothing left
      auto job = std::move(admin_jobs_.front());
      admin_jobs_.pop_front();
      l.unlock();
      job();
      l.lock();
    }
  });
  HttpLimits limits = cfg_.http;
  limits.max_body_bytes = cfg_.max_body_bytes;
  transport_ = std::make_unique<HttpTransport>(
      limits, [this](const HttpRequest& req, std::shared_ptr<HttpExchange> ex) { Handle(req, std::move(ex)); },
      [](int status, const std::string& message) {
        const char* type = status == 503 ? "service_unavailable" : "invalid_request_error";
        return Dump(ApiError{status, message, type, ""}.Json());
      });
}

HttpServer::~HttpServer() {
  Stop();
  {
    std::lock_guard<std::mutex> l(admin_mu_);
    admin_stop_ = true;
  }
  admin_cv_.notify_all();
  if (admin_.joinable()) admin_.join();  // a job left finishes first (an unload ends once the engine stops)
}

std::shared_ptr<const ServedModels> HttpServer::Served() const {
  std::lock_guard<std::mutex> l(models_mu_);
  return models_;
}

void HttpServer::SetServed(std::shared_ptr<const ServedModels> m) {
  std::lock_guard<std::mutex> l(models_mu_);
  models_ = std::move(m);
}

Status HttpServer::Bind() { return transport_->Bind(cfg_.host, cfg_.port); }

void HttpServer::Serve() { transport_->Serve(); }

void HttpServer::Stop() {
  if (transport_) transport_->Stop();
}

void HttpServer::Refuse(HttpExchange& ex, const ApiError& e, const std::string& endpoint, const std::string& model,
                        double seconds) {
  ReplyError(ex, e);
  metrics_.Observe(endpoint, model, e.status, seconds);
  LogRequest("-", endpoint, model, e.status, seconds, nullptr);
}

void HttpServer::Logged(const std::string& endpoint, const std::string& model, int status, double seconds) {
  metrics_.Observe(endpoint, model, status, seconds);
  LogRequest("-", endpoint, model, status, seconds, nullptr);
}

void HttpServer::RunAdmin(std::function<void()> job) {
  {
    std::lock_guard<std::mutex> l(admin_mu_);
    admin_jobs_.push_back(std::move(job));
  }
  admin_cv_.notify_one();
}

std::chrono::steady_clock::time_point HttpServer::Deadline(std::chrono::steady_clock::time_point arrived) const {
  if (cfg_.request_timeout_s <= 0) return {};
  return arrived + std::chrono::milliseconds(static_cast<int64_t>(cfg_.request_timeout_s * 1e3));
}

int HttpServer::Shutdown(std::chrono::milliseconds grace) {
  draining_ = true;  // connections are still accepted: /health says draining, new work gets 503
  const auto deadline = Clock::now() + grace;
  while (in_flight_.load() > 0 && Clock::now() < deadline) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  const int cut = in_flight_.load();
  engine_.Stop();  // whatever still runs ends with an error event
  const auto flush = Clock::now() + std::chrono::seconds(5);
  while (in_flight_.load() > 0 && Clock::now() < flush) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  Stop();
  return cut;
}

void HttpServer::Handle(const HttpRequest& req, Exchange ex) {
  const RequestHead head{req.method,
                         req.path,
                         req.Header("Host"),
                         req.Header("Authorization"),
                         req.Header("Content-Type"),
                         req.Header("Origin"),
                         req.Header("Access-Control-Request-Method"),
                         req.Header("Access-Control-Request-Headers")};
  auto refuse = [&](const ApiError& e) {
    HttpHeaders h;
    if (e.status == 405) h.emplace_back("Allow", RouteMethods(req.path));
    if (e.status == 401) h.emplace_back("WWW-Authenticate", "Bearer");
    ReplyError(*ex, e, std::move(h));
  };
  CorsAnswer cors;
  // The Host check first (a preflight too: DNS rebinding), then CORS, then the rest.
  if (auto e = CheckHost(cfg_.access, cfg_.host, head.host)) return refuse(*e);
  if (auto e = Cors(cfg_.access, head, &cors)) return refuse(*e);
  if (!cors.headers.empty()) ex = std::make_shared<WithHeaders>(std::move(ex), HttpHeaders(cors.headers.begin(), cors.headers.end()));
  if (cors.preflight) return ex->Reply(cors.status, "", "", {});
  if (auto e = CheckAccess(cfg_.access, cfg_.host, head)) return refuse(*e);
  if (draining_ && req.method == "POST") {
    ReplyError(*ex, {503, "the server is shutting down", "service_unavailable", ""}, {{"Connection", "close"}});
    return;
  }
  const std::string& p = req.path;
  if (req.method == "GET") {
    if (p == "/health") {
      const EngineStats st = engine_.Stats();
      return Reply(*ex, draining_ ? 503 : 200,
                   {{"status", draining_ ? "draining" : "ok"}, {"waiting", st.waiting}, {"running", st.running}});
    }
    if (p == "/metrics") return Metrics(ex);
    if (p == "/v1/models") return Models(nullptr, ex);
    if (p.rfind("/v1/models/", 0) == 0 && p.size() > 11) {
      const std::string id = PercentDecoded(p.substr(11));
      return Models(&id, ex);
    }
    if (p == "/version") return Reply(*ex, 200, {{"version", kGraftVersion}});
  } else if (req.method == "POST") {
    if (p == "/v1/chat/completions") return Generation(true, req, ex);
    if (p == "/v1/completions") return Generation(false, req, ex);
    if (p == "/v1/responses") return Responses(req, ex);
    if (p == "/v1/decisions") return Decisions(req, ex);
    if (p == "/tokenize") return Tokens(true, req, ex);
    if (p == "/detokenize") return Tokens(false, req, ex);
    if (p == "/v1/load_lora_adapter") return RuntimeAdapter(true, req, ex);
    if (p == "/v1/unload_lora_adapter") return RuntimeAdapter(false, req, ex);
  }
  ReplyError(*ex, {404, fmt::format("no route {} {}", req.method, p.substr(0, 200)), "not_found_error", ""});
}

void HttpServer::Metrics(const Exchange& ex) {
  const auto models = Served();
  std::map<int32_t, std::string> slot_names;
  for (const auto& [name, a] : models->adapters) {
    slot_names[a.slots.lora] = name;
    if (a.slots.exact >= 0) slot_names[a.slots.exact] = name;
  }
  const int max_lora = static_cast<int>(models->adapters.size()) + (runtime_ ? runtime_->capacity() : 0);
  ex->Reply(200, "text/plain; version=0.0.4", metrics_.Render(engine_.Stats(), slot_names, max_lora), {});
}

// The base and every adapter as OpenAI model objects (GET /v1/models lists them, GET
// /v1/models/{id} answers one).
void HttpServer::Models(const std::string* id, const Exchange& ex) {
  const auto served = Served();
  const ServedModels& sm = *served;
  const int64_t created = std::time(nullptr);
  ojson data = ojson::array();
  data.push_back({{"id", sm.base_name}, {"object", "model"}, {"created", created}, {"owned_by", "graft"},
                  {"root", sm.base_name}, {"parent", nullptr}, {"max_model_len", sm.context}});
  if (!sm.kv_dtype.empty()) {
    data.back()["kv_cache"] = {{"dtype", sm.kv_dtype}, {"bytes_per_token", sm.kv_bytes_per_token}, {"tokens", sm.kv_tokens}};
  }
  for (const auto& [name, a] : sm.adapters) {
    ojson modes = ojson::array(), memory = ojson::object();
    modes.push_back("lora");
    memory["lora"] = a.lora_bytes;
    if (a.slots.exact >= 0) {
      modes.push_back("exact");
      memory["exact"] = a.lora_bytes + a.exact_bytes;  // factors + residuals
    }
    data.push_back({{"id", name}, {"object", "model"}, {"created", created}, {"owned_by", "graft"},
                    {"root", name}, {"parent", sm.base_name}, {"max_model_len", sm.context},
                    {"modes", modes}, {"default_mode", a.slots.default_exact && a.slots.exact >= 0 ? "exact" : "lora"},
                    {"memory_bytes", memory},
                    {"shared_exact_scratch_bytes", a.slots.exact >= 0 ? sm.exact_scratch_bytes : 0},
                    {"shared_exact_base_copy_bytes", a.slots.exact >= 0 ? sm.exact_base_bytes : 0}});
  }
  if (!id) return Reply(*ex, 200, {{"object", "list"}, {"data", data}});
  for (const auto& m : data) {
    if (m["id"] == *id) return Reply(*ex, 200, m);
  }
  ReplyError(*ex, {404, fmt::format("The model '{}' does not exist; GET /v1/models lists the base and every adapter",
                                    id->substr(0, 200)),
                   "not_found_error", "model"});
}

void HttpServer::Generation(bool chat, const HttpRequest& req, const Exchange& ex) {
  auto call = std::make_shared<GenerationCall>(in_flight_, chat ? "/v1/chat/completions" : "/v1/completions");
  call->api = std::make_shared<GenerationApiRequest>();
  GenerationApiRequest& api = *call->api;
  nlohmann::json body;
  std::optional<ApiError> err = ParseJsonBody(req.body, &body);
  if (!err) err = ParseGenerationRequest(body, chat, *Served(), tok_, tmpl_, stop_tokens_, &api, &req.body);
  if (err) {
    Refuse(*ex, *err, call->endpoint, api.model, SecondsSince(call->t0));
    return;
  }
  call->count = call->remaining = static_cast<int>(api.choices.size());
  call->id = NewId(chat ? "chatcmpl-" : "cmpl-");
  call->created = std::time(nullptr);
  if (api.stream) {
    for (int i = 0; i < call->count; ++i) call->streams.push_back({ChatOutputParser(api.output), 0, !api.echo});
  } else {
    call->texts.resize(static_cast<size_t>(call->count));
    if (api.echo) call->texts = api.echo_texts;  // completions' echo: the prompt first
    call->results.resize(static_cast<size_t>(call->count));
  }

  // One choice's event, in order, on the exchange.
  auto on_event = [this, call, ex](int i, const GenEvent& ev) {
    if (call->finished) return;
    GenerationApiRequest& api = *call->api;
    GenEvent e = ev;
    auto done_counts = [&] {
      metrics_.ObserveGeneration(api.model, e.times, e.prompt_tokens, e.completion_tokens, e.finish_reason);
      if (i == 0) call->summary.times = e.times, call->summary.finish = e.finish_reason;
      if (i % api.n == 0) {  // a prompt once for its n choices, as vLLM counts
        call->prompt_tokens += e.prompt_tokens;
        call->cached_tokens += e.cached_tokens;
      }
      call->completion_tokens += e.completion_tokens;
    };
    auto complete = [&](int status) { call->Finish(metrics_, status); };
    if (!api.stream) {
      ChoiceResult& r = call->results[static_cast<size_t>(i)];
      if (e.kind == GenEvent::Kind::kDelta) {
        call->texts[static_cast<size_t>(i)] += e.text;
        r.logprobs.insert(r.logprobs.end(), e.prompt_logprobs.begin(), e.prompt_logprobs.end());
        r.logprobs.insert(r.logprobs.end(), e.logprobs.begin(), e.logprobs.end());
        return;
      }
      if (e.kind == GenEvent::Kind::kError) {
        api.gen.cancelled->store(true);  // the other choices stop too
        const ApiError err = FromStatus(e.error);
        ReplyError(*ex, err);
        return complete(err.status);
      }
      done_counts();
      r.finish_reason = e.finish_reason;
      if (--call->remaining > 0) return;
      for (int c = 0; c < call->count; ++c) {
        ChoiceResult& cr = call->results[static_cast<size_t>(c)];
        if (api.chat) {
          ChatOutputParser parser(api.output);
          cr.out = parser.Feed(call->texts[static_cast<size_t>(c)]);
          cr.out.Append(parser.Finish());
        } else {
          cr.out.content = std::move(call->texts[static_cast<size_t>(c)]);
        }
      }
      Reply(*ex, 200, CompletionJson(api, call->id, call->created, call->results, call->prompt_tokens, call->completion_tokens,
                                      call->cached_tokens));
      return complete(200);
    }
    GenerationCall::Streamed& st = call->streams[static_cast<size_t>(i)];
    std::string out;
    // A chat delta goes through the choice's output parser, which may hold text back (a tag
    // not yet complete); the logprobs go with whatever the delta released.
    auto piece = [&](ChatOutput o, const std::vector<TokenLogprob>* lps) {
      if (o.empty() && !(api.logprobs && lps && !lps->empty())) return;
      out += Sse(ChunkJson(api, call->id, call->created, i, nullptr, o, st.calls, lps, nullptr));
      st.calls += static_cast<int>(o.tool_calls.size());
    };
    if (!st.echoed) {  // the prompt first, with its logprobs when they are asked for
      ChatOutput o;
      o.content = api.echo_texts[static_cast<size_t>(i)];
      out += Sse(ChunkJson(api, call->id, call->created, i, nullptr, o, 0, &e.prompt_logprobs, nullptr));
      st.echoed = true;
      e.prompt_logprobs.clear();
    }
    bool end = false;
    if (e.kind == GenEvent::Kind::kDelta && e.text.empty() && e.logprobs.empty()) {
      // the prompt's logprobs alone: sent with the echo above
    } else if (e.kind == GenEvent::Kind::kDelta) {
      if (api.chat) {
        piece(st.parser.Feed(e.text), &e.logprobs);
      } else {
        ChatOutput o;
        o.content = e.text;
        out += Sse(ChunkJson(api, call->id, call->created, i, nullptr, o, 0, &e.logprobs, nullptr));
      }
    } else if (e.kind == GenEvent::Kind::kDone) {
      done_counts();
      if (api.chat) piece(st.parser.Finish(), nullptr);
      const std::string finish = st.calls > 0 ? "tool_calls" : e.finish_reason;
      out += Sse(ChunkJson(api, call->id, call->created, i, nullptr, ChatOutput{}, 0, nullptr, &finish));
      if (--call->remaining == 0) {
        if (api.include_usage) {
          ojson u = ChunkJson(api, call->id, call->created, 0, nullptr, ChatOutput{}, 0, nullptr, nullptr);
          u["choices"] = ojson::array();
          u["usage"] = UsageJson(call->prompt_tokens, call->completion_tokens, call->cached_tokens);
          out += Sse(u);
        }
        out += "data: [DONE]\n\n";
        end = true;
      }
    } else {
      api.gen.cancelled->store(true);  // the other choices stop too
      call->summary.finish = "error";
      out += Sse(FromStatus(e.error).Json());
      out += "data: [DONE]\n\n";
      end = true;
    }
    ex->Write(std::move(out));
    if (end) {
      ex->End();
      complete(200);
    }
  };

  // Submission runs on the exchange too, so no event can overtake the answer's head.
  ex->Run([this, call, ex, on_event] {
    GenerationApiRequest& api = *call->api;
    auto cancelled = api.gen.cancelled;
    ex->OnHangUp([this, call, cancelled] {
      if (call->finished) return;
      cancelled->store(true);  // the client is gone: stop generating
      call->Finish(metrics_, 499);
    });
    // Every choice into the engine; they share one cancellation flag (a hang-up or a failed
    // submit stops them all).
    for (int i = 0; i < call->count; ++i) {
      GenerationRequest& g = api.choices[static_cast<size_t>(i)];
      g.on_event = [ex, on_event, i](const GenEvent& e) { ex->Run([on_event, i, e] { on_event(i, e); }); };
      g.deadline = Deadline(call->t0);
      const Status st = engine_.Submit(g);
      g.on_event = nullptr;  // the engine holds its own copy; this one would keep the call alive
      if (!st.ok()) {
        cancelled->store(true);
        call->finished = true;
        Refuse(*ex, FromStatus(st), call->endpoint, api.model, SecondsSince(call->t0));
        call->flight.reset();
        return;
      }
    }
    if (!api.stream) return;
    ex->StartStream(200, "text/event-stream", {{"Cache-Control", "no-cache"}});
    if (api.chat) {
      const std::string role = "assistant";
      std::string out;
      for (int i = 0; i < call->count; ++i) out += Sse(ChunkJson(api, call->id, call->created, i, &role, ChatOutput{}, 0, nullptr, nullptr));
      ex->Write(std::move(out));
    }
  });
}

// OpenAI's Responses API: the chat completion the request means (server/responses.h), one choice.
void HttpServer::Responses(const HttpRequest& req, const Exchange& ex) {
  struct ResponseCall : Call {
    ResponseCall(std::atomic<int>& in_flight, ChatOutputOptions o) : Call(in_flight, "/v1/responses"), parser(std::move(o)) {}
    std::shared_ptr<GenerationApiRequest> api;
    ResponseHead head;
    bool stream = false;
    ChatOutputParser parser;
    ChatOutput all;    // streamed: everything released so far
    std::string text;  // not streamed: the whole text
    int sequence = 0;
  };
  const auto t0 = Clock::now();
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
    err = ParseGenerationRequest(body, /*chat=*/true, *Served(), tok_, tmpl_, stop_tokens_, api.get(), &chat_raw);
  }
  if (!err && api->choices.size() != 1) err = ApiError{400, "/v1/responses makes one answer", "invalid_request_error", ""};
  if (err) return Refuse(*ex, *err, endpoint, api->model, SecondsSince(t0));
  auto call = std::make_shared<ResponseCall>(in_flight_, api->output);
  call->api = api;
  call->stream = stream;
  call->t0 = t0;
  call->head = std::move(head);
  call->head.id = call->id = NewId("resp_");
  call->head.item_id = NewId("msg_");
  call->head.created = std::time(nullptr);
  call->head.model = api->model;

  auto complete = [this](ResponseCall& c, int status) { c.Finish(metrics_, c.api->model, status, true); };
  auto on_event = [this, call, ex, complete](const GenEvent& e) {
    ResponseCall& c = *call;
    if (c.finished) return;
    const std::string& model = c.api->model;
    if (!c.stream) {
      if (e.kind == GenEvent::Kind::kDelta) {
        c.text += e.text;
        return;
      }
      if (e.kind == GenEvent::Kind::kError) {
        const ApiError err = FromStatus(e.error);
        ReplyError(*ex, err);
        return complete(c, err.status);
      }
      metrics_.ObserveGeneration(model, e.times, e.prompt_tokens, e.completion_tokens, e.finish_reason);
      ChatOutput out = c.parser.Feed(c.text);
      out.Append(c.parser.Finish());
      const std::string status = e.finish_reason == "length" ? "incomplete" : "completed";
      Reply(*ex, 200, ResponseJson(c.head, status, &out, e.prompt_tokens, e.completion_tokens, e.cached_tokens));
      c.summary = {e.prompt_tokens, e.completion_tokens, e.times, e.finish_reason};
      return complete(c, 200);
    }
    std::string out;
    const ojson at = {{"item_id", c.head.item_id}, {"output_index", 0}, {"content_index", 0}};
    auto release = [&](ChatOutput o) {
      if (!o.content.empty()) {
        ojson d = at;
        d["delta"] = o.content;
        out += ResponseEvent("response.output_text.delta", d, &c.sequence);
      }
      c.all.Append(std::move(o));
    };
    bool end = false;
    if (e.kind == GenEvent::Kind::kDelta) {
      release(c.parser.Feed(e.text));
    } else if (e.kind == GenEvent::Kind::kDone) {
      metrics_.ObserveGeneration(model, e.times, e.prompt_tokens, e.completion_tokens, e.finish_reason);
      c.summary = {e.prompt_tokens, e.completion_tokens, e.times, e.finish_reason};
      release(c.parser.Finish());
      const std::string status = e.finish_reason == "length" ? "incomplete" : "completed";
      const ojson r = ResponseJson(c.head, status, &c.all, e.prompt_tokens, e.completion_tokens, e.cached_tokens);
      const ojson& message = r["output"].back();
      ojson text_done = at;
      text_done["text"] = c.all.content;
      out += ResponseEvent("response.output_text.done", text_done, &c.sequence);
      ojson part_done = at;
      part_done["part"] = message["content"][0];
      out += ResponseEvent("response.content_part.done", part_done, &c.sequence);
      out += ResponseEvent("response.output_item.done", {{"output_index", 0}, {"item", message}}, &c.sequence);
      out += ResponseEvent(status == "completed" ? "response.completed" : "response.incomplete", {{"response", r}},
                           &c.sequence);
      end = true;
    } else {
      c.summary.finish = "error";
      ojson r = ResponseJson(c.head, "failed", nullptr, 0, 0);
      r["error"] = {{"code", "server_error"}, {"message", e.error.message()}};
      out += ResponseEvent("response.failed", {{"response", r}}, &c.sequence);
      end = true;
    }
    ex->Write(std::move(out));
    if (end) {
      ex->End();
      complete(c, 200);
    }
  };

  ex->Run([this, call, ex, on_event, complete, endpoint] {
    ResponseCall& c = *call;
    auto cancelled = c.api->gen.cancelled;
    ex->OnHangUp([call, cancelled, complete] {
      if (call->finished) return;
      cancelled->store(true);  // the client is gone: stop generating
      complete(*call, 499);
    });
    GenerationRequest& g = c.api->choices[0];
    g.on_event = [ex, on_event](const GenEvent& e) { ex->Run([on_event, e] { on_event(e); }); };
    g.deadline = Deadline(c.t0);
    const Status st = engine_.Submit(g);
    g.on_event = nullptr;  // the engine holds its own copy; this one would keep the call alive
    if (!st.ok()) {
      c.finished = true;
      Refuse(*ex, FromStatus(st), endpoint, c.api->model, SecondsSince(c.t0));
      c.flight.reset();
      return;
    }
    if (!c.stream) return;
    ex->StartStream(200, "text/event-stream", {{"Cache-Control", "no-cache"}});
    const ojson r = ResponseJson(c.head, "in_progress", nullptr, 0, 0);
    std::string out = ResponseEvent("response.created", {{"response", r}}, &c.sequence);
    out += ResponseEvent("response.in_progress", {{"response", r}}, &c.sequence);
    out += ResponseEvent("response.output_item.added",
                         {{"output_index", 0},
                          {"item", {{"type", "message"}, {"id", c.head.item_id}, {"status", "in_progress"},
                                    {"role", "assistant"}, {"content", ojson::array()}}}},
                         &c.sequence);
    ojson part = {{"item_id", c.head.item_id}, {"output_index", 0}, {"content_index", 0}};
    part["part"] = {{"type", "output_text"}, {"text", ""}, {"annotations", ojson::array()}};
    out += ResponseEvent("response.content_part.added", part, &c.sequence);
    ex->Write(std::move(out));
  });
}

// vLLM's token counting endpoints (no engine involved). Metrics label a served model's name
// only (the base when the body names none or an unknown one).
void HttpServer::Tokens(bool tokenize, const HttpRequest& req, const Exchange& ex) {
  const auto t0 = Clock::now();
  const auto models = Served();
  nlohmann::json body;
  std::optional<ApiError> err = ParseJsonBody(req.body, &body);
  if (tokenize) {
    std::vector<int32_t> ids;
    if (!err) err = ParseTokenizeRequest(body, *models, tok_, tmpl_, &ids);
    if (err) ReplyError(*ex, *err);
    else Reply(*ex, 200, {{"count", ids.size()}, {"max_model_len", models->context}, {"tokens", ids}, {"token_strs", nullptr}});
  } else {
    std::string text;
    if (!err) err = ParseDetokenizeRequest(body, *models, tok_, &text);
    if (err) ReplyError(*ex, *err);
    else Reply(*ex, 200, {{"prompt", text}});
  }
  int32_t slot = 0;
  std::string name = models->base_name;
  if (body.is_object()) (void)models->Resolve(body, &slot, &name);
  metrics_.Observe(tokenize ? "/tokenize" : "/detokenize", name, err ? err->status : 200, SecondsSince(t0));
}

void HttpServer::Decisions(const HttpRequest& req, const Exchange& ex) {
  struct DecisionCall : Call {
    using Call::Call;
    std::string model, mode;
  };
  auto call = std::make_shared<DecisionCall>(in_flight_, "/v1/decisions");
  const auto models = Served();
  call->model = models->base_name;
  auto finish = [this](DecisionCall& c, int status) { c.Finish(metrics_, c.model, status, false); };
  auto refuse = [&](const ApiError& e) {
    ReplyError(*ex, e);
    finish(*call, e.status);
  };
  nlohmann::json body;
  if (auto err = ParseJsonBody(req.body, &body)) return refuse(*err);
  if (!body.is_object()) return refuse({400, "the request body must be a JSON object", "invalid_request_error", ""});
  int32_t slot = 0;
  if (auto err = models->Resolve(body, &slot, &call->model, &call->mode)) return refuse(*err);
  auto r = ParseDecisionRequest(body, cfg_.decision_limits);
  if (!r.ok()) return refuse({400, r.status().message(), "invalid_request_error", ""});
  auto cancelled = std::make_shared<std::atomic<bool>>(false);
  ex->Run([this, call, ex, cancelled, finish, r = std::move(r).value(), slot]() mutable {
    ex->OnHangUp([call, cancelled, finish] {
      if (call->finished) return;
      cancelled->store(true);  // the client is gone: the engine stops the decision at its next piece
      finish(*call, 499);
    });
    auto done = [call, ex, finish](Result<DecisionResult> result) {
      ex->Run([call, ex, finish, result = std::move(result)]() mutable {
        if (call->finished) return;
        if (!result.ok()) {
          const ApiError e = FromStatus(result.status());
          ReplyError(*ex, e);
          return finish(*call, e.status);
        }
        result->id = NewId("dec-");
        result->model = call->model;
        result->mode = call->mode;
        Reply(*ex, 200, DecisionResultJson(result.value()));
        finish(*call, 200);
      });
    };
    if (Status st = engine_.DecideAsync(std::move(r), slot, std::move(done), cancelled); !st.ok()) {
      const ApiError e = FromStatus(st);
      ReplyError(*ex, e);
      finish(*call, e.status);
    }
  });
}

}  // namespace graft
