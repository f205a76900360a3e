// tests/testing/expect_text.h — gtest checks on message text (gmock is not linked; these stand
// in for HasSubstr / StartsWith). Test-only.
#pragma once

#include <string>

#include <gtest/gtest.h>

#define EXPECT_CONTAINS(haystack, needle)                                                       \
  do {                                                                                          \
    const std::string h_ = (haystack);                                                          \
    EXPECT_NE(h_.find(needle), std::string::npos) << "missing: " << (needle) << "\nin: " << h_; \
  } while (0)
#define EXPECT_STARTS_WITH(haystack, prefix)                                                     \
  do {                                                                                           \
    const std::string h_ = (haystack);                                                           \
    EXPECT_EQ(h_.rfind(prefix, 0), 0u) << "expected prefix: " << (prefix) << "\nin: " << h_;     \
  } while (0)
