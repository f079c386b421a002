#include "tools/tokenize.h"
#include "util/json_depth.h"

#include <fmt/core.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

namespace graft {

Status RunTokenize(const Tokenizer& tok, const std::string& input, const std::string& output, bool decode) {
  std::ifstream in(input, std::ios::binary);
  if (!in) return NotFound(input + ": cannot open");
  std::ostringstream ss;
  ss << in.rdbuf();
  GRAFT_RETURN_IF_ERROR(CheckJsonDepth(ss.str(), input));
  nlohmann::json j = nlohmann::json::parse(ss.str(), nullptr, false);
  if (j.is_discarded() || !j.is_array()) return InvalidArgument(input + ": must be a JSON array");
  nlohmann::json out = nlohmann::json::array();
  for (size_t i = 0; i < j.size(); ++i) {
    if (!decode) {
      if (!j[i].is_string()) return InvalidArgument(fmt::format("{}: element {} is not a string", input, i));
      auto ids = tok.Encode(j[i].get<std::string>());
      if (!ids.ok()) return ids.status().WithContext(fmt::format("{}: element {}", input, i));
      out.push_back(ids.value());
      continue;
    }
    if (!j[i].is_array()) return InvalidArgument(fmt::format("{}: element {} is not an array of ids", input, i));
    std::vector<int32_t> ids;
    for (const auto& e : j[i]) {
      if (!e.is_number_integer() || e.get<int64_t>() < 0 || e.get<int64_t>() >= tok.vocab_size()) {
        return InvalidArgument(fmt::format("{}: element {} holds {}, not a token id in [0, {})", input, i, e.dump(),
                                           tok.vocab_size()));
      }
      ids.push_back(e.get<int32_t>());
    }
    out.push_back(tok.Decode(ids));
  }
  const std::string tmp = output + ".tmp";
  {
    std::ofstream o(tmp, std::ios::binary | std::ios::trunc);
    if (!o) return IoError(tmp + ": cannot create");
    o << out.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
    if (!o) return IoError(tmp + ": write failed");
  }
  std::error_code ec;
  std::filesystem::rename(tmp, output, ec);
  if (ec) return IoError(output + ": " + ec.message());
  return Status::Ok();
}

}  // namespace graft
