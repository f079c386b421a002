// Serving settings and run-time adapters, in process: max_model_len's default and refusals, and
// vLLM's /v1/load_lora_adapter / /v1/unload_lora_adapter (a loaded adapter answers as one given at
// start-up, bit for bit; every bad load or unload is a clear error; an unload waits for its work).
#include <fmt/core.h>
#include <gtest/gtest.h>
#include <httplib.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>

#include "adapters/lora_loader.h"
#include "backend/cpu/cpu_ops.h"
#include "server/adapter_registry.h"
#include "server/api.h"
#include "server/http_server.h"
#include "test_util.h"
#include "tools/generate.h"

namespace graft {
namespace {

using json = nlohmann::json;

// max_model_len: by default the model's context cut to the KV pool; an explicit value
// over either is refused, naming both numbers.
TEST(ServedContext, DefaultsToWhatTheKvBudgetHoldsAndRefusesMore) {
  EXPECT_EQ(ServedContext(0, 262144, 65536).value(), 65536);
  EXPECT_EQ(ServedContext(0, 4096, 65536).value(), 4096);
  EXPECT_EQ(ServedContext(0, 0, 8192).value(), 8192) << "a config without a context";
  EXPECT_EQ(ServedContext(32768, 262144, 65536).value(), 32768);
  auto over_model = ServedContext(8192, 4096, 65536);
  ASSERT_FALSE(over_model.ok());
  EXPECT_EQ(over_model.status().message(), "--max-model-len 8192 is over the model's context of 4096 tokens (max_position_embeddings)");
  auto over_kv = ServedContext(100000, 262144, 65536);
  ASSERT_FALSE(over_kv.ok());
  EXPECT_EQ(over_kv.status().message(),
            "--max-model-len 100000: one sequence of that length needs 100000 tokens of KV, but the KV pool "
            "(--kv-tokens) is 65536; raise --kv-tokens or lower --max-model-len");
}

// Run-time adapters (--allow-runtime-adapters): a server that starts with empty slots and loads
// the adapter over HTTP answers exactly what a server given it at start-up answers, the base's
// answers never move, and every bad load or unload is a clear error.
class RuntimeAdapters : public ::testing::Test {
 protected:
  struct Stack {
    AdapterSet set;
    std::unique_ptr<Engine> engine;
    std::unique_ptr<AdapterRegistry> registry;
    std::unique_ptr<HttpServer> server;
    std::thread thread;
    ~Stack() {
      if (server) server->Stop();
      if (thread.joinable()) thread.join();
      if (engine) engine->Stop();
    }
  };
  void SetUp() override {
    model_ = test::LoadFixtureModel("qwen3_5-wrapper");
    tok_ = Tokenizer::FromFile(test::Fixture("qwen3_5-wrapper/tokenizer.json")).value();
    tmpl_ = ChatTemplate::Load(test::Fixture("qwen3_5-wrapper"), "").value();
    auto a = LoadLoraAdapter(Dir(), model_->config(), {"gdn", false, nullptr});
    ASSERT_TRUE(a.ok());
    adapter_ = std::make_unique<LoraAdapter>(std::move(a).value());
  }
  static std::string Dir() { return test::Fixture("adapters/qwen3_5-wrapper-lora-gdn"); }
  // slots: run-time slots (0: the adapter at start-up in slot 1, no run-time loading).
  std::unique_ptr<Stack> Start(int slots, int max_rank = 1024) {
    auto st = std::make_unique<Stack>();
    ServedModels served;
    served.base_name = "base";
    served.context = model_->config().max_position_embeddings;
    served.kv_tokens = 8192;
    RuntimeAdapterConfig rc;
    if (slots == 0) {
      st->set.slots.push_back(adapter_.get());
      served.adapters["gdn"].slots.lora = 1;
    } else {
      for (int i = 0; i < slots; ++i) {
        rc.slots.push_back(static_cast<int32_t>(st->set.slots.size()));
        st->set.slots.push_back(nullptr);
      }
      rc.max_rank = max_rank;
    }
    EngineConfig ec;
    ec.max_step_tokens = 64;
    ec.kv_token_budget = 8192;
    st->engine = std::make_unique<Engine>(ec, *model_, std::make_unique<CpuOps>(ActDtype::kBF16, 2), *tok_, *tmpl_, st->set);
    if (slots > 0) st->registry = std::make_unique<AdapterRegistry>(*st->engine, model_->config(), rc);
    ServerConfig sc;
    sc.port = 0;
    st->server = std::make_unique<HttpServer>(*st->engine, *tok_, *tmpl_, served,
                                              StopTokens(test::Fixture("qwen3_5-wrapper"), model_->config(), *tok_, tmpl_.get()),
                                              sc, st->registry.get());
    EXPECT_TRUE(st->server->Bind().ok());
    Stack* raw = st.get();
    st->thread = std::thread([raw] { raw->server->Serve(); });
    return st;
  }
  static std::pair<int, std::string> PostRaw(const Stack& st, const std::string& path, const std::string& body) {
    httplib::Client c("127.0.0.1", st.server->port());
    c.set_read_timeout(120, 0);
    auto r = c.Post(path.c_str(), body, "application/json");
    if (!r) return {-1, ""};
    return {r->status, r->body};
  }
  static std::string Chat(const Stack& st, const std::string& model, int max_tokens = 10) {
    auto [status, body] = PostRaw(st, "/v1/chat/completions",
                                  json{{"model", model},
                                       {"messages", {{{"role", "user"}, {"content", "Summarize the incident report."}}}},
                                       {"max_tokens", max_tokens},
                                       {"temperature", 0},
                                       {"logprobs", true},
                                       {"top_logprobs", 3}}
                                      .dump());
    if (status != 200) return fmt::format("status {}: {}", status, body);
    return json::parse(body)["choices"][0].dump();
  }
  static std::string Load(const std::string& name, const std::string& dir) {
    return json{{"lora_name", name}, {"lora_path", dir}}.dump();
  }
  std::unique_ptr<Model> model_;
  std::shared_ptr<const Tokenizer> tok_;
  std::shared_ptr<const ChatTemplate> tmpl_;
  std::unique_ptr<LoraAdapter> adapter_;
};

TEST_F(RuntimeAdapters, ALoadedAdapterAnswersAsOneGivenAtStartUpAndUnloadsCleanly) {
  auto fixed = Start(0);
  auto rt = Start(2);
  const std::string want = Chat(*fixed, "gdn"), base = Chat(*rt, "base");
  ASSERT_EQ(want.rfind("status", 0), std::string::npos) << want;
  EXPECT_EQ(base, Chat(*fixed, "base"));
  EXPECT_NE(Chat(*rt, "gdn").find("status 404"), std::string::npos) << "not loaded yet";

  auto [st, text] = PostRaw(*rt, "/v1/load_lora_adapter", Load("gdn", Dir()));
  ASSERT_EQ(st, 200) << text;
  EXPECT_EQ(text, "Success: LoRA adapter 'gdn' added successfully.");
  EXPECT_EQ(Chat(*rt, "gdn"), want) << "the run-time adapter's rows are the start-up adapter's, bit for bit";
  EXPECT_EQ(Chat(*rt, "base"), base) << "the base's rows never move";
  {
    httplib::Client c("127.0.0.1", rt->server->port());
    auto r = c.Get("/v1/models/gdn");
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 200);
    EXPECT_EQ(json::parse(r->body)["parent"], "base");
  }

  // Refusals: a name taken, a field graft does not know, load_inplace, missing fields.
  std::tie(st, text) = PostRaw(*rt, "/v1/load_lora_adapter", Load("gdn", Dir()));
  EXPECT_EQ(st, 400);
  EXPECT_NE(text.find("The lora adapter 'gdn' has already been loaded."), std::string::npos) << text;
  std::tie(st, text) = PostRaw(*rt, "/v1/load_lora_adapter", Load("base", Dir()));
  EXPECT_EQ(st, 400) << "the base's name is taken too";
  std::tie(st, text) = PostRaw(*rt, "/v1/load_lora_adapter", R"({"lora_name": "x", "lora_path": "/tmp", "lora_int_id": 3})");
  EXPECT_EQ(st, 400);
  EXPECT_NE(text.find("'lora_int_id' is not a field of /v1/load_lora_adapter"), std::string::npos) << text;
  std::tie(st, text) = PostRaw(*rt, "/v1/load_lora_adapter", json{{"lora_name", "y"}, {"lora_path", Dir()}, {"load_inplace", true}}.dump());
  EXPECT_EQ(st, 400);
  EXPECT_NE(text.find("'load_inplace' must be false"), std::string::npos) << text;
  std::tie(st, text) = PostRaw(*rt, "/v1/load_lora_adapter", R"({"lora_name": "z"})");
  EXPECT_EQ(st, 400);
  EXPECT_NE(text.find("'lora_path' must be a non-empty string"), std::string::npos) << text;
  std::tie(st, text) = PostRaw(*rt, "/v1/load_lora_adapter", R"({"lora_name": 5, "lora_path": "/tmp"})");
  EXPECT_EQ(st, 400);
  EXPECT_NE(text.find("'lora_name' must be a non-empty string"), std::string::npos) << text;
  std::tie(st, text) = PostRaw(*rt, "/v1/unload_lora_adapter", R"({"lora_name": "gdn", "lora_path": "/tmp"})");
  EXPECT_EQ(st, 400);
  EXPECT_NE(text.find("'lora_path' is not a field of /v1/unload_lora_adapter"), std::string::npos) << text;
  std::tie(st, text) = PostRaw(*rt, "/v1/unload_lora_adapter", "[1]");
  EXPECT_EQ(st, 400);
  EXPECT_NE(text.find("must be a JSON object"), std::string::npos) << text;

  // Bad adapters: no directory; an adapter made for another base (the loader's own messages).
  std::tie(st, text) = PostRaw(*rt, "/v1/load_lora_adapter", Load("nodir", "/nonexistent/adapter"));
  EXPECT_EQ(st, 400);
  EXPECT_NE(text.find("'/nonexistent/adapter' is not a directory"), std::string::npos) << text;
  std::tie(st, text) = PostRaw(*rt, "/v1/load_lora_adapter", Load("other", test::Fixture("adapters/qwen3-tiny-lora-mixed")));
  EXPECT_EQ(st, 400) << text;
  EXPECT_NE(text.find("qwen3-tiny-lora-mixed"), std::string::npos) << "the message names the adapter: " << text;
  EXPECT_NE(Chat(*rt, "other").find("status 404"), std::string::npos) << "a failed load serves nothing";

  // The second slot, then no slot left.
  std::tie(st, text) = PostRaw(*rt, "/v1/load_lora_adapter", Load("gdn2", Dir()));
  ASSERT_EQ(st, 200) << text;
  EXPECT_EQ(Chat(*rt, "gdn2"), want);
  std::tie(st, text) = PostRaw(*rt, "/v1/load_lora_adapter", Load("gdn3", Dir()));
  EXPECT_EQ(st, 400);
  EXPECT_NE(text.find("all 2 run-time adapter slots are taken"), std::string::npos) << text;

  // Unload: unknown names are 404; then the adapter is gone, the other stays, the slot is reused.
  std::tie(st, text) = PostRaw(*rt, "/v1/unload_lora_adapter", R"({"lora_name": "nope"})");
  EXPECT_EQ(st, 404);
  EXPECT_NE(text.find("The lora adapter 'nope' cannot be found."), std::string::npos) << text;
  std::tie(st, text) = PostRaw(*rt, "/v1/unload_lora_adapter", R"({"lora_name": "gdn"})");
  ASSERT_EQ(st, 200) << text;
  EXPECT_EQ(text, "Success: LoRA adapter 'gdn' removed successfully.");
  EXPECT_NE(Chat(*rt, "gdn").find("status 404"), std::string::npos);
  EXPECT_EQ(Chat(*rt, "gdn2"), want);
  EXPECT_EQ(Chat(*rt, "base"), base);
  std::tie(st, text) = PostRaw(*rt, "/v1/load_lora_adapter", Load("again", Dir()));
  ASSERT_EQ(st, 200) << text;
  EXPECT_EQ(Chat(*rt, "again"), want);

  // A server without --allow-runtime-adapters: 404 naming the flag; start-up adapters stay.
  std::tie(st, text) = PostRaw(*fixed, "/v1/load_lora_adapter", Load("x", Dir()));
  EXPECT_EQ(st, 404);
  EXPECT_NE(text.find("--allow-runtime-adapters"), std::string::npos) << text;
}

TEST_F(RuntimeAdapters, RankLimitAndStartUpAdaptersAreRefused) {
  auto rt = Start(1, /*max_rank=*/adapter_->max_rank() - 1);
  auto [st, text] = PostRaw(*rt, "/v1/load_lora_adapter", Load("gdn", Dir()));
  EXPECT_EQ(st, 400);
  EXPECT_NE(text.find(fmt::format("rank {} is over this server's --max-adapter-rank {}", adapter_->max_rank(),
                                  adapter_->max_rank() - 1)),
            std::string::npos)
      << text;
  auto fixed = Start(0);
  std::tie(st, text) = PostRaw(*fixed, "/v1/unload_lora_adapter", R"({"lora_name": "gdn"})");
  EXPECT_EQ(st, 404) << "no run-time adapters at all on that server: " << text;
}

// An unload waits for the request running on the adapter: that request finishes whole, and the
// unload answers after it.
TEST_F(RuntimeAdapters, UnloadWaitsForTheRequestsOnTheAdapter) {
  auto rt = Start(1);
  ASSERT_EQ(PostRaw(*rt, "/v1/load_lora_adapter", Load("gdn", Dir())).first, 200);
  std::string chat;
  std::thread t([&] { chat = Chat(*rt, "gdn", 120); });
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (rt->engine->Stats().running == 0 && std::chrono::steady_clock::now() < give_up) {
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  ASSERT_GT(rt->engine->Stats().running, 0) << "the chat never started";
  auto [st, text] = PostRaw(*rt, "/v1/unload_lora_adapter", R"({"lora_name": "gdn"})");
  // The engine empties the slot only once nothing uses it: the request is out of the engine now.
  const EngineStats after = rt->engine->Stats();
  t.join();
  EXPECT_EQ(st, 200) << text;
  EXPECT_EQ(after.running + after.waiting, 0) << "the unload answered while the request on it still ran";
  ASSERT_EQ(chat.rfind("status", 0), std::string::npos) << chat;
  const json c = json::parse(chat);
  EXPECT_TRUE(c["finish_reason"] == "length" || c["finish_reason"] == "stop") << "the request ran to its end: " << chat;
  EXPECT_FALSE(c["message"]["content"].get<std::string>().empty() && c["message"].value("reasoning_content", "").empty())
      << chat;
  EXPECT_NE(Chat(*rt, "gdn").find("status 404"), std::string::npos);
}

}  // namespace
}  // namespace graft
