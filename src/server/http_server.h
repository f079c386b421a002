// HttpServer: the OpenAI / vLLM API over HttpTransport (docs/style.md 10). Handlers parse and
// validate on the transport's handler threads, hand the work to the Engine as a request with a
// callback, and turn the callback's events into a response or a server-sent-event stream on the
// request's exchange: no thread waits for the engine, and a client that hangs up cancels its
// request (streamed or not, chat or decision; 499 in the metrics and the log line).
//
// Handlers never throw; errors are OpenAI error objects with fitting statuses as vLLM's server
// sets them (400 for any invalid request — a wrong type, a value out of range, an unsupported
// option —, 404 unknown model or route, 413 body too large, 429 queue full, 503 shutting down,
// 504 past --request-timeout), `code` the status; the transport's own (408, 413, 431, 400,
// 503) have the same shape. Before any handler, CheckAccess (server/access.h): 403 a Host that
// is not allowed, 405 a wrong method, 401 a missing or wrong API key, 415 a body that is not JSON.
//
// Routes: POST /v1/chat/completions, POST /v1/completions, POST /v1/responses, POST /v1/decisions,
//         POST /tokenize, POST /detokenize, POST /v1/load_lora_adapter, POST /v1/unload_lora_adapter
//         (with a runtime AdapterRegistry; else 404), GET /v1/models, GET /v1/models/{id},
//         GET /version, GET /health, GET /metrics.
// The served models are a snapshot that loads and unloads replace (a request resolves its model
// against the snapshot it read); those two run on a thread of their own, one at a time, so that no
// handler thread waits on the disk or on the requests an unload waits for.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>

#include "engine/engine.h"
#include "server/access.h"
#include "server/adapter_registry.h"
#include "server/api.h"
#include "server/http_transport.h"
#include "server/metrics.h"

namespace graft {

struct ServerConfig {
  std::string host = "127.0.0.1";
  int port = 8000;             // 0: any free port
  size_t max_body_bytes = 8u << 20;
  HttpLimits http;             // the transport's limits (server/http_transport.h); its max_body_bytes is the one above
  double request_timeout_s = 0;  // a generation past this (from arrival) ends with a 504 / an error event; 0: none
  DecisionLimits decision_limits;
  AccessConfig access;         // Host, API key, method and body-type checks (server/access.h)
};

class HttpServer {
 public:
  // runtime: where /v1/load_lora_adapter loads adapters (null: those routes answer 404).
  HttpServer(Engine& engine, const Tokenizer& tok, const ChatTemplate& tmpl, ServedModels models,
             std::set<int32_t> stop_tokens, ServerConfig cfg, AdapterRegistry* runtime = nullptr);
  ~HttpServer();
  // Binds the socket; port() is known afterwards.
  Status Bind();
  // Serves until Stop() (blocking).
  void Serve();
  void Stop();
  // Graceful shutdown (SIGTERM): from now on new work gets 503 and /health says "draining";
  // requests in flight run until they finish or `grace` passes; then the engine stops, so each
  // one still running ends with an error (a stream: an error event, then [DONE]); then the
  // listener closes. Returns how many requests the grace period cut.
  int Shutdown(std::chrono::milliseconds grace);
  int in_flight() const { return in_flight_.load(); }
  int port() const { return transport_->port(); }

 private:
  using Exchange = std::shared_ptr<HttpExchange>;
  // Every request: the access checks (server/access.h), then its route.
  void Handle(const HttpRequest& req, Exchange ex);
  void Generation(bool chat, const HttpRequest& req, const Exchange& ex);
  void Responses(const HttpRequest& req, const Exchange& ex);
  void Decisions(const HttpRequest& req, const Exchange& ex);
  void Tokens(bool tokenize, const HttpRequest& req, const Exchange& ex);
  void Metrics(const Exchange& ex);
  void Models(const std::string* id, const Exchange& ex);
  void RuntimeAdapter(bool load, const HttpRequest& req, const Exchange& ex);  // http_server_adapters.cpp
  // A request answered elsewhere: its metric and its log line.
  void Logged(const std::string& endpoint, const std::string& model, int status, double seconds);
  void RunAdmin(std::function<void()> job);  // on the admin thread, after the jobs before it
  // The served models now (loads and unloads swap in a new snapshot).
  std::shared_ptr<const ServedModels> Served() const;
  void SetServed(std::shared_ptr<const ServedModels> m);
  // A request refused before it reached the engine (or by it): the error, its metric, its log line.
  void Refuse(HttpExchange& ex, const ApiError& e, const std::string& endpoint, const std::string& model, double seconds);
  // A generation arriving now: its --request-timeout deadline (the epoch: none).
  std::chrono::steady_clock::time_point Deadline(std::chrono::steady_clock::time_point arrived) const;
  Engine& engine_;
  const Tokenizer& tok_;
  const ChatTemplate& tmpl_;
  mutable std::mutex models_mu_;
  std::shared_ptr<const ServedModels> models_;  // GUARDED_BY(models_mu_)
  std::set<std::string> loading_;               // GUARDED_BY(models_mu_): names a load is reading
  AdapterRegistry* runtime_;
  // Loads and unloads, one at a time off the handler threads.
  std::mutex admin_mu_;
  std::condition_variable admin_cv_;
  std::deque<std::function<void()>> admin_jobs_;  // GUARDED_BY(admin_mu_)
  bool admin_stop_ = false;                       // GUARDED_BY(admin_mu_)
  std::thread admin_;
  std::set<int32_t> stop_tokens_;
  ServerConfig cfg_;
  graft::Metrics metrics_;
  std::atomic<bool> draining_{false};
  std::atomic<int> in_flight_{0};  // generation and decision requests not yet answered in full
  std::unique_ptr<HttpTransport> transport_;
};

}  // namespace graft
