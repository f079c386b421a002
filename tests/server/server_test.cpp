// The HTTP server end to end, in process: OpenAI shapes, decisions, isolation of chat from
// adapter decisions, concurrency, and a hostile-input suite after which it still answers.
#include "server/api.h"
#include "server/http_server.h"
#include "server/metrics.h"
#include "server/stats_log.h"

#include <fmt/core.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <spdlog/sinks/ringbuffer_sink.h>
#include <spdlog/spdlog.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <mutex>
#include <set>
#include <sstream>
#include <thread>

#include "adapters/lora_loader.h"
#include "backend/cpu/cpu_ops.h"
#include "test_util.h"
#include "util/version.h"
#include "engine/decision_scorer.h"
#include "tools/generate.h"

namespace graft {
namespace {

using json = nlohmann::json;

class Server : public ::testing::Test {
 protected:
  void SetUp() override {
    model_ = test::LoadFixtureModel("qwen3_5-wrapper");
    tok_ = Tokenizer::FromFile(test::Fixture("qwen3_5-wrapper/tokenizer.json")).value();
    tmpl_ = ChatTemplate::Load(test::Fixture("qwen3_5-wrapper"), "").value();
    auto a = LoadLoraAdapter(test::Fixture("adapters/qwen3_5-wrapper-lora-gdn"), model_->config(), {"gdn", false, nullptr});
    ASSERT_TRUE(a.ok());
    adapter_ = std::make_unique<LoraAdapter>(std::move(a).value());
    set_.slots.push_back(adapter_.get());
    ServedModels served;
    served.base_name = "base";
    served.adapters["gdn"].slots.lora = 1;
    served.context = model_->config().max_position_embeddings;
    served.kv_tokens = 8192;
    served.kv_dtype = "float32";
    served.turn_snapshots = true;  // as graft serve sets it for this recurrent model with its prefix cache
    served.kv_bytes_per_token = 2 * int64_t{model_->config().num_kv_heads} * model_->config().head_dim * 4 *
                                model_->config().num_layers_of(LayerKind::kFullAttention);
    EngineConfig ec;
    ec.max_step_tokens = 64;
    ec.kv_token_budget = 8192;
    engine_ = std::make_unique<Engine>(ec, *model_, std::make_unique<CpuOps>(ActDtype::kBF16, 2), *tok_, *tmpl_, set_);
    ServerConfig sc;
    sc.port = 0;
    sc.max_body_bytes = 1 << 20;
    sc.access.api_key = kKey;
    server_ = std::make_unique<HttpServer>(*engine_, *tok_, *tmpl_, served,
                                           StopTokens(test::Fixture("qwen3_5-wrapper"), model_->config(), *tok_, tmpl_.get()), sc);
    ASSERT_TRUE(server_->Bind().ok());
    thread_ = std::thread([this] { server_->Serve(); });
  }
  void TearDown() override {
    server_->Stop();
    if (thread_.joinable()) thread_.join();
    engine_->Stop();
  }
  httplib::Client Client() {
    httplib::Client c("127.0.0.1", server_->port());
    c.set_read_timeout(60, 0);
    c.set_bearer_token_auth(kKey);
    return c;
  }
  static constexpr const char* kKey = "test-key-1";
  std::pair<int, json> Post(const std::string& path, const std::string& body) {
    auto c = Client();
    auto r = c.Post(path.c_str(), body, "application/json");
    if (!r) return {-1, json()};
    return {r->status, json::parse(r->body, nullptr, false)};
  }
  std::string Chat(int max_tokens = 12) {
    auto [status, j] = Post("/v1/chat/completions",
                            R"({"model": "base", "messages": [{"role": "user", "content": "Tell me about logs."}], "max_tokens": )" +
                                std::to_string(max_tokens) + R"(, "temperature": 0, "logprobs": true, "top_logprobs": 3})");
    EXPECT_EQ(status, 200) << j.dump();
    return j["choices"][0].dump();  // content and logprobs
  }
  static std::string Decision(const std::string& record) {
    return json{{"model", "gdn"},
                {"record", record},
                {"questions", {{{"id", "m"}, {"question", "Malicious?"}, {"choices", {"yes", "no"}}},
                               {{"id", "c"}, {"question", "Category?"}, {"choices", {"sqli", "xss", "none"}}}}}}
        .dump();
  }

  std::unique_ptr<Model> model_;
  std::shared_ptr<const Tokenizer> tok_;
  std::shared_ptr<const ChatTemplate> tmpl_;
  std::unique_ptr<LoraAdapter> adapter_;
  AdapterSet set_;
  std::unique_ptr<Engine> engine_;
  std::unique_ptr<HttpServer> server_;
  std::thread thread_;
};

// No SO_REUSEPORT: a second server on a busy port fails to bind, naming the port and why,
// instead of sharing the connections with the first.
TEST_F(Server, ASecondServerOnABusyPortFailsToBind) {
  ServerConfig sc;
  sc.port = server_->port();
  HttpServer second(*engine_, *tok_, *tmpl_, ServedModels{}, {}, sc);
  const Status s = second.Bind();
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.message(), fmt::format("cannot listen on 127.0.0.1:{}: the port is in use (another server is listening there?)",
                                     server_->port()));
  EXPECT_EQ(Post("/v1/chat/completions", "{}").first, 400);  // the first still answers
}

// Structured output: every choice's text parses and has the schema's shape, also streamed; a
// choice list and json_object likewise.
TEST_F(Server, StructuredOutputFollowsTheSchemaAndChoices) {
  const std::string schema = R"({"type": "object", "properties": {"verdict": {"enum": ["benign", "malicious"]},
      "score": {"type": "integer"}, "why": {"type": "string", "maxLength": 12}}, "required": ["verdict", "score"],
      "additionalProperties": false})";
  const std::string chat = R"("messages": [{"role": "user", "content": "Classify the log."}], "max_tokens": 300,
      "chat_template_kwargs": {"enable_thinking": false})";
  for (const char* sampling : {R"("temperature": 0)", R"("temperature": 1, "seed": 5, "n": 2)"}) {
    auto [status, j] = Post("/v1/chat/completions", "{" + chat + ", " + sampling +
                                                        R"(, "response_format": {"type": "json_schema", "json_schema": {"name": "v", "schema": )" +
                                                        schema + "}}}");
    ASSERT_EQ(status, 200) << j.dump();
    for (const auto& c : j["choices"]) {
      const std::string text = c["message"]["content"].get<std::string>();
      auto v = json::parse(text, nullptr, false);
      ASSERT_TRUE(v.is_object()) << text;
      EXPECT_TRUE(v["verdict"] == "benign" || v["verdict"] == "malicious") << text;
      EXPECT_TRUE(v["score"].is_number_integer()) << text;
      for (const auto& [k, x] : v.items()) EXPECT_TRUE(k == "verdict" || k == "score" || k == "why") << text;
      EXPECT_EQ(c["finish_reason"], "stop") << text;
      EXPECT_EQ(text.find("\"verdict\""), text.find('"')) << "properties in the schema's order: " << text;
    }
  }
  auto [cs, cj] = Post("/v1/completions", R"({"prompt": "The answer is", "max_tokens": 20, "temperature": 0,
      "guided_choice": ["alpha", "beta gamma"]})");
  ASSERT_EQ(cs, 200) << cj.dump();
  const std::string choice = cj["choices"][0]["text"];
  EXPECT_TRUE(choice == "alpha" || choice == "beta gamma") << choice;
  auto [rs, rj] = Post("/v1/completions", R"({"prompt": "The date:", "max_tokens": 20, "temperature": 0,
      "guided_regex": "\\d{4}-\\d{2}-\\d{2}"})");
  ASSERT_EQ(rs, 200) << rj.dump();
  const std::string date = rj["choices"][0]["text"];
  EXPECT_EQ(date.size(), 10u) << date;
  EXPECT_TRUE(date.size() == 10 && date[4] == '-' && date[7] == '-' && std::isdigit(static_cast<unsigned char>(date[0]))) << date;
  EXPECT_EQ(rj["choices"][0]["finish_reason"], "stop");
  auto [os, oj] = Post("/v1/completions", R"({"prompt": "{", "max_tokens": 300, "temperature": 0,
      "structured_outputs": {"json_object": true}})");
  ASSERT_EQ(os, 200) << oj.dump();
  EXPECT_TRUE(json::parse(oj["choices"][0]["text"].get<std::string>(), nullptr, false).is_object()) << oj.dump();
}

// tool_choice "required" and a named function force calls: the answer is tool_calls whose
// arguments follow the tool's parameters, finish_reason "tool_calls".
TEST_F(Server, ToolChoiceForcesCallsThatFollowTheParameters) {
  const std::string tools = R"("tools": [
      {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object",
        "properties": {"city": {"type": "string", "maxLength": 10}, "days": {"type": "integer"}}, "required": ["city", "days"]}}},
      {"type": "function", "function": {"name": "get_time", "parameters": {"type": "object",
        "properties": {"zone": {"enum": ["UTC", "CET"]}}, "required": ["zone"]}}}])";
  for (const char* choice : {R"("required")", R"({"type": "function", "function": {"name": "get_time"}})"}) {
    auto [status, j] = Post("/v1/chat/completions", R"({"messages": [{"role": "user", "content": "Weather?"}], "max_tokens": 400,
        "temperature": 0, "chat_template_kwargs": {"enable_thinking": false}, )" + tools + R"(, "tool_choice": )" + choice + "}");
    ASSERT_EQ(status, 200) << j.dump();
    const auto& c = j["choices"][0];
    EXPECT_EQ(c["finish_reason"], "tool_calls") << j.dump();
    ASSERT_TRUE(c["message"]["tool_calls"].is_array() && !c["message"]["tool_calls"].empty()) << j.dump();
    for (const auto& call : c["message"]["tool_calls"]) {
      const std::string name = call["function"]["name"];
      auto args = json::parse(call["function"]["arguments"].get<std::string>(), nullptr, false);
      ASSERT_TRUE(args.is_object()) << j.dump();
      if (std::string(choice) != R"("required")") {
        EXPECT_EQ(name, "get_time");
      }
      if (name == "get_weather") {
        EXPECT_TRUE(args["city"].is_string() && args["days"].is_number_integer()) << args.dump();
      } else {
        ASSERT_EQ(name, "get_time");
        EXPECT_TRUE(args["zone"] == "UTC" || args["zone"] == "CET") << args.dump();
      }
    }
  }
}

// /v1/responses answers what the same chat completion answers, as a response object.
TEST_F(Server, ResponsesApiAnswersAsTheChatCompletionDoes) {
  auto [cs, cj] = Post("/v1/chat/completions", R"({"messages": [{"role": "system", "content": "Be brief."},
      {"role": "user", "content": "Tell me about logs."}], "max_tokens": 9, "temperature": 0, "chat_template_kwargs": {"enable_thinking": false}})");
  ASSERT_EQ(cs, 200) << cj.dump();
  auto [rs, rj] = Post("/v1/responses", R"({"instructions": "Be brief.", "input": [{"type": "message", "role": "user",
      "content": [{"type": "input_text", "text": "Tell me about logs."}]}], "max_output_tokens": 9, "temperature": 0,
      "metadata": {"case": "a"}, "store": false, "chat_template_kwargs": {"enable_thinking": false}})");
  ASSERT_EQ(rs, 200) << rj.dump();
  EXPECT_EQ(rj["object"], "response");
  EXPECT_EQ(rj["id"].get<std::string>().rfind("resp_", 0), 0u);
  EXPECT_EQ(rj["status"], cj["choices"][0]["finish_reason"] == "length" ? "incomplete" : "completed");
  EXPECT_EQ(rj["metadata"]["case"], "a");
  const auto& msg = rj["output"].back();
  EXPECT_EQ(msg["type"], "message");
  EXPECT_EQ(msg["content"][0]["type"], "output_text");
  EXPECT_EQ(msg["content"][0]["text"], cj["choices"][0]["message"]["content"]);
  EXPECT_EQ(rj["usage"]["input_tokens"], cj["usage"]["prompt_tokens"]);
  EXPECT_EQ(rj["usage"]["output_tokens"], cj["usage"]["completion_tokens"]);
}

// One log line a request, logfmt: id, endpoint, model, status, tokens, the engine's timeline.
// The stats line sums a period.
TEST_F(Server, EachRequestLogsOneLineAndStatsSumAPeriod) {
  // A request's line is written when its call ends, which can be after the client has its answer:
  // wait for both lines, and keep the capturing logger alive for the server's other threads (a
  // thread-safe ring of the last lines, never freed under a thread still logging into it).
  static const auto sink = std::make_shared<spdlog::sinks::ringbuffer_sink_mt>(256);
  static const auto logger = std::make_shared<spdlog::logger>("t", sink);
  auto previous = spdlog::default_logger();
  spdlog::set_default_logger(logger);
  Chat(5);
  (void)Post("/v1/chat/completions", R"({"messages": "nope"})");
  auto captured = [] {
    std::string all;
    for (const auto& line : sink->last_formatted()) all += line;
    return all;
  };
  for (int i = 0; i < 200 && captured().find("status=400") == std::string::npos; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  spdlog::set_default_logger(previous);
  const std::string log = captured();
  EXPECT_NE(log.find("request id=chatcmpl-"), std::string::npos) << log;
  EXPECT_NE(log.find(" endpoint=/v1/chat/completions model=base status=200 prompt_tokens="), std::string::npos) << log;
  EXPECT_NE(log.find(" completion_tokens=5 queue_ms="), std::string::npos) << log;
  EXPECT_NE(log.find(" finish=length total_ms="), std::string::npos) << log;
  EXPECT_NE(log.find("request id=- endpoint=/v1/chat/completions model=base status=400 total_ms="), std::string::npos) << log;
  EngineStats a, b;
  b.prompt_tokens = 200;
  b.generated_tokens = 50;
  b.running = 2;
  b.kv_reserved = 1024;
  b.kv_budget = 8192;
  EXPECT_EQ(StatsLine(a, b, 10.0), "stats: prompt 20.0 tok/s, generation 5.0 tok/s, running 2, waiting 0, KV 12.5% of 8192 tokens");
}

// A long stream, read whole on its own thread (its SSE text), started once the server counts it.
std::thread LongStream(int port, std::string* sse, int max_tokens) {
  return std::thread([port, sse, max_tokens] {
    httplib::Client c("127.0.0.1", port);
    c.set_read_timeout(60, 0);
    c.set_bearer_token_auth("test-key-1");
    const std::string body = R"({"messages": [{"role": "user", "content": "Go on."}], "stream": true, "temperature": 0,
        "ignore_eos": true, "max_tokens": )" + std::to_string(max_tokens) + "}";
    auto r = c.Post("/v1/chat/completions", httplib::Headers{}, body, "application/json");
    if (r) *sse = r->body;
  });
}

// SIGTERM's path: in-flight work runs to its end while new work gets 503 and /health says draining.
TEST_F(Server, ShutdownLetsInFlightWorkFinishAndRefusesNewWork) {
  std::string sse;
  std::thread stream = LongStream(server_->port(), &sse, 1000);
  for (int i = 0; i < 500 && server_->in_flight() == 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(2));
  ASSERT_EQ(server_->in_flight(), 1);
  int cut = -1;
  std::thread shutdown([&] { cut = server_->Shutdown(std::chrono::seconds(60)); });
  for (int i = 0; i < 500; ++i) {
    auto h = Client().Get("/health");
    if (h && h->status == 503) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  auto h = Client().Get("/health");
  ASSERT_TRUE(h);
  EXPECT_EQ(h->status, 503);
  EXPECT_EQ(json::parse(h->body)["status"], "draining");
  auto [status, j] = Post("/v1/chat/completions", R"({"messages": [{"role": "user", "content": "x"}], "max_tokens": 1})");
  EXPECT_EQ(status, 503) << j.dump();
  EXPECT_EQ(j["error"]["message"], "the server is shutting down");
  stream.join();
  shutdown.join();
  EXPECT_EQ(cut, 0);
  EXPECT_NE(sse.find(R"("finish_reason":"length")"), std::string::npos) << sse.substr(sse.size() > 300 ? sse.size() - 300 : 0);
  EXPECT_EQ(sse.find("\"error\""), std::string::npos);
  EXPECT_EQ(sse.substr(sse.size() - 14), "data: [DONE]\n\n");
}

// Past the grace period the engine stops: a stream still running ends with an error event and [DONE].
TEST_F(Server, ShutdownPastItsGraceEndsStreamsWithAnErrorAndDone) {
  std::string sse;
  std::thread stream = LongStream(server_->port(), &sse, 1000);
  for (int i = 0; i < 500 && server_->in_flight() == 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(2));
  ASSERT_EQ(server_->in_flight(), 1);
  std::this_thread::sleep_for(std::chrono::milliseconds(30));  // some tokens out
  EXPECT_EQ(server_->Shutdown(std::chrono::milliseconds(0)), 1);
  stream.join();
  EXPECT_NE(sse.find("the server is shutting down"), std::string::npos) << sse.substr(sse.size() > 300 ? sse.size() - 300 : 0);
  EXPECT_EQ(sse.find(R"("finish_reason":"length")"), std::string::npos);
  EXPECT_EQ(sse.substr(sse.size() - 14), "data: [DONE]\n\n");
  EXPECT_EQ(server_->in_flight(), 0);
}

// Completions' echo (lm-eval-harness's log-likelihood request): the text starts with the prompt,
// the logprobs cover the prompt's tokens (the first null) and then the generated ones, the
// latter as without echo.
TEST_F(Server, EchoReturnsThePromptWithItsLogprobs) {
  const std::string ask = R"("prompt": [3, 77, 104, 5, 8, 42], "max_tokens": 2, "temperature": 0, "logprobs": 1)";
  auto [es, ej] = Post("/v1/completions", "{" + ask + R"(, "echo": true})");
  auto [ps, pj] = Post("/v1/completions", "{" + ask + "}");
  ASSERT_EQ(es, 200) << ej.dump();
  ASSERT_EQ(ps, 200) << pj.dump();
  const auto& e = ej["choices"][0];
  const auto& p = pj["choices"][0];
  const std::string prompt_text = tok_->Decode({3, 77, 104, 5, 8, 42});
  EXPECT_EQ(e["text"].get<std::string>(), prompt_text + p["text"].get<std::string>());
  const auto& lp = e["logprobs"];
  ASSERT_EQ(lp["tokens"].size(), 6u + p["logprobs"]["tokens"].size()) << lp.dump();
  EXPECT_TRUE(lp["token_logprobs"][0].is_null());
  EXPECT_TRUE(lp["top_logprobs"][0].is_null());
  for (size_t i = 1; i < 6; ++i) EXPECT_LE(lp["token_logprobs"][i].get<double>(), 0.0) << i;
  for (size_t i = 0; i < p["logprobs"]["tokens"].size(); ++i) {
    EXPECT_EQ(lp["token_logprobs"][6 + i], p["logprobs"]["token_logprobs"][i]) << i;
  }
  EXPECT_EQ(ej["usage"], pj["usage"]);
  // Streamed: the prompt's text first, then the same text.
  auto c = Client();
  auto r = c.Post("/v1/completions", httplib::Headers{}, "{" + ask + R"(, "echo": true, "stream": true})", "application/json");
  ASSERT_TRUE(r);
  std::string text;
  for (size_t at = r->body.find("data: {"); at != std::string::npos; at = r->body.find("data: {", at + 1)) {
    auto chunk = json::parse(r->body.substr(at + 6, r->body.find("\n\n", at) - at - 6), nullptr, false);
    if (chunk.is_object() && !chunk["choices"].empty()) text += chunk["choices"][0].value("text", "");
  }
  EXPECT_EQ(text, e["text"].get<std::string>());
  EXPECT_EQ(Post("/v1/chat/completions", R"({"messages": [{"role": "user", "content": "x"}], "echo": true})").first, 400);
}

// A Qwen3.5 chat's next turn continues from the first turn's cache up to where the template's
// rendering of the conversation parts from the first prompt (a snapshot kept there: a recurrent
// state cannot be cut back). The bits are the engine test's (ASnapshotLetsTheNextTurnContinue...).
TEST_F(Server, AChatsNextTurnContinuesFromTheFirstTurnsSnapshot) {
  auto [s1, one] = Post("/v1/chat/completions",
                        R"({"messages": [{"role": "user", "content": "Name three colours of the sea."}], "max_tokens": 4})");
  ASSERT_EQ(s1, 200) << one.dump();
  const std::string reply = one["choices"][0]["message"].value("content", "");
  json turn2 = {{"messages", json::array({{{"role", "user"}, {"content", "Name three colours of the sea."}},
                                          {{"role", "assistant"}, {"content", reply}},
                                          {{"role", "user"}, {"content", "And of the sky?"}}})},
                {"max_tokens", 4}};
  auto [s2, two] = Post("/v1/chat/completions", turn2.dump());
  ASSERT_EQ(s2, 200) << two.dump();
  const int cached = two["usage"]["prompt_tokens_details"]["cached_tokens"].get<int>();
  EXPECT_GT(cached, 0) << "the next turn continued from the snapshot";
  EXPECT_LT(cached, one["usage"]["prompt_tokens"].get<int>());
}

TEST_F(Server, ChatCompletionShapesAndModels) {
  auto [status, j] = Post("/v1/chat/completions", R"({"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 5})");
  ASSERT_EQ(status, 200) << j.dump();
  EXPECT_EQ(j["object"], "chat.completion");
  EXPECT_EQ(j["choices"][0]["message"]["role"], "assistant");
  EXPECT_EQ(j["usage"]["completion_tokens"].get<int>() + j["usage"]["prompt_tokens"].get<int>(), j["usage"]["total_tokens"].get<int>());
  // OpenAI's prompt_tokens_details.cached_tokens: the prompt tokens continued from the prefix cache.
  ASSERT_TRUE(j["usage"].contains("prompt_tokens_details")) << j["usage"].dump();
  const int cached = j["usage"]["prompt_tokens_details"]["cached_tokens"].get<int>();
  EXPECT_GE(cached, 0);
  EXPECT_LT(cached, j["usage"]["prompt_tokens"].get<int>());
  EXPECT_TRUE(j["choices"][0]["finish_reason"] == "length" || j["choices"][0]["finish_reason"] == "stop");
  auto c = Client();
  auto m = c.Get("/v1/models");
  ASSERT_TRUE(m);
  const json models = json::parse(m->body);
  EXPECT_EQ(models["data"][0]["id"], "base");
  EXPECT_EQ(models["data"][0]["kv_cache"]["dtype"], "float32") << "the base carries the KV cache's width and capacity";
  EXPECT_GT(models["data"][0]["kv_cache"]["bytes_per_token"].get<int64_t>(), 0);
  EXPECT_EQ(models["data"][0]["kv_cache"]["tokens"].get<int64_t>(), 8192);
  EXPECT_EQ(models["data"][1]["id"], "gdn");
  EXPECT_EQ(models["data"][1]["parent"], "base");
  // One model by id (the list's own object), an unknown one a 404 naming it; the version.
  auto one = c.Get("/v1/models/gdn");
  ASSERT_TRUE(one);
  EXPECT_EQ(one->status, 200);
  EXPECT_EQ(json::parse(one->body).dump(), models["data"][1].dump());
  auto none = c.Get("/v1/models/nope");
  ASSERT_TRUE(none);
  EXPECT_EQ(none->status, 404);
  EXPECT_NE(json::parse(none->body)["error"]["message"].get<std::string>().find("The model 'nope' does not exist"),
            std::string::npos);
  auto v = c.Get("/version");
  ASSERT_TRUE(v);
  EXPECT_EQ(v->status, 200);
  EXPECT_EQ(json::parse(v->body)["version"], kGraftVersion);
  auto h = c.Get("/health");
  ASSERT_TRUE(h);
  EXPECT_EQ(h->status, 200);
  auto met = c.Get("/metrics");
  ASSERT_TRUE(met);
  EXPECT_NE(met->body.find("graft_requests_total{endpoint=\"/v1/chat/completions\",model=\"base\",status=\"200\"} 1"), std::string::npos)
      << met->body;
  EXPECT_NE(met->body.find("graft_request_duration_seconds_bucket"), std::string::npos);
  EXPECT_NE(met->body.find("graft_kv_budget_tokens 8192"), std::string::npos);
}

// vLLM's request metrics under its names and graft's: the counts add up to the requests made,
// and promtool (Prometheus's own checker) accepts the whole page.
TEST_F(Server, MetricsCarryVllmsSeriesAndPassPromtool) {
  for (int i = 0; i < 3; ++i) Chat(6 + i);
  auto c = Client();
  // The engine counts a finished sequence out of "running" when its step's bookkeeping ends, which
  // can be just after the client has its last token: read the page once that has happened.
  auto met = c.Get("/metrics");
  for (int i = 0; i < 200 && met && met->body.find("vllm:num_requests_running{model_name=\"base\"} 0") == std::string::npos;
       ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    met = c.Get("/metrics");
  }
  ASSERT_TRUE(met);
  const std::string& m = met->body;
  for (const char* series : {"num_requests_running{model_name=\"base\"} 0", "num_requests_waiting{model_name=\"base\"} 0",
                             "prompt_tokens_total{model_name=\"base\"}", "generation_tokens_total{model_name=\"base\"} 21"}) {
    EXPECT_NE(m.find(std::string("vllm:") + series), std::string::npos) << series << "\n" << m;
  }
  for (const char* series : {"graft_decisions_running 0", "graft_decision_restarts_total 0", "graft_kv_decision_tokens "}) {
    EXPECT_NE(m.find(series), std::string::npos) << series << "\n" << m;
  }
  for (const char* p : {"vllm:", "graft_"}) {
    for (const char* series : {"kv_cache_usage_perc{model_name=\"base\"} 0", "num_preemptions_total{model_name=\"base\"} 0",
                               "request_success_total{model_name=\"base\",finished_reason=\"length\"} 3",
                               "time_to_first_token_seconds_count{model_name=\"base\"} 3",
                               "inter_token_latency_seconds_count{model_name=\"base\"} 18",
                               "e2e_request_latency_seconds_count{model_name=\"base\"} 3",
                               "request_queue_time_seconds_count{model_name=\"base\"} 3",
                               "request_prefill_time_seconds_bucket{model_name=\"base\",le=\"+Inf\"} 3",
                               "request_decode_time_seconds_sum{model_name=\"base\"}",
                               "request_generation_tokens_bucket{model_name=\"base\",le=\"5\"} 0",
                               "request_generation_tokens_bucket{model_name=\"base\",le=\"10\"} 3"}) {
      EXPECT_NE(m.find(std::string(p) + series), std::string::npos) << p << series << "\n" << m;
    }
  }
  EXPECT_NE(m.find(R"(vllm:lora_requests_info{max_lora="1",running_lora_adapters="",waiting_lora_adapters=""} )"),
            std::string::npos) << m;
  test::TempDir d;
  {
    std::ofstream f(d.File("metrics.txt"));
    f << m;
  }
  const std::string cmd = "promtool check metrics < " + d.File("metrics.txt") + " > " + d.File("promtool.txt") + " 2>&1";
  const int rc = std::system(cmd.c_str());
  std::ifstream out(d.File("promtool.txt"));
  const std::string said((std::istreambuf_iterator<char>(out)), std::istreambuf_iterator<char>());
  // The page parses (exit 3 is lint only) and the only lint is the colon of vLLM's own names.
  EXPECT_TRUE(WIFEXITED(rc) && (WEXITSTATUS(rc) == 0 || WEXITSTATUS(rc) == 3))
      << "promtool (installed by scripts/install-deps --oracles): " << said;
  std::istringstream lines(said);
  int colon_lints = 0;
  for (std::string line; std::getline(lines, line);) {
    const bool colon = line.rfind("vllm:", 0) == 0 && line.find(" metric names should not contain ':'") != std::string::npos;
    EXPECT_TRUE(colon) << "promtool: " << line;
    colon_lints += colon;
  }
  EXPECT_GT(colon_lints, 10) << said;
}

TEST_F(Server, StreamingEndsWithDoneAndMatchesTheNonStreamedText) {
  const std::string body = R"({"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 10, "temperature": 0, "stream": true,
                             "stream_options": {"include_usage": true}})";
  auto c = Client();
  std::string sse;
  auto r = c.Post("/v1/chat/completions", httplib::Headers{}, body, "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->get_header_value("Content-Type"), "text/event-stream");
  sse = r->body;
  ASSERT_GE(sse.size(), 14u);
  EXPECT_EQ(sse.substr(sse.size() - 14), "data: [DONE]\n\n");
  std::string text, reasoning;
  size_t pos = 0;
  bool usage = false;
  while ((pos = sse.find("data: {", pos)) != std::string::npos) {
    const size_t end = sse.find("\n\n", pos);
    const json chunk = json::parse(sse.substr(pos + 6, end - pos - 6));
    if (chunk.contains("usage")) usage = true;
    if (!chunk["choices"].empty() && chunk["choices"][0]["delta"].contains("content")) {
      text += chunk["choices"][0]["delta"]["content"].get<std::string>();
    }
    if (!chunk["choices"].empty() && chunk["choices"][0]["delta"].contains("reasoning_content")) {
      reasoning += chunk["choices"][0]["delta"]["reasoning_content"].get<std::string>();
    }
    pos = end;
  }
  EXPECT_TRUE(usage);
  auto [status, j] = Post("/v1/chat/completions", R"({"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 10, "temperature": 0})");
  ASSERT_EQ(status, 200);
  const json& m = j["choices"][0]["message"];
  EXPECT_EQ(text, m["content"].get<std::string>());
  // The fixture's template opens <think> and its random model never closes it: the text is
  // reasoning (server/chat_output.h), streamed as it is returned whole.
  ASSERT_TRUE(m.contains("reasoning_content")) << m.dump();
  EXPECT_EQ(reasoning, m["reasoning_content"].get<std::string>());
  EXPECT_FALSE(reasoning.empty());
  // Thinking off (the template closes the block): the text is content again.
  auto [s2, j2] = Post("/v1/chat/completions", R"({"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 10,
                       "temperature": 0, "chat_template_kwargs": {"enable_thinking": false}})");
  ASSERT_EQ(s2, 200);
  EXPECT_FALSE(j2["choices"][0]["message"].contains("reasoning_content"));
  EXPECT_FALSE(j2["choices"][0]["message"]["content"].get<std::string>().empty());
}

TEST_F(Server, ToolCallTurnsComeBackAsOpenAISendsThem) {
  // The second turn of a tool loop: the assistant's call with arguments as a JSON string (as
  // OpenAI clients send it back) and the tool's answer render as the template expects.
  const json tools = json::parse(R"([{"type": "function", "function": {"name": "get_weather", "parameters": {"type":
      "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}])");
  auto turn = [&](const json& arguments) {
    return json{{"messages",
                 {{{"role", "user"}, {"content", "Weather in Paris?"}},
                  {{"role", "assistant"},
                   {"content", nullptr},
                   {"tool_calls",
                    {{{"id", "call_1"}, {"type", "function"},
                      {"function", {{"name", "get_weather"}, {"arguments", arguments}}}}}}},
                  {{"role", "tool"}, {"tool_call_id", "call_1"}, {"content", "18 C, sunny"}}}},
                {"tools", tools},
                {"max_tokens", 4},
                {"temperature", 0}}
        .dump();
  };
  auto [s1, j1] = Post("/v1/chat/completions", turn("{\"city\": \"Paris\"}"));
  EXPECT_EQ(s1, 200) << j1.dump();
  auto [s2, j2] = Post("/v1/chat/completions", turn(json{{"city", "Paris"}}));
  EXPECT_EQ(s2, 200) << j2.dump();
  EXPECT_EQ(j1["choices"][0]["message"].dump(), j2["choices"][0]["message"].dump()) << "string and object arguments";
  // The rendered prompt holds the arguments as the template renders an object.
  auto [s3, j3] = Post("/tokenize", turn("{\"city\": \"Paris\"}"));
  ASSERT_EQ(s3, 200) << j3.dump();
  std::vector<int32_t> ids = j3["tokens"].get<std::vector<int32_t>>();
  const std::string prompt = tok_->Decode(ids);
  EXPECT_NE(prompt.find("<function=get_weather>\n<parameter=city>\nParis\n</parameter>"), std::string::npos) << prompt;
  // Arguments that are not a JSON object: a 400 naming where.
  for (const json& bad : {json("{city: Paris}"), json("[1, 2]"), json(3)}) {
    auto [s, j] = Post("/v1/chat/completions", turn(bad));
    EXPECT_EQ(s, 400) << bad.dump();
    EXPECT_NE(j["error"]["message"].get<std::string>().find("messages[1].tool_calls[0].function.arguments"),
              std::string::npos)
        << j.dump();
  }
}

TEST_F(Server, ChatIsBitIdenticalBeforeDuringAndAfterAdapterDecisions) {
  const std::string before = Chat();
  std::vector<std::thread> burst;
  std::atomic<int> ok{0};
  for (int i = 0; i < 6; ++i) {
    burst.emplace_back([&, i] {
      auto [status, j] = Post("/v1/decisions", Decision("GET /admin?id=" + std::to_string(i)));
      ok += status == 200;
    });
  }
  const std::string during = Chat();
  for (auto& t : burst) t.join();
  const std::string after = Chat();
  EXPECT_EQ(ok.load(), 6);
  EXPECT_EQ(before, during);
  EXPECT_EQ(before, after);
}

TEST_F(Server, ConcurrentDecisionsEqualTheSameDecisionsAlone) {
  std::vector<std::string> records = {"GET /a", "POST /login user=admin'--", "GET /img.png", "DELETE /users/1"};
  std::vector<json> alone;
  for (const auto& r : records) alone.push_back(Post("/v1/decisions", Decision(r)).second);
  std::vector<json> together(records.size());
  std::vector<std::thread> ts;
  for (size_t i = 0; i < records.size(); ++i) ts.emplace_back([&, i] { together[i] = Post("/v1/decisions", Decision(records[i])).second; });
  for (auto& t : ts) t.join();
  for (size_t i = 0; i < records.size(); ++i) {
    ASSERT_TRUE(alone[i].contains("decisions")) << alone[i].dump();
    EXPECT_EQ(alone[i]["decisions"].dump(), together[i]["decisions"].dump());
  }
}

TEST_F(Server, HostileInputsGetTheRightStatusAndTheServerStillAnswers) {
  const std::string healthy = Chat(6);
  struct Case {
    std::string path, body;
    int status;
    std::string expect;
  };
  const std::vector<Case> cases = {
      {"/v1/chat/completions", "{not json", 400, "not valid JSON"},
      {"/v1/chat/completions", R"({"messages": "hi"})", 400, "'messages' must be an array"},
      {"/v1/chat/completions", R"({"messages": []})", 400, "'messages' is empty"},
      {"/v1/chat/completions",
       R"({"messages": [{"role": "user", "content": "x"}], "chat_template_kwargs": {"messages": [{"role": "system"}]}})",
       400, "'messages' is set by the server"},
      {"/tokenize", R"({"messages": [{"role": "user", "content": "x"}], "chat_template_kwargs": {"tools": []}})", 400,
       "'tools' is set by the server"},
      {"/v1/chat/completions", R"({"messages": [{"role": "user", "content": "x"}], "max_tokens": "5"})", 400, "'max_tokens' must be an integer"},
      {"/v1/chat/completions", R"({"messages": [{"role": "user", "content": "x"}], "temperature": 9})", 400, "'temperature' = 9 is outside"},
      {"/v1/chat/completions", R"({"model": "nope", "messages": [{"role": "user", "content": "x"}]})", 404, "The model 'nope' does not exist"},
      {"/v1/chat/completions", R"({"messages": [{"role": "user", "content": "x"}], "max_tokens": 5000})", 400, "maximum context length is 4096"},
      {"/v1/chat/completions", "{\"messages\": [{\"role\": \"user\", \"content\": \"\xff\xfe\"}]}", 400, "not valid JSON"},
      {"/v1/completions", R"({"prompt": 7})", 400, "'prompt' must be a string"},
      {"/v1/completions", R"({"prompt": [1, "a"]})", 400, "prompt[1] must be a token id (an integer)"},
      {"/v1/completions", R"({"prompt": [3, -1]})", 400, "prompt[1] = -1 is outside the tokenizer's vocabulary"},
      {"/v1/completions", R"({"prompt": []})", 400, "'prompt' must be a string, token ids, or a non-empty array"},
      {"/v1/completions", R"({"prompt": "x", "presence_penalty": 2.5})", 400, "'presence_penalty' = 2.5 is outside [-2, 2]"},
      {"/v1/completions", R"({"prompt": "x", "frequency_penalty": "high"})", 400, "'frequency_penalty' must be a number"},
      {"/v1/completions", R"({"prompt": "x", "repetition_penalty": 0})", 400, "'repetition_penalty' must be > 0"},
      {"/v1/completions", R"({"prompt": "x", "min_p": 1.5})", 400, "'min_p' = 1.5 is outside [0, 1]"},
      {"/v1/completions", R"({"prompt": "x", "logit_bias": [1, 2]})", 400, "'logit_bias' must be an object"},
      {"/v1/completions", R"({"prompt": "x", "logit_bias": {"the": 1}})", 400, "key 'the' is not a token id"},
      {"/v1/completions", R"({"prompt": "x", "logit_bias": {"-5": 1}})", 400, "key '-5' is not a token id"},
      {"/v1/completions", R"({"prompt": "x", "logit_bias": {"5": "up"}})", 400, "the bias for token 5 must be a number"},
      {"/v1/completions", R"({"prompt": "x", "logit_bias": {"5": 101}})", 400, "the bias 101 for token 5 is outside [-100, 100]"},
      {"/v1/completions", R"({"prompt": "x", "logit_bias": {"999999999": 1}})", 400,
       "logit_bias: token 999999999 is outside the vocabulary"},
      {"/v1/completions", R"({"prompt": "x", "stop_token_ids": 5})", 400, "'stop_token_ids' must be an array"},
      {"/v1/completions", R"({"prompt": "x", "stop_token_ids": [1, -2]})", 400, "entries must be token ids (non-negative integers); got -2"},
      {"/v1/completions", R"({"prompt": "x", "stop_token_ids": [999999999]})", 400, "stop token 999999999 is outside the vocabulary"},
      {"/v1/completions", R"({"prompt": "x", "ignore_eos": 1})", 400, "'ignore_eos' must be true or false"},
      {"/v1/completions", R"({"prompt": "x", "max_tokens": 3, "min_tokens": 4})", 400, "'min_tokens' (4) exceeds max_tokens (3)"},
      // Structured output that graft cannot honour, and forced tool calls: refused by name, not ignored.
      {"/v1/chat/completions", R"({"messages": [{"role": "user", "content": "x"}], "response_format": {"type": "bogus"}})", 400,
       "response_format type 'bogus' is not supported"},
      {"/v1/chat/completions", R"({"messages": [{"role": "user", "content": "x"}], "response_format": "json"})", 400,
       "'response_format' must be an object with a string 'type'"},
      {"/v1/chat/completions", R"({"messages": [{"role": "user", "content": "x"}], "response_format": {"type": "json_schema"}})", 400,
       "response_format json_schema needs 'json_schema'"},
      {"/v1/chat/completions",
       R"({"messages": [{"role": "user", "content": "x"}], "response_format": {"type": "json_schema", "json_schema": {"name": "a", "schema": {"type": "string", "pattern": "^a"}}}})",
       400, "response_format: json_schema: the schema at '#' uses 'pattern'"},
      {"/v1/completions", R"({"prompt": "x", "guided_json": {"type": "object", "properties": {"d": {"type": "string", "format": "date"}}}})", 400,
       "guided_json: json_schema: the schema at '/properties/d' uses 'format'"},
      {"/v1/completions", R"({"prompt": "x", "guided_json": "{not json"})", 400, "'guided_json' is a string that is not JSON"},
      {"/v1/completions", R"({"prompt": "x", "guided_regex": "(a)\\1"})", 400, "guided_regex: the escape \\1 (at position 3 of the regular expression) is not supported"},
      {"/v1/completions", R"({"prompt": "x", "guided_regex": ""})", 400, "'guided_regex' must be a non-empty string"},
      {"/v1/completions", R"({"prompt": "x", "guided_grammar": "root ::= x"})", 400, "'guided_grammar' is not supported"},
      {"/v1/completions", R"({"prompt": "x", "guided_choice": []})", 400, "'guided_choice' must be a non-empty array of strings"},
      {"/v1/completions", R"({"prompt": "x", "guided_choice": ["a"], "guided_decoding_backend": "xgrammar"})", 400,
       "only \"auto\""},
      {"/v1/completions", R"({"prompt": "x", "guided_choice": ["a"], "guided_json": {}})", 400,
       "one structured-output constraint a request; this one names guided_json and guided_choice"},
      {"/v1/chat/completions", R"({"messages": [{"role": "user", "content": "x"}], "structured_outputs": {"grammar": "a"}})", 400,
       "structured_outputs.grammar is not supported"},
      {"/v1/chat/completions", R"({"messages": [{"role": "user", "content": "x"}], "tool_choice": "required"})", 400,
       "tool_choice forces a call, but the request lists no tools"},
      {"/v1/chat/completions",
       R"({"messages": [{"role": "user", "content": "x"}], "tools": [{"type": "function", "function": {"name": "g"}}], "tool_choice": {"type": "function", "function": {"name": "f"}}})",
       400, "tool_choice names the function 'f', which tools does not list"},
      {"/v1/chat/completions", R"({"messages": [{"role": "user", "content": "x"}], "tool_choice": "always"})", 400,
       "'tool_choice' must be \"none\", \"auto\", \"required\" or"},
      {"/v1/chat/completions",
       R"({"messages": [{"role": "user", "content": "x"}], "tools": [{"type": "function", "function": {"name": "g"}}], "tool_choice": "required", "guided_choice": ["a"]})",
       400, "cannot be combined"},
      // The Responses API: what graft cannot do is refused by name.
      {"/v1/responses", R"({"input": "x", "store": true})", 400, "graft keeps no responses"},
      {"/v1/responses", R"({"input": "x", "tools": [{"type": "web_search"}]})", 400, "'tools' is not supported by graft's /v1/responses"},
      {"/v1/responses", R"({"input": "x", "previous_response_id": "resp_1"})", 400, "'previous_response_id' is not supported"},
      {"/v1/responses", R"({"input": [{"role": "user", "content": [{"type": "input_image", "image_url": "x"}]}]})", 400,
       "only input_text and output_text parts are supported (got 'input_image')"},
      {"/v1/responses", R"({"input": [{"type": "function_call_output", "call_id": "c", "output": "x"}]})", 400,
       "items of type 'function_call_output' are not supported"},
      {"/v1/responses", R"({"input": "x", "frobnicate": 1})", 400, "unknown field 'frobnicate'"},
      {"/v1/responses", R"({"instructions": "x"})", 400, "'input' is required"},
      {"/v1/responses", R"({"input": "x", "text": {"format": {"type": "json_schema", "name": "a", "schema": {"type": "string", "format": "email"}}}})",
       400, "uses 'format'"},
      {"/tokenize", R"({"prompt": 5})", 400, "'prompt' must be a string"},
      {"/tokenize", R"({"prompt": "x", "messages": []})", 400, "give exactly one of 'prompt' and 'messages'"},
      {"/tokenize", R"({})", 400, "give exactly one of 'prompt' and 'messages'"},
      {"/tokenize", R"({"messages": "hi"})", 400, "'messages' must be an array"},
      {"/tokenize", R"({"model": "nope", "prompt": "x"})", 404, "The model 'nope' does not exist"},
      {"/tokenize", R"({"prompt": "x", "add_generation_prompt": "yes"})", 400, "'add_generation_prompt' must be true or false"},
      {"/tokenize", R"({"prompt": "x", "return_token_strs": true})", 400, "'return_token_strs' is not supported"},
      {"/tokenize", "{\"prompt\": \"\xff\"}", 400, "not valid JSON"},
      {"/detokenize", R"({"tokens": "1 2"})", 400, "'tokens' must be an array of token ids"},
      {"/detokenize", R"({"tokens": [1, 2.5]})", 400, "tokens[1] must be an integer"},
      {"/detokenize", R"({"tokens": [1, -1]})", 400, "tokens[1] = -1 is outside the tokenizer's vocabulary"},
      {"/detokenize", R"({"tokens": [99999999]})", 400, "tokens[0] = 99999999 is outside the tokenizer's vocabulary"},
      {"/v1/decisions", R"({"model": "gdn", "record": "r", "questions": [{"id": "a", "question": "q", "choices": []}]})", 400,
       "needs at least 2 choices"},
      {"/v1/decisions", R"({"model": "gdn", "record": "r", "questions": [{"id": "a", "question": "q", "choices": ["x", "x"]}]})", 400,
       "duplicate choice 'x'"},
      {"/v1/decisions", R"({"model": "gdn", "record": "r", "questions": [{"id": "a", "question": "q", "choices": ["x", "y"]},
        {"id": "a", "question": "q", "choices": ["x", "y"]}]})", 400, "duplicate question id 'a'"},
      {"/v1/decisions", R"({"model": "gdn", "record": 12, "questions": []})", 400, "'record' must be a string"},
      {"/v1/decisions", R"({"model": "other", "record": "r", "questions": []})", 404, "does not exist"},
      {"/v1/decisions", R"({"model": "gdn", "record": ")" + std::string(5000 * 4, 'x') + R"(", "questions": [{"id": "a", "question": "q", "choices": ["x", "y"]}]})",
       400, "the model's context is 4096"},
      {"/v1/nothing", "{}", 404, "no route POST /v1/nothing"},
      // Nested 100,000 deep (200 KB): once a stack overflow that took the whole server down.
      {"/v1/chat/completions", R"({"messages": [{"role": "user", "content": "x"}], "tools": [)" + std::string(100000, '[') +
                                   std::string(100000, ']') + "]}",
       400, "the request body: JSON nested deeper than 128 levels"},
      {"/v1/chat/completions", R"({"messages": [{"role": "user", "content": "x"}], "chat_template_kwargs": )" +
                                   [] { std::string s; for (int i = 0; i < 50000; ++i) s += R"({"a": )"; return s + "1" + std::string(50000, '}'); }() + "}",
       400, "nested deeper than 128 levels"},
      {"/v1/decisions", R"({"model": "gdn", "record": "r", "questions": )" + std::string(130, '[') + std::string(130, ']') + "}", 400,
       "nested deeper than 128 levels"},
  };
  for (const auto& c : cases) {
    auto [status, j] = Post(c.path, c.body);
    EXPECT_EQ(status, c.status) << c.body.substr(0, 200) << " -> " << j.dump();
    ASSERT_TRUE(j.is_object() && j.contains("error")) << c.body.substr(0, 200);
    EXPECT_NE(j["error"]["message"].get<std::string>().find(c.expect), std::string::npos) << j.dump();
  }
  // A 10 MB body: 413 with an OpenAI error object.
  auto [big_status, big] = Post("/v1/chat/completions", std::string(10 << 20, ' '));
  EXPECT_EQ(big_status, 413);
  EXPECT_NE(big.dump().find("larger than the server's limit"), std::string::npos);
  // A client that disconnects mid-stream: the server cancels and keeps serving.
  {
    // A raw socket: send the request, read the first events, hang up.
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    ASSERT_GE(fd, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<uint16_t>(server_->port()));
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ASSERT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
    const std::string body = R"({"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 3000, "stream": true})";
    const std::string req = "POST /v1/chat/completions HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer " +
                            std::string(kKey) + "\r\nContent-Type: application/json\r\nContent-Length: " +
                            std::to_string(body.size()) + "\r\n\r\n" + body;
    ASSERT_EQ(::send(fd, req.data(), req.size(), 0), static_cast<ssize_t>(req.size()));
    std::string got;
    char buf[512];
    while (got.find("data:") == std::string::npos) {
      const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
      if (n <= 0) break;
      got.append(buf, static_cast<size_t>(n));
    }
    EXPECT_NE(got.find("data:"), std::string::npos);
    ::close(fd);
  }
  // The abandoned stream is cancelled: the engine drains back to idle.
  for (int i = 0; i < 100 && engine_->Stats().running + engine_->Stats().waiting > 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  EXPECT_EQ(engine_->Stats().running, 0);
  // 100 concurrent connections.
  std::vector<std::thread> ts;
  std::atomic<int> ok{0};
  std::mutex failures_mu;
  std::vector<std::string> failures;
  for (int i = 0; i < 100; ++i) {
    ts.emplace_back([&, i] {
      auto c = Client();
      auto r = i % 10 == 0 ? c.Post("/v1/chat/completions", R"({"messages": [{"role": "user", "content": "x"}], "max_tokens": 2})",
                                    "application/json")
                           : c.Get("/health");
      if (r && r->status == 200) {
        ++ok;
      } else {
        std::lock_guard<std::mutex> l(failures_mu);
        failures.push_back(r ? std::to_string(r->status) : httplib::to_string(r.error()));
      }
    });
  }
  for (auto& t : ts) t.join();
  EXPECT_EQ(ok.load(), 100) << "failures: " << ::testing::PrintToString(failures);
  EXPECT_EQ(Chat(6), healthy);  // and the answers are still the same bits
}

// Penalties, min_p and logit_bias over HTTP: accepted in OpenAI's (and vLLM's) ranges, and a
// -100 bias on the greedy token moves the answer off it while logprobs stay the model's.
TEST_F(Server, AccessNeedsTheKeyALoopbackHostTheRightMethodAndJson) {
  const std::string chat = R"({"messages": [{"role": "user", "content": "x"}], "max_tokens": 1})";
  httplib::Client bare("127.0.0.1", server_->port());
  auto status = [](const httplib::Result& r) { return r ? r->status : -1; };
  auto message = [](const httplib::Result& r) {
    return r ? json::parse(r->body, nullptr, false)["error"]["message"].get<std::string>() : std::string("no reply");
  };
  // A browser's preflight, before the key (browsers send none): without --allowed-origins a 403
  // and no CORS header.
  auto pre = bare.Options("/v1/chat/completions", {{"Origin", "https://app.example"}, {"Access-Control-Request-Method", "POST"}});
  EXPECT_EQ(status(pre), 403);
  EXPECT_FALSE(pre && pre->has_header("Access-Control-Allow-Origin"));
  // The key: none, a wrong one (401 with an OpenAI error object); the open routes without it.
  auto r = bare.Post("/v1/chat/completions", chat, "application/json");
  EXPECT_EQ(status(r), 401);
  EXPECT_NE(message(r).find("API key is required"), std::string::npos);
  EXPECT_EQ(r->get_header_value("WWW-Authenticate"), "Bearer");
  httplib::Client wrong("127.0.0.1", server_->port());
  wrong.set_bearer_token_auth("test-key-2");
  r = wrong.Post("/v1/chat/completions", chat, "application/json");
  EXPECT_EQ(status(r), 401);
  EXPECT_NE(message(r).find("Incorrect API key"), std::string::npos);
  EXPECT_EQ(status(bare.Get("/v1/models")), 401);
  EXPECT_EQ(status(bare.Post("/tokenize", R"({"prompt": "x"})", "application/json")), 401);
  for (const char* open : {"/health", "/metrics", "/version"}) EXPECT_EQ(status(bare.Get(open)), 200) << open;
  auto c = Client();
  EXPECT_EQ(status(c.Post("/v1/chat/completions", chat, "application/json")), 200);
  // DNS rebinding: a page's name re-bound to 127.0.0.1 sends its own Host.
  r = c.Post("/v1/chat/completions", httplib::Headers{{"Host", "evil.example:8000"}}, chat, "application/json");
  EXPECT_EQ(status(r), 403);
  EXPECT_NE(message(r).find("Host 'evil.example' is not allowed"), std::string::npos);
  for (const char* host : {"localhost:8000", "127.0.0.1", "[::1]:80", "LOCALHOST"}) {
    EXPECT_EQ(status(c.Get("/health", httplib::Headers{{"Host", host}})), 200) << host;
  }
  // A cross-site form's body types; JSON with a charset passes.
  for (const char* type : {"text/plain", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x"}) {
    r = c.Post("/v1/chat/completions", chat, type);
    EXPECT_EQ(status(r), 415) << type;
    EXPECT_NE(message(r).find("must be JSON"), std::string::npos) << type;
  }
  EXPECT_EQ(status(c.Post("/v1/chat/completions", chat, "application/json; charset=utf-8")), 200);
  // A known route with the wrong method: 405 naming the right one; an unknown route: 404.
  r = c.Get("/v1/chat/completions");
  EXPECT_EQ(status(r), 405);
  EXPECT_EQ(r->get_header_value("Allow"), "POST");
  EXPECT_EQ(status(c.Post("/v1/models", "{}", "application/json")), 405);
  EXPECT_EQ(status(c.Get("/v1/nothing")), 404);
}

// CORS: off by default (a preflight is a 403, no header on a simple request); with
// --allowed-origins an allowed origin gets its headers and a 204 preflight, another a 403.
// vllm:lora_requests_info names the adapters with running and waiting requests (never the base).
TEST(Metrics, LoraRequestsInfoNamesTheBusyAdapters) {
  Metrics metrics("base");
  EngineStats e;
  e.running_by_slot = {{0, 3}, {1, 2}, {2, 1}};
  e.waiting_by_slot = {{3, 1}, {1, 0}};
  const std::string m = metrics.Render(e, {{1, "alpha"}, {2, "alpha"}, {3, "beta"}}, 2);
  EXPECT_NE(m.find(R"(vllm:lora_requests_info{max_lora="2",running_lora_adapters="alpha",waiting_lora_adapters="beta"} )"),
            std::string::npos) << m;
}

TEST(Access, CorsOnlyForAllowedOrigins) {
  const std::string site = "https://app.example", other = "https://evil.example", post = "POST", hdrs = "authorization, content-type";
  auto head = [&](const char* method, const std::string* origin, const std::string* request_method) {
    RequestHead h{method, "/v1/chat/completions"};
    h.origin = origin;
    h.request_method = request_method;
    h.request_headers = request_method ? &hdrs : nullptr;
    return h;
  };
  AccessConfig off;
  CorsAnswer a;
  EXPECT_FALSE(Cors(off, head("POST", &site, nullptr), &a));
  EXPECT_TRUE(a.headers.empty());
  auto refused = Cors(off, head("OPTIONS", &site, &post), &a);
  ASSERT_TRUE(refused);
  EXPECT_EQ(refused->status, 403);
  EXPECT_NE(refused->message.find("no --allowed-origins"), std::string::npos);
  AccessConfig on;
  on.allowed_origins = {"https://APP.example"};
  EXPECT_FALSE(Cors(on, head("POST", &site, nullptr), &a));
  ASSERT_EQ(a.headers.size(), 2u);
  EXPECT_EQ(a.headers[0], (std::pair<std::string, std::string>{"Access-Control-Allow-Origin", site}));
  EXPECT_FALSE(a.preflight);
  EXPECT_FALSE(Cors(on, head("OPTIONS", &site, &post), &a));
  EXPECT_TRUE(a.preflight);
  EXPECT_EQ(a.status, 204);
  bool methods = false, headers = false;
  for (const auto& [k, v] : a.headers) {
    methods = methods || (k == "Access-Control-Allow-Methods" && v == "POST");
    headers = headers || (k == "Access-Control-Allow-Headers" && v == hdrs);
  }
  EXPECT_TRUE(methods && headers);
  EXPECT_FALSE(Cors(on, head("POST", &other, nullptr), &a));
  EXPECT_TRUE(a.headers.empty()) << "another origin's simple request gets no CORS header";
  EXPECT_EQ(Cors(on, head("OPTIONS", &other, &post), &a)->status, 403);
  AccessConfig any;
  any.allowed_origins = {"*"};
  EXPECT_FALSE(Cors(any, head("POST", &other, nullptr), &a));
  EXPECT_EQ(a.headers[0].second, other);
}

TEST(Access, Rules) {
  AccessConfig open;
  const std::string json = "application/json", key = "Bearer k";
  auto head = [](const char* method, const char* path, const std::string* host, const std::string* auth,
                 const std::string* type) { return RequestHead{method, path, host, auth, type}; };
  const std::string evil = "evil.example", lan = "10.0.0.5:8000", local = "localhost:1";
  EXPECT_FALSE(CheckAccess(open, "127.0.0.1", head("GET", "/health", &local, nullptr, nullptr)));
  EXPECT_EQ(CheckAccess(open, "127.0.0.1", head("GET", "/health", &evil, nullptr, nullptr))->status, 403);
  EXPECT_FALSE(CheckAccess(open, "127.0.0.1", head("GET", "/health", nullptr, nullptr, nullptr))) << "no Host header";
  // Bound to every address: any Host unless --allowed-hosts lists some.
  EXPECT_FALSE(CheckAccess(open, "0.0.0.0", head("GET", "/health", &evil, nullptr, nullptr)));
  AccessConfig listed;
  listed.allowed_hosts = {"10.0.0.5"};
  EXPECT_FALSE(CheckAccess(listed, "0.0.0.0", head("GET", "/health", &lan, nullptr, nullptr)));
  EXPECT_EQ(CheckAccess(listed, "0.0.0.0", head("GET", "/health", &evil, nullptr, nullptr))->status, 403);
  EXPECT_FALSE(CheckAccess(listed, "127.0.0.1", head("GET", "/health", &lan, nullptr, nullptr)));
  AccessConfig any;
  any.allowed_hosts = {"*"};
  EXPECT_FALSE(CheckAccess(any, "127.0.0.1", head("GET", "/health", &evil, nullptr, nullptr)));
  // Keys: exact, the Bearer scheme.
  AccessConfig keyed;
  keyed.api_key = "k";
  EXPECT_FALSE(CheckAccess(keyed, "127.0.0.1", head("POST", "/v1/decisions", nullptr, &key, &json)));
  for (const std::string bad : {"Bearer k2", "Bearer ", "k", "Basic k", "bearer k"}) {
    EXPECT_EQ(CheckAccess(keyed, "127.0.0.1", head("POST", "/v1/decisions", nullptr, &bad, &json))->status, 401) << bad;
  }
  EXPECT_EQ(CheckAccess(keyed, "127.0.0.1", head("GET", "/v1/models/x", nullptr, nullptr, nullptr))->status, 401);
  EXPECT_FALSE(CheckAccess(keyed, "127.0.0.1", head("GET", "/metrics", nullptr, nullptr, nullptr)));
  keyed.open_routes = {"/health"};  // --open-routes /health: the metrics need the key too
  EXPECT_EQ(CheckAccess(keyed, "127.0.0.1", head("GET", "/metrics", nullptr, nullptr, nullptr))->status, 401);
  EXPECT_FALSE(CheckAccess(keyed, "127.0.0.1", head("GET", "/health", nullptr, nullptr, nullptr)));
  // Body types and methods.
  const std::string vendor = "application/vnd.api+json", none_json = "text/json";
  EXPECT_FALSE(CheckAccess(open, "127.0.0.1", head("POST", "/tokenize", nullptr, nullptr, &vendor)));
  EXPECT_EQ(CheckAccess(open, "127.0.0.1", head("POST", "/tokenize", nullptr, nullptr, &none_json))->status, 415);
  EXPECT_EQ(CheckAccess(open, "127.0.0.1", head("POST", "/tokenize", nullptr, nullptr, nullptr))->status, 415);
  EXPECT_EQ(CheckAccess(open, "127.0.0.1", head("DELETE", "/v1/models", nullptr, nullptr, nullptr))->status, 405);
  EXPECT_FALSE(CheckAccess(open, "127.0.0.1", head("HEAD", "/health", nullptr, nullptr, nullptr)));
  EXPECT_EQ(RouteMethods("/v1/models/gdn"), "GET");
  EXPECT_EQ(RouteMethods("/v1/models/"), "");
  EXPECT_EQ(RouteMethods("/nope"), "");
}

TEST_F(Server, SeveralChoicesAndPromptArraysEqualTheirRequestsAlone) {
  // n choices of one seeded request: choice j is the request alone with seed + j.
  auto chat = [&](const std::string& extra) {
    return Post("/v1/chat/completions", R"({"messages": [{"role": "user", "content": "Tell me about logs."}],
                "max_tokens": 6, "temperature": 1, "chat_template_kwargs": {"enable_thinking": false})" + extra + "}");
  };
  auto [s3, three] = chat(R"(, "n": 3, "seed": 40)");
  ASSERT_EQ(s3, 200) << three.dump();
  ASSERT_EQ(three["choices"].size(), 3u);
  int completion = 0;
  for (int j = 0; j < 3; ++j) {
    auto [s1, one] = chat(R"(, "seed": )" + std::to_string(40 + j));
    ASSERT_EQ(s1, 200);
    EXPECT_EQ(three["choices"][j]["index"], j);
    EXPECT_EQ(three["choices"][j]["message"].dump(), one["choices"][0]["message"].dump()) << "choice " << j;
    EXPECT_EQ(three["usage"]["prompt_tokens"], one["usage"]["prompt_tokens"]) << "the prompt counts once";
    completion += one["usage"]["completion_tokens"].get<int>();
  }
  EXPECT_EQ(three["usage"]["completion_tokens"], completion);
  // Streamed: every choice's chunks carry its index and add up to the same texts.
  {
    auto c = Client();
    auto r = c.Post("/v1/chat/completions",
                    R"({"messages": [{"role": "user", "content": "Tell me about logs."}], "max_tokens": 6, "temperature": 1,
                        "chat_template_kwargs": {"enable_thinking": false}, "n": 3, "seed": 40, "stream": true,
                        "stream_options": {"include_usage": true}})",
                    "application/json");
    ASSERT_TRUE(r);
    std::vector<std::string> texts(3);
    std::vector<int> finishes(3, 0);
    json usage;
    for (size_t pos = 0; (pos = r->body.find("data: {", pos)) != std::string::npos;) {
      const size_t end = r->body.find("\n\n", pos);
      const json chunk = json::parse(r->body.substr(pos + 6, end - pos - 6));
      pos = end;
      if (chunk.contains("usage")) usage = chunk["usage"];
      if (chunk["choices"].empty()) continue;
      const int i = chunk["choices"][0]["index"];
      ASSERT_GE(i, 0);
      ASSERT_LT(i, 3);
      if (chunk["choices"][0]["delta"].contains("content")) texts[i] += chunk["choices"][0]["delta"]["content"].get<std::string>();
      if (!chunk["choices"][0]["finish_reason"].is_null()) ++finishes[i];
    }
    for (int j = 0; j < 3; ++j) {
      EXPECT_EQ(texts[j], three["choices"][j]["message"]["content"].get<std::string>()) << "choice " << j;
      EXPECT_EQ(finishes[j], 1);
    }
    // The same counts; cached_tokens may differ (the streamed request repeats the first one's
    // prompt, which continues from that one's snapshot).
    for (const char* k : {"prompt_tokens", "completion_tokens", "total_tokens"}) EXPECT_EQ(usage[k], three["usage"][k]) << k;
  }
  // A completions prompt array (strings and token ids): prompt-major choices, each as alone.
  auto [sa, ids] = Post("/tokenize", R"({"prompt": "Once upon"})");
  ASSERT_EQ(sa, 200);
  const json batch = {{"prompt", {"Tell me about logs.", ids["tokens"]}}, {"max_tokens", 4}, {"temperature", 0}, {"n", 2}};
  auto [sb, both] = Post("/v1/completions", batch.dump());
  ASSERT_EQ(sb, 200) << both.dump();
  ASSERT_EQ(both["choices"].size(), 4u);
  for (int p = 0; p < 2; ++p) {
    json alone = batch;
    alone["prompt"] = batch["prompt"][p];
    alone.erase("n");
    auto [s1, one] = Post("/v1/completions", alone.dump());
    ASSERT_EQ(s1, 200);
    for (int j = 0; j < 2; ++j) EXPECT_EQ(both["choices"][2 * p + j]["text"], one["choices"][0]["text"]) << p << " " << j;
  }
  // Limits, each a 400 naming the field.
  for (const auto& [body, expect] : std::vector<std::pair<std::string, std::string>>{
           {R"({"prompt": "x", "n": 129})", "'n' = 129 is outside [1, 128]"},
           {R"({"prompt": ["a", "b", "c"], "n": 50})", "3 prompts with n = 50 make 150 choices; at most 128"},
           {R"({"prompt": []})", "'prompt' must be a string"},
           {json{{"prompt", std::vector<std::string>(129, "a")}}.dump(), "'prompt' holds 129 prompts; at most 128"},
           {R"({"prompt": ["a", 3]})", "prompt[1] must be a string or an array of token ids"},
           {R"({"prompt": ["a", ""]})", "prompt[1] encodes to no tokens"},
           {R"({"prompt": [[1, 2], [99999999]]})", "prompt[1][0] = 99999999 is outside the tokenizer's vocabulary"}}) {
    auto [st, j] = Post("/v1/completions", body);
    EXPECT_EQ(st, 400) << body;
    EXPECT_NE(j["error"]["message"].get<std::string>().find(expect), std::string::npos) << j.dump();
  }
}

TEST_F(Server, LogitBiasAndPenaltiesShapeTheAnswer) {
  const std::string prompt = "Tell me about logs.";
  auto ids = tok_->Encode(prompt).value();
  const int vocab = model_->config().vocab_size;
  CpuOps ops(ActDtype::kBF16, 1);
  SequenceState st = model_->NewState();
  std::vector<float> logits(ids.size() * static_cast<size_t>(vocab));
  ASSERT_TRUE(model_->Forward(ops, ids.data(), static_cast<int>(ids.size()), st, logits.data()).ok());
  const float* last = logits.data() + (ids.size() - 1) * static_cast<size_t>(vocab);
  const int32_t best = static_cast<int32_t>(std::max_element(last, last + vocab) - last);
  auto first = [&](const std::string& extra) {
    auto [status, j] = Post("/v1/completions", R"({"prompt": ")" + prompt +
                                                   R"(", "max_tokens": 1, "temperature": 0, "logprobs": 1)" + extra + "}");
    EXPECT_EQ(status, 200) << j.dump();
    return j["choices"][0]["logprobs"]["token_logprobs"][0].get<double>();
  };
  const double plain = first("");
  const double banned = first(R"(, "logit_bias": {")" + std::to_string(best) + R"(": -100})");
  EXPECT_LT(banned, plain) << "the banned greedy token was still drawn";
  EXPECT_EQ(first(R"(, "logit_bias": {")" + std::to_string(best) + R"(": 0.5})"), plain);
  auto [status, j] = Post("/v1/chat/completions",
                          R"({"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 6, "temperature": 0.8, "seed": 3,
                              "presence_penalty": 1.5, "frequency_penalty": -0.5, "repetition_penalty": 1.1, "min_p": 0.05})");
  EXPECT_EQ(status, 200) << j.dump();
}

// Without a seed every request draws a fresh one (OpenAI's and vLLM's behaviour); with one it is
// that seed, and the answer repeats bit for bit. (The seeds are compared as parsed: the fixture's
// random model is certain of its next token in some states, where any seed draws the same.)
// response_format "text" and tool_choice "auto" / "none" are plain generation.
TEST_F(Server, UnseededSamplingDrawsAFreshSeedAndSeededRepeats) {
  ServedModels served;
  served.base_name = "base";
  served.context = 4096;
  auto seed_of = [&](const std::string& extra) {
    GenerationApiRequest r;
    const json body = json::parse(R"({"messages": [{"role": "user", "content": "Hi"}], "temperature": 1)" + extra + "}");
    auto err = ParseGenerationRequest(body, true, served, *tok_, *tmpl_, {}, &r);
    EXPECT_FALSE(err.has_value()) << (err ? err->message : "");
    return r.gen.sampling.seed;
  };
  std::set<uint64_t> unseeded;
  for (int i = 0; i < 8; ++i) unseeded.insert(seed_of(""));
  EXPECT_EQ(unseeded.size(), 8u) << "unseeded requests drew the same seed";
  EXPECT_EQ(seed_of(R"(, "seed": 11)"), 11u);
  EXPECT_EQ(seed_of(R"(, "seed": null)") == seed_of(R"(, "seed": null)"), false) << "a null seed is no seed";
  auto answer = [&](const std::string& extra) {
    auto [status, j] = Post("/v1/chat/completions", R"({"messages": [{"role": "user", "content": "Tell me a story."}],
                                                        "max_tokens": 24, "temperature": 1, "logprobs": true)" +
                                                        extra + "}");
    EXPECT_EQ(status, 200) << j.dump();
    return j["choices"][0]["logprobs"].dump();
  };
  EXPECT_EQ(answer(R"(, "seed": 11)"), answer(R"(, "seed": 11)"));
  EXPECT_EQ(answer(R"(, "seed": 11, "response_format": {"type": "text"}, "tool_choice": "auto")"), answer(R"(, "seed": 11)"));
  EXPECT_EQ(answer(R"(, "seed": 11, "tool_choice": "none")"), answer(R"(, "seed": 11)"));
}

// vLLM's ignore_eos, stop_token_ids and min_tokens over HTTP, on an answer forced to end at once
// (a +100 bias on the model's end token).
TEST_F(Server, IgnoreEosStopTokenIdsAndMinTokens) {
  const auto ends = StopTokens(test::Fixture("qwen3_5-wrapper"), model_->config(), *tok_, tmpl_.get());
  ASSERT_FALSE(ends.empty());
  const std::string eos = std::to_string(*ends.begin());
  auto complete = [&](const std::string& extra) {
    auto [status, j] = Post("/v1/completions", R"({"prompt": "Tell me about logs.", "max_tokens": 5, "temperature": 0,
                                                   "logit_bias": {")" + eos + R"(": 100})" + extra + "}");
    EXPECT_EQ(status, 200) << j.dump();
    return std::make_pair(j["choices"][0]["finish_reason"].get<std::string>(), j["usage"]["completion_tokens"].get<int>());
  };
  EXPECT_EQ(complete(""), std::make_pair(std::string("stop"), 0));
  EXPECT_EQ(complete(R"(, "ignore_eos": true)"), std::make_pair(std::string("length"), 5)) << "the end token is generated on";
  EXPECT_EQ(complete(R"(, "ignore_eos": true, "stop_token_ids": [)" + eos + "]"), std::make_pair(std::string("stop"), 0))
      << "stop_token_ids still stop";
  EXPECT_EQ(complete(R"(, "min_tokens": 2)"), std::make_pair(std::string("stop"), 2)) << "two tokens, then the end token";
}

// vLLM's /tokenize and /detokenize: the ids /v1/completions and /v1/chat/completions would run
// (the chat form counted as the usage of a real chat request reports), and back to the text.
TEST_F(Server, TokenizeAndDetokenize) {
  auto [s1, t1] = Post("/tokenize", R"({"prompt": "Tell me about logs."})");
  ASSERT_EQ(s1, 200) << t1.dump();
  const auto ids = tok_->Encode("Tell me about logs.").value();
  EXPECT_EQ(t1["tokens"].get<std::vector<int32_t>>(), ids);
  EXPECT_EQ(t1["count"].get<size_t>(), ids.size());
  EXPECT_EQ(t1["max_model_len"].get<int>(), model_->config().max_position_embeddings);
  const std::string messages = R"("messages": [{"role": "user", "content": "Tell me about logs."}])";
  auto [s2, t2] = Post("/tokenize", "{" + messages + "}");
  ASSERT_EQ(s2, 200) << t2.dump();
  auto [s3, chat] = Post("/v1/chat/completions", "{" + messages + R"(, "max_tokens": 1})");
  ASSERT_EQ(s3, 200) << chat.dump();
  EXPECT_EQ(t2["count"].get<int>(), chat["usage"]["prompt_tokens"].get<int>()) << "the prompt a chat request runs";
  auto [s4, t4] = Post("/tokenize", "{" + messages + R"(, "add_generation_prompt": false, "model": "gdn"})");
  ASSERT_EQ(s4, 200) << t4.dump();
  EXPECT_LT(t4["count"].get<int>(), t2["count"].get<int>()) << "without the assistant header";
  auto [s4n, t4n] = Post("/tokenize", "{" + messages + R"(, "add_generation_prompt": null})");
  ASSERT_EQ(s4n, 200) << "null is the default, not an error: " << t4n.dump();
  EXPECT_EQ(t4n["count"], t2["count"]);
  auto [s5, d5] = Post("/detokenize", json{{"tokens", t2["tokens"]}}.dump());
  ASSERT_EQ(s5, 200) << d5.dump();
  auto [s6, d6] = Post("/tokenize", json{{"prompt", d5["prompt"]}}.dump());
  ASSERT_EQ(s6, 200);
  EXPECT_EQ(d6["tokens"], t2["tokens"]) << "the rendered chat prompt, special tokens and all, round-trips";
  EXPECT_NE(d5["prompt"].get<std::string>().find("Tell me about logs."), std::string::npos);
  auto [s7, d7] = Post("/detokenize", R"({"tokens": []})");
  EXPECT_EQ(s7, 200);
  EXPECT_EQ(d7["prompt"], "");
  // /tokenize's ids as a completions prompt (OpenAI's pre-tokenized form): the text's answer.
  auto answer = [&](const json& prompt) {
    auto [status, j] = Post("/v1/completions", json{{"prompt", prompt}, {"max_tokens", 6}, {"temperature", 0}}.dump());
    EXPECT_EQ(status, 200) << j.dump();
    return std::make_pair(j["choices"][0]["text"].get<std::string>(), j["usage"]["prompt_tokens"].get<int>());
  };
  const auto by_text = answer("Tell me about logs."), by_ids = answer(t1["tokens"]);
  EXPECT_EQ(by_ids, by_text);
  EXPECT_EQ(by_ids.second, t1["count"].get<int>());
}

// Exact mode over HTTP: an adapter extracted with --exact serves "mode": "exact" by default
// (the merged release's decisions, bit for bit), "lora" on request; /v1/models lists each
// adapter's modes and memory; a mode an adapter lacks is a 400 naming it; base chat is
// unchanged by exact decisions.
TEST(ApiShapes, ToolCallsAndReasoningAsOpenAIAndVllmReturnThem) {
  GenerationApiRequest r;
  r.chat = true;
  r.model = "base";
  ChatOutputOptions o;
  o.reasoning = o.think_open = o.tools = true;
  ChatOutputParser p(o);
  ChatOutput out = p.Feed("Need data.</think>\n\n<tool_call>\n{\"name\": \"f\", \"arguments\": {\"x\": 1}}\n</tool_call>");
  out.Append(p.Finish());
  const auto whole = CompletionJson(r, "id", 1, {ChoiceResult{out, {}, "stop"}}, 3, 4);
  const auto& m = whole["choices"][0]["message"];
  EXPECT_EQ(whole["choices"][0]["finish_reason"], "tool_calls");
  EXPECT_TRUE(m["content"].is_null()) << m.dump();
  EXPECT_EQ(m["reasoning_content"], "Need data.");
  ASSERT_EQ(m["tool_calls"].size(), 1u);
  EXPECT_EQ(m["tool_calls"][0]["type"], "function");
  EXPECT_EQ(m["tool_calls"][0]["function"]["name"], "f");
  EXPECT_EQ(m["tool_calls"][0]["function"]["arguments"], "{\"x\":1}");
  EXPECT_EQ(m["tool_calls"][0]["id"].get<std::string>().substr(0, 5), "call_");
  // A streamed chunk numbers its calls after those streamed before it.
  const auto chunk = ChunkJson(r, "id", 1, 0, nullptr, out, 2, nullptr, nullptr);
  const auto& d = chunk["choices"][0]["delta"];
  EXPECT_EQ(d["tool_calls"][0]["index"], 2);
  EXPECT_EQ(d["reasoning_content"], "Need data.");
  EXPECT_FALSE(d.contains("content"));
  // No calls: the finish reason and the content as they were.
  ChatOutput plain;
  plain.content = "hi";
  const auto w2 = CompletionJson(r, "id", 1, {ChoiceResult{plain, {}, "length"}}, 3, 4);
  EXPECT_EQ(w2["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(w2["choices"][0]["message"]["content"], "hi");
  EXPECT_FALSE(w2["choices"][0]["message"].contains("tool_calls"));
}

TEST(ApiShapes, GenerationConfigDefaultsApplyAndRequestValuesWin) {
  auto tok = Tokenizer::FromFile(test::Fixture("qwen3_5-wrapper/tokenizer.json")).value();
  auto tmpl = ChatTemplate::Load(test::Fixture("qwen3_5-wrapper"), "").value();
  ServedModels models;
  models.base_name = "base";
  models.context = 1000;
  models.kv_tokens = 600;
  auto parse = [&](const std::string& body) {
    GenerationApiRequest r;
    auto e = ParseGenerationRequest(json::parse(body), /*chat=*/false, models, *tok, *tmpl, {}, &r);
    EXPECT_FALSE(e) << (e ? e->message : "");
    return r;
  };
  // No defaults: OpenAI's; max_tokens the rest of the KV budget (smaller than the context's).
  GenerationApiRequest plain = parse(R"({"prompt": "Tell me about logs."})");
  const int prompt = static_cast<int>(plain.gen.prompt.size());
  EXPECT_EQ(plain.gen.sampling.temperature, 1.0f);
  EXPECT_EQ(plain.gen.sampling.top_k, 0);
  EXPECT_EQ(plain.gen.max_tokens, 600 - prompt);
  models.kv_tokens = 0;
  EXPECT_EQ(parse(R"({"prompt": "Tell me about logs."})").gen.max_tokens, 1000 - prompt) << "the rest of the context";
  // generation_config.json's values where the request is silent; the request's own win.
  models.defaults.temperature = 0.6;
  models.defaults.top_k = 20;
  models.defaults.top_p = 0.95;
  models.defaults.repetition_penalty = 1.1;
  models.defaults.max_tokens = 50;
  const GenerationApiRequest d = parse(R"({"prompt": "Tell me about logs."})");
  EXPECT_EQ(d.gen.sampling.temperature, 0.6f);
  EXPECT_EQ(d.gen.sampling.top_k, 20);
  EXPECT_EQ(d.gen.sampling.top_p, 0.95f);
  EXPECT_EQ(d.gen.sampling.repetition_penalty, 1.1f);
  EXPECT_EQ(d.gen.max_tokens, 50);
  const GenerationApiRequest own =
      parse(R"({"prompt": "Tell me about logs.", "temperature": 0, "top_k": -1, "max_tokens": 7, "repetition_penalty": 1})");
  EXPECT_EQ(own.gen.sampling.temperature, 0.0f);
  EXPECT_EQ(own.gen.sampling.top_k, 0);
  EXPECT_EQ(own.gen.sampling.repetition_penalty, 1.0f);
  EXPECT_EQ(own.gen.max_tokens, 7);
}

TEST(ExactServer, ModesDecisionsAndModels) {
  test::TempDir d;
  test::ExtractExactAdapter(test::Fixture("adapters/qwen3_5-wrapper-lora-gdn-merged"), test::Fixture("qwen3_5-wrapper"), 16,
                            d.path());
  auto model = test::LoadFixtureModel("qwen3_5-wrapper");
  auto merged = test::LoadFixtureModel("adapters/qwen3_5-wrapper-lora-gdn-merged");
  auto tok = Tokenizer::FromFile(test::Fixture("qwen3_5-wrapper/tokenizer.json")).value();
  auto tmpl = ChatTemplate::Load(test::Fixture("qwen3_5-wrapper"), "").value();
  auto ex = LoadLoraAdapter(d.path(), model->config(), {"ft", false, nullptr});
  auto lo = LoadLoraAdapter(test::Fixture("adapters/qwen3_5-wrapper-lora-gdn"), model->config(), {"gdn", false, nullptr});
  ASSERT_TRUE(ex.ok() && lo.ok());
  AdapterSet set;
  ServedModels served;
  served.base_name = "base";
  served.context = model->config().max_position_embeddings;
  ServedAdapter& ft = served.adapters["ft"];
  ft.slots = {set.Add(&ex.value(), false), set.Add(&ex.value(), true), ex->default_exact};
  ft.lora_bytes = ex->bytes();
  ft.exact_bytes = ex->exact_bytes();
  served.adapters["gdn"].slots.lora = set.Add(&lo.value(), false);
  served.exact_scratch_bytes = model->ExactScratchElements(set).value() * 2;
  EngineConfig ec;
  ec.max_step_tokens = 48;
  ec.kv_token_budget = 4096;
  auto ops = std::make_unique<CpuOps>(ActDtype::kBF16, 2);
  ASSERT_TRUE(ops->ReserveExact(served.exact_scratch_bytes / 2).ok());
  Engine engine(ec, *model, std::move(ops), *tok, *tmpl, set);
  ServerConfig sc;
  sc.port = 0;
  HttpServer server(engine, *tok, *tmpl, served, StopTokens(test::Fixture("qwen3_5-wrapper"), model->config(), *tok, tmpl.get()), sc);
  ASSERT_TRUE(server.Bind().ok());
  std::thread th([&] { server.Serve(); });
  httplib::Client c("127.0.0.1", server.port());
  c.set_read_timeout(60, 0);
  auto post = [&](const std::string& path, const json& body) {
    auto r = c.Post(path.c_str(), body.dump(), "application/json");
    return r ? std::make_pair(r->status, json::parse(r->body, nullptr, false)) : std::make_pair(-1, json());
  };
  const json chat = {{"model", "base"}, {"messages", {{{"role", "user"}, {"content", "Tell me about logs."}}}}, {"max_tokens", 10},
                     {"temperature", 0}, {"logprobs", true}, {"top_logprobs", 3}};
  const std::string chat_before = post("/v1/chat/completions", chat).second["choices"][0].dump();

  auto m = c.Get("/v1/models");
  ASSERT_TRUE(m);
  const json models = json::parse(m->body);
  ASSERT_EQ(models["data"].size(), 3u);
  const json& jft = models["data"][1]["id"] == "ft" ? models["data"][1] : models["data"][2];
  const json& jgdn = models["data"][1]["id"] == "gdn" ? models["data"][1] : models["data"][2];
  EXPECT_EQ(jft["modes"], json::array({"lora", "exact"}));
  EXPECT_EQ(jft["default_mode"], "exact");
  EXPECT_EQ(jft["memory_bytes"]["lora"].get<int64_t>(), ex->bytes());
  EXPECT_EQ(jft["memory_bytes"]["exact"].get<int64_t>(), ex->bytes() + ex->exact_bytes());
  EXPECT_GT(jft["shared_exact_scratch_bytes"].get<int64_t>(), 0);
  EXPECT_EQ(jgdn["modes"], json::array({"lora"}));
  EXPECT_EQ(jgdn["default_mode"], "lora");

  json req = {{"model", "ft"},
              {"record", "10.0.0.1 GET /admin?id=1' OR '1'='1 403\n10.0.0.2 GET /index.html 200\n"},
              {"questions", {{{"id", "m"}, {"question", "Malicious?"}, {"choices", {"yes", "no"}}},
                             {{"id", "c"}, {"question", "Category?"}, {"choices", {"sqli", "xss", "none"}}}}}};
  // The reference: the merged checkpoint, decided alone.
  CpuOps ref_ops(ActDtype::kBF16, 2);
  const AdapterSet none;
  DecisionScorer ref(*merged, ref_ops, *tok, *tmpl, none);
  auto want = ref.Score(ParseDecisionRequest(req, {}).value(), 0);
  ASSERT_TRUE(want.ok());
  const json want_decisions = json::parse(DecisionResultJson(want.value()).dump())["decisions"];

  auto [s1, exact_default] = post("/v1/decisions", req);
  ASSERT_EQ(s1, 200) << exact_default.dump();
  EXPECT_EQ(exact_default["mode"], "exact");
  EXPECT_EQ(exact_default["decisions"].dump(), want_decisions.dump());
  req["mode"] = "exact";
  auto [s2, exact_named] = post("/v1/decisions", req);
  EXPECT_EQ(exact_named["decisions"].dump(), want_decisions.dump());
  req["mode"] = "lora";
  auto [s3, lora] = post("/v1/decisions", req);
  ASSERT_EQ(s3, 200);
  EXPECT_EQ(lora["mode"], "lora");
  EXPECT_NE(lora["decisions"].dump(), want_decisions.dump());

  req["model"] = "gdn";
  req["mode"] = "exact";
  auto [s4, no_exact] = post("/v1/decisions", req);
  EXPECT_EQ(s4, 400);
  EXPECT_NE(no_exact["error"]["message"].get<std::string>().find("'gdn' has no exact representation"), std::string::npos) << no_exact.dump();
  EXPECT_EQ(no_exact["error"]["param"], "mode");
  req["mode"] = 7;
  auto [s5, bad] = post("/v1/decisions", req);
  EXPECT_EQ(s5, 400);
  EXPECT_NE(bad["error"]["message"].get<std::string>().find("'mode' must be"), std::string::npos) << bad.dump();
  req["mode"] = "fast";
  EXPECT_EQ(post("/v1/decisions", req).first, 400);

  EXPECT_EQ(post("/v1/chat/completions", chat).second["choices"][0].dump(), chat_before) << "exact decisions changed base chat";
  server.Stop();
  th.join();
  engine.Stop();
}

TEST(Scheduler, DecodesFirstThenAdmitsInOrderWithinBudgets) {
  Scheduler s(8, 40);
  std::vector<SchedSeq> seqs = {{1, 10, 0, 10, false}, {2, 30, 0, 10, false}, {3, 5, 0, 5, false}};
  StepPlan p = s.Plan(seqs);
  ASSERT_EQ(p.entries.size(), 1u);  // seq 1 admitted (its prompt and first token: 11 of 40), prefills 8 rows;
  EXPECT_EQ(p.entries[0].id, 1);     // seq 2 needs 31 more: waits
  EXPECT_EQ(p.entries[0].tokens, 8);
  EXPECT_EQ(s.kv_reserved(), 11);
  EXPECT_EQ(seqs[0].reserved, 11);
  seqs[0].prefilled = 8;
  p = s.Plan(seqs);
  EXPECT_EQ(p.entries[0].tokens, 2);  // the rest of seq 1's prompt; seq 2 still does not fit, so seq 3 waits behind it
  EXPECT_EQ(p.entries.size(), 1u);
  seqs[0].prefilled = 10;
  p = s.Plan(seqs);
  EXPECT_EQ(p.entries[0].id, 1);  // decode row first
  EXPECT_EQ(p.entries[0].tokens, 1);
  s.Release(seqs[0]);
  seqs.erase(seqs.begin());
  p = s.Plan(seqs);
  EXPECT_EQ(p.admitted, (std::vector<int64_t>{2}));
  EXPECT_EQ(p.entries[0].tokens, 8);
  std::vector<SchedSeq> huge = {{9, 100, 0, 100, false}};
  EXPECT_EQ(s.Plan(huge).rejected, (std::vector<int64_t>{9}));
}

// KV as sequences grow, as vLLM holds it: admitted with room for the prompt and a first token,
// a page more where a decode row starts one; with the budget full the newest running sequence
// gives all of its KV back (preempted: it starts over later, behind the older ones) — itself when
// it is the newest. Nothing is ever over the budget.
TEST(Scheduler, AGrowingSequenceTakesItsPageFromTheNewest) {
  Scheduler s(16, 16, /*page_size=*/4);
  std::vector<SchedSeq> seqs = {{1, 4, 0, 8, false}, {2, 3, 0, 4, false}};
  StepPlan p = s.Plan(seqs);
  EXPECT_EQ(p.admitted, (std::vector<int64_t>{1, 2}));  // 8 + 4 of 16: both prompts fit
  EXPECT_EQ(s.kv_reserved(), 12);
  seqs[0].prefilled = 4;
  seqs[1].prefilled = 3;
  for (int step = 0; step < 4; ++step) {  // four decode rows each: 1 grows to 8 tokens, 2 to 8 (a page more)
    p = s.Plan(seqs);
    ASSERT_EQ(p.entries.size(), 2u) << step;
    EXPECT_TRUE(p.preempted.empty()) << step;
    ++seqs[0].decoded;
    ++seqs[1].decoded;
    EXPECT_LE(s.kv_reserved(), 16);
  }
  EXPECT_EQ(s.kv_reserved(), 16);
  p = s.Plan(seqs);  // 1's ninth token starts a page: 2, the newest, gives its 8 back
  EXPECT_EQ(p.preempted, (std::vector<int64_t>{2}));
  ASSERT_EQ(p.entries.size(), 1u);
  EXPECT_EQ(p.entries[0].id, 1);
  EXPECT_FALSE(seqs[1].admitted);
  EXPECT_EQ(seqs[1].reserved, 0);
  EXPECT_EQ(seqs[0].reserved, 12);
  EXPECT_EQ(s.kv_reserved(), 12);
  // 2 starts over: its 3 prompt tokens and 4 generated, one of them not yet fed, to prefill.
  seqs[1].prompt_tokens = 7;
  seqs[1].prefilled = 0;
  seqs[1].decoded = 0;
  seqs[1].max_new_tokens = 0;
  ++seqs[0].decoded;
  p = s.Plan(seqs);
  EXPECT_TRUE(p.admitted.empty()) << "8 more do not fit beside 12";
  s.Release(seqs[0]);
  seqs.erase(seqs.begin());
  p = s.Plan(seqs);
  EXPECT_EQ(p.admitted, (std::vector<int64_t>{2}));
  EXPECT_EQ(p.entries.at(0).tokens, 7);
  // The newest needing a page with the budget full gives up its own KV.
  Scheduler u(16, 8, 4);
  std::vector<SchedSeq> pair = {{1, 3, 0, 4, false}, {2, 3, 0, 4, false}};
  u.Plan(pair);  // 4 + 4 of 8
  pair[0].prefilled = pair[1].prefilled = 3;
  pair[0].decoded = 0;
  pair[1].decoded = 1;  // 2's next row starts a page; 1's does not
  p = u.Plan(pair);
  EXPECT_EQ(p.preempted, (std::vector<int64_t>{2}));
  ASSERT_EQ(p.entries.size(), 1u);
  EXPECT_EQ(p.entries[0].id, 1);
  EXPECT_EQ(u.kv_reserved(), 4);
}

// Rows reserved for a decision's piece come out of the prefill's share of the budget, never the
// decode rows': a step holds decode rows, the reserved rows, then prefill chunks in what is left.
TEST(Scheduler, APrefillChunkEndsAtItsStopPosition) {
  Scheduler s(64, 1000);
  SchedSeq q{1, 100, 0, 10, false};
  q.stop_at = 40;
  std::vector<SchedSeq> seqs = {q};
  EXPECT_EQ(s.Plan(seqs).entries.at(0).tokens, 40) << "the chunk ends at stop_at, not at the budget";
  seqs[0].prefilled = 40;
  EXPECT_EQ(s.Plan(seqs).entries.at(0).tokens, 60) << "past it, the budget again";
  seqs[0].prefilled = 10;
  seqs[0].stop_at = 30;
  EXPECT_EQ(s.Plan(seqs).entries.at(0).tokens, 20);
}

TEST(Scheduler, ReservedRowsComeAfterTheDecodeRowsAndBeforePrefill) {
  Scheduler s(8, 1000);
  std::vector<SchedSeq> seqs = {{1, 2, 2, 10, true}, {2, 3, 3, 10, true}, {3, 50, 0, 10, false}};
  // Sequences 1 and 2 are running (admitted, prompts done); 3 waits.
  EXPECT_EQ(s.DecodeRows(seqs), 2);
  StepPlan p = s.Plan(seqs, 4);  // 2 decode rows, 4 reserved: 2 left for seq 3's prefill
  ASSERT_EQ(p.entries.size(), 3u);
  EXPECT_EQ(p.entries[2].id, 3);
  EXPECT_EQ(p.entries[2].tokens, 2);
  seqs[2].prefilled = 2;
  p = s.Plan(seqs, 6);  // nothing left for the prefill; the decode rows keep their place
  ASSERT_EQ(p.entries.size(), 2u);
  EXPECT_EQ(p.entries[0].tokens + p.entries[1].tokens, 2);
  p = s.Plan(seqs, 100);  // more reserved than the budget: still the decode rows
  EXPECT_EQ(p.entries.size(), 2u);
  EXPECT_EQ(s.Plan(seqs, 0).entries.back().tokens, 6);
}

}  // namespace
}  // namespace graft
