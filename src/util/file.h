// Reading a whole (small) file with a size limit: configs, indexes, templates, manifests.
#pragma once

#include <cstdint>
#include <string>

#include "util/status.h"

namespace graft {

// The file's bytes; NotFound when it does not exist, InvalidArgument when it is larger than
// `limit` bytes (checked before reading), IoError when reading fails. Errors name the path.
Result<std::string> ReadFileLimited(const std::string& path, uint64_t limit);

}  // namespace graft
