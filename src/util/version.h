// graft's version (CMake's project version), for `graft --version`, GET /version and logs.
#pragma once

#ifndef GRAFT_VERSION
#error "GRAFT_VERSION is set by the build (CMakeLists.txt: the project's version)"
#endif

namespace graft {

inline constexpr const char* kGraftVersion = GRAFT_VERSION;

}  // namespace graft
