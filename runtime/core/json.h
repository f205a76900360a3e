// runtime/core/json.h — a small JSON reader and writer (RFC 8259) for the files Tessera owns
// or reads: safetensors headers, model.safetensors.index.json, metrics lines, manifests.
//
// The parser never throws and never crashes on hostile input: nesting depth is bounded,
// every error is a Status naming the byte offset. Numbers keep their integer value exactly
// when they are integers (tensor offsets exceed 2^53 only in theory, but be exact anyway).
// Objects keep key order (a vector of pairs); lookups are linear, which suits small headers.
// Thread-safety: values; JsonWriter is single-threaded.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "runtime/core/status.h"

namespace tessera {

class JsonValue {
 public:
  enum class Type { kNull, kBool, kNumber, kString, kArray, kObject };

  Type type() const { return type_; }
  bool is_null() const { return type_ == Type::kNull; }
  bool is_bool() const { return type_ == Type::kBool; }
  bool is_number() const { return type_ == Type::kNumber; }
  bool is_string() const { return type_ == Type::kString; }
  bool is_array() const { return type_ == Type::kArray; }
  bool is_object() const { return type_ == Type::kObject; }
  // True for numbers written without fraction or exponent that fit in int64.
  bool is_integer() const { return type_ == Type::kNumber && is_int_; }

  bool as_bool() const { return bool_; }
  double as_double() const { return number_; }
  int64_t as_int() const { return int_; }
  const std::string& as_string() const { return string_; }
  const std::vector<JsonValue>& items() const { return array_; }
  const std::vector<std::pair<std::string, JsonValue>>& members() const { return object_; }
  // Member by key, or nullptr if absent (or not an object).
  const JsonValue* Find(std::string_view key) const;

  static JsonValue Null() { return JsonValue(); }
  static JsonValue Bool(bool b);
  static JsonValue Number(double d);
  static JsonValue Integer(int64_t i);
  static JsonValue String(std::string s);
  static JsonValue Array(std::vector<JsonValue> items);
  static JsonValue Object(std::vector<std::pair<std::string, JsonValue>> members);

 private:
  Type type_ = Type::kNull;
  bool bool_ = false;
  bool is_int_ = false;
  double number_ = 0;
  int64_t int_ = 0;
  std::string string_;
  std::vector<JsonValue> array_;
  std::vector<std::pair<std::string, JsonValue>> object_;
};

// Parses exactly one JSON value (surrounding whitespace allowed). Errors are kDataLoss with
// "JSON error at byte N: ...". Duplicate object keys are an error (ambiguous headers), and so
// is a number beyond the range of a double (1e999: it could not be written back).
// At most `max_values` values (each ~200 bytes in memory): a hostile 100 MiB header of
// "[0,0,0,..." must fail with a message, not exhaust memory.
inline constexpr size_t kJsonDefaultMaxValues = size_t{1} << 20;
Result<JsonValue> ParseJson(std::string_view text, size_t max_values = kJsonDefaultMaxValues);

// Streaming writer producing compact JSON. Commas are inserted automatically.
class JsonWriter {
 public:
  JsonWriter& BeginObject();
  JsonWriter& EndObject();
  JsonWriter& BeginArray();
  JsonWriter& EndArray();
  JsonWriter& Key(std::string_view k);
  JsonWriter& String(std::string_view s);
  JsonWriter& Int(int64_t v);
  // Shortest text that reads back to the same double (%.17g, trimmed; -0.0 as "-0.0", since
  // "-0" reads back as the integer 0); NaN/inf become null.
  JsonWriter& Double(double v);
  JsonWriter& Bool(bool b);
  JsonWriter& Null();
  JsonWriter& Value(const JsonValue& v);
  const std::string& str() const { return out_; }

 private:
  void BeforeValue();
  std::string out_;
  std::vector<bool> first_;   // per open container: no element written yet
  bool after_key_ = false;
};

// `s` as a quoted JSON string literal with escapes.
std::string JsonQuote(std::string_view s);

}  // namespace tessera
