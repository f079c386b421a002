// HttpServer's run-time adapter routes (http_server.h): vLLM's /v1/load_lora_adapter and
// /v1/unload_lora_adapter over an AdapterRegistry, answered from the admin thread.
#include <fmt/core.h>
#include <spdlog/spdlog.h>

#include <chrono>

#include "server/http_server.h"
#include "util/seconds.h"

namespace graft {

// vLLM's run-time LoRA endpoints. Load: {"lora_name", "lora_path"} (and "load_inplace": false);
// unload: {"lora_name"}. Answers as vLLM's: 200 with a plain-text "Success: ..." line; 400 for a
// bad request or an adapter that fails validation (the loader's message), 404 for an unknown
// name on unload. Any other field is a 400 naming it. The work runs on the admin thread.
void HttpServer::RuntimeAdapter(bool load, const HttpRequest& req, const Exchange& ex) {
  const char* endpoint = load ? "/v1/load_lora_adapter" : "/v1/unload_lora_adapter";
  const auto t0 = std::chrono::steady_clock::now();
  auto refuse = [&](const ApiError& e) { Refuse(*ex, e, endpoint, "-", SecondsSince(t0)); };
  if (runtime_ == nullptr) {
    return refuse({404, fmt::format("{} is off: start graft serve with --allow-runtime-adapters", endpoint), "not_found_error", ""});
  }
  nlohmann::json body;
  if (auto err = ParseJsonBody(req.body, &body)) return refuse(*err);
  if (!body.is_object()) return refuse({400, "the request body must be a JSON object", "invalid_request_error", ""});
  for (const auto& [k, v] : body.items()) {
    const bool known = k == "lora_name" || (load && (k == "lora_path" || k == "load_inplace"));
    if (!known) return refuse({400, fmt::format("'{}' is not a field of {} (graft does not support it)", k, endpoint), "invalid_request_error", k});
  }
  auto text = [&](const char* key) -> std::string {
    auto it = body.find(key);
    return it != body.end() && it->is_string() ? it->get<std::string>() : std::string();
  };
  const std::string name = text("lora_name"), path = text("lora_path");
  if (name.empty()) return refuse({400, "'lora_name' must be a non-empty string", "invalid_request_error", "lora_name"});
  if (load && path.empty()) return refuse({400, "'lora_path' must be a non-empty string", "invalid_request_error", "lora_path"});
  if (load && body.contains("load_inplace") && body["load_inplace"] != false) {
    return refuse({400, "'load_inplace' must be false: unload the adapter, then load it again", "invalid_request_error",
                   "load_inplace"});
  }
  if (load) {
    {
      std::lock_guard<std::mutex> l(models_mu_);
      if (name == models_->base_name || models_->adapters.count(name) || loading_.count(name)) {
        return refuse({400, fmt::format("The lora adapter '{}' has already been loaded.", name), "invalid_request_error", "lora_name"});
      }
      loading_.insert(name);
    }
    auto job = [this, ex, name, path, t0, endpoint] {
      Result<ServedAdapter> sa = runtime_->Load(name, path);
      {
        std::lock_guard<std::mutex> l(models_mu_);
        loading_.erase(name);
        if (sa.ok()) {
          auto next = std::make_shared<ServedModels>(*models_);
          next->adapters[name] = *sa;
          models_ = std::move(next);
        }
      }
      if (!sa.ok()) return Refuse(*ex, {400, sa.status().message(), "invalid_request_error", "lora_path"}, endpoint, name, SecondsSince(t0));
      spdlog::info("adapter {} loaded from {} into slot {} ({:.2f} MB of factors)", name, path, sa->slots.lora, sa->lora_bytes / 1e6);
      ex->Reply(200, "text/plain; charset=utf-8", fmt::format("Success: LoRA adapter '{}' added successfully.", name), {});
      Logged(endpoint, name, 200, SecondsSince(t0));
    };
    return RunAdmin(std::move(job));
  }
  int32_t slot = -1;
  {
    std::lock_guard<std::mutex> l(models_mu_);
    auto it = models_->adapters.find(name);
    if (it == models_->adapters.end()) {
      return refuse({404, fmt::format("The lora adapter '{}' cannot be found.", name), "not_found_error", "lora_name"});
    }
    if (it->second.runtime_slot < 0) {
      return refuse({400, fmt::format("adapter '{}' was given with --adapter at start-up and stays loaded", name),
                     "invalid_request_error", "lora_name"});
    }
    slot = it->second.runtime_slot;
    auto next = std::make_shared<ServedModels>(*models_);  // new requests no longer find it
    next->adapters.erase(name);
    models_ = std::move(next);
  }
  auto job = [this, ex, name, slot, t0, endpoint] {
    const Status st = runtime_->Unload(slot);  // waits for the work on it
    if (!st.ok()) return Refuse(*ex, {503, st.message(), "service_unavailable", ""}, endpoint, name, SecondsSince(t0));
    spdlog::info("adapter {} unloaded from slot {}", name, slot);
    ex->Reply(200, "text/plain; charset=utf-8", fmt::format("Success: LoRA adapter '{}' removed successfully.", name), {});
    Logged(endpoint, name, 200, SecondsSince(t0));
  };
  RunAdmin(std::move(job));
}

}  // namespace graft
