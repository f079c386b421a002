#include "server/access.h"

#include <fmt/core.h>

#include <algorithm>
#include <cctype>

namespace graft {
namespace {

std::string Lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

// "name:port", "[v6]:port" -> the name (lower case), brackets kept for IPv6.
std::string HostName(const std::string& host) {
  std::string h = Lower(host);
  if (!h.empty() && h[0] == '[') {
    const size_t close = h.find(']');
    return close == std::string::npos ? h : h.substr(0, close + 1);
  }
  const size_t colon = h.find(':');
  return colon == std::string::npos ? h : h.substr(0, colon);
}

bool IsLoopbackName(const std::string& name) {
  return name == "localhost" || name == "[::1]" || name == "::1" || name.rfind("127.", 0) == 0 ||
         (name.size() > 10 && name.substr(name.size() - 10) == ".localhost");
}

// Equal non-empty strings, in time that depends on the lengths only.
bool SameSecret(const std::string& a, const std::string& b) {
  if (a.size() != b.size() || b.empty()) return false;
  unsigned diff = 0;
  for (size_t i = 0; i < a.size(); ++i) diff |= static_cast<unsigned char>(a[i] ^ b[i]);
  return diff == 0;
}

}  // namespace

std::string RouteMethods(const std::string& path) {
  for (const char* p : {"/v1/chat/completions", "/v1/completions", "/v1/responses", "/v1/decisions", "/tokenize", "/detokenize",
                        "/v1/load_lora_adapter", "/v1/unload_lora_adapter"}) {
    if (path == p) return "POST";
  }
  for (const char* p : {"/health", "/metrics", "/v1/models", "/version"}) {
    if (path == p) return "GET";
  }
  if (path.rfind("/v1/models/", 0) == 0 && path.size() > 11) return "GET";
  return "";
}

std::optional<ApiError> Cors(const AccessConfig& c, const RequestHead& r, CorsAnswer* answer) {
  *answer = CorsAnswer{};
  const bool preflight = r.method == "OPTIONS" && r.origin && r.request_method;
  if (!r.origin || c.allowed_origins.empty()) {
    if (preflight) {
      return ApiError{403, "cross-origin requests are not allowed (the server has no --allowed-origins)", "permission_error", ""};
    }
    return std::nullopt;
  }
  const bool any = std::find(c.allowed_origins.begin(), c.allowed_origins.end(), "*") != c.allowed_origins.end();
  bool listed = false;
  for (const auto& o : c.allowed_origins) listed = listed || Lower(o) == Lower(*r.origin);
  if (!any && !listed) {
    if (preflight) {
      return ApiError{403, fmt::format("origin '{}' is not among --allowed-origins", r.origin->substr(0, 100)),
                      "permission_error", ""};
    }
    return std::nullopt;
  }
  answer->headers.push_back({"Access-Control-Allow-Origin", *r.origin});
  answer->headers.push_back({"Vary", "Origin"});
  if (preflight) {
    const std::string methods = RouteMethods(r.path);
    answer->preflight = true;
    answer->headers.push_back({"Access-Control-Allow-Methods", methods.empty() ? "GET, POST" : methods});
    answer->headers.push_back(
        {"Access-Control-Allow-Headers", r.request_headers ? r.request_headers->substr(0, 1024) : "Authorization, Content-Type"});
    answer->headers.push_back({"Access-Control-Max-Age", "600"});
  }
  return std::nullopt;
}

std::optional<ApiError> CheckHost(const AccessConfig& c, const std::string& bind_host, const std::string* host) {
  if (host) {
    const std::string name = HostName(*host);
    const bool any = std::find(c.allowed_hosts.begin(), c.allowed_hosts.end(), "*") != c.allowed_hosts.end();
    bool listed = false;
    for (const auto& h : c.allowed_hosts) listed = listed || Lower(h) == name;
    const bool loopback = IsLoopbackName(Lower(bind_host));
    const bool ok = any || listed || (loopback ? IsLoopbackName(name) : c.allowed_hosts.empty());
    if (!ok) {
      return ApiError{403,
                      fmt::format("Host '{}' is not allowed: {}; --allowed-hosts adds names", name.substr(0, 100),
                                  loopback ? "the server listens on loopback and answers loopback names only"
                                           : "it is not among --allowed-hosts"),
                      "permission_error", ""};
    }
  }
  return std::nullopt;
}

std::optional<ApiError> CheckAccess(const AccessConfig& c, const std::string& bind_host, const RequestHead& r) {
  if (auto e = CheckHost(c, bind_host, r.host)) return e;
  const std::string methods = RouteMethods(r.path);
  if (!methods.empty() && methods != r.method && !(methods == "GET" && r.method == "HEAD")) {
    return ApiError{405, fmt::format("{} takes {}, not {}", r.path, methods, r.method.substr(0, 20)),
                    "invalid_request_error", ""};
  }
  const bool open = std::find(c.open_routes.begin(), c.open_routes.end(), r.path) != c.open_routes.end();
  if (!c.api_key.empty() && !open) {
    const std::string prefix = "Bearer ";
    const bool bearer = r.authorization && r.authorization->compare(0, prefix.size(), prefix) == 0;
    if (!bearer || !SameSecret(r.authorization->substr(prefix.size()), c.api_key)) {
      return ApiError{401,
                      bearer ? "Incorrect API key provided" : "An API key is required: send 'Authorization: Bearer KEY'",
                      "authentication_error", ""};
    }
  }
  if (r.method == "POST") {
    const std::string type = r.content_type ? Lower(*r.content_type) : "";
    const std::string media = type.substr(0, type.find(';'));
    const auto trimmed = media.substr(0, media.find_last_not_of(' ') + 1);
    const bool json = trimmed == "application/json" ||
                      (trimmed.size() > 5 && trimmed.rfind("application/", 0) == 0 &&
                       trimmed.substr(trimmed.size() - 5) == "+json");
    if (!json) {
      return ApiError{415,
                      fmt::format("the request body must be JSON (Content-Type: application/json), not '{}'",
                                  r.content_type ? r.content_type->substr(0, 80) : std::string("none")),
                      "invalid_request_error", ""};
    }
  }
  return std::nullopt;
}

}  // namespace graft
