// Typed reads of optional fields of a JSON object that never throw. nlohmann's value() throws
// type_error when the field holds another type, or when the value is not an object at all; a
// checkpoint's, an adapter's or a request's JSON is input, and a hostile one must get an error
// naming the file and the field, never an exception (fuzz_requests found an adapter_config.json
// whose "peft_type" was 16).
//
// Absent and null fields give the default (PEFT and tokenizer files write null for "unset").
#pragma once

#include <fmt/core.h>

#include <cstdint>
#include <string>

#include "util/status.h"

namespace graft {

namespace json_field_detail {
template <class Json>
Status NotAnObject(const Json& j, const char* key, const std::string& where) {
  return InvalidArgument(fmt::format("{}: expected an object with \"{}\", found a {}", where, key, j.type_name()));
}
}  // namespace json_field_detail

template <class Json>
Result<std::string> StringField(const Json& j, const char* key, const std::string& def, const std::string& where) {
  if (!j.is_object()) return json_field_detail::NotAnObject(j, key, where);
  const auto it = j.find(key);
  if (it == j.end() || it->is_null()) return def;
  if (!it->is_string()) {
    return InvalidArgument(fmt::format("{}: \"{}\" must be a string, not {} ({})", where, key, it->type_name(), it->dump()));
  }
  return it->template get<std::string>();
}

template <class Json>
Result<bool> BoolField(const Json& j, const char* key, bool def, const std::string& where) {
  if (!j.is_object()) return json_field_detail::NotAnObject(j, key, where);
  const auto it = j.find(key);
  if (it == j.end() || it->is_null()) return def;
  if (!it->is_boolean()) {
    return InvalidArgument(fmt::format("{}: \"{}\" must be true or false, not {} ({})", where, key, it->type_name(),
                                       it->dump()));
  }
  return it->template get<bool>();
}

// A number (integer or floating point) as a double.
template <class Json>
Result<double> NumberField(const Json& j, const char* key, double def, const std::string& where) {
  if (!j.is_object()) return json_field_detail::NotAnObject(j, key, where);
  const auto it = j.find(key);
  if (it == j.end() || it->is_null()) return def;
  if (!it->is_number()) {
    return InvalidArgument(fmt::format("{}: \"{}\" must be a number, not {} ({})", where, key, it->type_name(), it->dump()));
  }
  return it->template get<double>();
}

// An integer that fits int64 (a float, or an unsigned past 2^63 - 1, is refused: never rounded
// or wrapped into a plausible value).
template <class Json>
Result<int64_t> Int64Field(const Json& j, const char* key, int64_t def, const std::string& where) {
  if (!j.is_object()) return json_field_detail::NotAnObject(j, key, where);
  const auto it = j.find(key);
  if (it == j.end() || it->is_null()) return def;
  if (!it->is_number_integer() || (it->is_number_unsigned() && it->template get<uint64_t>() > 0x7fffffffffffffffULL)) {
    return InvalidArgument(fmt::format("{}: \"{}\" must be an integer, not {} ({})", where, key, it->type_name(), it->dump()));
  }
  return it->template get<int64_t>();
}

}  // namespace graft
