#include "util/file.h"

#include <filesystem>
#include <fstream>
#include <sstream>

namespace graft {

Result<std::string> ReadFileLimited(const std::string& path, uint64_t limit) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) return NotFound(path + ": no such file");
  const auto size = std::filesystem::file_size(path, ec);
  if (ec) return IoError(path + ": " + ec.message());
  if (size > limit) {
    return InvalidArgument(path + ": " + std::to_string(size) + " bytes is larger than the limit of " + std::to_string(limit));
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) return IoError(path + ": cannot open");
  std::ostringstream ss;
  ss << in.rdbuf();
  if (!in.good() && !in.eof()) return IoError(path + ": read failed");
  return ss.str();
}

}  // namespace graft
