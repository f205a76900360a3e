// models/quote.h — private to models/: how error messages quote a tensor or file name.
//
// 'name' in single quotes, bytes as they are. Not JsonQuote (runtime/core/json.h): that writes
// "name" with escapes, and the messages users and tests match ("tensor 'a' appears in both")
// use single quotes. One definition so every models/ message quotes names the same way.
// Thread-safety: pure function.
#pragma once

#include <string>
#include <string_view>

namespace tessera {

inline std::string Quote(std::string_view s) {
  std::string out;  // built by append: gcc 12 warns falsely (-Wrestrict) on "'" + string
  out.reserve(s.size() + 2);
  out.push_back('\'');
  out.append(s);
  out.push_back('\'');
  return out;
}

}  // namespace tessera
