// tests/e2e/nfc_test.cc — NFC (runtime/train/data/nfc.h): hand-worked cases of each step
// (decomposition, canonical ordering, composition, blocking, exclusions, Hangul, bytes that are
// not UTF-8), then every code point NFC touches, alone and after a letter, and 20,000 random
// sequences of marks, jamo and letters against Python's unicodedata.normalize
// (tests/e2e/reference/nfc_cases.py), an independent implementation of the same algorithm.
#include "runtime/train/data/nfc.h"

#include <gtest/gtest.h>

#include <sstream>
#include <string>

#include "runtime/train/data/unicode_tables.h"
#include "tests/e2e/cli_util.h"

namespace tessera::testing {
namespace {

TEST(Nfc, EachStepOnHandWorkedCases) {
  EXPECT_EQ(NfcNormalize("cafe\u0301"), "caf\u00e9");                 // compose
  EXPECT_EQ(NfcNormalize("caf\u00e9 \u6771\u4eac"), "caf\u00e9 \u6771\u4eac");  // already NFC
  EXPECT_EQ(NfcNormalize("\u212b"), "\u00c5");                        // singleton
  EXPECT_EQ(NfcNormalize("a\u0307\u0323"), "\u1ea1\u0307");           // reorder (220 < 230), compose
  EXPECT_EQ(NfcNormalize("\u1e0b\u0323"), "\u1e0d\u0307");            // decompose, reorder, compose
  EXPECT_EQ(NfcNormalize("A\u030a\u0301"), "\u01fa");                 // two marks in turn
  EXPECT_EQ(NfcNormalize("e\u0301\u0301"), "\u00e9\u0301");           // the second is blocked
  EXPECT_EQ(NfcNormalize("\u0958"), "\u0915\u093c");                  // composition exclusion
  EXPECT_EQ(NfcNormalize("\u0b47\u0b3e"), "\u0b4b");                  // a starter that composes
  EXPECT_EQ(NfcNormalize("\u0b47\u0301\u0b3e"), "\u0b47\u0301\u0b3e");  // ... blocked by a mark
  EXPECT_EQ(NfcNormalize("\u1100\u1161\u11a8"), "\uac01");            // Hangul L V T
  EXPECT_EQ(NfcNormalize("\uac00\u11a8"), "\uac01");                  // LV + T
  EXPECT_EQ(NfcNormalize("\xff" "e\u0301\xc3"), "\xff\u00e9\xc3");    // bytes not UTF-8 kept
  EXPECT_STREQ(UnicodeTablesVersion(), "14.0.0");
}

std::string Unhex(const std::string& hex) {
  std::string out;
  for (size_t i = 0; i + 1 < hex.size(); i += 2) {
    out += static_cast<char>(std::stoi(hex.substr(i, 2), nullptr, 16));
  }
  return out;
}

TEST(Nfc, AgreesWithPythonsUnicodedataOnEveryCodePointItTouches) {
  if (RunCommand("/usr/bin/python3 -c 'import unicodedata; "
                 "assert unicodedata.unidata_version == \"14.0.0\"'").exit_code != 0) {
    GTEST_SKIP() << "/usr/bin/python3 with Unicode 14's unicodedata (Debian 12's) is needed";
  }
  TempDir dir("nfc");
  CommandResult r = RunCommand("/usr/bin/python3 " + Repo("tests/e2e/reference/nfc_cases.py") + " " +
                               (dir / "cases.txt"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  std::istringstream in(ReadFile(dir / "cases.txt"));
  std::string a, b;
  int cases = 0, wrong = 0;
  while (in >> a >> b) {
    ++cases;
    const std::string got = NfcNormalize(Unhex(a)), want = Unhex(b);
    if (got != want && ++wrong <= 10) ADD_FAILURE() << "NFC of " << a << ": " << want << " expected";
  }
  EXPECT_GT(cases, 30000);
  EXPECT_EQ(wrong, 0) << "of " << cases;
}

}  // namespace
}  // namespace tessera::testing
