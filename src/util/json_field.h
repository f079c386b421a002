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
// The field `key` of j read as T when fits(value), else an error saying it must be `what`;
// absent or null: def; j not an object: an error saying so.
template <class T, class Json, class Fits>
Result<T> Field(const Json& j, const char* key, T def, const std::string& where, const char* what, Fits fits) {
  if (!j.is_object()) {
    return InvalidArgument(fmt::format("{}: expected an object with \"{}\", found a {}", where, key, j.type_name()));
  }
  const auto it = j.find(key);
  if (it == j.end() || it->is_null()) return def;
  if (!fits(*it)) {
    return InvalidArgument(fmt::format("{}: \"{}\" must be {}, not {} ({})", where, key, what, it->type_name(), it->dump()));
  }
  return it->template get<T>();
}
}  // namespace json_field_detail

template <class Json>
Result<std::string> StringField(const Json& j, const char* key, const std::string& def, const std::string& where) {
  return json_field_detail::Field<std::string>(j, key, def, where, "a string", [](const Json& v) { return v.is_string(); });
}

template <class Json>
Result<bool> BoolField(const Json& j, const char* key, bool def, const std::string& where) {
  return json_field_detail::Field<bool>(j, key, def, where, "true or false", [](const Json& v) { return v.is_boolean(); });
}

// A number (integer or floating point) as a double.
template <class Json>
Result<double> NumberField(const Json& j, const char* key, double def, const std::string& where) {
  return json_field_detail::Field<double>(j, key, def, where, "a number", [](const Json& v) { return v.is_number(); });
}

// An integer that fits int64 (a float, or an unsigned past 2^63 - 1, is refused: never rounded
// or wrapped into a plausible value).
template <class Json>
Result<int64_t> Int64Field(const Json& j, const char* key, int64_t def, const std::string& where) {
  return json_field_detail::Field<int64_t>(j, key, def, where, "an integer", [](const Json& v) {
    return v.is_number_integer() && !(v.is_number_unsigned() && v.template get<uint64_t>() > 0x7fffffffffffffffULL);
  });
}

}  // namespace graft
