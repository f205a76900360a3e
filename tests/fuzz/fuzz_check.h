// tests/fuzz/fuzz_check.h — what every fuzz target shares: viewing the input as text, and the
// check that turns a broken parser property into a crash libFuzzer records.
//
// A target's properties are the parser's contract (an error is a Status of the documented
// code with a message; what parses re-serializes to something that parses to the same
// thing). FUZZ_CHECK prints the property and aborts, so a violation is kept as a crash input
// exactly like a sanitizer report. Header-only; used by tests/fuzz/*_fuzz.cc only.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include "runtime/core/status.h"

// Aborts with `what` (printf-style) when `cond` is false.
#define FUZZ_CHECK(cond, ...)                                                      \
  do {                                                                             \
    if (!(cond)) {                                                                 \
      std::fprintf(stderr, "fuzz property failed at %s:%d: %s: ", __FILE__, __LINE__, #cond); \
      std::fprintf(stderr, __VA_ARGS__);                                           \
      std::fputc('\n', stderr);                                                    \
      std::abort();                                                                \
    }                                                                              \
  } while (0)

namespace tessera::fuzz {

inline std::string_view AsText(const uint8_t* data, size_t size) {
  return {reinterpret_cast<const char*>(data), size};
}

// A refusal must carry the code the parser documents and a message naming what was wrong.
inline void CheckRefusal(const Status& s, StatusCode expected, const char* parser) {
  FUZZ_CHECK(s.code() == expected, "%s refused with code %s (expected %s): %s", parser,
             StatusCodeName(s.code()), StatusCodeName(expected), s.message().c_str());
  FUZZ_CHECK(!s.message().empty(), "%s refused without a message", parser);
}

}  // namespace tessera::fuzz
