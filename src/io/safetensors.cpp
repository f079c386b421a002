#include "io/safetensors.h"
#include "util/json_depth.h"

#include <fmt/core.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cstring>
#include <nlohmann/json.hpp>
#include <set>

namespace graft {
namespace {

using json = nlohmann::json;

Status Bad(const std::string& source, const std::string& what) {
  return Corrupt(fmt::format("{}: {}", source, what));
}

// Parses `text` as JSON and reports duplicate keys in any object (nlohmann keeps the last).
Result<json> ParseJsonNoDuplicates(std::string_view text, const std::string& source) {
  if (Status depth = CheckJsonDepth(text, "header"); !depth.ok()) return Bad(source, depth.message());
  std::vector<std::set<std::string>> keys;
  std::string duplicate;
  auto cb = [&](int /*depth*/, json::parse_event_t ev, json& parsed) {
    if (ev == json::parse_event_t::object_start) keys.emplace_back();
    else if (ev == json::parse_event_t::object_end && !keys.empty()) keys.pop_back();
    else if (ev == json::parse_event_t::key && !keys.empty()) {
      if (!keys.back().insert(parsed.get<std::string>()).second && duplicate.empty()) {
        duplicate = parsed.get<std::string>();
      }
    }
    return true;
  };
  json j;
  try {
    j = json::parse(text.begin(), text.end(), cb);
  } catch (const json::exception& e) {
    return Bad(source, fmt::format("header is not valid JSON: {}", e.what()));
  }
  if (!duplicate.empty()) return Bad(source, fmt::format("header has duplicate key '{}'", duplicate));
  return j;
}

Result<uint64_t> ReadU64(const json& v, const std::string& source, const std::string& what) {
  if (!v.is_number_unsigned()) return Bad(source, what + " must be a non-negative integer");
  return v.get<uint64_t>();
}

Result<TensorInfo> ParseEntry(const std::string& name, const json& e, const std::string& source) {
  const std::string where = fmt::format("tensor '{}'", name);
  if (!e.is_object()) return Bad(source, where + ": entry is not an object");
  TensorInfo t;
  t.name = name;
  auto d = e.find("dtype");
  if (d == e.end() || !d->is_string()) return Bad(source, where + ": missing or non-string dtype");
  auto dt = ParseDType(d->get<std::string>());
  if (!dt) return Bad(source, fmt::format("{}: unknown dtype '{}'", where, d->get<std::string>()));
  t.dtype = *dt;
  auto s = e.find("shape");
  if (s == e.end() || !s->is_array()) return Bad(source, where + ": missing or non-array shape");
  if (s->size() > 16) return Bad(source, where + ": shape has more than 16 dimensions");
  uint64_t elements = 1;
  for (const auto& dim : *s) {
    GRAFT_ASSIGN_OR_RETURN(uint64_t n, ReadU64(dim, source, where + ": shape dimension"));
    if (n > (1ull << 62)) return Bad(source, where + ": shape dimension too large");
    if (__builtin_mul_overflow(elements, n, &elements)) {
      return Bad(source, where + ": shape overflows 64 bits");
    }
    t.shape.push_back(static_cast<int64_t>(n));
  }
  auto o = e.find("data_offsets");
  if (o == e.end() || !o->is_array() || o->size() != 2) {
    return Bad(source, where + ": data_offsets must be an array [begin, end]");
  }
  GRAFT_ASSIGN_OR_RETURN(t.begin, ReadU64((*o)[0], source, where + ": data_offsets begin"));
  GRAFT_ASSIGN_OR_RETURN(t.end, ReadU64((*o)[1], source, where + ": data_offsets end"));
  if (t.end < t.begin) {
    return Bad(source, fmt::format("{}: data_offsets end {} is before begin {}", where, t.end, t.begin));
  }
  uint64_t bits = 0;
  if (__builtin_mul_overflow(elements, static_cast<uint64_t>(DTypeBits(t.dtype)), &bits)) {
    return Bad(source, where + ": byte size overflows 64 bits");
  }
  if (bits % 8 != 0) {
    return Bad(source, fmt::format("{}: {} elements of {} do not fill whole bytes", where, elements,
                                   DTypeName(t.dtype)));
  }
  if (bits / 8 != t.num_bytes()) {
    return Bad(source, fmt::format("{}: shape [{}] of {} needs {} bytes but data_offsets span {}",
                                   where, fmt::join(t.shape, ", "), DTypeName(t.dtype), bits / 8,
                                   t.num_bytes()));
  }
  return t;
}

}  // namespace

uint64_t TensorInfo::num_elements() const {
  uint64_t n = 1;
  for (int64_t d : shape) n *= static_cast<uint64_t>(d);
  return n;
}

Result<SafetensorsHeader> ParseSafetensorsHeader(const uint8_t* bytes, size_t available,
                                                 uint64_t file_size, const std::string& source) {
  if (file_size < 8 || available < 8) {
    return Bad(source, fmt::format("file is {} bytes, too short for the 8-byte header length", file_size));
  }
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | bytes[i];  // little-endian
  if (n > kMaxHeaderBytes) {
    return Bad(source, fmt::format("header length {} exceeds the limit of {} bytes", n, kMaxHeaderBytes));
  }
  if (n > file_size - 8 || n > available - 8) {
    return Bad(source, fmt::format("header length {} runs past the end of the file ({} bytes): truncated?",
                                   n, file_size));
  }
  if (n < 2) return Bad(source, fmt::format("header length {} is too short for a JSON object", n));
  std::string_view text(reinterpret_cast<const char*>(bytes + 8), static_cast<size_t>(n));
  GRAFT_ASSIGN_OR_RETURN(json j, ParseJsonNoDuplicates(text, source));
  if (!j.is_object()) return Bad(source, "header is not a JSON object");

  SafetensorsHeader h;
  h.header_bytes = n;
  for (const auto& [key, value] : j.items()) {
    if (key == "__metadata__") {
      if (!value.is_object()) return Bad(source, "__metadata__ is not an object");
      for (const auto& [mk, mv] : value.items()) {
        if (!mv.is_string()) return Bad(source, fmt::format("__metadata__ value '{}' is not a string", mk));
        h.metadata[mk] = mv.get<std::string>();
      }
      continue;
    }
    GRAFT_ASSIGN_OR_RETURN(TensorInfo t, ParseEntry(key, value, source));
    h.tensors.push_back(std::move(t));
  }
  std::sort(h.tensors.begin(), h.tensors.end(), [](const TensorInfo& a, const TensorInfo& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  const uint64_t buffer = file_size - 8 - n;
  uint64_t at = 0;
  const TensorInfo* prev = nullptr;
  for (const auto& t : h.tensors) {
    if (t.begin < at) {
      return Bad(source, fmt::format("tensor '{}' (bytes {}..{}) overlaps tensor '{}' (bytes ..{})",
                                     t.name, t.begin, t.end, prev->name, prev->end));
    }
    if (t.begin > at) {
      return Bad(source, fmt::format("{} unused bytes before tensor '{}' (offset {})", t.begin - at,
                                     t.name, t.begin));
    }
    if (t.end > buffer) {
      return Bad(source, fmt::format("tensor '{}' ends at byte {} but the data buffer holds {} bytes: "
                                     "truncated?", t.name, t.end, buffer));
    }
    at = t.end;
    prev = &t;
  }
  if (at != buffer) {
    return Bad(source, fmt::format("data buffer holds {} bytes but the tensors cover {}", buffer, at));
  }
  return h;
}

Result<SafetensorsFile> SafetensorsFile::Open(const std::string& path) {
  GRAFT_ASSIGN_OR_RETURN(MappedFile mf, MappedFile::Open(path));
  SafetensorsFile f;
  GRAFT_ASSIGN_OR_RETURN(f.header_, ParseSafetensorsHeader(mf.data(), mf.size(), mf.size(), path));
  f.file_ = std::move(mf);
  f.buffer_ = f.file_.data() + 8 + f.header_.header_bytes;
  for (size_t i = 0; i < f.header_.tensors.size(); ++i) f.index_[f.header_.tensors[i].name] = i;
  return f;
}

const TensorInfo* SafetensorsFile::Find(std::string_view name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : &header_.tensors[it->second];
}

}  // namespace graft
