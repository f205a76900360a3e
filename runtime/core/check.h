// runtime/core/check.h — invariants that must hold; a failure is a bug, so log and abort.
// Expected failures (bad input, I/O) never use CHECK: they return Status (status.h).
#pragma once

#include <cstdio>
#include <cstdlib>

#define TESSERA_CHECK(cond)                                                              \
  do {                                                                                   \
    if (!(cond)) {                                                                       \
      std::fprintf(stderr, "tessera: CHECK failed at %s:%d: %s\n", __FILE__, __LINE__, #cond); \
      std::abort();                                                                      \
    }                                                                                    \
  } while (0)

#define TESSERA_CHECK_MSG(cond, ...)                                                   \
  do {                                                                                 \
    if (!(cond)) {                                                                     \
      std::fprintf(stderr, "tessera: CHECK failed at %s:%d: %s: ", __FILE__, __LINE__, #cond); \
      std::fprintf(stderr, __VA_ARGS__);                                               \
      std::fputc('\n', stderr);                                                        \
      std::abort();                                                                    \
    }                                                                                  \
  } while (0)
