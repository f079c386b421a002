// What a request must show before any handler sees it (the HTTP server's pre-routing check):
//
// 1. Host (403): a server bound to loopback answers only requests whose Host names loopback
//    (localhost, 127.x.x.x, [::1]) or one of --allowed-hosts, so a web page whose name was
//    re-bound to 127.0.0.1 (DNS rebinding) cannot drive it; bound elsewhere, only
//    --allowed-hosts is enforced (when given). "*" allows any. A request without Host passes.
// 2. Method (405, with Allow): a known route asked with another method.
// 3. API key (401): with --api-key, every route but the open ones (--open-routes, default
//    /health, /metrics and /version) needs "Authorization: Bearer KEY" (compared in constant
//    time), as vLLM's --api-key guards /v1.
// 4. Body type (415): a POST body must be JSON (Content-Type application/json or +json), so a
//    cross-site form (text/plain, urlencoded, multipart) cannot start work.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "server/api.h"

namespace graft {

struct AccessConfig {
  std::string api_key;                     // empty: no key needed
  std::vector<std::string> allowed_hosts;  // Host names (no port), "*" for any
  std::vector<std::string> open_routes = {"/health", "/metrics", "/version"};  // need no key
};

struct RequestHead {
  std::string method, path;
  const std::string* host = nullptr;           // the headers, null when absent
  const std::string* authorization = nullptr;
  const std::string* content_type = nullptr;
};

// The methods a route answers ("" for an unknown path): the server's route table.
std::string RouteMethods(const std::string& path);

// nullopt: the request may proceed. `bind_host` is the address the server listens on.
std::optional<ApiError> CheckAccess(const AccessConfig& c, const std::string& bind_host, const RequestHead& r);

}  // namespace graft
