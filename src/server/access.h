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
//
// CORS (off by default; --allowed-origins names the web origins, "*" any): a request whose
// Origin is allowed gets Access-Control-Allow-Origin (that origin) and Vary: Origin; a preflight
// (OPTIONS with Access-Control-Request-Method) from an allowed origin is answered 204 with the
// route's methods, the headers asked for and a max age — before the key check, as browsers send
// preflights without credentials — and one from any other origin is a 403. Without
// --allowed-origins no CORS header is ever sent, so browsers keep other origins out.
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
  std::vector<std::string> allowed_origins;  // CORS: "scheme://host[:port]" or "*"; empty: none
};

struct RequestHead {
  std::string method, path;
  const std::string* host = nullptr;           // the headers, null when absent
  const std::string* authorization = nullptr;
  const std::string* content_type = nullptr;
  const std::string* origin = nullptr;
  const std::string* request_method = nullptr;   // Access-Control-Request-Method (a preflight's)
  const std::string* request_headers = nullptr;  // Access-Control-Request-Headers
};

// CORS's answer to a request: the headers to add, and for a preflight its whole answer.
struct CorsAnswer {
  std::vector<std::pair<std::string, std::string>> headers;
  bool preflight = false;      // answer now with `status` and no body
  int status = 204;
};

// The methods a route answers ("" for an unknown path): the server's route table.
std::string RouteMethods(const std::string& path);

// nullopt: no CORS (no Origin, CORS off, or a simple request from an origin not allowed — then
// no header is added). An error: a preflight from an origin not allowed (403).
std::optional<ApiError> Cors(const AccessConfig& c, const RequestHead& r, CorsAnswer* answer);

// Rule 1 alone (CheckAccess runs it first): nullopt, or the 403.
std::optional<ApiError> CheckHost(const AccessConfig& c, const std::string& bind_host, const std::string* host);

// nullopt: the request may proceed. `bind_host` is the address the server listens on.
std::optional<ApiError> CheckAccess(const AccessConfig& c, const std::string& bind_host, const RequestHead& r);

}  // namespace graft
