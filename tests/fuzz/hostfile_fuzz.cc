// tests/fuzz/hostfile_fuzz.cc — the hostfile parser (ParseHostfileText,
// runtime/supervisor/launcher.h) on arbitrary text.
//
// Properties: no crash, hang or unbounded allocation; a refusal is kInvalidArgument with a
// message; an accepted file lists at least one host, each a non-empty word (no whitespace, no
// '#') listed once with slots >= 1, at strictly increasing 1-based line numbers.
#include <set>
#include <string>

#include "runtime/supervisor/launcher.h"
#include "tests/fuzz/fuzz_check.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tessera;
  Result<std::vector<HostfileEntry>> hosts = ParseHostfileText(fuzz::AsText(data, size), "fuzz");
  if (!hosts.ok()) {
    fuzz::CheckRefusal(hosts.status(), StatusCode::kInvalidArgument, "ParseHostfileText");
    return 0;
  }
  FUZZ_CHECK(!hosts->empty(), "accepted a hostfile without hosts");
  std::set<std::string> seen;
  int last_line = 0;
  for (const HostfileEntry& h : *hosts) {
    FUZZ_CHECK(!h.host.empty(), "empty host name");
    FUZZ_CHECK(h.host.find_first_of(" \t\n\v\f\r#") == std::string::npos,
               "host \"%s\" holds whitespace or '#'", h.host.c_str());
    FUZZ_CHECK(h.slots >= 1, "host %s has %d slots", h.host.c_str(), h.slots);
    FUZZ_CHECK(h.line > last_line, "line %d after line %d", h.line, last_line);
    FUZZ_CHECK(seen.insert(h.host).second, "host %s listed twice", h.host.c_str());
    last_line = h.line;
  }
  return 0;
}
